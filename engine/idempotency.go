package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"slices"
	"unsafe"

	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// The digest of an idempotent append's events is what a retry with the same
// key is compared with: the same events give the first append's result,
// other events an *IdempotencyMismatchError. It is a SHA-256 over each
// event in order, of its entity, key, event name, canonical meta and
// canonical data, each preceded by its length as a big-endian u32. The
// lengths make the encoding of a sequence of events unambiguous (no two
// sequences share one), and the canonical forms make any formatting of the
// same JSON the same event. A CRC would not do: it is a checksum against
// accidents, and two different payloads with the same CRC-32 are easy to
// make, on purpose or by chance (one in 2^32 pairs; a service with many
// idempotent appends meets such a pair), and would then be taken for a
// retry. The digest is kept in the index's entry of the key (index.Idem)
// and computed again from the records in the segments, which hold the
// same canonical forms, when the index is rebuilt.
type idemDigest struct {
	h   hash.Hash
	len [4]byte
}

func newIdemDigest() *idemDigest { return &idemDigest{h: sha256.New()} }

// field adds one length-prefixed field.
func (d *idemDigest) field(b []byte) {
	binary.BigEndian.PutUint32(d.len[:], uint32(len(b)))
	d.h.Write(d.len[:])
	d.h.Write(b)
}

// fieldString is field for a string, without a copy.
func (d *idemDigest) fieldString(s string) {
	binary.BigEndian.PutUint32(d.len[:], uint32(len(s)))
	d.h.Write(d.len[:])
	// A hash does not keep what it is given: no copy needed.
	d.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// entry adds an event about to be appended.
func (d *idemDigest) entry(e *segment.Entry) {
	d.fieldString(e.Entity)
	d.fieldString(e.Key)
	d.fieldString(e.Event)
	d.field(e.Meta)
	d.field(e.Data)
}

// record adds an event read from the segments.
func (d *idemDigest) record(r *segment.Record) {
	d.field(r.Entity)
	d.field(r.Key)
	d.field(r.Event)
	d.field(r.Meta)
	d.field(r.Data)
}

func (d *idemDigest) sum() (s [index.DigestSize]byte) {
	d.h.Sum(s[:0])
	return s
}

// digestOfEntries returns the digest of a batch's entries.
func digestOfEntries(entries []segment.Entry) [index.DigestSize]byte {
	d := newIdemDigest()
	for i := range entries {
		d.entry(&entries[i])
	}
	return d.sum()
}

// reindexer turns the records of a walk of the segments into index
// records, computing the digest of every idempotent batch over its
// records. The first record of such a batch carries its key, and its index
// record the digest, known only at the batch's last record: add holds the
// first record back until then. A batch is whole in the segments
// (recovery cuts a torn one), so a walk that ends inside one is damage.
type reindexer struct {
	// Of the idempotent batch being read, if open: its first record
	// (with copies of the slices the iterator reuses) and how many of its
	// records are still to come.
	first  index.Record
	left   uint32
	digest *idemDigest
	// rec is the record add hands to emit: a field, not a local, which
	// would be allocated for every record (emit is a func value, so its
	// pointer escapes): verify --full and rebuilds call add per event.
	rec index.Record
}

// open reports whether a batch's first record is held back: its
// index entries are not added yet, so no progress marker may cover it.
func (x *reindexer) open() bool { return x.left > 0 }

// add gives emit the index records for r, at loc: r's own, and, at the
// last record of an idempotent batch, its first one's. The records given
// to emit are valid during the call only.
func (x *reindexer) add(r *segment.Record, loc segment.Location, emit func(*index.Record)) error {
	x.rec = index.Record{ID: r.ID, Seq: r.Seq, Loc: loc, Entity: r.Entity, Key: r.Key, Event: r.Event}
	ir := &x.rec
	switch {
	case r.IdempotencyKey != nil && x.open():
		return fmt.Errorf("%w: record #%d begins a batch inside the batch of %d records at #%d", segment.ErrCorruption, r.Seq, x.first.BatchLen, x.first.Seq)
	case r.IdempotencyKey != nil:
		if x.digest == nil {
			x.digest = newIdemDigest()
		} else {
			x.digest.h.Reset()
		}
		x.digest.record(r)
		ir.IdempotencyKey, ir.BatchLen = r.IdempotencyKey, r.BatchLen
		x.first = *ir
		x.first.Entity, x.first.Key, x.first.Event = slices.Clone(r.Entity), slices.Clone(r.Key), slices.Clone(r.Event)
		x.first.IdempotencyKey = append([]byte{}, r.IdempotencyKey...)
		x.left = r.BatchLen - 1
		if x.left == 0 {
			return x.close(emit)
		}
		return nil
	case x.open():
		if r.Seq != x.first.Seq+uint64(x.first.BatchLen-x.left) {
			return fmt.Errorf("%w: record #%d inside the batch of %d records at #%d", segment.ErrCorruption, r.Seq, x.first.BatchLen, x.first.Seq)
		}
		x.digest.record(r)
		emit(ir)
		if x.left--; x.left == 0 {
			return x.close(emit)
		}
		return nil
	}
	emit(ir)
	return nil
}

// close emits the held-back first record of a batch, with its digest.
func (x *reindexer) close(emit func(*index.Record)) error {
	s := x.digest.sum()
	x.first.Digest = s[:]
	emit(&x.first)
	x.first = index.Record{}
	return nil
}

// end reports a walk that ended inside an idempotent batch.
func (x *reindexer) end() error {
	if x.open() {
		return fmt.Errorf("%w: the segments end inside the batch of %d records at #%d (%d missing)", segment.ErrCorruption, x.first.BatchLen, x.first.Seq, x.left)
	}
	return nil
}
