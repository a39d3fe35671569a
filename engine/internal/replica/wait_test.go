package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// waitersOf returns the records the Writer's registered Waits wait for.
func waitersOf(w *Writer) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var seqs []uint64
	for _, x := range w.waiters {
		seqs = append(seqs, x.seq)
	}
	return seqs
}

// awaitWaiters polls until the Writer's Waits wait for want.
func awaitWaiters(t *testing.T, w *Writer, want ...uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := waitersOf(w)
		if equalSeqs(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Writer's Waits wait for %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWaitReleasedByItsChunkOnly: an acknowledgement releases the Waits
// for the records it stores and leaves the others registered, in record
// order, until their own chunk is stored; a Wait that ends on its
// context is forgotten.
func TestWaitReleasedByItsChunkOnly(t *testing.T) {
	tl := newTestLog(t, 1<<30, segment.Sync)
	g := newGatedChunks(store.NewMemory())
	cfg := testConfig(g, tl, Replicated)
	cfg.Uploads = 2
	w := openTake(t, cfg, tl)
	t.Cleanup(g.openAll)
	ctx := context.Background()
	if err := w.Wait(ctx, tl.Head().Seq); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	a := tl.append(2)
	x := g.next(t, "the first append")
	b := tl.append(1)
	y := g.next(t, "the second append")
	if x.LastSeq != a || y.LastSeq != b {
		t.Fatalf("chunks to records %d and %d, want %d and %d", x.LastSeq, y.LastSeq, a, b)
	}
	done := make(chan error, 3)
	wait := func(ctx context.Context, seq uint64) { done <- w.Wait(ctx, seq) }
	go wait(ctx, b)
	awaitWaiters(t, w, b)
	go wait(ctx, a)
	awaitWaiters(t, w, a, b)
	cctx, cancel := context.WithCancel(ctx)
	go wait(cctx, b)
	awaitWaiters(t, w, a, b, b)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled Wait returned %v", err)
	}
	awaitWaiters(t, w, a, b)

	g.open(ChunkKey(testLedgerID(), x.Number))
	if err := <-done; err != nil {
		t.Fatalf("Wait(%d) after chunk %d was stored: %v", a, x.Number, err)
	}
	awaitWaiters(t, w, b)
	select {
	case err := <-done:
		t.Fatalf("Wait(%d) returned (%v) before chunk %d was stored", b, err, y.Number)
	case <-time.After(50 * time.Millisecond):
	}
	g.open(ChunkKey(testLedgerID(), y.Number))
	if err := <-done; err != nil {
		t.Fatalf("Wait(%d) after chunk %d was stored: %v", b, y.Number, err)
	}
	awaitWaiters(t, w)
}
