package replica

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// TestTakeAfterReopenContinuesChain: a Writer opened after another
// closed finds the tail the first stored (record, ID, chunk), takes the
// next epoch with a fence chunk that continues the numbering and the
// hash chain, and ships on from there.
func TestTakeAfterReopenContinuesChain(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	a := openTake(t, testConfig(st, tl, Replicated), tl)
	var last uint64
	for range 20 {
		last = tl.append(2)
	}
	if err := a.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before, _ := bucketChunks(t, st)
	b, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	if tail.Seq != last || tail.ID != tl.Head().ID || tail.Manifest.Epoch != 1 {
		t.Fatalf("tail: record %d %v epoch %d; want %d %v epoch 1", tail.Seq, tail.ID, tail.Manifest.Epoch, last, tl.Head().ID)
	}
	if h := tl.Head().Loc; tail.Segment != h.Segment || tail.Offset != h.End() {
		t.Fatalf("tail says the next record goes at %d/%d, the log's head ends at %d/%d", tail.Segment, tail.Offset, h.Segment, h.End())
	}
	tl.attach(b)
	if err := b.Take(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	for range 20 {
		last = tl.append(1)
	}
	if err := b.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	chunks := tl.checkBucket(t, st, last)
	fence := chunks[len(before)]
	if !fence.Fence() || fence.Epoch != 2 || fence.Number != before[len(before)-1].Number+1 || fence.FirstSeq != tail.Seq+1 {
		t.Fatalf("the chunk after the first writer's is %+v, want the fence of epoch 2 at %d", fence.Number, before[len(before)-1].Number+1)
	}
	if s := b.Status(); s.Epoch != 2 || s.Stored != last {
		t.Fatalf("status: epoch %d stored %d", s.Epoch, s.Stored)
	}
}

// TestTakeFencesShippingWriter: writer B takes the ledger while A ships
// under 8 appenders: A's Waits then fail with ErrFenced (sticky), and
// every record A acknowledged is in a chunk before B's fence. A Take that
// meets A's chunk at its slot is ErrBehind, and B opens again.
func TestTakeFencesShippingWriter(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 64<<10, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	fs.maxDelay = 2 * time.Millisecond
	ctx := context.Background()
	a := openTake(t, testConfig(fs, tl, Replicated), tl)
	var acked atomic.Uint64 // the highest record A acknowledged
	var fenced atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				seq := tl.append(1)
				err := a.Wait(ctx, seq)
				switch {
				case err == nil:
					for {
						old := acked.Load()
						if seq <= old || acked.CompareAndSwap(old, seq) {
							break
						}
					}
				case errors.Is(err, ErrFenced):
					fenced.Add(1)
					return
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	var b *Writer
	behind := 0
	for b == nil {
		w, _, err := Open(ctx, testConfig(fs, tl, Replicated))
		if err != nil {
			t.Fatal(err)
		}
		tl.attach(w)
		switch err := w.Take(ctx); {
		case err == nil:
			b = w
		case errors.Is(err, ErrBehind):
			behind++
			_ = w.Close(ctx)
		default:
			t.Fatal(err)
		}
	}
	defer b.Close(ctx)
	// A's next records go to slots B holds.
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if fenced.Load() == 0 {
		t.Fatal("no Wait of A failed with ErrFenced")
	}
	seq := tl.append(1)
	if err := a.Wait(ctx, seq); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's Wait after the fence: %v, want ErrFenced", err)
	}
	if !a.Status().Fenced {
		t.Fatal("A's status does not say fenced")
	}
	if err := b.Wait(ctx, seq); err != nil {
		t.Fatal(err)
	}
	chunks := tl.checkBucket(t, fs, seq)
	var fence Chunk
	epoch := b.Status().Epoch
	for _, c := range chunks {
		if c.Epoch == epoch {
			fence = c
			break
		}
	}
	if !fence.Fence() {
		t.Fatalf("the first chunk of B's epoch %d is not a fence: chunk %d", epoch, fence.Number)
	}
	if acked.Load() > fence.LastSeq {
		t.Fatalf("A acknowledged record %d, B's fence follows record %d", acked.Load(), fence.LastSeq)
	}
	for _, c := range chunks {
		if c.Number > fence.Number && c.Epoch != epoch {
			t.Fatalf("chunk %d after B's fence holds epoch %d", c.Number, c.Epoch)
		}
	}
	t.Logf("A acknowledged up to %d; B (epoch %d) fenced after %d (%d Takes behind first)", acked.Load(), epoch, fence.LastSeq, behind)
}

// TestFencedWritersLateChunkIsReplaced: a chunk of the old epoch that
// lands after the new writer's fence (an upload the fenced writer had in
// flight) is not part of the history: a Writer opened then finds the
// tail at the fence, and the new writer, reaching that slot, deletes it
// and stores its own chunk, keeping the hash chain whole.
func TestFencedWritersLateChunkIsReplaced(t *testing.T) {
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
	aChunks, _ := bucketChunks(t, st)
	b := takeLedger(t, testConfig(st, tl, Replicated))
	fence := aChunks[len(aChunks)-1].Number + 1
	// A's late upload: epoch 1, at the slot after B's fence, chained to
	// an A chunk the bucket does not hold.
	late := Chunk{Ledger: testLedgerID(), Number: fence + 1, Epoch: 1, FirstSeq: last + 1, LastSeq: last,
		TreeSize: last, Root: tl.root(last), Prev: Hash{1}, Segment: 1, Offset: 64}
	if _, err := st.Put(ctx, ChunkKey(testLedgerID(), fence+1), late.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	c, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatalf("Open with a fenced writer's chunk after the fence: %v", err)
	}
	_ = c.Close(ctx)
	if tail.Seq != last || tail.ID != tl.Head().ID {
		t.Fatalf("tail %d %v, want B's fence after %d", tail.Seq, tail.ID, last)
	}
	tl.attach(b)
	last = tl.append(2)
	if err := b.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	chunks := tl.checkBucket(t, st, last)
	if got := chunks[len(chunks)-1]; got.Number != fence+1 || got.Epoch != 2 {
		t.Fatalf("chunk %d holds epoch %d, want B's (2)", got.Number, got.Epoch)
	}
}

// afterListStore calls after, once, when a List of chunks through it has
// returned.
type afterListStore struct {
	store.Store
	once  sync.Once
	after func()
}

func (s *afterListStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	p, err := s.Store.List(ctx, prefix, after, limit)
	if strings.HasSuffix(prefix, "/wal/") {
		s.once.Do(s.after)
	}
	return p, err
}

// TestFenceTakesInChunksStoredMeanwhile: Fence, from the bucket alone,
// while the writer stores its next chunk between Fence's read of the
// tail and its fence chunk: the fence goes after that chunk (the tail
// Fence returns is it), the writer is fenced at its next upload, and the
// bucket's history is the writer's acknowledged records then the fence.
func TestFenceTakesInChunksStoredMeanwhile(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	a := openTake(t, testConfig(st, tl, Replicated), tl)
	last := tl.append(3)
	if err := a.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	hook := &afterListStore{Store: st, after: func() {
		last = tl.append(2)
		if err := a.Wait(ctx, last); err != nil {
			t.Errorf("the writer's Wait before the fence: %v", err)
		}
	}}
	cfg := testConfig(hook, nil, Replicated)
	cfg.Source = nil
	cfg.Identity.Nonce += "-fence"
	tail, err := Fence(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tail.Seq != last || tail.ID != tl.Head().ID || tail.Manifest.Epoch != 2 {
		t.Fatalf("Fence's tail: record %d %v epoch %d; want %d %v epoch 2", tail.Seq, tail.ID, tail.Manifest.Epoch, last, tl.Head().ID)
	}
	next := tl.append(1)
	if err := a.Wait(ctx, next); !errors.Is(err, ErrFenced) {
		t.Fatalf("the writer's Wait after the fence: %v, want ErrFenced", err)
	}
	chunks := tl.checkBucket(t, st, last)
	end := chunks[len(chunks)-1]
	if !end.Fence() || end.Epoch != 2 || end.LastSeq != last {
		t.Fatalf("the history ends with chunk %d (epoch %d, fence %v, record %d), want the fence of epoch 2 after record %d", end.Number, end.Epoch, end.Fence(), end.LastSeq, last)
	}
}
