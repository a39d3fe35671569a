package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// testLog is a real segment.Log and the Source a Writer reads it by.
// Its Hooks.Records feeds the Writer set with attach; each record's
// Merkle leaf is the SHA-256 of its frame.
type testLog struct {
	t   testing.TB
	dir string
	log *segment.Log

	mu      sync.Mutex
	spans   []spanInfo // every committed span, in order
	leaves  []tree.Hash
	writers []*Writer // fed by records
}

// spanInfo is where a committed span is.
type spanInfo struct {
	seg         uint64
	off, end    int64
	first, last uint64
}

var testGenesis = segment.Entry{Entity: "ledger", Key: "replica-test", Event: "ledger-created", Meta: []byte(`{"actor":"test"}`), Data: []byte(`{"name":"replica-test"}`)}

func testLedgerID() eventid.LedgerID {
	c := eventid.Content{Entity: testGenesis.Entity, Key: testGenesis.Key, Event: testGenesis.Event, Meta: testGenesis.Meta, Data: testGenesis.Data}
	return c.LedgerID()
}

// newTestLog creates a ledger with its genesis in a temporary directory.
func newTestLog(t testing.TB, segmentSize int64, durability segment.Durability) *testLog {
	t.Helper()
	tl := &testLog{t: t, dir: t.TempDir()}
	l, err := segment.Create(tl.dir, segment.Options{
		Ledger: testLedgerID(), SegmentSize: segmentSize, Durability: durability,
		Hooks: segment.Hooks{Records: tl.records},
	})
	if err != nil {
		t.Fatal(err)
	}
	tl.log = l
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Append(&segment.Batch{Entries: []segment.Entry{testGenesis}}); err != nil {
		t.Fatal(err)
	}
	return tl
}

// records is the Log's Hooks.Records.
func (tl *testLog) records(s segment.Span) {
	leaves := frameLeaves(s.Bytes)
	tl.mu.Lock()
	tl.spans = append(tl.spans, spanInfo{seg: s.Segment, off: s.Offset, end: s.Offset + int64(len(s.Bytes)), first: s.FirstSeq, last: s.Last.Seq})
	tl.leaves = append(tl.leaves, leaves...)
	writers := tl.writers
	tl.mu.Unlock()
	for _, w := range writers {
		w.Add(s, leaves)
	}
}

// attach makes the Log's commits go to w as well.
func (tl *testLog) attach(w *Writer) {
	tl.mu.Lock()
	tl.writers = append(tl.writers[:len(tl.writers):len(tl.writers)], w)
	tl.mu.Unlock()
}

// detach stops the Log's commits going to w.
func (tl *testLog) detach(w *Writer) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var ws []*Writer
	for _, x := range tl.writers {
		if x != w {
			ws = append(ws, x)
		}
	}
	tl.writers = ws
}

// frameLeaves returns the SHA-256 of each frame in b.
func frameLeaves(b []byte) []tree.Hash {
	var out []tree.Hash
	for len(b) > 0 {
		n := 12 + int(binary.BigEndian.Uint32(b))
		out = append(out, tree.Hash(sha256.Sum256(b[:n])))
		b = b[n:]
	}
	return out
}

var testEntryN atomic.Int64

func testEntry() segment.Entry {
	i := testEntryN.Add(1)
	return segment.Entry{
		Entity: "order", Key: fmt.Sprintf("order-%d", i%97), Event: "order-placed",
		Meta: []byte(fmt.Sprintf(`{"actor":"user-%d"}`, i%13)),
		Data: []byte(fmt.Sprintf(`{"n":%d,"note":"some words to make it a realistic size"}`, i)),
	}
}

// append appends a batch of n entries and returns its last sequence
// number.
func (tl *testLog) append(n int) uint64 {
	tl.t.Helper()
	b := &segment.Batch{}
	for range n {
		b.Entries = append(b.Entries, testEntry())
	}
	if err := tl.log.Append(b); err != nil {
		tl.t.Fatal(err)
	}
	return b.FirstSeq + uint64(n) - 1
}

func (tl *testLog) Head() segment.Head    { return tl.log.Head() }
func (tl *testLog) Durable() segment.Head { return tl.log.Durable() }
func (tl *testLog) Sync() error           { return tl.log.Sync() }

