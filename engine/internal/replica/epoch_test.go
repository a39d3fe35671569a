package replica

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
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

// TestTakeRefusesTheLastEpoch: a manifest whose epoch is the largest
// number (written by someone with write access to the bucket) leaves no
// next epoch: Take refuses with an error naming the manifest, and writes
// no manifest of epoch 0 (which no reader accepts).
func TestTakeRefusesTheLastEpoch(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	a := openTake(t, testConfig(st, tl, Replicated), tl)
	last := tl.append(3)
	if err := a.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tl.detach(a)
	m, num, _, err := a.manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Epoch = math.MaxUint64
	forged := ManifestKey(testLedgerID(), num+1)
	if _, err := st.Put(ctx, forged, m.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	w, _, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	err = w.Take(ctx)
	if !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), forged) {
		t.Fatalf("Take after a manifest of epoch 2^64-1: %v, want a corruption error naming %s", err, forged)
	}
	if n := len(keys(t, st, "manifest/")); n != int(num)+1 {
		t.Fatalf("%d manifests after the refused Take, want %d", n, num+1)
	}
}
