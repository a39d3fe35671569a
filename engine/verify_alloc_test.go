package engine

import (
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// TestVerifyRecordNoAlloc: what verify --full does per record of the
// segments besides reading it (its index entries into the digest, through
// the reindexer; its leaf hash) allocates nothing. A per-record
// allocation (the index.Record the reindexer built on the heap) was a
// third of the allocations of a verification and fed the GC.
func TestVerifyRecordNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ledger := eventid.LedgerID(7)
	d := index.NewDigest(ledger)
	r := segment.Record{Seq: 1, ID: eventid.New(1_700_000_000_000_000, 1, ledger), Entity: []byte("order"), Key: []byte("o-1"), Event: []byte("placed"), Meta: []byte(`{}`), Data: []byte(`{"amount":1}`)}
	var rx reindexer
	buf := make([]byte, 0, 512)
	var h [32]byte
	allocs := testing.AllocsPerRun(1000, func() {
		r.Seq++
		if err := rx.add(&r, segment.Location{Segment: 1, Offset: 64 * int64(r.Seq), Size: 64}, d.Add); err != nil {
			t.Fatal(err)
		}
		h, buf = leafHash(buf, &r)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a record", allocs)
	}
	if d.Count[0] != 1001 || h == ([32]byte{}) {
		t.Fatalf("the digest counted %d records (want 1001), leaf hash %x", d.Count[0], h)
	}
}
