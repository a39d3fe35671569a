package replica

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// TestCutMinFlushIntervalBoundsChunkRate: in Replicated mode under 16
// appenders that never pause, chunks are cut at most once per
// MinFlushInterval, so each holds many appends.
func TestCutMinFlushIntervalBoundsChunkRate(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<30, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	cfg := testConfig(fs, tl, Replicated)
	cfg.MinFlushInterval = 40 * time.Millisecond
	w := openTake(t, cfg, tl)
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 400*time.Millisecond {
				if err := w.Wait(ctx, tl.append(1)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	puts := fs.chunkPuts()
	// The fence, then one chunk per interval, plus the one cut at once.
	limit := 2 + int(elapsed/cfg.MinFlushInterval)
	if len(puts) > limit {
		t.Fatalf("%d chunks in %s with MinFlushInterval %s: more than %d", len(puts), elapsed, cfg.MinFlushInterval, limit)
	}
	for i := 2; i < len(puts); i++ {
		// Uploads to the memory store take microseconds: each Put is
		// where its cut was, give or take the scheduler.
		if gap := puts[i].Sub(puts[i-1]); gap < cfg.MinFlushInterval/2 {
			t.Fatalf("chunks %d and %d stored %s apart, MinFlushInterval is %s", i, i+1, gap, cfg.MinFlushInterval)
		}
	}
	t.Logf("%d records in %d chunks over %s", tl.Head().Seq, len(puts)-1, elapsed)
}

// TestCutShippedWithinShipInterval: in Shipped mode, records appended
// with no Wait are stored within ShipInterval, the appends of one
// interval together in one chunk; Status shows the lag meanwhile.
func TestCutShippedWithinShipInterval(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<30, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	idx := &chunkIndex{Store: fs, last: map[uint64]uint64{}}
	cfg := testConfig(idx, tl, Shipped)
	cfg.ShipInterval = 300 * time.Millisecond
	w := openTake(t, cfg, tl)
	if err := w.Wait(context.Background(), tl.Head().Seq); err != nil { // the backlog: the genesis
		t.Fatal(err)
	}
	for round := range 3 {
		before := len(fs.chunkPuts())
		start := time.Now()
		var last uint64
		for range 10 {
			last = tl.append(1)
		}
		if s := w.Status(); s.Head != last || s.Stored >= last {
			t.Fatalf("round %d: status at once: head %d stored %d, want head %d, not stored", round, s.Head, s.Stored, last)
		}
		for idx.storedUpTo() < last {
			if time.Since(start) > cfg.ShipInterval {
				t.Fatalf("round %d: records not stored within ShipInterval %s", round, cfg.ShipInterval)
			}
			time.Sleep(time.Millisecond)
		}
		if n := len(fs.chunkPuts()) - before; n != 1 {
			t.Fatalf("round %d: 10 appends in one interval went into %d chunks, want 1", round, n)
		}
		time.Sleep(5 * time.Millisecond) // the acknowledgement follows the Put
		if s := w.Status(); s.Stored != last || s.LagTime != 0 {
			t.Fatalf("round %d: status once stored: stored %d lag %s", round, s.Stored, s.LagTime)
		}
	}
	tl.checkBucket(t, fs, tl.Head().Seq)
}

// TestCloseShipsPendingAndStopsGoroutines: Close stores what was added
// and not yet shipped (Shipped mode, long ShipInterval), the sealed
// segments and the checkpoint given before it, and leaves no goroutine
// of the Writer behind.
func TestCloseShipsPendingAndStopsGoroutines(t *testing.T) {
	tl := newTestLog(t, 4<<10, segment.Sync)
	st := store.NewMemory()
	before := runtime.NumGoroutine()
	cfg := testConfig(st, tl, Shipped)
	cfg.ShipInterval = time.Hour
	w, _, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tl.attach(w)
	if err := w.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 40 {
		last = tl.append(2)
	}
	if s := w.Status(); s.Stored >= last {
		t.Fatalf("stored %d before Close with an hour's ShipInterval", s.Stored)
	}
	w.Checkpoint(testCheckpoint(tl, last), last)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tl.checkBucket(t, st, last)
	if n := checkpointIn(t, st); n != last {
		t.Fatalf("the checkpoint given before Close has size %d in the bucket, want %d", n, last)
	}
	if err := w.Wait(context.Background(), last+1); err == nil {
		t.Fatal("Wait after Close succeeded")
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
