package index

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestSeqRange reads the stream, entity and event-name families in ranges
// of sequence numbers, forwards and backwards, against the same filter
// applied to the indexed events.
func TestSeqRange(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	var events []event
	for seq := uint64(1); seq <= 300; seq++ {
		events = append(events, event{seq: seq, entity: []string{"acct", "user"}[seq%5/4], key: fmt.Sprint(seq % 3), event: []string{"deposit", "withdraw"}[seq%2]})
	}
	// Indexed out of order, in several batches.
	shuffled := slices.Clone(events)
	slices.Reverse(shuffled)
	for c := range slices.Chunk(shuffled, 70) {
		add(t, x, ledgerA, c...)
	}
	want := func(match func(e event) bool, r SeqRange) []Position {
		var seqs []uint64
		for _, e := range events {
			if match(e) && e.seq > r.After && (r.Before == 0 || e.seq < r.Before) {
				seqs = append(seqs, e.seq)
			}
		}
		if r.Reverse {
			slices.Reverse(seqs)
		}
		return positions(ledgerA, seqs...)
	}
	bounds := []uint64{0, 1, 2, 3, 150, 298, 299, 300, 301, math.MaxUint64}
	for _, after := range bounds {
		for _, before := range bounds {
			for _, rev := range []bool{false, true} {
				r := SeqRange{After: after, Before: before, Reverse: rev}
				checkPositions(t, fmt.Sprintf("StreamRange %+v", r),
					collect(t, x.StreamRange(ctx, ledgerA, []byte("acct"), []byte("1"), r)),
					want(func(e event) bool { return e.entity == "acct" && e.key == "1" }, r))
				checkPositions(t, fmt.Sprintf("EntityEventsRange %+v", r),
					collect(t, x.EntityEventsRange(ctx, ledgerA, []byte("acct"), r)),
					want(func(e event) bool { return e.entity == "acct" }, r))
				checkPositions(t, fmt.Sprintf("EventNameRange %+v", r),
					collect(t, x.EventNameRange(ctx, ledgerA, []byte("withdraw"), r)),
					want(func(e event) bool { return e.event == "withdraw" }, r))
			}
		}
	}
}
