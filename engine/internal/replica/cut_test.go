package replica

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
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

// gatedChunks is a store whose chunk PUTs, once armed, wait until the
// test opens their key: the test decides which uploads are in flight.
type gatedChunks struct {
	store.Store
	armed   atomic.Bool
	arrived chan Chunk // each gated chunk Put's chunk, as it arrives

	mu     sync.Mutex
	gates  map[string]chan struct{}
	opened bool // openAll: every gate is open
}

func newGatedChunks(inner store.Store) *gatedChunks {
	return &gatedChunks{Store: inner, arrived: make(chan Chunk, 16), gates: map[string]chan struct{}{}}
}

func (g *gatedChunks) gate(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.gates[key]
	if !ok {
		c = make(chan struct{})
		if g.opened {
			close(c)
		}
		g.gates[key] = c
	}
	return c
}

// open lets the chunk Put of key through (before or after it arrives).
func (g *gatedChunks) open(key string) {
	c := g.gate(key)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		close(c)
	}
}

// openAll lets every chunk Put through from now on (a failed test's
// Close).
func (g *gatedChunks) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = true
	for _, c := range g.gates {
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

func (g *gatedChunks) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if isChunk(key) && g.armed.Load() {
		c, err := DecodeChunk(key, testLedgerID(), data)
		if err != nil {
			return "", err
		}
		g.arrived <- c
		select {
		case <-g.gate(key):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, data, cond)
}

// next returns the next gated chunk Put's chunk; it fails the test if
// none arrives within 10 s (a cut held that should not be).
func (g *gatedChunks) next(t *testing.T, what string) Chunk {
	t.Helper()
	select {
	case c := <-g.arrived:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no chunk cut for %s within 10 s", what)
		return Chunk{}
	}
}

// holdSetup takes a Replicated Writer over a gated store with two
// upload slots and the given Hold, then fills both slots: chunk x holds
// two records, chunk y one. It lets x through and waits for its
// acknowledgement, which releases two records' appenders, with y still
// waiting for the test to open it.
func holdSetup(t *testing.T, hold float64) (tl *testLog, g *gatedChunks, w *Writer, y Chunk) {
	tl = newTestLog(t, 1<<30, segment.Sync)
	g = newGatedChunks(store.NewMemory())
	cfg := testConfig(g, tl, Replicated)
	cfg.Uploads = 2
	cfg.Hold = hold
	w = openTake(t, cfg, tl)
	t.Cleanup(g.openAll)                                                // before the Writer's Close
	if err := w.Wait(context.Background(), tl.Head().Seq); err != nil { // the backlog: the genesis
		t.Fatal(err)
	}
	g.armed.Store(true)
	a := tl.append(2)
	x := g.next(t, "the first append, nothing in flight")
	b := tl.append(1)
	y = g.next(t, "the second append, nobody else released")
	if x.LastSeq != a || y.FirstSeq != b || y.LastSeq != b {
		t.Fatalf("chunks %d (records %d to %d) and %d (%d to %d), want records to %d, then %d alone", x.Number, x.FirstSeq, x.LastSeq, y.Number, y.FirstSeq, y.LastSeq, a, b)
	}
	g.open(ChunkKey(testLedgerID(), x.Number)) // releases x's two records
	if err := w.Wait(context.Background(), x.LastSeq); err != nil {
		t.Fatal(err)
	}
	return tl, g, w, y
}

// wantRecords fails the test unless chunk c holds records first to last.
func wantRecords(t *testing.T, c Chunk, first, last uint64, why string) {
	t.Helper()
	if c.FirstSeq != first || c.LastSeq != last {
		t.Fatalf("chunk %d holds records %d to %d, want %d to %d%s", c.Number, c.FirstSeq, c.LastSeq, first, last, why)
	}
}

// finish opens the chunks numbered open, waits until record last is
// stored and checks the bucket up to it.
func (g *gatedChunks) finish(t *testing.T, tl *testLog, w *Writer, last uint64, open ...uint64) {
	t.Helper()
	for _, n := range open {
		g.open(ChunkKey(testLedgerID(), n))
	}
	if err := w.Wait(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	tl.checkBucket(t, g, last)
}

// TestCutLoneAppenderNeverHeld: one appender that waits for each append
// is never held, however long the hold may be: with nothing else in
// flight, its chunk is cut as soon as it is pending.
func TestCutLoneAppenderNeverHeld(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<30, segment.Sync)
	cfg := testConfig(store.NewMemory(), tl, Replicated)
	cfg.Hold = 1e12 // a hold would outlast the test
	w := openTake(t, cfg, tl)
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Batches of 1 to 5 records: each acknowledgement releases
		// another number of records than the next append brings.
		err := w.Wait(ctx, tl.append(1+i%5))
		cancel()
		if err != nil {
			t.Fatalf("append %d of a lone appender: %v", i, err)
		}
	}
}

// TestCutHoldGathersReleasedAppenders: with an upload in flight, a cut
// after an acknowledgement waits for the records its appenders bring
// back, so that they go into one chunk, not one chunk each; the
// acknowledgements stay in chunk order.
func TestCutHoldGathersReleasedAppenders(t *testing.T) {
	t.Parallel()
	tl, g, w, y := holdSetup(t, 1e12)
	c1 := tl.append(1) // y is in flight: held for the second
	// Time for a cut that would not wait to take c1 alone.
	time.Sleep(20 * time.Millisecond)
	c2 := tl.append(1)
	z := g.next(t, "the records the acknowledgement released")
	wantRecords(t, z, c1, c2, ": the cut did not wait for both released appenders")
	// z stored before y acknowledges nothing until y is.
	g.open(ChunkKey(testLedgerID(), z.Number))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := w.Wait(ctx, c2)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for record %d with chunk %d not stored: %v, want it still waiting", c2, y.Number, err)
	}
	g.finish(t, tl, w, c2, y.Number)
}

// TestCutHoldEndsWithNothingInFlight: a held cut is cut as soon as the
// other uploads finish, however long the hold may be.
func TestCutHoldEndsWithNothingInFlight(t *testing.T) {
	t.Parallel()
	tl, g, w, y := holdSetup(t, 1e12)
	c1 := tl.append(1) // one of the two released: held while y is in flight
	g.open(ChunkKey(testLedgerID(), y.Number))
	z := g.next(t, "a held record once nothing else is in flight")
	wantRecords(t, z, c1, c1, "")
	g.finish(t, tl, w, c1, z.Number)
}

// TestCutHoldIsBounded: when the released appenders do not come back,
// the hold runs out (Hold times the mean upload) and the cut takes what
// is pending, uploads still in flight.
func TestCutHoldIsBounded(t *testing.T) {
	t.Parallel()
	tl, g, w, y := holdSetup(t, 2)
	c1 := tl.append(1) // one of the two released; y stays in flight
	z := g.next(t, "a held record past the hold")
	wantRecords(t, z, c1, c1, "")
	g.finish(t, tl, w, c1, y.Number, z.Number)
}
