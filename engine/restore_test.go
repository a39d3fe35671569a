package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// The restore tests build a ledger with the engine (small segments),
// then store it in a Memory bucket as the replica Writer lays it out
// (docs/replication.md, "Objects"): its first segments as seg/ objects,
// the records of the others cut into WAL chunks with their hash chain,
// epochs and Merkle roots, a fence chunk where epoch 2 begins, two
// manifests and the ledger's checkpoint file as checkpoint.

const (
	restoreLedger     = "orders"
	restoreEvents     = 3000
	restoreSegment    = 32 << 10
	restoreChunkSize  = 50 // records per chunk (the appends are of 5 events)
	restoreAppendSize = 5
)

// sourceLedger is a closed data directory holding one ledger, and what
// its segment files hold.
type sourceLedger struct {
	name    string
	dir     string
	opts    *Options // its key
	id      eventid.LedgerID
	files   [][]byte       // segment files 1..n
	records []sourceRecord // every record, in order
	ck      []byte         // its checkpoint file
	ids     []eventid.ID   // every event's ID
}

// sourceRecord is a record of a sourceLedger.
type sourceRecord struct {
	seq    uint64
	id     eventid.ID
	loc    segment.Location
	leaf   tree.Hash
	micros uint64
}

// makeSource makes a data directory holding restoreLedger with n events
// (its genesis included) in segments of restoreSegment bytes.
func makeSource(t testing.TB, n int) *sourceLedger {
	t.Helper()
	return makeSources(t, n, restoreLedger)[0]
}

// makeSources makes a data directory holding a ledger of n events for
// each name.
func makeSources(t testing.TB, n int, names ...string) []*sourceLedger {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: restoreSegment})
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{SegmentSize: restoreSegment, SigningKeyFile: filepath.Join(dir, signingKeyFile)}
	var ss []*sourceLedger
	for _, name := range names {
		info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		appendEvents(t, db, name, n-1, appendSpec{Batch: batchesOf(restoreAppendSize), Options: unsynced})
		if _, err := db.Checkpoint(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, &sourceLedger{name: name, dir: dir, opts: opts, id: info.ID})
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		s.read(t)
	}
	return ss
}

// ledgerDir is the source's ledger folder.
func (s *sourceLedger) ledgerDir() string { return filepath.Join(s.dir, ledgersDir, s.id.String()) }

