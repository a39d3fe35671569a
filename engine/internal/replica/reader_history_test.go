package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment/corruption"
)

// The Reader's history ends where the Writer's does (docs/replication.md,
// "Fencing"): at the first gap in wal/ or the first chunk that does not
// link to the one before; but never before what the checkpoint and the
// newest manifest vouch for.

// signAt stores a checkpoint of the first n events.
func (b *testBucket) signAt(t *testing.T, tl *closedLog, n uint64) {
	t.Helper()
	root := tl.root(n)
	if _, err := b.st.Put(context.Background(), CheckpointKey(readerLedger()), fmt.Appendf(nil, "%d %x", n, root[:]), store.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// lateUpload stores at slot n a chunk of epoch 1 (the fenced writer's)
// that names a chunk the bucket does not hold as Prev.
func (b *testBucket) lateUpload(t *testing.T, n uint64) {
	t.Helper()
	c := b.chunks[len(b.chunks)-1]
	c.Number, c.Epoch, c.Prev = n, 1, Hash{0xde, 0xad}
	c.FirstSeq, c.LastSeq, c.TreeSize = c.LastSeq+1, c.LastSeq+1, c.LastSeq+1
	if _, err := b.st.Put(context.Background(), ChunkKey(readerLedger(), n), c.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
}

func TestReaderHistoryEndsAtAGapAfterTheCheckpoint(t *testing.T) {
	tl := writeLog(t, 600)
	b := storeLog(t, tl)
	id := readerLedger()
	// Uploads in flight: the last chunk is stored, the one before not
	// yet; the checkpoint covers the chunks before the gap.
	n := len(b.chunks)
	if err := b.st.Delete(context.Background(), ChunkKey(id, uint64(n-1))); err != nil {
		t.Fatal(err)
	}
	want := b.chunks[n-3].LastSeq
	b.signAt(t, tl, want)
	st, err := testReader(b.st).State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Gap != ChunkKey(id, uint64(n-1)) || len(st.Chunks) != n-2 {
		t.Fatalf("state: %d chunks, gap %q; want %d chunks and the gap at %s", len(st.Chunks), st.Gap, n-2, ChunkKey(id, uint64(n-1)))
	}
	_, res, err := readAll(t, b.st, Limit{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified.Seq != want || res.Yielded.Seq != want {
		t.Fatalf("read %+v, want the %d events before the gap", res, want)
	}
}

func TestReaderHistoryEndsAtAFencedWritersLateUpload(t *testing.T) {
	tl := writeLog(t, 600)
	all := uint64(len(tl.leaves))
	t.Run("after the last chunk", func(t *testing.T) {
		b := storeLog(t, tl)
		b.lateUpload(t, uint64(len(b.chunks))+1)
		_, res, err := readAll(t, b.st, Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verified.Seq != all || res.Yielded.Seq != all {
			t.Fatalf("read %+v, want all %d events", res, all)
		}
	})
	t.Run("in the new writer's slot, its later chunk stored", func(t *testing.T) {
		// The new writer's chunk N is not stored yet (the slot holds the
		// late upload, to be deleted), its chunk N+1 is.
		b := storeLog(t, tl)
		n := uint64(len(b.chunks))
		if err := b.st.Delete(context.Background(), ChunkKey(readerLedger(), n-1)); err != nil {
			t.Fatal(err)
		}
		b.lateUpload(t, n-1)
		want := b.chunks[n-3].LastSeq
		b.signAt(t, tl, want)
		_, res, err := readAll(t, b.st, Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verified.Seq != want {
			t.Fatalf("read %+v, want the %d events before the late upload", res, want)
		}
	})
	t.Run("a linked chunk of a lower epoch", func(t *testing.T) {
		b := storeLog(t, tl)
		last := b.chunks[len(b.chunks)-1]
		last.Epoch = 1
		if _, err := b.st.Put(context.Background(), ChunkKey(readerLedger(), last.Number), last.Encode(), store.Condition{}); err != nil {
			t.Fatal(err)
		}
		want := b.chunks[len(b.chunks)-2].LastSeq
		b.signAt(t, tl, want)
		_, res, err := readAll(t, b.st, Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verified.Seq != want {
			t.Fatalf("read %+v, want the %d events before the chunk of epoch 1", res, want)
		}
	})
}

func TestReaderHistoryShorterThanTheBucketVouchesForIsDamage(t *testing.T) {
	tl := writeLog(t, 600)
	id := readerLedger()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(b *testBucket) []string // what the error names
	}{
		{"a gap below the checkpoint's size", func(b *testBucket) []string {
			n := uint64(len(b.chunks)) - 2
			b.st.Delete(ctx, ChunkKey(id, n))
			return []string{ChunkKey(id, n), CheckpointKey(id)}
		}},
		{"a late upload below the checkpoint's size", func(b *testBucket) []string {
			n := uint64(len(b.chunks)) - 2
			b.st.Delete(ctx, ChunkKey(id, n))
			b.lateUpload(t, n)
			return []string{ChunkKey(id, n), CheckpointKey(id)}
		}},
		{"a gap before the manifest's fence chunk", func(b *testBucket) []string {
			// The checkpoint is below the gap: the manifest still vouches
			// for the fence chunk and the chunks before it.
			b.st.Delete(ctx, ChunkKey(id, b.fence-1))
			b.signAt(t, tl, b.chunks[b.fence-3].LastSeq)
			return []string{ManifestKey(id, 1), ChunkKey(id, b.fence), ChunkKey(id, b.fence-1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := storeLog(t, tl)
			names := tc.damage(b)
			_, _, err := readAll(t, b.st, Limit{})
			if !errors.Is(err, corruption.Err) {
				t.Fatalf("want a corruption error: %v", err)
			}
			for _, k := range names {
				if !strings.Contains(err.Error(), k) {
					t.Fatalf("the error does not name %s: %v", k, err)
				}
			}
		})
	}
}
