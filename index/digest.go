package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2"
)

// digestFamilies are the families a Digest covers, in its order.
var digestFamilies = [...]byte{famTime, famSeq, famStream, famEntity, famEvent, famIdem}

// Places of the families in a Digest.
const (
	slotTime = iota
	slotSeq
	slotStream
	slotEntity
	slotEvent
	slotIdem
)

// familyNames name the families in messages.
var familyNames = map[byte]string{famTime: "T (ID to location)", famSeq: "S (sequence to ID)", famStream: "E (streams)",
	famEntity: "A (entities)", famEvent: "N (event names)", famIdem: "K (idempotency keys)"}

// digestSeed is the hash seed of this process: digests are compared
// within a process, never stored.
var digestSeed = maphash.MakeSeed()

// mixKeys are the process's keys of mix, from digestSeed.
var mixKeys = [2]uint64{maphash.String(digestSeed, "annal index digest a"), maphash.String(digestSeed, "annal index digest b") | 1}

// A Digest summarizes the events of one ledger that the index holds, in
// each family: the number of logical entries and the sum of a 64-bit hash
// of each. The entries are logical: one an event in T (its ID, sequence
// number and location), in S (its sequence number and ID), and in each
// of E, A and N (the name parts and its sequence number, ID and
// location), one an idempotency key in K (its key and value) — not the
// blocks and postings that hold them, so the digest does not depend on how events were grouped. The sum
// does not depend on order either, so the digest of what the segments say
// the index should hold ([Digest.Add], in ledger order) can be compared
// with the digest of what it holds ([Index.Digest], in key order) in one
// pass over each and constant memory. Any missing, extra or altered entry
// changes its family's count or sum (the chance that a change leaves a
// 64-bit sum as it was is about 2^-64).
type Digest struct {
	Count [len(digestFamilies)]uint64
	Sum   [len(digestFamilies)]uint64

	ledger   eventid.LedgerID
	key, val []byte
	// The entity and event name of the last event Add added and the
	// hashes of their A and N prefixes (valid when named is set): events
	// in a row often share them, and a comparison costs less than
	// building and hashing the prefix again.
	entity, event   []byte
	entityH, eventH uint64
	named           bool
}

// NewDigest returns the empty digest of a ledger's entries.
func NewDigest(ledger eventid.LedgerID) *Digest { return &Digest{ledger: ledger} }

// Add adds the entries of one event, as Batch.Add adds them.
func (d *Digest) Add(r *Record) {
	d.addEvent(&Position{ID: r.ID, Seq: r.Seq, Loc: r.Loc})
	p := Position{ID: r.ID, Seq: r.Seq, Loc: r.Loc}
	d.key = appendStreamPrefix(d.key[:0], d.ledger, r.Entity, r.Key)
	d.addPosting(slotStream, prefixHash(d.key), &p)
	if !d.named || !bytes.Equal(r.Entity, d.entity) {
		d.key = appendEntitySeqPrefix(d.key[:0], d.ledger, r.Entity)
		d.entity, d.entityH = append(d.entity[:0], r.Entity...), prefixHash(d.key)
	}
	if !d.named || !bytes.Equal(r.Event, d.event) {
		d.key = appendEventPrefix(d.key[:0], d.ledger, r.Event)
		d.event, d.eventH = append(d.event[:0], r.Event...), prefixHash(d.key)
	}
	d.named = true
	d.addPosting(slotEntity, d.entityH, &p)
	d.addPosting(slotEvent, d.eventH, &p)
	if r.IdempotencyKey != nil {
		d.key = appendIdemKey(d.key[:0], d.ledger, r.IdempotencyKey)
		d.val = appendIdem(d.val[:0], r)
		d.add(slotIdem, entryHash(d.key, d.val))
	}
}

func (d *Digest) add(slot int, h uint64) {
	d.Count[slot]++
	d.Sum[slot] += h
}

