package index

import (
	"encoding/binary"
	"math"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// Limits of format 3 (see the package documentation).
const (
	// blockMax is the most events a T block holds.
	blockMax = 64
	// postingMax is the most sequence numbers an E, A or N posting holds.
	postingMax = 256
)

// blockRec is what a T block holds of one event.
type blockRec struct {
	id  eventid.ID
	seq uint64
	loc segment.Location
}

// follows reports whether r can be the event after prev in one T block:
// the same ledger, the next sequence number, the next frame of the same
// segment, a later timestamp.
func (r *blockRec) follows(prev *blockRec) bool {
	return r.id.Ledger() == prev.id.Ledger() && r.seq == prev.seq+1 && r.loc.Segment == prev.loc.Segment &&
		r.loc.Offset == prev.loc.Offset+prev.loc.Size && r.id.Micros() > prev.id.Micros()
}

// appendBlock appends the T value of recs, consecutive events (each
// follows the one before; at least one):
//
//	uvarint first seq | uvarint segment | uvarint offset | uvarint first µs |
//	checksum u32 | uvarint size                     (the first event)
//	[ uvarint µs delta | checksum u32 | uvarint size ]...  (each later one)
func appendBlock(dst []byte, recs []blockRec) []byte {
	f := &recs[0]
	dst = binary.AppendUvarint(dst, f.seq)
	dst = binary.AppendUvarint(dst, f.loc.Segment)
	dst = binary.AppendUvarint(dst, uint64(f.loc.Offset))
	dst = binary.AppendUvarint(dst, f.id.Micros())
	prev := f.id.Micros()
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			dst = binary.AppendUvarint(dst, r.id.Micros()-prev)
			prev = r.id.Micros()
		}
		dst = binary.BigEndian.AppendUint32(dst, r.id.Checksum())
		dst = binary.AppendUvarint(dst, uint64(r.loc.Size))
	}
	return dst
}

// blockReader decodes a T block one event at a time, checking every field:
// a malformed value is ErrCorruption naming the key, never a panic. After
// next returns false, err is nil at the end of a well-formed block.
type blockReader struct {
	key, v []byte
	ledger eventid.LedgerID
	p      int // the next byte of v
	n      int // events read
	err    error

	// The current event.
	seq      uint64
	micros   uint64
	checksum uint32
	loc      segment.Location
}

// init starts reading the block of T key key, value v.
func (r *blockReader) init(key, v []byte) bool {
	*r = blockReader{key: key, v: v}
	if len(key) != timeKeyLen {
		return r.fail("key is %d bytes, want %d", len(key), timeKeyLen)
	}
	r.ledger = eventid.LedgerID(binary.BigEndian.Uint32(key[1:ledgerPrefixLen]))
	if eventid.ID(key[ledgerPrefixLen:]).Ledger() != r.ledger {
		return r.fail("the ID of the key is of ledger %v", eventid.ID(key[ledgerPrefixLen:]).Ledger())
	}
	var off uint64
	ok := r.uvarint(&r.seq) && r.uvarint(&r.loc.Segment) && r.uvarint(&off) && r.uvarint(&r.micros)
	if !ok {
		return false
	}
	if off > math.MaxInt64 {
		return r.fail("offset %d does not fit an int64", off)
	}
	r.loc.Offset = int64(off)
	return true
}

func (r *blockReader) fail(format string, args ...any) bool {
	if r.err == nil {
		r.err = corruptf(r.key, "T block: "+format, args...)
	}
	return false
}

func (r *blockReader) uvarint(dst *uint64) bool {
	x, w := binary.Uvarint(r.v[r.p:])
	if w <= 0 {
		return r.fail("truncated or overlong varint at byte %d", r.p)
	}
	r.p += w
	*dst = x
	return true
}

// next moves to the next event; false at the end or on an error (err).
func (r *blockReader) next() bool {
	if r.err != nil {
		return false
	}
	if r.p == len(r.v) {
		// The end: the key must name the last event.
		id := eventid.ID(r.key[ledgerPrefixLen:])
		switch {
		case r.n == 0:
			return r.fail("no event")
		case id.Micros() != r.micros || id.Checksum() != r.checksum:
			return r.fail("the last event is %v, not the key's", r.id())
		}
		return false
	}
	if r.n > 0 {
		var d uint64
		if !r.uvarint(&d) {
			return false
		}
		if d == 0 || r.micros+d < r.micros {
			return r.fail("event %d: timestamp delta %d after %d", r.n, d, r.micros)
		}
		if r.seq == math.MaxUint64 {
			return r.fail("event %d: sequence number beyond 2^64-1", r.n)
		}
		r.micros += d
		r.seq++
		r.loc.Offset += r.loc.Size
	}
	if len(r.v)-r.p < 4 {
		return r.fail("event %d: truncated checksum", r.n)
	}
	r.checksum = binary.BigEndian.Uint32(r.v[r.p:])
	r.p += 4
	var size uint64
	if !r.uvarint(&size) {
		return false
	}
	if size > math.MaxUint32 || uint64(r.loc.Offset)+size > math.MaxInt64 {
		return r.fail("event %d: frame of %d bytes at offset %d", r.n, size, r.loc.Offset)
	}
	r.loc.Size = int64(size)
	r.n++
	return true
}

func (r *blockReader) id() eventid.ID { return eventid.New(r.micros, r.checksum, r.ledger) }

func (r *blockReader) position() Position {
	return Position{ID: r.id(), Seq: r.seq, Loc: r.loc}
}

// decodeBlock appends the positions of the events of a T block to dst.
func decodeBlock(dst []Position, key, v []byte) ([]Position, error) {
	var r blockReader
	for ok := r.init(key, v); ok && r.next(); {
		dst = append(dst, r.position())
	}
	return dst, r.err
}

// appendPosting appends the value of a posting of seqs (increasing, at
// least one; the first is in the key): the difference of each later one
// from the one before, as uvarints.
func appendPosting(dst []byte, seqs []uint64) []byte {
	for i := 1; i < len(seqs); i++ {
		dst = binary.AppendUvarint(dst, seqs[i]-seqs[i-1])
	}
	return dst
}

// decodePosting appends to dst the sequence numbers of the posting of key
// k (its prefix of n bytes is the family, ledger and name parts, then the
// first seq) and value v.
func decodePosting(dst []uint64, k []byte, n int, v []byte) ([]uint64, error) {
	if len(k) != n+8 {
		return dst, corruptf(k, "key is %d bytes, want %d", len(k), n+8)
	}
	seq := binary.BigEndian.Uint64(k[n:])
	dst = append(dst, seq)
	for p := 0; p < len(v); {
		d, w := binary.Uvarint(v[p:])
		if w <= 0 {
			return dst, corruptf(k, "posting: truncated or overlong varint at byte %d", p)
		}
		if d == 0 || seq+d < seq {
			return dst, corruptf(k, "posting: delta %d after sequence number %d", d, seq)
		}
		p += w
		seq += d
		dst = append(dst, seq)
	}
	return dst, nil
}
