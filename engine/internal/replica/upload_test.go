package replica

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// TestUploadLostResponseIsSuccess: a chunk Put that was applied but whose
// answer was lost (ErrUnavailable), retried into a 412 with
// ErrMaybeApplied, is read back, found to be the Writer's own bytes, and
// counts as stored: no fence, no error.
func TestUploadLostResponseIsSuccess(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	w := openTake(t, testConfig(fs, tl, Replicated), tl)
	ctx := context.Background()
	fs.loseChunks.Store(3)
	var last uint64
	for range 10 {
		last = tl.append(2)
		if err := w.Wait(ctx, last); err != nil {
			t.Fatalf("Wait(%d) after lost answers: %v", last, err)
		}
	}
	fs.mu.Lock()
	lost := len(fs.lost)
	fs.mu.Unlock()
	if lost != 3 {
		t.Fatalf("%d answers lost, want 3", lost)
	}
	if s := w.Status(); s.Fenced || s.LastError != nil {
		t.Fatalf("status after the retries: fenced %v, last error %v", s.Fenced, s.LastError)
	}
	tl.checkBucket(t, fs, last)
}

// TestUploadConflictRetried: a 409 ConditionalRequestConflict wrote
// nothing; the Writer retries the Put and the records are stored.
func TestUploadConflictRetried(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	w := openTake(t, testConfig(fs, tl, Replicated), tl)
	ctx := context.Background()
	before := fs.puts.Load()
	fs.conflicts.Store(4)
	last := tl.append(3)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if n := fs.puts.Load() - before; n < 5 {
		t.Fatalf("%d chunk Puts for one chunk after 4 conflicts, want at least 5", n)
	}
	if fs.conflicts.Load() > 0 {
		t.Fatal("the conflicts were not all met")
	}
	tl.checkBucket(t, fs, last)
}

// TestUploadStoreDownWaitTimesOut: with the store down, Wait fails after
// StoreTimeout with an error naming the endpoint and the store's error;
// the upload keeps trying, and once the store answers the same records
// are stored and Wait succeeds.
func TestUploadStoreDownWaitTimesOut(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	cfg := testConfig(fs, tl, Replicated)
	cfg.StoreTimeout = 300 * time.Millisecond
	cfg.Endpoint = "s3://bucket/prefix at http://store.test:9000"
	w := openTake(t, cfg, tl)
	ctx := context.Background()
	fs.down.Store(true)
	last := tl.append(2)
	start := time.Now()
	err := w.Wait(ctx, last)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Wait succeeded with the store down")
	}
	if !strings.Contains(err.Error(), cfg.Endpoint) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Wait's error %q does not name the endpoint and the store's error", err)
	}
	if took < cfg.StoreTimeout || took > 10*cfg.StoreTimeout {
		t.Fatalf("Wait failed after %s, StoreTimeout is %s", took, cfg.StoreTimeout)
	}
	if s := w.Status(); !errors.Is(s.LastError, store.ErrUnavailable) || s.Stored >= last {
		t.Fatalf("status with the store down: stored %d, last error %v", s.Stored, s.LastError)
	}
	fs.down.Store(false)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatalf("Wait once the store answers: %v", err)
	}
	if s := w.Status(); s.LastError != nil {
		t.Fatalf("last error after success: %v", s.LastError)
	}
	tl.checkBucket(t, fs, last)
}
