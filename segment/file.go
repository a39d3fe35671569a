package segment

import (
	"fmt"

	"github.com/annal-db/annal/eventid"
)

// HeaderSize is the size of a segment file's header (format.md §6): the
// offset of its first record.
const HeaderSize = headerSize

// FileHeader returns the 64-byte header of segment n of ledger, whose
// first record follows prev (for segment 1, Head{ID: the genesis ID}),
// created at micros (µs since the epoch; informational), for a program
// that lays a segment file out from records read elsewhere (a restore
// from a replica).
func FileHeader(ledger eventid.LedgerID, n uint64, prev Head, micros uint64) []byte {
	h := header{ledger: ledger, number: n, prevID: prev.ID, prevSeq: prev.Seq, created: micros}
	return h.encode()
}

// VerifyFile verifies b as the whole file of sealed segment n of ledger
// (read somewhere else than the ledger's directory: a replica's seg/
// object, named what in errors): its header (CRC, version, size, ledger,
// number, and that it continues prev, the head before the segment: for
// segment 1, Head{ID: the genesis ID}), then every record as VerifySpan
// does, up to the last byte of b (a sealed segment holds at least one
// record, ends with a batch's last record, and has no zero tail). It
// returns the head at the segment's last record, and calls each, if not
// nil, with every record and its location. A bad file is a
// *CorruptionError naming what.
func VerifyFile(ledger eventid.LedgerID, n uint64, prev Head, what string, b []byte, each func(r *Record, loc Location) error) (Head, error) {
	if len(b) < headerSize {
		return Head{}, &CorruptionError{File: what, Problem: "segment header cut short", Expected: fmt.Sprintf("%d bytes", headerSize), Found: fmt.Sprintf("%d bytes", len(b))}
	}
	h, err := decodeHeader(b[:headerSize])
	if err != nil {
		return Head{}, &CorruptionError{File: what, Problem: "bad segment header: " + err.Error()}
	}
	switch {
	case h.ledger != ledger:
		return Head{}, &CorruptionError{File: what, Offset: 12, Problem: "segment of another ledger", Expected: ledger.String(), Found: h.ledger.String()}
	case h.number != n:
		return Head{}, &CorruptionError{File: what, Offset: 16, Problem: "segment number differs", Expected: fmt.Sprint(n), Found: fmt.Sprint(h.number)}
	case h.prevID != prev.ID || h.prevSeq != prev.Seq:
		return Head{}, &CorruptionError{File: what, Offset: 24, Problem: "segment does not continue the chain of the segment before",
			Expected: fmt.Sprintf("%s #%d", prev.ID, prev.Seq), Found: fmt.Sprintf("%s #%d", h.prevID, h.prevSeq)}
	case len(b) == headerSize:
		return Head{}, &CorruptionError{File: what, Offset: headerSize, Problem: "sealed segment holds no record", Expected: "at least one record", Found: "none"}
	}
	return VerifySpan(ledger, prev, what, n, headerSize, b[headerSize:], each)
}