// Read reads committed records from the segment file, from record from
// (whole spans after its own), in one segment, up to max bytes (at least
// record from's span's records from it).
func (tl *testLog) Read(from uint64, max int) (segment.Span, []tree.Hash, error) {
	tl.mu.Lock()
	i := sort.Search(len(tl.spans), func(i int) bool { return tl.spans[i].last >= from })
	if i == len(tl.spans) || tl.spans[i].first > from {
		tl.mu.Unlock()
		return segment.Span{}, nil, fmt.Errorf("test log: no span holds %d", from)
	}
	first, last := tl.spans[i], tl.spans[i]
	for j := i + 1; j < len(tl.spans) && tl.spans[j].seg == first.seg && tl.spans[j].end-first.off <= int64(max); j++ {
		last = tl.spans[j]
	}
	tl.mu.Unlock()
	f, err := os.Open(filepath.Join(tl.dir, segment.FileName(first.seg)))
	if err != nil {
		return segment.Span{}, nil, err
	}
	defer f.Close()
	b := make([]byte, last.end-first.off)
	if _, err := f.ReadAt(b, first.off); err != nil {
		return segment.Span{}, nil, err
	}
	off := first.off
	for q := first.first; q < from; q++ { // the frames before record from
		n := 12 + int(binary.BigEndian.Uint32(b))
		b, off = b[n:], off+int64(n)
	}
	var firstID eventid.ID
	h, err := segment.VerifySpan(testLedgerID(), tl.headBefore(from), "read", first.seg, off, b, func(r *segment.Record, _ segment.Location) error {
		if r.Seq == from {
			firstID = r.ID
		}
		return nil
	})
	if err != nil {
		return segment.Span{}, nil, err
	}
	return segment.Span{Segment: first.seg, Offset: off, Bytes: b, FirstSeq: from, FirstID: firstID, Last: h}, frameLeaves(b), nil
}

// headBefore is the head before record seq, as its frame names it.
func (tl *testLog) headBefore(seq uint64) segment.Head {
	b, err := tl.frame(seq)
	if err != nil {
		tl.t.Error(err)
		return segment.Head{}
	}
	prev, _ := segment.SpanPrev(b)
	return segment.Head{ID: prev, Seq: seq - 1}
}

// frame reads record seq's frame with the Log's iterator.
func (tl *testLog) frame(seq uint64) ([]byte, error) {
	tl.mu.Lock()
	i := sort.Search(len(tl.spans), func(i int) bool { return tl.spans[i].last >= seq })
	s := tl.spans[i]
	tl.mu.Unlock()
	b, err := os.ReadFile(filepath.Join(tl.dir, segment.FileName(s.seg)))
	if err != nil {
		return nil, err
	}
	b = b[s.off:s.end]
	for q := s.first; q < seq; q++ {
		b = b[12+int(binary.BigEndian.Uint32(b)):]
	}
	return b, nil
}

// Sealed reads segment n's file.
func (tl *testLog) Sealed(n uint64) ([]byte, uint64, uint64, error) {
	tl.mu.Lock()
	var first, last uint64
	for _, s := range tl.spans {
		if s.seg == n {
			if first == 0 {
				first = s.first
			}
			last = s.last
		}
	}
	sealed := len(tl.spans) > 0 && tl.spans[len(tl.spans)-1].seg > n
	tl.mu.Unlock()
	if !sealed {
		return nil, 0, 0, fmt.Errorf("test log: segment %d is not sealed", n)
	}
	b, err := os.ReadFile(filepath.Join(tl.dir, segment.FileName(n)))
	return b, first, last, err
}

// Frontier is the tree of the first n leaves.
func (tl *testLog) Frontier(n uint64) (*tree.Builder, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if n > uint64(len(tl.leaves)) {
		return nil, fmt.Errorf("test log: tree at %d, the log holds %d", n, len(tl.leaves))
	}
	b := &tree.Builder{}
	for _, l := range tl.leaves[:n] {
		b.Add(l)
	}
	return b, nil
}

// root is the tree root at size n.
func (tl *testLog) root(n uint64) Hash {
	b, err := tl.Frontier(n)
	if err != nil {
		tl.t.Fatal(err)
	}
	return Hash(b.Root())
}

// testConfig is a Writer's configuration over st and tl.
func testConfig(st store.Store, tl *testLog, mode Mode) Config {
	return Config{
		Store: st, Ledger: testLedgerID(), Name: "replica-test", Mode: mode,
		Identity: Identity{Host: "test", PID: os.Getpid(), Started: time.Now(), Nonce: fmt.Sprint(time.Now().UnixNano())},
		Source:   tl, Endpoint: "memory://test",
		OpenCheckpoint: openTestCheckpoint,
	}
}

// testSignature is the signature line of testCheckpoint: the "key" the
// tests' ledger signs with.
const testSignature = "— test signature\n"

