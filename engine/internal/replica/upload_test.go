package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
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

// durableCheck is a store wrapper that, at each chunk Put, checks that
// the local log had made the chunk's records durable.
type durableCheck struct {
	store.Store
	tl  *testLog
	bad atomic.Int32
}

func (d *durableCheck) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if isChunk(key) && d.tl.Durable().Seq < binary.BigEndian.Uint64(data[40:]) {
		d.bad.Add(1)
	}
	return d.Store.Put(ctx, key, data, cond)
}

// TestUploadSyncsBeforeUpload: records appended without a sync (the
// log's Durability None) are made durable locally before their chunk is
// uploaded: the bucket never holds records a local crash could lose.
func TestUploadSyncsBeforeUpload(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.None)
	dc := &durableCheck{Store: store.NewMemory(), tl: tl}
	w := openTake(t, testConfig(dc, tl, Replicated), tl)
	ctx := context.Background()
	var last uint64
	for range 30 {
		last = tl.append(2)
		if err := w.Wait(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	if n := dc.bad.Load(); n > 0 {
		t.Fatalf("%d chunks uploaded before their records were durable locally", n)
	}
	if d := tl.Durable().Seq; d < last {
		t.Fatalf("the log is durable to %d after Wait(%d)", d, last)
	}
	tl.checkBucket(t, dc, last)
}

// TestUploadOtherBytesOfOwnEpochIsDamage: a chunk of this writer's own
// epoch with other bytes in the slot it uploads to is not a fence but
// damage: Wait fails with an error that matches corruption and names the
// key, and nothing more is uploaded.
func TestUploadOtherBytesOfOwnEpochIsDamage(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	w := openTake(t, testConfig(st, tl, Replicated), tl)
	ctx := context.Background()
	if err := w.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	next := w.Status().Chunks + 1
	key := ChunkKey(testLedgerID(), next)
	other := Chunk{Ledger: testLedgerID(), Number: next, Epoch: 1, FirstSeq: 2, LastSeq: 1, TreeSize: 1, Root: tl.root(1), Prev: Hash{7}, Segment: 1, Offset: 64}
	if _, err := st.Put(ctx, key, other.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	err := w.Wait(ctx, tl.append(1))
	if !errors.Is(err, corruption.Err) || errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), key) {
		t.Fatalf("Wait = %v, want damage naming %s", err, key)
	}
	if err := w.Wait(ctx, tl.append(1)); !errors.Is(err, corruption.Err) {
		t.Fatalf("the next Wait = %v, want the same damage", err)
	}
	if n := len(keys(t, st, "wal/")); uint64(n) != next {
		t.Fatalf("%d chunks in the bucket, want %d: nothing more uploaded", n, next)
	}
}
