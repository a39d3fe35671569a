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
