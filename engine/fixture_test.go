package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// appendSpec says which test events appendEvents appends and how. The zero
// value appends order(0), order(1), … in Appends of up to 500 events with
// the DB's default options.
type appendSpec struct {
	// From is the number of the first event: the events are From to
	// From+n-1.
	From int
	// Event returns event i; nil means order.
	Event func(i int) EventInput
	// Batch returns how many events the Append that starts at event i
	// takes (at least 1; fewer if fewer are left); nil means 500.
	Batch func(i int) int
	// Options are every Append's options; nil means the DB's defaults.
	Options *AppendOptions
}

// unsynced is an appendSpec's Options for appends that need not wait for
// an fsync: faster, where the test is not about durability.
var unsynced = &AppendOptions{Durability: None}

// batchesOf returns an appendSpec's Batch for Appends of n events each.
func batchesOf(n int) func(int) int { return func(int) int { return n } }

// mixedBatches is an appendSpec's Batch for Appends of 1 to 5 events, in
// turn, so that the Merkle tree grows by groups of every small size.
func mixedBatches(i int) int { return 1 + i%5 }

// placed is a small "placed" event of one of 7 orders, numbered i.
func placed(i int) EventInput {
	return EventInput{Entity: "order", Key: fmt.Sprintf("o%d", i%7), Event: "placed", Meta: []byte(`{"by":"tree-test"}`), Data: []byte(fmt.Sprintf(`{"n":%d,"j":%d}`, i, i%7))}
}

// appendEvents appends n test events to ledger, as s says, and returns
// their IDs in order; it fails t if an Append fails.
func appendEvents(t testing.TB, db *DB, ledger string, n int, s appendSpec) []eventid.ID {
	t.Helper()
	event := s.Event
	if event == nil {
		event = order
	}
	batch := s.Batch
	if batch == nil {
		batch = batchesOf(500)
	}
	ids := make([]eventid.ID, 0, max(n, 0))
	for i, end := s.From, s.From+n; i < end; {
		k := min(max(batch(i), 1), end-i)
		evs := make([]EventInput, k)
		for j := range evs {
			evs[j] = event(i + j)
		}
		var opts *AppendOptions
		if s.Options != nil {
			o := *s.Options // Append gets its own copy, as a caller's would be
			opts = &o
		}
		r, err := db.Append(context.Background(), ledger, evs, opts)
		if err != nil {
			t.Fatalf("append to %q: %v", ledger, err)
		}
		ids = append(ids, r.IDs...)
		i += k
	}
	return ids
}
