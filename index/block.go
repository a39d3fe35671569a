package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// Limits of format 4 (see the package documentation).
const (
	// blockMax is the most events a T block holds.
	blockMax = 64
	// postingMax is the most events an E, A or N posting holds.
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

// postingFollows reports whether q can be the entry after p in one
// posting: a later sequence number, a later timestamp, and a frame after
// p's (in p's segment, at or after its end, or in a later segment).
func postingFollows(q, p *Position) bool {
	return q.Seq > p.Seq && q.ID.Micros() > p.ID.Micros() &&
		(q.Loc.Segment > p.Loc.Segment || q.Loc.Segment == p.Loc.Segment && q.Loc.Offset >= p.Loc.Offset+p.Loc.Size)
}

// appendPosting appends the value of a posting of ps (at least one; each
// follows the one before, see postingFollows; the first sequence number
// is in the key):
//
//	uvarint segment | uvarint offset | uvarint size | uvarint µs | checksum u32
//	                                                        (the first event)
//	[ uvarint seq delta | uvarint segment delta | uvarint offset or gap |
//	  uvarint size | uvarint µs delta | checksum u32 ]...  (each later one)
//
// where the gap, in the segment of the entry before, is the distance from
// the end of its frame; in a later segment, the offset.
func appendPosting(dst []byte, ps []Position) []byte {
	f := &ps[0]
	dst = binary.AppendUvarint(dst, f.Loc.Segment)
	dst = binary.AppendUvarint(dst, uint64(f.Loc.Offset))
	dst = binary.AppendUvarint(dst, uint64(f.Loc.Size))
	dst = binary.AppendUvarint(dst, f.ID.Micros())
	dst = binary.BigEndian.AppendUint32(dst, f.ID.Checksum())
	for i := 1; i < len(ps); i++ {
		p, q := &ps[i-1], &ps[i]
		dst = binary.AppendUvarint(dst, q.Seq-p.Seq)
		dst = binary.AppendUvarint(dst, q.Loc.Segment-p.Loc.Segment)
		if q.Loc.Segment == p.Loc.Segment {
			dst = binary.AppendUvarint(dst, uint64(q.Loc.Offset-p.Loc.Offset-p.Loc.Size))
		} else {
			dst = binary.AppendUvarint(dst, uint64(q.Loc.Offset))
		}
		dst = binary.AppendUvarint(dst, uint64(q.Loc.Size))
		dst = binary.AppendUvarint(dst, q.ID.Micros()-p.ID.Micros())
		dst = binary.BigEndian.AppendUint32(dst, q.ID.Checksum())
	}
	return dst
}

// decodePosting appends to dst the positions of the posting of key k (its
// prefix of n bytes is the family, ledger and name parts, then the first
// seq) and value v, checking every field: a malformed value is
// ErrCorruption naming the key, never a panic.
func decodePosting(dst []Position, k []byte, n int, v []byte) ([]Position, error) {
	if len(k) != n+8 || n < ledgerPrefixLen {
		return dst, corruptf(k, "key is %d bytes, want %d", len(k), n+8)
	}
	ledger := eventid.LedgerID(binary.BigEndian.Uint32(k[1:ledgerPrefixLen]))
	var (
		p      int // the next byte of v
		bad    string
		seq    = binary.BigEndian.Uint64(k[n:])
		micros uint64
		loc    segment.Location
	)
	uv := func(what string) uint64 {
		if bad != "" {
			return 0
		}
		x, w := binary.Uvarint(v[p:])
		if w <= 0 {
			bad = fmt.Sprintf("truncated or overlong varint (%s) at byte %d", what, p)
			return 0
		}
		p += w
		return x
	}
	fail := func(i int, format string, args ...any) ([]Position, error) {
		return dst, corruptf(k, "posting: event %d: "+format, append([]any{i}, args...)...)
	}
	if len(v) == 0 {
		return dst, corruptf(k, "posting: no event")
	}
	for i := 0; p < len(v); i++ {
		var seg, off uint64
		if i == 0 {
			seg, off = uv("segment"), uv("offset")
		} else {
			d := uv("sequence delta")
			if bad == "" && (d == 0 || seq+d < seq) {
				return fail(i, "sequence delta %d after %d", d, seq)
			}
			seq += d
			ds := uv("segment delta")
			if bad == "" && loc.Segment+ds < loc.Segment {
				return fail(i, "segment delta %d after %d", ds, loc.Segment)
			}
			seg, off = loc.Segment+ds, uv("offset")
			if ds == 0 {
				end := uint64(loc.Offset + loc.Size)
				if bad == "" && end+off < end {
					return fail(i, "gap %d after offset %d", off, end)
				}
				off += end
			}
		}
		size := uv("size")
		var dus uint64
		if i == 0 {
			micros = uv("timestamp")
		} else if dus = uv("timestamp delta"); bad == "" && (dus == 0 || micros+dus < micros) {
			return fail(i, "timestamp delta %d after %d", dus, micros)
		}
		if bad != "" {
			return fail(i, "%s", bad)
		}
		micros += dus
		if off > math.MaxInt64 || size > math.MaxUint32 || off+size > math.MaxInt64 {
			return fail(i, "frame of %d bytes at offset %d", size, off)
		}
		if len(v)-p < 4 {
			return fail(i, "truncated checksum")
		}
		loc = segment.Location{Segment: seg, Offset: int64(off), Size: int64(size)}
		dst = append(dst, Position{ID: eventid.New(micros, binary.BigEndian.Uint32(v[p:]), ledger), Seq: seq, Loc: loc})
		p += 4
	}
	return dst, nil
}
