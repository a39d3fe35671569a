package replica

import (
	"context"
	"errors"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// TestTakeEpochAboveTheChunksWhenNewestManifestDeleted: an operator
// deletes the newest manifest (taking it for a stale object) while writer
// A, which wrote it, runs. Writer B that takes the ledger then must still
// take a higher epoch than every chunk in the history: it fences A (A's
// next Wait fails with ErrFenced, not as damage) and its fence chunk's
// epoch is above the chunks before it, as a restore requires.
func TestTakeEpochAboveTheChunksWhenNewestManifestDeleted(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	a := openTake(t, testConfig(st, tl, Replicated), tl)
	last := tl.append(5)
	if err := a.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys(t, st, "manifest/") {
		if err := st.Delete(ctx, LedgerPrefix(testLedgerID())+"manifest/"+k); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := bucketChunks(t, st)
	b := openTake(t, testConfig(st, tl, Replicated), tl)
	if e, top := b.Status().Epoch, before[len(before)-1].Epoch; e <= top {
		t.Fatalf("B took epoch %d, the history's last chunk holds epoch %d", e, top)
	}
	seq := tl.append(1)
	if err := a.Wait(ctx, seq); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's Wait after B took the ledger: %v, want ErrFenced", err)
	}
	if err := b.Wait(ctx, seq); err != nil {
		t.Fatal(err)
	}
	chunks := tl.checkBucket(t, st, seq)
	for i := 1; i < len(chunks); i++ {
		if c, p := chunks[i], chunks[i-1]; c.Fence() && c.Epoch <= p.Epoch {
			t.Fatalf("fence chunk %d of epoch %d after chunk %d of epoch %d", c.Number, c.Epoch, p.Number, p.Epoch)
		}
	}
}

