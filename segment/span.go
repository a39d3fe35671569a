package segment

import (
	"fmt"
	"io"

	"github.com/annal-db/annal/eventid"
)

// VerifySpan verifies records that were read somewhere else than a
// segment file (a replica's chunk): b holds whole frames, one after the
// other, as a segment holds them at offset off of segment seg, and they
// must follow prev, the head of ledger before them (for the first
// record of a ledger, prev is Head{ID: the genesis ID}). Each frame's
// CRC, length and synced field, and each record's chain (ledger,
// sequence number, previous ID, time, checksum) are checked as Open
// checks a segment's, and the span must end with a batch's last record.
// It returns the head after the span (with the last record's Location),
// and calls each, if not nil, with every record and its location (the
// record is valid during the call only). A bad record is a
// *CorruptionError naming what, as File, and its offset.
func VerifySpan(ledger eventid.LedgerID, prev Head, what string, seg uint64, off int64, b []byte, each func(r *Record, loc Location) error) (Head, error) {
	if off < headerSize {
		return Head{}, &CorruptionError{File: what, Offset: off, Problem: "records before the end of a segment's header", Expected: fmt.Sprintf(">= %d", headerSize), Found: fmt.Sprint(off)}
	}
	s := newScanner(spanReader{b: b, base: off}, what, off, off+int64(len(b)), chain{ledger: ledger, id: prev.ID, seq: prev.Seq})
	head := prev
	for {
		ok, bad, err := s.next()
		if err != nil {
			return Head{}, err
		}
		if bad != nil {
			return Head{}, bad.corruption(what)
		}
		if !ok {
			break
		}
		loc := s.location(seg)
		head = Head{ID: s.rec.ID, Seq: s.rec.Seq, Loc: loc}
		if each != nil {
			if err := each(&s.rec, loc); err != nil {
				return Head{}, err
			}
		}
	}
	if head.Seq != prev.Seq && s.rec.more {
		return Head{}, &CorruptionError{File: what, Offset: head.Loc.Offset, Problem: "the span ends inside a batch", Expected: "a batch's last record", Found: "a record with more of its batch to follow"}
	}
	return head, nil
}

// spanReader reads a span of a segment held in memory, at the segment's
// offsets.
type spanReader struct {
	b    []byte
	base int64
}

func (r spanReader) ReadAt(p []byte, off int64) (int, error) {
	i := off - r.base
	if i < 0 || i > int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[i:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ReadSpan reads committed records from the one at from (its segment
// and offset; Size is not used) as a Span, the bytes of their frames as
// the segment holds them: at least one batch, whole batches only, at most
// max bytes unless the first batch alone is larger, all in from's
// segment. Each record read is checked (frame CRC, chain) and given to
// each, if not nil, with its location (valid during the call only): the
// records of the span, and maybe some of a batch after it that was begun
// and left out (over max), which the caller drops (those after
// Span.Last). Span.Durable says whether the whole span is durable. A
// from past the committed end is an error.
func (l *Log) ReadSpan(from Location, max int, each func(r *Record, loc Location)) (Span, error) {
	it := l.NewIterator(from.Segment, from.Offset)
	defer it.Close()
	var s Span
	n := 0
	var batchEnd Head // the last record of the last whole batch read
	for {
		if !it.Next() {
			if err := it.Err(); err != nil {
				return Span{}, fmt.Errorf("segment: read span from segment %d at %d: %w", from.Segment, from.Offset, err)
			}
			break
		}
		r, loc := it.Record(), it.Location()
		if loc.Segment != from.Segment {
			break
		}
		if n == 0 {
			s.Segment, s.Offset, s.FirstSeq, s.FirstID = loc.Segment, loc.Offset, r.Seq, r.ID
		}
		if batchEnd.Seq != 0 && loc.End()-s.Offset > int64(max) {
			break // the batch goes over max: left for the next span
		}
		if each != nil {
			each(r, loc)
		}
		n++
		s.Last = Head{ID: r.ID, Seq: r.Seq, Loc: loc}
		if !r.more {
			batchEnd = s.Last
			if loc.End()-s.Offset >= int64(max) {
				break
			}
		}
	}
	if batchEnd.Seq == 0 && n > 0 {
		// The committed end is always a batch's end: records that end
		// inside one are damage, never shipped.
		return Span{}, &CorruptionError{File: segmentName(from.Segment), Offset: s.Last.Loc.Offset, Problem: "the committed records end inside a batch"}
	}
	s.Last = batchEnd
	if n == 0 {
		return Span{}, fmt.Errorf("segment: read span: no committed record at segment %d offset %d (the head is #%d)", from.Segment, from.Offset, l.Head().Seq)
	}
	size := s.Last.Loc.End() - s.Offset
	s.Bytes = make([]byte, size)
	f, err := l.readFile(from.Segment)
	if err != nil {
		return Span{}, err
	}
	defer f.release()
	if m, err := f.ReadAt(s.Bytes, s.Offset); int64(m) < size {
		return Span{}, fmt.Errorf("segment: read span of %s at %d: %d of %d bytes: %w", segmentName(from.Segment), s.Offset, m, size, err)
	}
	s.Durable = l.Durable().Seq >= s.Last.Seq
	return s, nil
}

// ReadSealed returns sealed segment n's file, whole, and the sequence
// numbers of its first and last records (each record checked as
// ReadSpan checks them). The active segment is not sealed: an error.
func (l *Log) ReadSealed(n uint64) (data []byte, first, last uint64, err error) {
	if active := l.committed.Load().segNum; n == 0 || n >= active {
		return nil, 0, 0, fmt.Errorf("segment: %s is not a sealed segment (the active one is %s)", segmentName(n), segmentName(active))
	}
	it := l.NewIterator(n, headerSize)
	defer it.Close()
	for it.Next() && it.Location().Segment == n {
		if first == 0 {
			first = it.Record().Seq
		}
		last = it.Record().Seq
	}
	if err := it.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("segment: read sealed %s: %w", segmentName(n), err)
	}
	if first == 0 {
		return nil, 0, 0, fmt.Errorf("segment: sealed %s holds no record", segmentName(n))
	}
	f, err := l.readFile(n)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.release()
	size, _, err := l.committedSize(n, f)
	if err != nil {
		return nil, 0, 0, err
	}
	data = make([]byte, size)
	if m, err := f.ReadAt(data, 0); int64(m) < size {
		return nil, 0, 0, fmt.Errorf("segment: read sealed %s: %d of %d bytes: %w", segmentName(n), m, size, err)
	}
	return data, first, last, nil
}
