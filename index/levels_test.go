package index

import (
	"context"
	"errors"
	"testing"

	"github.com/annal-db/annal/segment"
)

// TestFlushState: a flush of what was committed counts and adds a
// sublevel to level 0, which Pebble leaves alone; a closed index reports
// ErrClosed.
func TestFlushState(t *testing.T) {
	t.Parallel()
	x := openAt(t, t.TempDir(), Options{})
	n0, sub, err := x.FlushState()
	if err != nil || sub != 0 {
		t.Fatalf("new index: %d flushes, %d sublevels, %v", n0, sub, err)
	}
	add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n"}, event{seq: 2, entity: "e", key: "k", event: "n"})
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	n1, sub, err := x.FlushState()
	if err != nil || n1 != n0+1 || sub != 1 {
		t.Fatalf("after a flush: %d flushes (was %d), %d sublevels, %v; want one more, 1", n1, n0, sub, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.FlushState(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v, want ErrClosed", err)
	}
}

// TestPostingsOfReusedBatch: postings built by one Batch over several
// commits, with entities and event names that alternate and repeat (the
// path of Add that finds the last posting of a family without the map),
// are read back as they were added.
func TestPostingsOfReusedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := openAt(t, t.TempDir(), Options{})
	b := x.NewBatch()
	defer b.Close()
	commits := [][]event{
		{{seq: 1, entity: "a", key: "1", event: "n"}, {seq: 2, entity: "a", key: "2", event: "n"}, {seq: 3, entity: "b", key: "1", event: "n"}, {seq: 4, entity: "a", key: "1", event: "m"}},
		{{seq: 5, entity: "b", key: "1", event: "m"}, {seq: 6, entity: "b", key: "1", event: "m"}, {seq: 7, entity: "a", key: "2", event: "n"}},
	}
	for _, evs := range commits {
		for _, e := range evs {
			b.Add(ledgerA, e.record(ledgerA))
		}
		last := evs[len(evs)-1].seq
		b.SetProgress(ledgerA, segment.Head{ID: idOf(ledgerA, last), Seq: last, Loc: locOf(last)})
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	checkPositions(t, "stream a/1", collect(t, x.Stream(ctx, ledgerA, []byte("a"), []byte("1"), 0)), positions(ledgerA, 1, 4))
	checkPositions(t, "stream a/2", collect(t, x.Stream(ctx, ledgerA, []byte("a"), []byte("2"), 0)), positions(ledgerA, 2, 7))
	checkPositions(t, "stream b/1", collect(t, x.Stream(ctx, ledgerA, []byte("b"), []byte("1"), 0)), positions(ledgerA, 3, 5, 6))
	checkPositions(t, "entity a", collect(t, x.EntityEvents(ctx, ledgerA, []byte("a"), 0)), positions(ledgerA, 1, 2, 4, 7))
	checkPositions(t, "entity b", collect(t, x.EntityEvents(ctx, ledgerA, []byte("b"), 0)), positions(ledgerA, 3, 5, 6))
	checkPositions(t, "event n", collect(t, x.EventName(ctx, ledgerA, []byte("n"), 0)), positions(ledgerA, 1, 2, 3, 7))
	checkPositions(t, "event m", collect(t, x.EventName(ctx, ledgerA, []byte("m"), 0)), positions(ledgerA, 4, 5, 6))
}
