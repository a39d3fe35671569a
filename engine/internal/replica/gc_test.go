package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
)

// fakeClock is a Config.Now that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newestManifest reads the bucket's newest manifest.
func newestManifest(t testing.TB, st store.Store) (Manifest, uint64) {
	t.Helper()
	ks := keys(t, st, "manifest/")
	if len(ks) == 0 {
		t.Fatal("no manifest")
	}
	key := LedgerPrefix(testLedgerID()) + "manifest/" + ks[len(ks)-1]
	o, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeManifest(key, testLedgerID(), o.Data)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := ParseNumber(key)
	return m, n
}

// eventually polls cond for up to 5 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// chunkNumbers lists the numbers of the chunks in st.
func chunkNumbers(t testing.TB, st store.Store) []uint64 {
	var out []uint64
	for _, k := range keys(t, st, "wal/") {
		n, _ := ParseNumber(k)
		out = append(out, n)
	}
	return out
}

// TestGCDeletesBelowBoundaryAfterGrace: once segments are sealed and a
// manifest moves the GC boundary, the chunks below it are kept until
// GCGrace has passed on the writer's clock, then deleted; chunks from
// the boundary on, seg/ objects and the newest two manifests stay, and a
// Writer opened afterwards finds the same tail.
func TestGCDeletesBelowBoundaryAfterGrace(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 4<<10, segment.Sync)
	st := store.NewMemory()
	clock := newFakeClock()
	cfg := testConfig(st, tl, Replicated)
	cfg.Now = clock.Now
	cfg.GCGrace = 10 * time.Minute
	w := openTake(t, cfg, tl)
	ctx := context.Background()
	var last uint64
	for range 80 {
		last = tl.append(1)
		if err := w.Wait(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	sealed := tl.Head().Loc.Segment - 1
	eventually(t, "a manifest names every sealed segment", func() bool {
		m, _ := newestManifest(t, st)
		return m.Segments == sealed
	})
	m, _ := newestManifest(t, st)
	if m.GC <= 2 {
		t.Fatalf("GC boundary %d after %d seals", m.GC, sealed)
	}
	all := chunkNumbers(t, st)
	segs := keys(t, st, "seg/")
	clock.advance(cfg.GCGrace - time.Second)
	w.kick()
	time.Sleep(50 * time.Millisecond)
	if got := chunkNumbers(t, st); len(got) != len(all) {
		t.Fatalf("%d chunks deleted before the grace period passed", len(all)-len(got))
	}
	clock.advance(2 * time.Second)
	w.kick()
	eventually(t, "the chunks below the boundary are deleted", func() bool {
		return chunkNumbers(t, st)[0] == m.GC
	})
	if got := chunkNumbers(t, st); got[len(got)-1] != all[len(all)-1] || uint64(len(got)) != all[len(all)-1]-m.GC+1 {
		t.Fatalf("chunks left %v, want %d to %d", got, m.GC, all[len(all)-1])
	}
	if got := keys(t, st, "seg/"); len(got) != len(segs) {
		t.Fatalf("seg/ held %d objects, now %d", len(segs), len(got))
	}
	eventually(t, "the manifests below the newest two are deleted", func() bool {
		return len(keys(t, st, "manifest/")) == 2
	})
	last = tl.append(1)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w2, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	_ = w2.Close(ctx)
	if tail.Seq != last || tail.ID != tl.Head().ID {
		t.Fatalf("tail after GC: %d %v, want %d %v", tail.Seq, tail.ID, last, tl.Head().ID)
	}
}

// TestGCZombieCannotRecreateUnnoticed: writer A pauses; B takes the
// ledger, seals segments and, after the grace period, deletes the chunks
// below its boundary, B's fence among them. A resumes and uploads into
// its next slot, now free: the upload lands, but below the boundary
// (no reader looks there), and A, whose last look at the manifest is
// older than GCGrace/2, reads it before acknowledging and fails with
// ErrFenced.
func TestGCZombieCannotRecreateUnnoticed(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 4<<10, segment.Sync)
	st := store.NewMemory()
	clock := newFakeClock()
	ctx := context.Background()
	cfgA := testConfig(st, tl, Replicated)
	cfgA.Now = clock.Now
	cfgA.GCGrace = 10 * time.Minute
	a := openTake(t, cfgA, tl)
	aLast := tl.append(1)
	if err := a.Wait(ctx, aLast); err != nil {
		t.Fatal(err)
	}
	tl.detach(a) // A pauses
	aNext := chunkNumbers(t, st)[len(chunkNumbers(t, st))-1] + 1

	cfgB := testConfig(st, tl, Replicated)
	cfgB.Now = clock.Now
	cfgB.GCGrace = 10 * time.Minute
	b := openTake(t, cfgB, tl)
	var last uint64
	for range 60 {
		last = tl.append(1)
	}
	if err := b.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B's manifest moves the GC boundary past its fence", func() bool {
		m, _ := newestManifest(t, st)
		return m.Epoch == 2 && m.GC > aNext+1
	})
	// The grace runs from B's last write of the manifest: a seal that B
	// stores after an advance writes it again, so the clock is advanced
	// until B deletes (a machine slow enough for B to be still sealing
	// at the first advance failed here).
	eventually(t, "B deletes the chunks below its boundary", func() bool {
		if chunkNumbers(t, st)[0] > aNext {
			return true
		}
		clock.advance(cfgB.GCGrace + time.Second)
		b.kick()
		return false
	})

	tl.attach(a) // A resumes
	seq := tl.append(1)
	err := a.Wait(ctx, seq)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the zombie's Wait: %v, want ErrFenced", err)
	}
	m, _ := newestManifest(t, st)
	recreated := 0
	for _, n := range chunkNumbers(t, st) {
		if n < m.GC {
			o, gerr := st.Get(ctx, ChunkKey(testLedgerID(), n))
			if gerr != nil {
				t.Fatal(gerr)
			}
			c, derr := DecodeChunk(ChunkKey(testLedgerID(), n), testLedgerID(), o.Data)
			if derr != nil || c.Epoch != 1 || n < aNext {
				t.Fatalf("below the boundary %d: chunk %d of epoch %d (%v); only the zombie's re-creations from %d on may be there", m.GC, n, c.Epoch, derr, aNext)
			}
			recreated++
		}
	}
	if recreated == 0 {
		t.Fatal("the zombie re-created no deleted chunk: the test did not test what it means to")
	}
	if err := b.Wait(ctx, seq); err != nil {
		t.Fatal(err)
	}
	w, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close(ctx)
	if tail.Seq != seq || tail.Manifest.Epoch != 2 {
		t.Fatalf("tail %d epoch %d, want %d epoch 2", tail.Seq, tail.Manifest.Epoch, seq)
	}
}

