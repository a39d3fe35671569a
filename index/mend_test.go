package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDeleteEventsKeepsTailUntilCommit: DeleteEvents drops the ledger's
// tail when its batch commits, not when it is called. A batch that is
// closed without a commit, or whose commit fails, leaves the tail (and so
// every read of the records it holds, which Pebble does not have yet) as
// it was; one that commits replaces it with what it wrote.
func TestDeleteEventsKeepsTailUntilCommit(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	const n = 60
	evs := randomEvents(rng, 1, n)
	for _, how := range []string{"closed", "failed commit", "committed"} {
		t.Run(how, func(t *testing.T) {
			x := openAt(t, "x", Options{FS: vfs.NewMem(), TailSize: 10 * n})
			add(t, x, ledgerA, evs[:n/2]...)
			tailAdd(t, x, ledgerA, evs[n/2:]...)
			want := reads(model{ledgerA, evs}, ledgerA, evs, 3)
			diffReads(t, "before the batch", reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
			b := x.NewBatch()
			b.DeleteEvents(ledgerA)
			switch how {
			case "closed":
				b.Close()
			case "failed commit":
				// Valid records, then one of another ledger: Commit
				// writes nothing.
				for _, e := range evs[:5] {
					b.Add(ledgerA, e.record(ledgerA))
				}
				b.Add(ledgerA, evs[5].record(ledgerB))
				if err := b.Commit(false); !errors.Is(err, ErrInvalid) {
					t.Fatalf("Commit of an invalid batch: %v, want ErrInvalid", err)
				}
				b.Close()
			case "committed":
				// Indexed again from the first record, as the engine
				// does: the tail's records are in the batch.
				for _, e := range evs {
					b.Add(ledgerA, e.record(ledgerA))
				}
				if err := b.Commit(false); err != nil {
					t.Fatalf("Commit: %v", err)
				}
				b.Close()
				if x.tailBusy(ledgerA) {
					t.Fatal("the tail still holds records after the deletion committed")
				}
			}
			diffReads(t, fmt.Sprintf("after the batch (%s)", how), reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
			// What is in the tail is still written by a flush.
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
			diffReads(t, fmt.Sprintf("after the batch (%s) and Flush", how), reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
		})
	}
}

// TestTailPublishRefusedChangesNothing: a Publish refused because a
// record is out of sequence publishes none of its records and leaves the
// sequence number the tail wants as it was, so that the records that do
// follow are taken next.
func TestTailPublishRefusedChangesNothing(t *testing.T) {
	x := openAt(t, "x", Options{FS: vfs.NewMem()})
	evs := randomEvents(rand.New(rand.NewPCG(15, 2)), 1, 6)
	tailAdd(t, x, ledgerA, evs[:3]...)
	tl := x.Tail(ledgerA)
	tailStage(tl, ledgerA, []event{evs[3], evs[5]}) // #4, then #6 instead of #5
	if err := tl.Publish(segment.Head{ID: idOf(ledgerA, 6), Seq: 6, Loc: locOf(6)}, segment.Head{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Publish of #4 and #6: %v, want ErrInvalid", err)
	}
	diffReads(t, "after the refused Publish", reads(indexView{t, x, ledgerA}, ledgerA, evs[:3], 4), reads(model{ledgerA, evs[:3]}, ledgerA, evs[:3], 4))
	tailAdd(t, x, ledgerA, evs[3:]...)
	diffReads(t, "after #4 to #6", reads(indexView{t, x, ledgerA}, ledgerA, evs, 4), reads(model{ledgerA, evs}, ledgerA, evs, 4))
}