// addEvent adds the T and S entries of an event.
func (d *Digest) addEvent(p *Position) {
	d.addTime(p)
	d.addSeqID(p.Seq, binary.BigEndian.Uint64(p.ID[:8]), binary.BigEndian.Uint64(p.ID[8:]))
}

// addTime adds the T entry of an event.
func (d *Digest) addTime(p *Position) { d.add(slotTime, positionHash(famTime, p)) }

// positionHash is the hash of a position mixed into h.
func positionHash(h uint64, p *Position) uint64 {
	hi, lo := binary.BigEndian.Uint64(p.ID[:8]), binary.BigEndian.Uint64(p.ID[8:])
	return mix(mix(mix(mix(mix(h, hi), lo), p.Seq), p.Loc.Segment), uint64(p.Loc.Offset)<<32^uint64(p.Loc.Size))
}

// addSeqID adds the S entry of an event.
func (d *Digest) addSeqID(seq, idHi, idLo uint64) {
	d.add(slotSeq, mix(mix(mix(famSeq, seq), idHi), idLo))
}

// addPosting adds the entry of an event under a prefix of E, A or N whose
// hash is h: its sequence number, ID and location.
func (d *Digest) addPosting(slot int, h uint64, p *Position) { d.add(slot, positionHash(h, p)) }

// mix is a keyed 64-bit mixing step: the high and low halves of the
// 128-bit product of the inputs, each keyed, folded (as wyhash does).
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^mixKeys[0], b^mixKeys[1])
	return hi ^ lo
}

func prefixHash(prefix []byte) uint64 { return maphash.Bytes(digestSeed, prefix) }

func entryHash(key, val []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(key)))
	h.Write(n[:])
	h.Write(key)
	h.Write(val)
	return h.Sum64()
}

// Diff says in which families two digests differ, or "" if they agree.
func (d *Digest) Diff(o *Digest) string {
	var out []string
	for i, f := range digestFamilies {
		if d.Count[i] != o.Count[i] || d.Sum[i] != o.Sum[i] {
			out = append(out, fmt.Sprintf("family %s: %d entries (sum %016x) against %d (sum %016x)", familyNames[f], d.Count[i], d.Sum[i], o.Count[i], o.Sum[i]))
		}
	}
	return strings.Join(out, "; ")
}

// digestPebble returns the digest of what Pebble holds for ledger,
// counting only the entries of events up to sequence number maxSeq. It
// reads one snapshot of the index:
// the T blocks and the S entries side by side (both are in ledger order),
// then the postings of E, A and N, then K. A malformed entry is
// ErrCorruption.
func (x *Index) digestPebble(ctx context.Context, ledger eventid.LedgerID, maxSeq uint64) (d *Digest, err error) {
	if err := x.usable(); err != nil {
		return nil, err
	}
	defer x.guard("digest", &err)
	snap := x.db.NewSnapshot()
	defer snap.Close()
	d = NewDigest(ledger)
	iter := func(fam byte) (*pebble.Iterator, error) {
		lo := appendLedgerPrefix(nil, fam, ledger)
		it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: prefixSuccessor(lo)})
		if err != nil {
			return nil, readErr(err)
		}
		return it, nil
	}
	t, err := iter(famTime)
	if err != nil {
		return nil, err
	}
	s, err := iter(famSeq)
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	err = d.addBlocks(ctx, t, s, maxSeq)
	err = errors.Join(err, t.Error(), t.Close(), s.Error(), s.Close())
	for _, fam := range []byte{famStream, famEntity, famEvent, famIdem} {
		if err != nil {
			break
		}
		var it *pebble.Iterator
		if it, err = iter(fam); err != nil {
			break
		}
		if fam == famIdem {
			err = d.addIdem(ctx, it, maxSeq)
		} else {
			err = d.addPostings(ctx, it, familySlot(fam), maxSeq)
		}
		err = errors.Join(err, it.Error(), it.Close())
	}
	if err != nil {
		if pebble.IsCorruptionError(err) {
			return nil, readErr(err)
		}
		return nil, err
	}
	return d, nil
}