// openTestCheckpoint is the tests' Config.OpenCheckpoint: a checkpoint of
// the test ledger signed with testSignature.
func openTestCheckpoint(note []byte) (uint64, tree.Hash, error) {
	text, sig, ok := bytes.Cut(note, []byte("\n\n"))
	if !ok || string(sig) != testSignature {
		return 0, tree.Hash{}, errors.New("not signed by the test key")
	}
	c, err := tree.ParseCheckpoint(append(bytes.Clone(text), '\n'))
	if err != nil {
		return 0, tree.Hash{}, err
	}
	if c.Origin != fmt.Sprintf("test/%08x", uint32(testLedgerID())) {
		return 0, tree.Hash{}, fmt.Errorf("origin %q is not the test ledger's", c.Origin)
	}
	return c.Size, c.Root, nil
}

// openTake opens and takes a Writer over cfg, attached to tl.
func openTake(t testing.TB, cfg Config, tl *testLog) *Writer {
	t.Helper()
	w, _, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tl.attach(w)
	if err := w.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// takeLedger opens and takes a second Writer over cfg, not attached to
// its log (another writer taking the ledger): the Writers before it are
// fenced. Closed at the test's end.
func takeLedger(t testing.TB, cfg Config) *Writer {
	t.Helper()
	ctx := context.Background()
	w, _, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Take(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })
	return w
}

// bucketChunks reads every chunk in st, in order.
func bucketChunks(t testing.TB, st store.Store) ([]Chunk, [][]byte) {
	t.Helper()
	ctx := context.Background()
	var chunks []Chunk
	var objs [][]byte
	prefix := LedgerPrefix(testLedgerID()) + "wal/"
	for after := ""; ; {
		page, err := st.List(ctx, prefix, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			g, err := st.Get(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := DecodeChunk(o.Key, testLedgerID(), g.Data)
			if err != nil {
				t.Fatal(err)
			}
			chunks, objs = append(chunks, c), append(objs, g.Data)
		}
		if !page.Truncated {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	return chunks, objs
}

// checkBucket checks that the chunks in st from the first form a hash
// chain with consecutive numbers and records, epochs that never go
// down, roots of the log's tree, and records byte for byte as the log's
// segment files hold them, up to record upTo at least. A chunk of a
// lower epoch that does not name the one before (a fenced writer's late
// upload after the new writer's last chunk) ends the history. It returns
// the chunks of the history.
func (tl *testLog) checkBucket(t testing.TB, st store.Store, upTo uint64) []Chunk {
	t.Helper()
	chunks, objs := bucketChunks(t, st)
	if len(chunks) == 0 {
		t.Fatal("no chunk in the bucket")
	}
	files := map[uint64][]byte{}
	next := chunks[0].FirstSeq
	for i, c := range chunks {
		if i > 0 {
			p := chunks[i-1]
			if c.Epoch < p.Epoch && c.Prev != Sum(objs[i-1]) && c.Number == p.Number+1 {
				// A fenced writer's late upload after the new writer's
				// last chunk: the history ends before it.
				chunks = chunks[:i]
				break
			}
			if c.Number != p.Number+1 || c.Prev != Sum(objs[i-1]) || c.Epoch < p.Epoch {
				t.Fatalf("chunk %d after chunk %d: number, Prev or epoch wrong (epochs %d, %d)", c.Number, p.Number, p.Epoch, c.Epoch)
			}
		}
		if c.FirstSeq != next {
			t.Fatalf("chunk %d begins at record %d, want %d", c.Number, c.FirstSeq, next)
		}
		next = c.LastSeq + 1
		if c.Root != tl.root(c.LastSeq) {
			t.Fatalf("chunk %d: root at %d is not the log's", c.Number, c.LastSeq)
		}
		if c.Fence() {
			continue
		}
		f, ok := files[uint64(c.Segment)]
		if !ok {
			var err error
			if f, err = os.ReadFile(filepath.Join(tl.dir, segment.FileName(uint64(c.Segment)))); err != nil {
				t.Fatal(err)
			}
			files[uint64(c.Segment)] = f
		}
		if end := int(c.Offset) + len(c.Records); end > len(f) || !bytes.Equal(f[c.Offset:end], c.Records) {
			t.Fatalf("chunk %d: records are not segment %d's bytes at %d", c.Number, c.Segment, c.Offset)
		}
	}
	if next-1 < upTo {
		t.Fatalf("the chunks end at record %d, want at least %d", next-1, upTo)
	}
	return chunks
}

// keys lists the keys in st under the ledger's folder sub.
func keys(t testing.TB, st store.Store, sub string) []string {
	t.Helper()
	var out []string
	prefix := LedgerPrefix(testLedgerID()) + sub
	for after := ""; ; {
		page, err := st.List(context.Background(), prefix, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			out = append(out, strings.TrimPrefix(o.Key, prefix))
		}
		if !page.Truncated {
			return out
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}
