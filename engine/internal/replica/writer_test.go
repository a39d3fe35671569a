package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// TestWriterShipsAndWaits: in Replicated mode each Wait returns once the
// record is stored; the bucket's chunks then hold the log's records byte
// for byte, across segments, in a hash chain with the log's roots; each
// sealed segment is stored under seg/ and named by a manifest.
func TestWriterShipsAndWaits(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 8<<10, segment.Sync)
	st := store.NewMemory()
	w := openTake(t, testConfig(st, tl, Replicated), tl)
	ctx := context.Background()
	var last uint64
	for i := range 150 {
		last = tl.append(1 + i%3)
		if err := w.Wait(ctx, last); err != nil {
			t.Fatal(err)
		}
		if s := w.Status(); s.Stored < last {
			t.Fatalf("Wait(%d) returned with Status.Stored %d", last, s.Stored)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tl.checkBucket(t, st, last)
	active := tl.Head().Loc.Segment
	if active < 3 {
		t.Fatalf("the test wants several segments; the log has %d", active)
	}
	segs := keys(t, st, "seg/")
	if uint64(len(segs)) != active-1 {
		t.Fatalf("seg/ holds %d objects %v, want the %d sealed segments", len(segs), segs, active-1)
	}
	for n := uint64(1); n < active; n++ {
		data, first, last, err := tl.Sealed(n)
		if err != nil {
			t.Fatal(err)
		}
		o, err := st.Get(ctx, SegmentKey(testLedgerID(), first, last))
		if err != nil {
			t.Fatal(err)
		}
		if string(o.Data) != string(data) {
			t.Fatalf("seg/ object of segment %d is not its file", n)
		}
	}
	w2, tail, err := Open(ctx, testConfig(st, tl, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	if tail.Manifest.Segments != active-1 || tail.Seq != last || tail.ID != tl.Head().ID {
		t.Fatalf("reopened: manifest segments %d, tail %d %v; want %d, %d %v", tail.Manifest.Segments, tail.Seq, tail.ID, active-1, last, tl.Head().ID)
	}
	if tail.Manifest.Fence == 0 || tail.Manifest.GC <= 1 {
		t.Fatalf("the manifest after seals says fence %d, GC boundary %d", tail.Manifest.Fence, tail.Manifest.GC)
	}
}

// chunkIndex is a store wrapper that notes the last record of every
// chunk stored, to tell which records the bucket holds without a gap.
type chunkIndex struct {
	store.Store
	mu   sync.Mutex
	last map[uint64]uint64 // chunk number -> last record
}

func (c *chunkIndex) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	etag, err := c.Store.Put(ctx, key, data, cond)
	if err == nil && isChunk(key) {
		n, _ := ParseNumber(key)
		c.mu.Lock()
		c.last[n] = binary.BigEndian.Uint64(data[40:])
		c.mu.Unlock()
	}
	return etag, err
}

// storedUpTo is the last record of the chunks stored from chunk 1 on
// without a gap.
func (c *chunkIndex) storedUpTo() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var seq uint64
	for n := uint64(1); ; n++ {
		last, ok := c.last[n]
		if !ok {
			return seq
		}
		seq = last
	}
}

// TestWriterConcurrentAppendersAckInOrder: 64 appenders in Replicated
// mode, over a store that delays each upload randomly (so that later
// chunks are often stored first): every Wait returns only once its
// record and every one before it are stored, and the bucket ends with
// the log's bytes in an intact hash chain.
func TestWriterConcurrentAppendersAckInOrder(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 64<<10, segment.Sync)
	fs := newFaultStore(store.NewMemory())
	fs.maxDelay = 4 * time.Millisecond
	idx := &chunkIndex{Store: fs, last: map[uint64]uint64{}}
	cfg := testConfig(idx, tl, Replicated)
	cfg.Uploads = 4
	w := openTake(t, cfg, tl)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				seq := tl.append(1)
				if err := w.Wait(ctx, seq); err != nil {
					errs <- err
					return
				}
				if got := idx.storedUpTo(); got < seq {
					errs <- errors.New("Wait returned before its record was stored")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	chunks := tl.checkBucket(t, fs, tl.Head().Seq)
	t.Logf("%d records in %d chunks", tl.Head().Seq, len(chunks))
}

// slowChunks is a store whose chunk PUTs take at least d.
type slowChunks struct {
	store.Store
	d time.Duration
}

func (s slowChunks) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if isChunk(key) {
		time.Sleep(s.d)
	}
	return s.Store.Put(ctx, key, data, cond)
}

// TestStatusCountsUploadsAndTheirTime: Status.Uploads counts the chunks
// this Writer stored, and Status.UploadTime their uploads' time, so that
// their quotient is at least what each PUT took.
func TestStatusCountsUploadsAndTheirTime(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	const putTime = 5 * time.Millisecond
	w := openTake(t, testConfig(slowChunks{Store: store.NewMemory(), d: putTime}, tl, Replicated), tl)
	defer w.Close(context.Background())
	before := w.Status()
	for range 10 {
		if err := w.Wait(context.Background(), tl.append(1)); err != nil {
			t.Fatal(err)
		}
	}
	s := w.Status()
	n := s.Uploads - before.Uploads
	if n < 10 || s.Chunks-before.Chunks != n {
		t.Fatalf("10 appends each waited for: %d uploads counted, chunks %d to %d", n, before.Chunks, s.Chunks)
	}
	if mean := (s.UploadTime - before.UploadTime) / time.Duration(n); mean < putTime {
		t.Fatalf("mean upload time %v, each PUT took at least %v", mean, putTime)
	}
}