// testCheckpoint is a signed checkpoint's note as the Writer sees it.
func testCheckpoint(tl *testLog, n uint64) []byte {
	c := tree.Checkpoint{Origin: fmt.Sprintf("test/%08x", uint32(testLedgerID())), Size: n, Root: tree.Hash(tl.root(n))}
	return append(append(c.Text(), '\n'), testSignature...)
}

// checkpointIn returns the size of the bucket's checkpoint (0: none).
func checkpointIn(t testing.TB, st store.Store) uint64 {
	t.Helper()
	o, err := st.Get(context.Background(), CheckpointKey(testLedgerID()))
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := checkpointSize(o.Data)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkpointSize is the tree size of a signed checkpoint: its note's
// second line.
func checkpointSize(note []byte) (uint64, error) {
	lines := bytes.SplitN(note, []byte("\n"), 3)
	if len(lines) < 3 {
		return 0, errors.New("not a checkpoint: fewer than three lines")
	}
	n, err := strconv.ParseUint(string(lines[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a checkpoint: line 2 is %q, not a tree size", lines[1])
	}
	return n, nil
}

// TestCheckpointNeverGoesBack: a checkpoint is stored only once every
// record it covers is, and replaces the bucket's only when larger: one
// smaller than the stored one, from this writer or after another wrote a
// larger one, changes nothing.
func TestCheckpointNeverGoesBack(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	cfg := testConfig(st, tl, Shipped)
	cfg.ShipInterval = time.Hour
	w := openTake(t, cfg, tl)
	ctx := context.Background()
	if err := w.Wait(ctx, 1); err != nil { // the backlog: the genesis
		t.Fatal(err)
	}
	for range 10 {
		tl.append(1)
	}
	w.Checkpoint(testCheckpoint(tl, 5), 5)
	w.kick()
	time.Sleep(50 * time.Millisecond)
	if n := checkpointIn(t, st); n != 0 {
		t.Fatalf("checkpoint of size %d stored before its records", n)
	}
	if err := w.Wait(ctx, 5); err != nil {
		t.Fatal(err)
	}
	eventually(t, "checkpoint 5 is stored", func() bool { return checkpointIn(t, st) == 5 })
	w.Checkpoint(testCheckpoint(tl, 3), 3)
	w.kick()
	time.Sleep(50 * time.Millisecond)
	if n := checkpointIn(t, st); n != 5 {
		t.Fatalf("checkpoint went from 5 to %d", n)
	}
	// Another writer stores a larger one.
	o, err := st.Get(ctx, CheckpointKey(testLedgerID()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, CheckpointKey(testLedgerID()), testCheckpoint(tl, 9), store.ReplaceIf(o.ETag)); err != nil {
		t.Fatal(err)
	}
	w.Checkpoint(testCheckpoint(tl, 7), 7)
	w.kick()
	time.Sleep(50 * time.Millisecond)
	if n := checkpointIn(t, st); n != 9 {
		t.Fatalf("checkpoint went from 9 to %d", n)
	}
	last := tl.append(2)
	w.Checkpoint(testCheckpoint(tl, last), last)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the larger checkpoint replaces the stored one", func() bool { return checkpointIn(t, st) == last })
}

// pastGCBoundary stores a ledger through a Replicated writer, record by
// record, until the newest manifest's GC boundary has two chunks after
// it, then closes the writer: it returns the log, the bucket, the newest
// manifest and the last record acknowledged.
func pastGCBoundary(t *testing.T) (*testLog, *store.Memory, Manifest, uint64) {
	t.Helper()
	tl := newTestLog(t, 4<<10, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	a := openTake(t, testConfig(st, tl, Replicated), tl)
	var acked uint64
	eventually(t, "a manifest's GC boundary with two chunks after it", func() bool {
		acked = tl.append(1)
		if err := a.Wait(ctx, acked); err != nil {
			t.Fatal(err)
		}
		m, _ := newestManifest(t, st)
		nums := chunkNumbers(t, st)
		return m.GC > 1 && nums[len(nums)-1] > m.GC+1
	})
	tl.detach(a)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ := newestManifest(t, st)
	return tl, st, m, acked
}

// TestWriterOpenGapAtGCBoundary: the chunk at the newest manifest's GC
// boundary is missing and later ones are stored (the writer was killed
// with that upload in flight after later ones landed). The next writer
// finds the tail at the last seg/ object, not in the chunks after the
// gap, fences in the gap's slot and ships its records again from there,
// deleting the old epoch's chunks in its way.
func TestWriterOpenGapAtGCBoundary(t *testing.T) {
	t.Parallel()
	tl, st, m, _ := pastGCBoundary(t)
	ctx := context.Background()
	if err := st.Delete(ctx, ChunkKey(testLedgerID(), m.GC)); err != nil {
		t.Fatal(err)
	}

	b, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	if tail.Seq != m.SealedSeq || tail.Segment != m.Segments+1 || tail.Offset != segment.RecordsStart {
		t.Fatalf("tail at record %d (segment %d offset %d), want the last seg/ object's, %d (segment %d offset %d)",
			tail.Seq, tail.Segment, tail.Offset, m.SealedSeq, m.Segments+1, segment.RecordsStart)
	}
	tl.attach(b)
	if err := b.Take(ctx); err != nil {
		t.Fatal(err)
	}
	head := tl.append(1)
	if err := b.Wait(ctx, head); err != nil {
		t.Fatal(err)
	}
	chunks, _ := bucketChunks(t, st)
	next := m.SealedSeq + 1
	for _, c := range chunks {
		if c.Number < m.GC {
			continue
		}
		if next > head && c.Epoch < 2 {
			// The old epoch's uploads past the new writer's last chunk
			// (its backlog shipped in fewer chunks): the history ends
			// before them, as a fenced writer's late uploads.
			continue
		}
		if c.Epoch != 2 || c.FirstSeq != next || c.Number == m.GC && !c.Fence() {
			t.Fatalf("chunk %d: epoch %d, records %d to %d (fence %v); want epoch 2 from %d, its fence at %d", c.Number, c.Epoch, c.FirstSeq, c.LastSeq, c.Fence(), next, m.GC)
		}
		next = c.LastSeq + 1
	}
	if next != head+1 {
		t.Fatalf("the chunks from the boundary end at %d, want %d", next-1, head)
	}
}

// TestTakeKeepsLateUploadAtGCBoundary: the next writer opens while the
// chunk at the GC boundary is missing and later ones are stored (tail at
// the last seg/ object, TestWriterOpenGapAtGCBoundary); then the old
// writer's upload of that chunk lands before the fence. With it, the
// chunks from the boundary hold the old writer's records without a gap,
// and it acknowledged them: the chunk is the history's next, not a
// fenced writer's late upload, whatever it names as the chunk before (a
// chunk deleted by GC, which the next writer cannot know). Take must not
// delete it: the bucket is ahead of what the writer read (ErrBehind), as
// when an upload in flight lands in a gap after the first chunk.
func TestTakeKeepsLateUploadAtGCBoundary(t *testing.T) {
	t.Parallel()
	tl, st, m, acked := pastGCBoundary(t)
	ctx := context.Background()
	key := ChunkKey(testLedgerID(), m.GC)
	late, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}

	b, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	if tail.Seq != m.SealedSeq {
		t.Fatalf("tail at record %d, want the last seg/ object's, %d", tail.Seq, m.SealedSeq)
	}
	if _, err := st.Put(ctx, key, late.Data, store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	tl.attach(b)
	if err := b.Take(ctx); !errors.Is(err, ErrBehind) {
		t.Fatalf("Take after the old writer's chunk %s landed at the boundary: %v, want ErrBehind", key, err)
	}
	got, err := st.Get(ctx, key)
	if err != nil || !bytes.Equal(got.Data, late.Data) {
		t.Fatalf("chunk %s, acknowledged, is gone or replaced (%v)", key, err)
	}
	next := m.SealedSeq + 1
	chunks, _ := bucketChunks(t, st)
	for _, c := range chunks {
		if c.Number >= m.GC {
			if c.FirstSeq != next {
				t.Fatalf("chunk %d holds records from %d, want %d", c.Number, c.FirstSeq, next)
			}
			next = c.LastSeq + 1
		}
	}
	if next <= acked {
		t.Fatalf("the chunks from the boundary end at record %d, record %d was acknowledged", next-1, acked)
	}
}

// TestTakeAfterGapAtGCBoundaryTakesNewEpoch: the chunk at the GC
// boundary is missing, later ones are stored, and they are of a higher
// epoch than the newest manifest's (the manifests of the writer that
// stored them deleted by hand). The next writer, whose tail is the last
// seg/ object's, takes an epoch above theirs: two writers of one epoch
// would leave chunks that no reader can order.
func TestTakeAfterGapAtGCBoundaryTakesNewEpoch(t *testing.T) {
	t.Parallel()
	tl, st, m, _ := pastGCBoundary(t)
	ctx := context.Background()
	if err := st.Delete(ctx, ChunkKey(testLedgerID(), m.GC)); err != nil {
		t.Fatal(err)
	}
	// The chunks after the gap, as a writer of epoch m.Epoch+1 stored
	// them.
	chunks, _ := bucketChunks(t, st)
	later := m.Epoch + 1
	for _, c := range chunks {
		if c.Number > m.GC {
			c.Epoch = later
			if _, err := st.Put(ctx, ChunkKey(testLedgerID(), c.Number), c.Encode(), store.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	b, _, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	tl.attach(b)
	if err := b.Take(ctx); err != nil {
		t.Fatal(err)
	}
	if e := b.Status().Epoch; e <= later {
		t.Fatalf("the next writer took epoch %d; the chunks after the gap are of epoch %d", e, later)
	}
	head := tl.append(1)
	if err := b.Wait(ctx, head); err != nil {
		t.Fatal(err)
	}
}