func familySlot(fam byte) int {
	for i, f := range digestFamilies {
		if f == fam {
			return i
		}
	}
	panic(fmt.Sprintf("index: no digest of family %q", fam))
}

// addBlocks adds the events of the T blocks of t and the S entries of s.
// In an index as Batch writes it, the i-th S entry names the i-th block
// (its last sequence number and ID): each event of a block so named counts
// as an S entry. An S entry that names no block counts as one of its
// own, and a block no S entry names has none, so either shows in S.
func (d *Digest) addBlocks(ctx context.Context, t, s *pebble.Iterator, maxSeq uint64) error {
	sOK := s.First()
	var blk []Position
	// skipS counts the S entry at s as one of its own, and moves on.
	skipS := func() error {
		k := s.Key()
		v, err := s.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		if len(k) != seqKeyLen || len(v) != seqValueLen {
			return corruptf(k, "key of %d bytes, value of %d, want %d and %d", len(k), len(v), seqKeyLen, seqValueLen)
		}
		if seq := binary.BigEndian.Uint64(k[ledgerPrefixLen:]); seq <= maxSeq {
			d.addSeqID(seq, binary.BigEndian.Uint64(v[:8]), binary.BigEndian.Uint64(v[8:]))
		}
		sOK = s.Next()
		return nil
	}
	for n, ok := 1, t.First(); ok; n, ok = n+1, t.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v, err := t.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		if blk, err = decodeBlock(blk[:0], t.Key(), v); err != nil {
			return err
		}
		last := &blk[len(blk)-1]
		for sOK && binary.BigEndian.Uint64(s.Key()[min(len(s.Key()), ledgerPrefixLen):]) < last.Seq {
			if err := skipS(); err != nil {
				return err
			}
		}
		named := false
		if sOK {
			k := s.Key()
			v, err := s.ValueAndErr()
			if err != nil {
				return readErr(err)
			}
			named = len(k) == seqKeyLen && binary.BigEndian.Uint64(k[ledgerPrefixLen:]) == last.Seq && bytes.Equal(v, last.ID[:])
		}
		for i := range blk {
			p := &blk[i]
			if p.Seq > maxSeq {
				continue
			}
			if named {
				d.addEvent(p)
			} else {
				d.addTime(p)
			}
		}
		if named {
			sOK = s.Next()
		}
	}
	for sOK {
		if err := skipS(); err != nil {
			return err
		}
	}
	return nil
}

// addPostings adds the events of the postings of it.
func (d *Digest) addPostings(ctx context.Context, it *pebble.Iterator, slot int, maxSeq uint64) error {
	var (
		prev []byte
		h    uint64
		ps   []Position
	)
	for n, ok := 1, it.First(); ok; n, ok = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		if len(k) < ledgerPrefixLen+8 {
			return corruptf(k, "key is too short")
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		n := len(k) - 8
		if ps, err = decodePosting(ps[:0], k, n, v); err != nil {
			return err
		}
		if !bytes.Equal(k[:n], prev) {
			prev = append(prev[:0], k[:n]...)
			h = prefixHash(prev)
		}
		for i := range ps {
			if ps[i].Seq <= maxSeq {
				d.addPosting(slot, h, &ps[i])
			}
		}
	}
	return nil
}

// addIdem adds the K entries of it.
func (d *Digest) addIdem(ctx context.Context, it *pebble.Iterator, maxSeq uint64) error {
	for n, ok := 1, it.First(); ok; n, ok = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		// The sequence number leads the value.
		if len(v) < 8 {
			return corruptf(k, "value of %d bytes", len(v))
		}
		if binary.BigEndian.Uint64(v) <= maxSeq {
			d.add(slotIdem, entryHash(k, v))
		}
	}
	return nil
}
