package segment

import (
	"fmt"

	"github.com/annal-db/annal/eventid"
)

// RecordsStart is the offset of a segment's first record: the size of
// its header.
const RecordsStart = headerSize

// SpanPrev returns the ID that the first record of b (whole frames, as
// VerifySpan takes them) names as its previous record's, unverified:
// the head a VerifySpan of b starts from when the record before it is
// not at hand (Head{ID: prev, Seq: first - 1}). VerifySpan then checks
// the record itself. A b too short to hold a record's fixed fields is
// an error.
func SpanPrev(b []byte) (eventid.ID, error) {
	var id eventid.ID
	if len(b) < frameSize+payloadFixed {
		return id, fmt.Errorf("segment: %d bytes, fewer than a record's %d fixed ones", len(b), frameSize+payloadFixed)
	}
	copy(id[:], b[frameSize+40:frameSize+56])
	return id, nil
}