// read reads the source's segment files and checkpoint.
func (s *sourceLedger) read(t testing.TB) {
	t.Helper()
	s.files, s.records, s.ids = nil, nil, nil
	s.files = readSegmentFiles(t, s.ledgerDir())
	var buf []byte
	head := segment.Head{ID: eventid.Genesis(s.id)}
	for i, f := range s.files {
		var err error
		head, err = segment.VerifyFile(s.id, uint64(i)+1, head, "source", f, func(r *segment.Record, loc segment.Location) error {
			var leaf tree.Hash
			leaf, buf = leafHash(buf, r)
			s.records = append(s.records, sourceRecord{seq: r.Seq, id: r.ID, loc: loc, leaf: leaf, micros: r.ID.Micros()})
			s.ids = append(s.ids, r.ID)
			return nil
		})
		if err != nil {
			t.Fatalf("source segment %d: %v", i+1, err)
		}
	}
	ck, err := os.ReadFile(filepath.Join(s.ledgerDir(), checkpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	s.ck = ck
}

// readSegmentFiles reads the segment files of a ledger folder, in order.
func readSegmentFiles(t testing.TB, dir string) [][]byte {
	t.Helper()
	var files [][]byte
	for n := uint64(1); ; n++ {
		b, err := os.ReadFile(filepath.Join(dir, segment.FileName(n)))
		if errors.Is(err, os.ErrNotExist) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
}

// bucket is a source stored in a Memory store as a Writer would.
type bucket struct {
	st *store.Memory
	// sealed is the number of segments stored under seg/; chunks[i] is
	// chunk i+1 as stored; fence is the number of epoch 2's fence chunk;
	// data lists the numbers of the chunks that hold records after the
	// seg/ objects.
	sealed int
	chunks []replica.Chunk
	fence  uint64
	data   []uint64
}

// storeSource writes s into a new Memory store: segments 1 to n-3 under
// seg/, then chunks from the start of segment n-3 (covered by seg/, as
// chunks above the GC boundary may be), an epoch 1 fence first and an
// epoch 2 fence in the middle of segment n-1, and the manifests of both
// epochs.
func storeSource(t testing.TB, s *sourceLedger) *bucket {
	t.Helper()
	return storeSourceIn(t, s, store.NewMemory())
}

// storeSourceIn is storeSource into st.
func storeSourceIn(t testing.TB, s *sourceLedger, st *store.Memory) *bucket {
	t.Helper()
	ctx := context.Background()
	b := &bucket{st: st, sealed: len(s.files) - 3}
	if b.sealed < 2 {
		t.Fatalf("%d segments: too few for the layout", len(s.files))
	}
	put := func(key string, data []byte) {
		if _, err := b.st.Put(ctx, key, data, store.CreateOnly()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range b.sealed {
		first, last := s.segmentRange(uint64(i) + 1)
		put(replica.SegmentKey(s.id, first, last), s.files[i])
	}
	var tb tree.Builder
	// The chunks begin with segment sealed, whose records are also under
	// seg/; the tree is fed every record before them.
	firstSeq, _ := s.segmentRange(uint64(b.sealed))
	for _, r := range s.records[:firstSeq-1] {
		tb.Add(r.leaf)
	}
	var prev replica.Hash
	epoch := uint64(1)
	fenceSeg := uint64(len(s.files) - 1)
	fenced := false
	add := func(c replica.Chunk) {
		c.Ledger, c.Number, c.Epoch, c.Prev = s.id, uint64(len(b.chunks))+1, epoch, prev
		c.TreeSize, c.Root = c.LastSeq, replica.Hash(tb.Root())
		obj := c.Encode()
		put(replica.ChunkKey(s.id, c.Number), obj)
		prev = replica.Sum(obj)
		b.chunks = append(b.chunks, c)
	}
	fence := func(next sourceRecord) {
		last := s.records[next.seq-2]
		add(replica.Chunk{FirstSeq: next.seq, LastSeq: next.seq - 1, FirstMicros: last.micros, LastMicros: last.micros, Segment: uint32(next.loc.Segment), Offset: uint32(next.loc.Offset)})
	}
	fence(s.records[firstSeq-1])
	for seg := uint64(b.sealed); seg <= uint64(len(s.files)); seg++ {
		first, last := s.segmentRange(seg)
		for i := first; i <= last; {
			j := min(i+restoreChunkSize-1, last)
			if seg == fenceSeg && !fenced && i > first {
				epoch, fenced = 2, true
				fence(s.records[i-1])
				b.fence = uint64(len(b.chunks))
			}
			recs := s.records[i-1 : j]
			for _, r := range recs {
				tb.Add(r.leaf)
			}
			start, end := recs[0].loc.Offset, recs[len(recs)-1].loc.End()
			add(replica.Chunk{FirstSeq: i, LastSeq: j, FirstMicros: recs[0].micros, LastMicros: recs[len(recs)-1].micros,
				Segment: uint32(seg), Offset: uint32(start), Records: s.files[seg-1][start:end]})
			if seg > uint64(b.sealed) {
				b.data = append(b.data, uint64(len(b.chunks)))
			}
			i = j + 1
		}
	}
	_, sealedSeq := s.segmentRange(uint64(b.sealed))
	for i, m := range []replica.Manifest{
		{V: 1, Ledger: s.id.String(), Name: s.name, Epoch: 1, Fence: 1, Segments: uint64(b.sealed), SealedSeq: sealedSeq, GC: 1},
		{V: 1, Ledger: s.id.String(), Name: s.name, Epoch: 2, Fence: b.fence, Segments: uint64(b.sealed), SealedSeq: sealedSeq, GC: 1},
	} {
		put(replica.ManifestKey(s.id, uint64(i)+1), m.Encode())
	}
	if _, err := b.st.Put(ctx, replica.CheckpointKey(s.id), s.ck, store.Condition{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// segmentRange returns the first and last events of segment n.
func (s *sourceLedger) segmentRange(n uint64) (first, last uint64) {
	for _, r := range s.records {
		if r.loc.Segment == n {
			if first == 0 {
				first = r.seq
			}
			last = r.seq
		}
	}
	return first, last
}

// chunkKey is the key of chunk n of the bucket's ledger.
func (b *bucket) chunkKey(s *sourceLedger, n uint64) string { return replica.ChunkKey(s.id, n) }

// rewrite replaces chunk n with what change makes of it, re-encoded.
func (b *bucket) rewrite(t testing.TB, s *sourceLedger, n uint64, change func(c *replica.Chunk)) string {
	t.Helper()
	c := b.chunks[n-1]
	change(&c)
	key := b.chunkKey(s, n)
	if _, err := b.st.Put(context.Background(), key, c.Encode(), store.Condition{}); err != nil {
		t.Fatal(err)
	}
	return key
}

// flip changes one byte of the object under key, at off from its end.
func (b *bucket) flip(t testing.TB, key string, fromEnd int) {
	t.Helper()
	ctx := context.Background()
	o, err := b.st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	o.Data[len(o.Data)-fromEnd] ^= 0x20
	if _, err := b.st.Put(ctx, key, o.Data, store.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// restoreTo restores the bucket into a new directory beside none other
// and returns it.
func restoreTo(t testing.TB, s *sourceLedger, st store.Store, o RestoreOptions) (string, []RestoredLedger, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	o.store = st
	if o.Options == nil {
		o.Options = s.opts
	}
	res, err := Restore(context.Background(), dir, o)
	return dir, res, err
}

// checkRestored checks that dir opens with s's key, passes a full
// Verify and holds s's first n events, whose segment files are s's
// byte for byte (segments begun from chunks: but the creation time in
// their header, bytes 48 to 55, which the restore sets to the first
// record's time, and so the header's CRC).
func checkRestored(t *testing.T, s *sourceLedger, dir string, n uint64, identical int) {
	t.Helper()
	files := readSegmentFiles(t, filepath.Join(dir, ledgersDir, s.id.String()))
	if n == uint64(len(s.records)) && len(files) != len(s.files) {
		t.Fatalf("restored %d segment files, the source has %d", len(files), len(s.files))
	}
	for i, f := range files {
		want := s.files[i]
		if n < uint64(len(s.records)) && i == len(files)-1 {
			want = want[:s.records[n-1].loc.End()]
		}
		switch {
		case i < identical:
			if !bytes.Equal(f, want) {
				t.Fatalf("segment %d differs from the source's (%d bytes, want %d)", i+1, len(f), len(want))
			}
		case len(f) != len(want) || !bytes.Equal(f[:48], want[:48]) || !bytes.Equal(f[segment.HeaderSize:], want[segment.HeaderSize:]):
			t.Fatalf("segment %d differs from the source's but for its creation time (%d bytes, want %d)", i+1, len(f), len(want))
		}
	}
	checkOpens(t, s, dir, s.opts, n)
}

// checkOpens checks that dir opens with opts, passes a full Verify of s's
// ledger and holds its first n events.
func checkOpens(t *testing.T, s *sourceLedger, dir string, opts *Options, n uint64) {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable after the restore: %v", u)
	}
	// The restore's own Open built the index, the tree and meta.db: this
	// one has nothing to report.
	if err := db.MetaRebuilt(); err != nil {
		t.Fatalf("meta.db rebuilt at the Open after the restore: %v", err)
	}
	if err := db.IndexRebuilt(); err != nil {
		t.Fatalf("index rebuilt at the Open after the restore: %v", err)
	}
	if tr := db.TreeRebuilt(); len(tr) > 0 {
		t.Fatalf("trees rebuilt at the Open after the restore: %v", tr)
	}
	if r := db.Renamed(); len(r) > 0 {
		t.Fatalf("ledgers renamed at the Open after the restore: %v", r)
	}
	rep, err := db.Verify(context.Background(), s.name, nil)
	if err != nil {
		t.Fatalf("full Verify of the restored ledger: %v", err)
	}
	if rep.Events != n || rep.Head != s.ids[n-1] || rep.TreeSize != n {
		t.Fatalf("Verify: %d events, head %s, tree %d; want %d, %s", rep.Events, rep.Head, rep.TreeSize, n, s.ids[n-1])
	}
	var got []eventid.ID
	for ev, err := range db.Scan(context.Background(), s.name, ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.ID)
	}
	if !slices.Equal(got, s.ids[:n]) {
		t.Fatalf("read %d events back, want the source's first %d", len(got), n)
	}
}

// checkNothingLeft checks that a failed restore to dir left neither dir
// nor its temporary directory.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		t.Fatalf("a failed restore left %s", e.Name())
	}
}

func TestRestoreFromBucket(t *testing.T) {
	s := makeSource(t, restoreEvents)
	b := storeSource(t, s)
	var last RestoreProgress
	dir, res, err := restoreTo(t, s, b.st, RestoreOptions{Progress: func(p RestoreProgress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Name != restoreLedger || res[0].Events != restoreEvents || res[0].Verified != restoreEvents || res[0].Resigned {
		t.Fatalf("restored %+v", res)
	}
	if last.Records != restoreEvents || last.Name != restoreLedger {
		t.Fatalf("last progress %+v, want %d records", last, restoreEvents)
	}
	t.Logf("%d segments: %d under seg/, %d chunks", len(s.files), b.sealed, len(b.chunks))
	checkRestored(t, s, dir, restoreEvents, b.sealed)
	ck, err := os.ReadFile(filepath.Join(dir, ledgersDir, s.id.String(), checkpointFileName))
	if err != nil || !bytes.Equal(ck, s.ck) {
		t.Fatalf("the restored checkpoint file is not the bucket's (%v)", err)
	}
}

func TestRestoreByName(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	for _, name := range []string{restoreLedger, s.id.String(), ""} {
		dir, res, err := restoreTo(t, s, b.st, RestoreOptions{Ledger: name})
		if err != nil {
			t.Fatalf("restore %q: %v", name, err)
		}
		if len(res) != 1 || res[0].ID != s.id {
			t.Fatalf("restore %q: %+v", name, res)
		}
		checkRestored(t, s, dir, 1500, b.sealed)
	}
	dir, _, err := restoreTo(t, s, b.st, RestoreOptions{Ledger: "other"})
	if !errors.Is(err, ErrLedgerNotFound) || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("restore of a ledger the bucket lacks: %v", err)
	}
	checkNothingLeft(t, dir)
}

func TestRestoreEveryLedger(t *testing.T) {
	ss := makeSources(t, 1500, "orders", "refunds")
	st := store.NewMemory()
	b := storeSourceIn(t, ss[0], st)
	storeSourceIn(t, ss[1], st)
	dir, res, err := restoreTo(t, ss[0], st, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("restored %+v", res)
	}
	for _, s := range ss {
		checkRestored(t, s, dir, 1500, b.sealed)
	}
	dir, res, err = restoreTo(t, ss[0], st, RestoreOptions{Ledger: "refunds"})
	if err != nil || len(res) != 1 || res[0].ID != ss[1].id {
		t.Fatalf("restore of refunds: %+v, %v", res, err)
	}
	checkRestored(t, ss[1], dir, 1500, b.sealed)
}

// TestRestoreWithAnotherKey: a bucket's checkpoint checked with the
// verifier key given, and the ledger signed anew by the new directory's
// own key.
func TestRestoreWithAnotherKey(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	k := mustKey(t, s.opts.SigningKeyFile)
	dir := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(context.Background(), dir, RestoreOptions{store: b.st, VerifierKey: k.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Resigned || res[0].Events != 1500 {
		t.Fatalf("restored %+v", res)
	}
	checkOpens(t, s, dir, nil, 1500)
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.VerifierKey() == k.Verifier {
		t.Fatal("the restored directory signs with the source's key")
	}
	// Without the verifier key the bucket's checkpoint is refused.
	_, err = Restore(context.Background(), filepath.Join(t.TempDir(), "r"), RestoreOptions{store: b.st})
	if err == nil || !strings.Contains(err.Error(), "give the key that signed it") {
		t.Fatalf("restore with a key that did not sign the bucket's checkpoint: %v", err)
	}
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(context.Background(), dir, RestoreOptions{store: b.st, Options: s.opts})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
	// An empty directory is fine.
	empty := t.TempDir()
	if _, err := Restore(context.Background(), empty, RestoreOptions{store: b.st, Options: s.opts}); err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, empty, 1500, b.sealed)
}

// TestRestoreRefusesDamage: each damage to the bucket fails the restore
// with an error that names the object, and leaves nothing behind.
func TestRestoreRefusesDamage(t *testing.T) {
	s := makeSource(t, restoreEvents)
	key, err := tree.LoadKey(vfs.Default, s.opts.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, b *bucket) string // returns the key the error must name
		want   string                               // in the error too
	}{
		{"a byte of a chunk's records", func(t *testing.T, b *bucket) string {
			k := b.chunkKey(s, b.data[2])
			b.flip(t, k, 10)
			return k
		}, "CRC"},
		{"a byte of a chunk's header", func(t *testing.T, b *bucket) string {
			k := b.chunkKey(s, b.data[1])
			o, _ := b.st.Get(context.Background(), k)
			o.Data[35] ^= 1
			b.st.Put(context.Background(), k, o.Data, store.Condition{})
			return k
		}, "header CRC"},
		{"a byte of a seg/ object", func(t *testing.T, b *bucket) string {
			first, last := s.segmentRange(2)
			k := replica.SegmentKey(s.id, first, last)
			b.flip(t, k, 100)
			return k
		}, "CRC"},
		{"a byte of the newest manifest", func(t *testing.T, b *bucket) string {
			k := replica.ManifestKey(s.id, 2)
			o, _ := b.st.Get(context.Background(), k)
			other := "f" // another first digit: not the ID's own
			if s.id.String()[0] == 'f' {
				other = "0"
			}
			o.Data = bytes.Replace(o.Data, []byte(`"ledger":"`+s.id.String()), []byte(`"ledger":"`+other+s.id.String()[1:]), 1)
			b.st.Put(context.Background(), k, o.Data, store.Condition{})
			return k
		}, "ledger"},
		{"a chunk removed (a gap)", func(t *testing.T, b *bucket) string {
			k := b.chunkKey(s, b.data[3])
			b.st.Delete(context.Background(), k)
			return k
		}, "missing"},
		{"the last chunk removed", func(t *testing.T, b *bucket) string {
			k := b.chunkKey(s, uint64(len(b.chunks)))
			b.st.Delete(context.Background(), k)
			return replica.CheckpointKey(s.id)
		}, "signed for 3000 events"},
		{"a seg/ object removed", func(t *testing.T, b *bucket) string {
			first, last := s.segmentRange(2)
			b.st.Delete(context.Background(), replica.SegmentKey(s.id, first, last))
			next, _ := s.segmentRange(3)
			_, l := s.segmentRange(3)
			return replica.SegmentKey(s.id, next, l)
		}, "gap"},
		{"a chunk of epoch 1 after epoch 2's fence", func(t *testing.T, b *bucket) string {
			n := b.fence + 1
			return b.rewrite(t, s, n, func(c *replica.Chunk) { c.Epoch = 1 })
		}, "epoch 1, after a chunk of epoch 2"},
		{"a chunk of epoch 2 before its fence", func(t *testing.T, b *bucket) string {
			return b.rewrite(t, s, b.fence-1, func(c *replica.Chunk) { c.Epoch = 2 })
		}, "without its fence"},
		{"a chunk's previous chunk wrong", func(t *testing.T, b *bucket) string {
			return b.rewrite(t, s, b.data[4], func(c *replica.Chunk) { c.Prev[0] ^= 1 })
		}, "previous chunk's SHA-256"},
		{"a chunk's root wrong", func(t *testing.T, b *bucket) string {
			return b.rewrite(t, s, b.data[5], func(c *replica.Chunk) { c.Root[31] ^= 1 })
		}, "Merkle root"},
		{"a chunk's records laid elsewhere", func(t *testing.T, b *bucket) string {
			return b.rewrite(t, s, b.data[5], func(c *replica.Chunk) { c.Offset += 8 })
		}, "offset"},
		{"a fence that does not fit", func(t *testing.T, b *bucket) string {
			return b.rewrite(t, s, b.fence, func(c *replica.Chunk) { c.FirstSeq, c.LastSeq, c.TreeSize = c.FirstSeq+1, c.LastSeq+1, c.TreeSize+1 })
		}, "fence"},
		{"the checkpoint's root not the events'", func(t *testing.T, b *bucket) string {
			c, err := tree.OpenCheckpoint(s.ck, mustVerifier(t, key))
			if err != nil {
				t.Fatal(err)
			}
			c.Root[0] ^= 1
			msg, err := tree.Sign(c, key.Signer)
			if err != nil {
				t.Fatal(err)
			}
			k := replica.CheckpointKey(s.id)
			b.st.Put(context.Background(), k, msg, store.Condition{})
			return k
		}, "signed checkpoint's"},
		{"the checkpoint signed by another key", func(t *testing.T, b *bucket) string {
			other, _, err := tree.LoadOrCreateKey(vfs.Default, filepath.Join(t.TempDir(), "other.key"))
			if err != nil {
				t.Fatal(err)
			}
			c, _ := tree.OpenCheckpoint(s.ck, mustVerifier(t, key))
			c.Origin = tree.Origin(other.Signer.Name(), uint32(s.id))
			msg, _ := tree.Sign(c, other.Signer)
			k := replica.CheckpointKey(s.id)
			b.st.Put(context.Background(), k, msg, store.Condition{})
			return k
		}, "signed by the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := storeSource(t, s)
			named := tc.damage(t, b)
			dir, _, err := restoreTo(t, s, b.st, RestoreOptions{})
			if err == nil {
				t.Fatal("restored a damaged bucket")
			}
			if !strings.Contains(err.Error(), named) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the error does not name %s (and %q): %v", named, tc.want, err)
			}
			if !strings.Contains(tc.name, "another key") && !errors.Is(err, ErrCorruption) {
				t.Fatalf("damage is not ErrCorruption: %v", err)
			}
			checkNothingLeft(t, dir)
		})
	}
}

func mustVerifier(t *testing.T, k tree.Key) note.Verifier {
	t.Helper()
	v, err := tree.NewVerifier(k.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gcStore is the bucket of a writer that, once a restore read chunk
// trigger, seals the segment that chunks held, stores it under seg/,
// and deletes those chunks (its GC), as Litestream #1270's race did.
type gcStore struct {
	*store.Memory
	once    sync.Once
	trigger string
	seal    func()
}

func (g *gcStore) Get(ctx context.Context, key string) (store.Object, error) {
	if key == g.trigger {
		g.once.Do(g.seal)
	}
	return g.Memory.Get(ctx, key)
}

func TestRestoreChunkDeletedByGC(t *testing.T) {
	s := makeSource(t, restoreEvents)
	b := storeSource(t, s)
	// The manifest says the segment after the seg/ objects is not
	// sealed; a chunk of it is read, then the writer stores it whole
	// and deletes its chunks.
	seg := uint64(b.sealed + 1)
	var inSeg []uint64
	for _, n := range b.data {
		if uint64(b.chunks[n-1].Segment) == seg {
			inSeg = append(inSeg, n)
		}
	}
	if len(inSeg) < 3 {
		t.Fatalf("segment %d has %d chunks", seg, len(inSeg))
	}
	g := &gcStore{Memory: b.st, trigger: b.chunkKey(s, inSeg[1])}
	gcRan := false
	g.seal = func() {
		gcRan = true
		ctx := context.Background()
		first, last := s.segmentRange(seg)
		if _, err := b.st.Put(ctx, replica.SegmentKey(s.id, first, last), s.files[seg-1], store.CreateOnly()); err != nil {
			panic(err)
		}
		for _, n := range inSeg[1:] {
			b.st.Delete(ctx, b.chunkKey(s, n))
		}
	}
	// The Get of the trigger chunk finds it deleted already.
	dir, _, err := restoreTo(t, s, g, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !gcRan {
		t.Fatal("the restore never read the chunk whose read runs the GC")
	}
	// Segment seg, read from its seg/ object after its first chunk, is
	// the source's whole but for its header's creation time.
	checkRestored(t, s, dir, restoreEvents, b.sealed)

	// A chunk deleted whose records no seg/ object holds is a gap.
	b2 := storeSource(t, s)
	g2 := &gcStore{Memory: b2.st, trigger: b2.chunkKey(s, inSeg[1]), seal: func() { b2.st.Delete(context.Background(), b2.chunkKey(s, inSeg[1])) }}
	dir, _, err = restoreTo(t, s, g2, RestoreOptions{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), b2.chunkKey(s, inSeg[1])) {
		t.Fatalf("a chunk deleted with no seg/ object for it: %v", err)
	}
	checkNothingLeft(t, dir)
}

// addStore is the bucket of a writer that appends a chunk (and writes a
// newer manifest) once a restore read its first chunk.
type addStore struct {
	*store.Memory
	once sync.Once
	add  func()
}

func (a *addStore) Get(ctx context.Context, key string) (store.Object, error) {
	if strings.Contains(key, "/wal/") {
		a.once.Do(a.add)
	}
	return a.Memory.Get(ctx, key)
}

func TestRestoreIgnoresChunksAddedMeanwhile(t *testing.T) {
	s := makeSource(t, restoreEvents)
	b := storeSource(t, s)
	a := &addStore{Memory: b.st, add: func() {
		ctx := context.Background()
		last := b.chunks[len(b.chunks)-1]
		c := replica.Chunk{Ledger: s.id, Number: last.Number + 1, Epoch: 2, FirstSeq: last.LastSeq + 1, LastSeq: last.LastSeq + 1, Records: []byte("not yet vouched for")}
		b.st.Put(ctx, b.chunkKey(s, c.Number), c.Encode(), store.CreateOnly())
		m := replica.Manifest{V: 1, Ledger: s.id.String(), Epoch: 3}
		b.st.Put(ctx, replica.ManifestKey(s.id, 3), m.Encode(), store.CreateOnly())
	}}
	dir, res, err := restoreTo(t, s, a, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Events != restoreEvents {
		t.Fatalf("restored %d events, want the %d the state read vouches for", res[0].Events, restoreEvents)
	}
	checkRestored(t, s, dir, restoreEvents, b.sealed)
}

func TestRestorePointInTime(t *testing.T) {
	s := makeSource(t, restoreEvents)
	b := storeSource(t, s)
	first, _ := s.segmentRange(2)
	inSeg := first + 7 // under seg/
	inChunk := uint64(restoreEvents - 37)
	// A point in time ends with the last whole batch before it: the
	// genesis event, then appends of restoreAppendSize events.
	batchEnd := func(seq uint64) uint64 { return seq - (seq-1)%restoreAppendSize }
	for _, tc := range []struct {
		name string
		o    RestoreOptions
		want uint64
	}{
		{"seq in a chunk", RestoreOptions{Seq: inChunk}, batchEnd(inChunk)},
		{"seq in a seg/ object", RestoreOptions{Seq: inSeg}, batchEnd(inSeg)},
		{"seq at a batch's end", RestoreOptions{Seq: batchEnd(inChunk)}, batchEnd(inChunk)},
		{"seq at the end", RestoreOptions{Seq: restoreEvents}, restoreEvents},
		{"seq beyond the end", RestoreOptions{Seq: restoreEvents + 10}, restoreEvents},
		{"time of an event in a chunk", RestoreOptions{At: time.UnixMicro(int64(s.records[inChunk-1].micros))}, batchEnd(inChunk)},
		{"time before an event", RestoreOptions{At: time.UnixMicro(int64(s.records[inSeg].micros) - 1)}, batchEnd(inSeg)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, res, err := restoreTo(t, s, b.st, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Events != tc.want || r.Verified != restoreEvents || r.Resigned != (tc.want < restoreEvents) {
				t.Fatalf("restored %+v, want %d events", r, tc.want)
			}
			identical := b.sealed
			if tc.want < restoreEvents {
				identical = min(int(s.records[tc.want-1].loc.Segment), b.sealed)
			}
			checkRestored(t, s, dir, tc.want, identical)
		})
	}
	// A point before the genesis restores nothing: an error.
	dir, _, err := restoreTo(t, s, b.st, RestoreOptions{At: time.UnixMicro(int64(s.records[0].micros) - 1)})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("restore to before the first event: %v", err)
	}
	checkNothingLeft(t, dir)
	// A changed object after the point fails it all the same.
	b.rewrite(t, s, b.data[len(b.data)-1], func(c *replica.Chunk) { c.Root[0] ^= 1 })
	dir, _, err = restoreTo(t, s, b.st, RestoreOptions{Seq: inSeg})
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("restore to a point before a changed chunk: %v", err)
	}
	checkNothingLeft(t, dir)
}

// localHead is the head of a closed ledger folder's segment files.
func localHead(t testing.TB, id eventid.LedgerID, dir string) segment.Head {
	t.Helper()
	head := segment.Head{ID: eventid.Genesis(id)}
	for i, f := range readSegmentFiles(t, dir) {
		var err error
		if head, err = segment.VerifyFile(id, uint64(i)+1, head, "local", f, nil); err != nil {
			t.Fatal(err)
		}
	}
	return head
}

// TestPullBehindDirectory: a takeover's pull makes a directory copied
// before the writer went on hold what the bucket holds.
func TestPullBehindDirectory(t *testing.T) {
	ctx := context.Background()
	s := makeSource(t, 1500)
	behind := copyDir(t, s.dir)
	db, err := Open(s.dir, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, restoreLedger, restoreEvents-1500, appendSpec{From: 1500, Batch: batchesOf(restoreAppendSize), Options: unsynced})
	if _, err := db.Checkpoint(ctx, restoreLedger); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s.read(t)
	b := storeSource(t, s)
	ldir := filepath.Join(behind, ledgersDir, s.id.String())
	local := localHead(t, s.id, ldir)
	if local.Seq != 1500 {
		t.Fatalf("the copy holds %d events", local.Seq)
	}
	// Its active segment ends with a zero tail (format.md "The zero
	// tail"), as a writer with Sync appends leaves it when it stops.
	active := filepath.Join(ldir, segment.FileName(local.Loc.Segment))
	f, err := os.OpenFile(active, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	v := mustVerifier(t, mustKey(t, s.opts.SigningKeyFile))
	res, err := pullFromBucket(ctx, vfs.Default, ldir, s.id, local, b.st, v, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified.Seq != restoreEvents || res.Yielded.Seq != restoreEvents {
		t.Fatalf("pulled %+v", res)
	}
	// The bucket's checkpoint replaced the copy's; the copy's tree file
	// is behind it: the first Open extends it from the segments, saying
	// so.
	ck, err := os.ReadFile(filepath.Join(ldir, checkpointFileName))
	if err != nil || !bytes.Equal(ck, s.ck) {
		t.Fatalf("the pulled folder's checkpoint is not the bucket's (%v)", err)
	}
	db, err = Open(behind, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if tr := db.TreeRebuilt(); len(tr) != 1 || !strings.Contains(tr[restoreLedger].Error(), "holds 1500 leaves") {
		t.Fatalf("the first Open after the pull: trees rebuilt %v", tr)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The segments the copy held keep their own headers; those the pull
	// began from chunks differ in their creation time only.
	copied := int(local.Loc.Segment)
	checkRestored(t, s, behind, restoreEvents, max(copied, b.sealed))
	// A second pull has nothing to do.
	if _, err := pullFromBucket(ctx, vfs.Default, ldir, s.id, localHead(t, s.id, ldir), b.st, v, false); err != nil {
		t.Fatal(err)
	}
}

// TestPullCutsZeroTailOfSealedSegment: a directory whose records end with
// a segment (and a zero tail after them) that the bucket's next segment
// seals gets the bucket's next segments, and its own is cut at its last
// record (a sealed segment has no zero tail).
func TestPullCutsZeroTailOfSealedSegment(t *testing.T) {
	ctx := context.Background()
	s := makeSource(t, restoreEvents)
	b := storeSource(t, s)
	behind := copyDir(t, s.dir)
	ldir := filepath.Join(behind, ledgersDir, s.id.String())
	k := len(s.files) - 2 // a segment the bucket holds as chunks
	for n := k + 1; n <= len(s.files); n++ {
		if err := os.Remove(filepath.Join(ldir, segment.FileName(uint64(n)))); err != nil {
			t.Fatal(err)
		}
	}
	local := localHead(t, s.id, ldir)
	if _, last := s.segmentRange(uint64(k)); local.Seq != last || local.Loc.Segment != uint64(k) {
		t.Fatalf("the copy ends at %+v", local)
	}
	f, err := os.OpenFile(filepath.Join(ldir, segment.FileName(uint64(k))), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := pullFromBucket(ctx, vfs.Default, ldir, s.id, local, b.st, mustVerifier(t, mustKey(t, s.opts.SigningKeyFile)), false); err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, behind, restoreEvents, k)
}

func mustKey(t *testing.T, path string) tree.Key {
	t.Helper()
	k, err := tree.LoadKey(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPullDivergedDirectory: a directory whose events after a common
// prefix are not the bucket's is ErrDiverged, and the pull writes
// nothing.
func TestPullDivergedDirectory(t *testing.T) {
	ctx := context.Background()
	s := makeSource(t, 1500)
	other := copyDir(t, s.dir)
	for _, d := range []struct {
		dir  string
		from int
	}{{s.dir, 1500}, {other, 100000}} {
		opts := s.opts
		if d.dir == other {
			opts = &Options{SegmentSize: restoreSegment} // its own copy of the key
		}
		db, err := Open(d.dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		appendEvents(t, db, restoreLedger, 700, appendSpec{From: d.from, Batch: batchesOf(restoreAppendSize), Options: unsynced})
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s.read(t)
	b := storeSource(t, s)
	ldir := filepath.Join(other, ledgersDir, s.id.String())
	before := readSegmentFiles(t, ldir)
	v := mustVerifier(t, mustKey(t, s.opts.SigningKeyFile))
	_, err := pullFromBucket(ctx, vfs.Default, ldir, s.id, localHead(t, s.id, ldir), b.st, v, false)
	if !errors.Is(err, replica.ErrDiverged) || !strings.Contains(err.Error(), ldir) {
		t.Fatalf("pull into a diverged directory: %v", err)
	}
	if after := readSegmentFiles(t, ldir); !slices.EqualFunc(before, after, bytes.Equal) {
		t.Fatal("the failed pull changed the directory's segments")
	}
}

func TestRestoreProgressCounts(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	var calls []RestoreProgress
	_, _, err := restoreTo(t, s, b.st, RestoreOptions{Progress: func(p RestoreProgress) { calls = append(calls, p) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i].Records < calls[i-1].Records || calls[i].Bytes < calls[i-1].Bytes {
			t.Fatalf("progress went back: %+v after %+v", calls[i], calls[i-1])
		}
	}
	var size int64
	for _, f := range s.files {
		size += int64(len(f)) - segment.HeaderSize
	}
	if last := calls[len(calls)-1]; last.Records != 1500 || last.Bytes != size {
		t.Fatalf("last progress %+v, want 1500 records, %d bytes", last, size)
	}
}
