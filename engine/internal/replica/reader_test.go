package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The Reader's tests write a real segment.Log, keep the spans its
// Hooks.Records gives (what a Writer ships), and store its first segments
// under seg/ and those spans as chunks. The leaf function and the
// checkpoint are the test's own (the Reader takes both as parameters):
// SHA-256 of the record's ID, and a checkpoint object "SIZE ROOT-HEX".

var readerGenesis = segment.Entry{Entity: "ledger", Key: "r", Event: "ledger-created", Meta: []byte(`{}`), Data: []byte(`{"name":"r"}`)}

func readerLedger() eventid.LedgerID {
	c := eventid.Content{Entity: readerGenesis.Entity, Key: readerGenesis.Key, Event: readerGenesis.Event, Meta: readerGenesis.Meta, Data: readerGenesis.Data}
	return c.LedgerID()
}

func testLeaf(r *segment.Record) tree.Hash { return sha256.Sum256(r.ID[:]) }

// closedLog is a closed log: its segment files and the spans it committed.
type closedLog struct {
	files  [][]byte
	spans  []segment.Span
	leaves []tree.Hash // of every record, in order
	heads  []segment.Head
}

// writeLog appends n events (after the genesis) in batches of 1 to 5 to
// a new log in segments of 8 KiB.
func writeLog(t *testing.T, n int) *closedLog {
	t.Helper()
	fs := vfs.NewMem()
	tl := &closedLog{}
	o := segment.Options{FS: fs, Ledger: readerLedger(), SegmentSize: 8 << 10, Hooks: segment.Hooks{Records: func(s segment.Span) {
		s.Bytes = bytes.Clone(s.Bytes)
		tl.spans = append(tl.spans, s)
	}}}
	l, err := segment.Create("led", o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&segment.Batch{Entries: []segment.Entry{readerGenesis}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; {
		b := &segment.Batch{}
		for k := 0; k < 1+i%5 && i < n; k++ {
			b.Entries = append(b.Entries, segment.Entry{Entity: "order", Key: fmt.Sprint(i % 13), Event: "placed", Meta: []byte(`{}`), Data: fmt.Appendf(nil, `{"n":%d}`, i)})
			i++
		}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	head := segment.Head{ID: eventid.Genesis(readerLedger())}
	for k := uint64(1); ; k++ {
		f, err := fs.Open("led/" + segment.FileName(k))
		if err != nil {
			break
		}
		st, _ := f.Stat()
		b := make([]byte, st.Size())
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		tl.files = append(tl.files, b)
		tl.heads = append(tl.heads, head)
		if head, err = segment.VerifyFile(readerLedger(), k, head, "source", b, func(r *segment.Record, _ segment.Location) error {
			tl.leaves = append(tl.leaves, testLeaf(r))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(tl.files) < 4 {
		t.Fatalf("%d segments", len(tl.files))
	}
	return tl
}

// root is the Merkle root of the first n records.
func (tl *closedLog) root(n uint64) tree.Hash {
	var b tree.Builder
	for _, l := range tl.leaves[:n] {
		b.Add(l)
	}
	return b.Root()
}

// testBucket is a closedLog stored as a Writer would: segments but the
// last two under seg/, each span of the last two as a chunk (after an
// epoch 1 fence; epoch 2's fence before the middle one).
type testBucket struct {
	st     *store.Memory
	chunks []Chunk
	fence  uint64
	sealed int
}

func storeLog(t *testing.T, tl *closedLog) *testBucket {
	t.Helper()
	ctx := context.Background()
	id := readerLedger()
	b := &testBucket{st: store.NewMemory(), sealed: len(tl.files) - 2}
	put := func(key string, data []byte) {
		if _, err := b.st.Put(ctx, key, data, store.CreateOnly()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range b.sealed {
		first := tl.heads[i].Seq + 1
		last := tl.heads[i+1].Seq
		put(SegmentKey(id, first, last), tl.files[i])
	}
	var spans []segment.Span
	for _, s := range tl.spans {
		if s.Segment > uint64(b.sealed) {
			spans = append(spans, s)
		}
	}
	var prev Hash
	epoch := uint64(1)
	add := func(c Chunk) {
		c.Ledger, c.Number, c.Epoch, c.Prev = id, uint64(len(b.chunks))+1, epoch, prev
		c.TreeSize, c.Root = c.LastSeq, Hash(tl.root(c.LastSeq))
		obj := c.Encode()
		put(ChunkKey(id, c.Number), obj)
		prev = Sum(obj)
		b.chunks = append(b.chunks, c)
	}
	fence := func(s segment.Span, before segment.Head) {
		add(Chunk{FirstSeq: s.FirstSeq, LastSeq: s.FirstSeq - 1, FirstMicros: before.ID.Micros(), LastMicros: before.ID.Micros(), Segment: uint32(s.Segment), Offset: uint32(s.Offset)})
	}
	before := tl.heads[b.sealed]
	fence(spans[0], before)
	for i, s := range spans {
		if i == len(spans)/2 {
			epoch = 2
			fence(s, before)
			b.fence = uint64(len(b.chunks))
		}
		add(Chunk{FirstSeq: s.FirstSeq, LastSeq: s.Last.Seq, FirstMicros: s.FirstID.Micros(), LastMicros: s.Last.ID.Micros(), Segment: uint32(s.Segment), Offset: uint32(s.Offset), Records: s.Bytes})
		before = s.Last
	}
	m := Manifest{V: 1, Ledger: id.String(), Name: "r", Epoch: 2, Fence: b.fence, Segments: uint64(b.sealed), SealedSeq: tl.heads[b.sealed].Seq, GC: 1}
	put(ManifestKey(id, 1), m.Encode())
	n := uint64(len(tl.leaves))
	root := tl.root(n)
	put(CheckpointKey(id), fmt.Appendf(nil, "%d %x", n, root[:]))
	return b
}

func testReader(st store.Store) *Reader {
	return NewReader(ReaderConfig{Store: st, Ledger: readerLedger(), Leaf: testLeaf,
		OpenCheckpoint: func(key string, note []byte) (uint64, tree.Hash, error) {
			size, rootHex, ok := strings.Cut(string(note), " ")
			n, err := strconv.ParseUint(size, 10, 64)
			b, herr := hex.DecodeString(rootHex)
			if !ok || err != nil || herr != nil || len(b) != len(tree.Hash{}) {
				return 0, tree.Hash{}, fmt.Errorf("not a test checkpoint")
			}
			return n, tree.Hash(b), nil
		}})
}

// readAll reads the bucket and lays the pieces out as files, checking
// that each goes where the one before ended or begins a segment.
func readAll(t *testing.T, st store.Store, lim Limit) ([][]byte, Result, error) {
	t.Helper()
	r := testReader(st)
	state, err := r.State(context.Background())
	if err != nil {
		return nil, Result{}, err
	}
	var files [][]byte
	res, err := r.Read(context.Background(), state, lim, func(p Piece) error {
		if p.Header != nil {
			if p.Segment != uint64(len(files))+1 || p.Offset != segment.HeaderSize {
				t.Fatalf("%s: a new segment %d at %d after %d segments", p.Key, p.Segment, p.Offset, len(files))
			}
			files = append(files, bytes.Clone(p.Header))
		}
		f := &files[len(files)-1]
		if p.Segment != uint64(len(files)) || p.Offset != int64(len(*f)) {
			t.Fatalf("%s: records at segment %d offset %d, the records before end at segment %d offset %d", p.Key, p.Segment, p.Offset, len(files), len(*f))
		}
		*f = append(*f, p.Bytes...)
		return nil
	})
	return files, res, err
}

func TestReaderYieldsEveryRecord(t *testing.T) {
	tl := writeLog(t, 600)
	b := storeLog(t, tl)
	files, res, err := readAll(t, b.st, Limit{})
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(tl.leaves))
	if res.Verified.Seq != n || res.Yielded.Seq != n {
		t.Fatalf("read %+v, want %d records", res, n)
	}
	if len(files) != len(tl.files) {
		t.Fatalf("%d segments, want %d", len(files), len(tl.files))
	}
	for i, f := range files {
		want := tl.files[i]
		if i < b.sealed && !bytes.Equal(f, want) || !bytes.Equal(f[segment.HeaderSize:], want[segment.HeaderSize:]) || !bytes.Equal(f[:48], want[:48]) {
			t.Fatalf("segment %d differs from the log's", i+1)
		}
	}
}

func TestReaderLimitCutsWholeBatches(t *testing.T) {
	tl := writeLog(t, 600)
	b := storeLog(t, tl)
	// The appends are sequential: each span is one batch. A limit inside
	// a batch of several records keeps the batches before it.
	var s segment.Span
	for _, sp := range tl.spans[len(tl.spans)/2:] {
		if sp.Last.Seq > sp.FirstSeq {
			s = sp
			break
		}
	}
	_, res, err := readAll(t, b.st, Limit{Seq: s.Last.Seq - 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Yielded.Seq != s.FirstSeq-1 || res.Verified.Seq != uint64(len(tl.leaves)) {
		t.Fatalf("read %+v with a limit at %d, inside the batch of %d to %d", res, s.Last.Seq-1, s.FirstSeq, s.Last.Seq)
	}
}

func TestReaderRefuses(t *testing.T) {
	tl := writeLog(t, 600)
	id := readerLedger()
	for _, tc := range []struct {
		name   string
		damage func(b *testBucket) string // the key the error names
	}{
		{"a chunk missing", func(b *testBucket) string {
			b.st.Delete(context.Background(), ChunkKey(id, 3))
			return ChunkKey(id, 3)
		}},
		{"a chunk of an earlier epoch after a fence", func(b *testBucket) string {
			c := b.chunks[b.fence] // the chunk after epoch 2's fence
			c.Epoch = 1
			b.st.Put(context.Background(), ChunkKey(id, c.Number), c.Encode(), store.Condition{})
			return ChunkKey(id, c.Number)
		}},
		{"a chunk's records not where the one before ended", func(b *testBucket) string {
			c := b.chunks[3]
			c.Segment++
			b.st.Put(context.Background(), ChunkKey(id, c.Number), c.Encode(), store.Condition{})
			return ChunkKey(id, c.Number)
		}},
		{"a chunk's times not its records'", func(b *testBucket) string {
			c := b.chunks[4]
			c.FirstMicros--
			b.st.Put(context.Background(), ChunkKey(id, c.Number), c.Encode(), store.Condition{})
			return ChunkKey(id, c.Number)
		}},
		{"a seg/ object of other events than its key's", func(b *testBucket) string {
			// Segment 2's key says one event fewer, segment 3's one more:
			// the keys follow each other, the objects do not match them.
			ctx := context.Background()
			f2, l2 := tl.heads[1].Seq+1, tl.heads[2].Seq
			f3, l3 := l2+1, tl.heads[3].Seq
			o2, _ := b.st.Get(ctx, SegmentKey(id, f2, l2))
			o3, _ := b.st.Get(ctx, SegmentKey(id, f3, l3))
			b.st.Delete(ctx, SegmentKey(id, f2, l2))
			b.st.Delete(ctx, SegmentKey(id, f3, l3))
			b.st.Put(ctx, SegmentKey(id, f2, l2-1), o2.Data, store.Condition{})
			b.st.Put(ctx, SegmentKey(id, f3-1, l3), o3.Data, store.Condition{})
			return SegmentKey(id, f2, l2-1)
		}},
		{"a checkpoint beyond the objects", func(b *testBucket) string {
			n := uint64(len(tl.leaves))
			b.st.Put(context.Background(), CheckpointKey(id), fmt.Appendf(nil, "%d %x", n+1, make([]byte, 32)), store.Condition{})
			return CheckpointKey(id)
		}},
		{"no checkpoint", func(b *testBucket) string {
			b.st.Delete(context.Background(), CheckpointKey(id))
			return CheckpointKey(id)
		}},
		{"fewer seg/ objects than the manifest says", func(b *testBucket) string {
			first, last := tl.heads[b.sealed-1].Seq+1, tl.heads[b.sealed].Seq
			b.st.Delete(context.Background(), SegmentKey(id, first, last))
			return ManifestKey(id, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := storeLog(t, tl)
			key := tc.damage(b)
			_, _, err := readAll(t, b.st, Limit{})
			if !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), key) {
				t.Fatalf("want a corruption error naming %s: %v", key, err)
			}
		})
	}
	if _, _, err := readAll(t, store.NewMemory(), Limit{}); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("an empty bucket: %v", err)
	}
}

// TestReaderGapAtGCBoundary: the chunk at the newest manifest's GC
// boundary is missing and a later one is stored (an upload in flight that
// a later one overtook, its writer killed: the boundary a seal had just
// moved there). The history ends at the seg/ objects, as at any gap, when
// the checkpoint vouches for no more; when it vouches for the missing
// events, the bucket is refused, naming the checkpoint.
func TestReaderGapAtGCBoundary(t *testing.T) {
	tl := writeLog(t, 600)
	id := readerLedger()
	ctx := context.Background()
	// gapped stores the log with the gap, and a checkpoint of all its
	// events (all) or of the seg/ objects' alone.
	gapped := func(t *testing.T, all bool) *testBucket {
		b := storeLog(t, tl)
		sealed := tl.heads[b.sealed].Seq
		ckSize := sealed
		if all {
			ckSize = uint64(len(tl.leaves))
		}
		// Chunk 2 holds the first records after the seg/ objects (chunk
		// 1 is epoch 1's fence): the boundary a seal moves there.
		if c := b.chunks[1]; c.FirstSeq != sealed+1 || c.Number != 2 {
			t.Fatalf("chunk 2 holds %d to %d, want the records from %d", c.FirstSeq, c.LastSeq, sealed+1)
		}
		m := Manifest{V: 1, Ledger: id.String(), Name: "r", Epoch: 1, Fence: 1, Segments: uint64(b.sealed), SealedSeq: sealed, GC: 2}
		if _, err := b.st.Put(ctx, ManifestKey(id, 2), m.Encode(), store.CreateOnly()); err != nil {
			t.Fatal(err)
		}
		root := tl.root(ckSize)
		if _, err := b.st.Put(ctx, CheckpointKey(id), fmt.Appendf(nil, "%d %x", ckSize, root[:]), store.Condition{}); err != nil {
			t.Fatal(err)
		}
		if err := b.st.Delete(ctx, ChunkKey(id, 2)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("checkpoint before the gap", func(t *testing.T) {
		b := gapped(t, false)
		_, res, err := readAll(t, b.st, Limit{})
		if err != nil {
			t.Fatalf("a gap at the GC boundary, the checkpoint before it: %v", err)
		}
		if want := tl.heads[b.sealed].Seq; res.Verified.Seq != want || res.Yielded.Seq != want {
			t.Fatalf("read %+v, want the seg/ objects' %d events", res, want)
		}
		if !strings.Contains(res.Ignored, ChunkKey(id, 2)+", missing (a gap)") {
			t.Fatalf("Ignored %q, want it to name the gap at %s", res.Ignored, ChunkKey(id, 2))
		}
	})
	t.Run("checkpoint past the gap", func(t *testing.T) {
		b := gapped(t, true)
		_, _, err := readAll(t, b.st, Limit{})
		if !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), CheckpointKey(id)) || !strings.Contains(err.Error(), ChunkKey(id, 2)) {
			t.Fatalf("want a corruption error naming the checkpoint and the gap at %s: %v", ChunkKey(id, 2), err)
		}
	})
}

// missOnceStore answers the first Get of key, once key is set, with
// ErrNotFound: a GET that ran just before the object's PUT.
type missOnceStore struct {
	store.Store
	key    string
	missed bool
}

func (s *missOnceStore) Get(ctx context.Context, key string) (store.Object, error) {
	if key == s.key && !s.missed {
		s.missed = true
		return store.Object{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	return s.Store.Get(ctx, key)
}

// TestFollowChunkSkippingRecordsNamed: a Follow's next chunk, not found
// by its GET and then listed (stored in between), names the chunk
// before it as Prev but holds records that do not follow it (events
// skipped: forged by someone with write access to the bucket). The Poll
// fails naming that chunk, as when the GET finds it: it is no gap, the
// chunk before it being the last one read.
func TestFollowChunkSkippingRecordsNamed(t *testing.T) {
	tl := writeLog(t, 600)
	id := readerLedger()
	ctx := context.Background()
	b := storeLog(t, tl)
	n := uint64(len(b.chunks))
	if b.chunks[n-1].Fence() || b.chunks[n-2].Fence() || b.chunks[n-3].Fence() {
		t.Fatalf("the last three chunks are not all data chunks")
	}
	kept, err := b.st.Get(ctx, ChunkKey(id, n-2))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint64{n - 1, n} {
		if err := b.st.Delete(ctx, ChunkKey(id, k)); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(size uint64) {
		root := tl.root(size)
		if _, err := b.st.Put(ctx, CheckpointKey(id), fmt.Appendf(nil, "%d %x", size, root[:]), store.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	head := b.chunks[n-3].LastSeq
	checkpoint(head)
	st := &missOnceStore{Store: b.st}
	f := testReader(st).Follow()
	nop := func(Piece) error { return nil }
	res, err := f.Poll(ctx, nop)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified.Seq != head {
		t.Fatalf("the first Poll verified %d events, want %d", res.Verified.Seq, head)
	}

	forged := b.chunks[n-1]
	forged.Number, forged.Prev = n-1, Sum(kept.Data)
	if _, err := b.st.Put(ctx, ChunkKey(id, n-1), forged.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	checkpoint(uint64(len(tl.leaves)))
	st.key = ChunkKey(id, n-1)
	_, err = f.Poll(ctx, nop)
	if !st.missed {
		t.Fatal("the second Poll did not GET the next chunk")
	}
	if !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), ChunkKey(id, n-1)) || strings.Contains(err.Error(), "(a gap)") {
		t.Fatalf("a chunk after the last read holding records %d to %d, the events read ending at %d: %v; want a corruption error naming %s",
			forged.FirstSeq, forged.LastSeq, head, err, ChunkKey(id, n-1))
	}
}
