package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/internal/replica/tilecheck"
	"github.com/annal-db/annal/eventid"
)

// tileStore records the writes to a bucket's tiles, entry bundles and
// leaf objects (every attempt, with its bytes), and checks at each write
// of a checkpoint that the bucket already holds every tile and bundle
// of its tree size.
type tileStore struct {
	store.Store
	mu      sync.Mutex
	puts    map[string][][]byte // tile, bundle and leaf keys: every Put's bytes
	missing []string            // tiles a checkpoint was written without
	lists   [][2]string         // every List of tiles: its prefix and start-after key (not st.Store's)
}

func (s *tileStore) List(ctx context.Context, prefix, startAfter string, limit int) (store.Page, error) {
	if strings.Contains(prefix, "/tile/") {
		s.mu.Lock()
		s.lists = append(s.lists, [2]string{prefix, startAfter})
		s.mu.Unlock()
	}
	return s.Store.List(ctx, prefix, startAfter, limit)
}

func newTileStore() *tileStore {
	return &tileStore{Store: store.NewMemory(), puts: map[string][][]byte{}}
}

func (s *tileStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if strings.Contains(key, "/tile/") || strings.Contains(key, "/leaf/") {
		s.mu.Lock()
		s.puts[key] = append(s.puts[key], append([]byte(nil), data...))
		s.mu.Unlock()
	}
	if prefix, ok := strings.CutSuffix(key, "checkpoint"); ok {
		n := checkpointTreeSize(data)
		for _, k := range c2spTileKeys(n) {
			if _, err := s.Store.Head(ctx, prefix+k); err != nil {
				s.mu.Lock()
				s.missing = append(s.missing, fmt.Sprintf("%s (size %d): %s: %v", key, n, k, err))
				s.mu.Unlock()
			}
		}
	}
	return s.Store.Put(ctx, key, data, cond)
}

// checkpointTreeSize is the second line of a checkpoint.
func checkpointTreeSize(note []byte) int64 {
	var n int64
	fmt.Sscan(strings.Split(string(note), "\n")[1], &n)
	return n
}

// c2spTileKeys are the paths of every tile and entry bundle of a tree of
// size n, from the tlog-tiles spec: tlog's own tile paths, less the
// height element.
func c2spTileKeys(n int64) []string {
	var keys []string
	for l := 0; n>>(8*l) > 0; l++ {
		for i := int64(0); i <= n>>(8*(l+1)); i++ {
			w := 256
			if i == n>>(8*(l+1)) {
				if w = int(n >> (8 * l) % 256); w == 0 {
					continue
				}
			}
			p := strings.TrimPrefix(tlog.Tile{H: 8, L: l, N: i, W: w}.Path(), "tile/8/")
			keys = append(keys, "tile/"+p)
			if l == 0 {
				keys = append(keys, "tile/entries/"+strings.TrimPrefix(p, "0/"))
			}
		}
	}
	return keys
}

// bucketLog is the tiled log of ledger id in st, read as a generic client
// reads it.
func bucketLog(t *testing.T, st store.Store, id eventid.LedgerID, vkey string) *tilecheck.Log {
	t.Helper()
	prefix := replica.LedgerPrefix(id)
	lg, err := tilecheck.New(func(path string) ([]byte, error) {
		o, err := st.Get(context.Background(), prefix+path)
		return o.Data, err
	}, vkey)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// waitBucketCheckpoint waits until the bucket's checkpoint of ledger id
// covers n events, and returns it.
func waitBucketCheckpoint(t *testing.T, st store.Store, id eventid.LedgerID, n uint64) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := st.Get(context.Background(), replica.CheckpointKey(id))
		if err == nil && uint64(checkpointTreeSize(o.Data)) >= n {
			return o.Data
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket's checkpoint does not reach %d events: %v", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appendAndCheckpoint appends n events to ledger "cash" of db, one at a
// time, issues a checkpoint, waits until the bucket st (of ledger id)
// holds it and returns it.
func appendAndCheckpoint(t *testing.T, db *DB, st store.Store, id eventid.LedgerID, n int) []byte {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Checkpoint(ctx, "cash")
	if err != nil {
		t.Fatal(err)
	}
	return waitBucketCheckpoint(t, st, id, c.Size)
}

// exportLines is the ledger's export, split into its lines: the leaves'
// bytes.
func exportLines(t *testing.T, db *DB, name string) [][]byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := db.Export(context.Background(), name, &b, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n"))
}

// bucketTiles returns the bytes of every tile, bundle and leaf object of
// ledger id in st.
func bucketTiles(t *testing.T, st store.Store, id eventid.LedgerID) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, prefix := range []string{replica.LedgerPrefix(id) + "tile/", replica.LedgerPrefix(id) + "leaf/"} {
		for _, key := range listAll(t, st, prefix) {
			g, err := st.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			out[key] = g.Data
		}
	}
	return out
}

// openTiledLedger opens a DB replicated in mode to a new tileStore, with
// checkpoints on request only, and creates ledger "cash" in it.
func openTiledLedger(t *testing.T, mode Replication) (*tileStore, *DB, LedgerInfo) {
	t.Helper()
	st := newTileStore()
	o := replOptions(st, mode)
	o.PublishTiles = true
	o.CheckpointInterval = -1
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "cash"})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return st, db, info
}

// tiledLedger appends to ledger "cash" of db in steps, issues a checkpoint
// after each, waits until the bucket holds it and returns the ten
// checkpoints. The events' data is small but for one of 70,000 bytes
// (event #300, more than an entry bundle holds).
func tiledLedger(t *testing.T, db *DB, st store.Store, id eventid.LedgerID) [][]byte {
	t.Helper()
	ctx := context.Background()
	var notes [][]byte
	seq := uint64(1)
	for _, n := range []int{1, 98, 155, 1, 1, 42, 350, 400, 255, 300} {
		events := make([]EventInput, n)
		for i := range events {
			data := []byte(fmt.Sprintf(`{"n":%d}`, seq+uint64(i)+1))
			if seq+uint64(i)+1 == 300 {
				data = []byte(fmt.Sprintf(`{"big":"%s"}`, strings.Repeat("x", 70000)))
			}
			events[i] = EventInput{Entity: "acct", Key: fmt.Sprintf("a%d", i%7), Event: "credited", Data: data}
		}
		if _, err := db.Append(ctx, "cash", events, nil); err != nil {
			t.Fatal(err)
		}
		seq += uint64(n)
		if _, err := db.Checkpoint(ctx, "cash"); err != nil {
			t.Fatal(err)
		}
		notes = append(notes, waitBucketCheckpoint(t, st, id, seq))
	}
	return notes
}

// TestBucketTilesVerifyWithTlogAlone: a replicated ledger's bucket holds
// its log as C2SP tlog-tiles. From the bucket's objects alone, with
// x/mod's tlog and note (package tilecheck), a client verifies the
// inclusion of 100 events (each the export line of the event, from its
// entry bundle) in the latest checkpoint and the consistency of the nine
// checkpoints before it with it; the event larger than an entry bundle
// holds has an empty entry, which fails, and its leaf object verifies. A
// changed byte in a tile or a bundle fails the verification. Every
// checkpoint was written after its tiles.
func TestBucketTilesVerifyWithTlogAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db, info := openTiledLedger(t, Replicated)
	defer db.Close()
	notes := tiledLedger(t, db, st, info.ID)
	lines := exportLines(t, db, "cash")
	lg := bucketLog(t, st, info.ID, db.VerifierKey())

	head, note, err := lg.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(note, notes[len(notes)-1]) || head.N != int64(len(lines)) || head.N != 1604 {
		t.Fatalf("the bucket's checkpoint is of %d events, the ledger has %d (want 1604)", head.N, len(lines))
	}
	// 100 events: the first, last, those at a tile's edges, the large
	// one, and every 17th.
	big := int64(299)
	leaves := map[int64]bool{0: true, 255: true, 256: true, big: true, head.N - 1: true}
	for i := int64(1); len(leaves) < 100; i += 13 {
		leaves[i] = true
	}
	for j := range leaves {
		entry, err := lg.VerifyInclusion(head, j)
		if j == big {
			if err == nil || len(entry) != 0 {
				t.Fatalf("leaf %d, of %d bytes: its bundle entry is %d bytes and verifies (%v): want an empty entry that fails", j, len(lines[j]), len(entry), err)
			}
			whole, err := st.Get(ctx, replica.LeafKey(info.ID, uint64(j)))
			if err != nil {
				t.Fatal(err)
			}
			entry = whole.Data
			if err := lg.VerifyEntry(head, j, entry); err != nil {
				t.Fatalf("leaf %d from %s: %v", j, replica.LeafKey(info.ID, uint64(j)), err)
			}
		} else if err != nil {
			t.Fatalf("leaf %d: %v", j, err)
		}
		if !bytes.Equal(entry, lines[j]) {
			t.Fatalf("leaf %d's entry is\n%.200s\nthe export's line\n%.200s", j, entry, lines[j])
		}
	}
	verifyOlderCheckpoints(t, lg, notes, head)
	objs, size := 0, 0
	for _, b := range bucketTiles(t, st, info.ID) {
		objs++
		size += len(b)
	}
	t.Logf("%d events, 10 checkpoints: %d tile, bundle and leaf objects, %d bytes", head.N, objs, size)
	st.mu.Lock()
	if len(st.missing) > 0 {
		t.Errorf("checkpoints written before their tiles:\n%s", strings.Join(st.missing, "\n"))
	}
	st.mu.Unlock()

	// A byte changed in a tile, then in a bundle: the same proofs fail.
	for _, c := range []struct {
		path string
		leaf int64
	}{{"tile/0/001", 300}, {"tile/1/000.p/6", 1000}, {"tile/entries/003", 1023}} {
		key := replica.LedgerPrefix(info.ID) + c.path
		orig, err := st.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte(nil), orig.Data...)
		bad[len(bad)-5] ^= 1
		if _, err := st.Store.Put(ctx, key, bad, store.Condition{}); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.VerifyInclusion(head, c.leaf); err == nil {
			t.Errorf("%s changed: leaf %d still verifies", c.path, c.leaf)
		}
		if _, err := st.Store.Put(ctx, key, orig.Data, store.Condition{}); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.VerifyInclusion(head, c.leaf); err != nil {
			t.Fatalf("%s put back: %v", c.path, err)
		}
	}
}

// verifyOlderCheckpoints checks, as a client holding each of notes but
// the last would, the consistency of each with head and with the next,
// and the inclusion of its last event in it (from its own tiles).
func verifyOlderCheckpoints(t *testing.T, lg *tilecheck.Log, notes [][]byte, head tlog.Tree) {
	t.Helper()
	var trees []tlog.Tree
	for _, n := range notes {
		tr, err := lg.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tr)
	}
	for i, old := range trees[:len(trees)-1] {
		if err := lg.VerifyConsistency(old, head); err != nil {
			t.Fatalf("checkpoint %d (size %d) with the newest: %v", i, old.N, err)
		}
		if err := lg.VerifyConsistency(old, trees[i+1]); err != nil {
			t.Fatalf("checkpoints %d and %d: %v", i, i+1, err)
		}
		if _, err := lg.VerifyInclusion(old, old.N-1); err != nil {
			t.Fatalf("checkpoint %d's last event: %v", i, err)
		}
	}
}

// TestBucketTilesResumeWritesSameBytes: a reopened writer (a new epoch)
// finds the tiles of the bucket's checkpoint and writes none of them
// again; a takeover by a directory restored from the bucket, whose
// bucket lost some tiles, writes them again with the same bytes; no
// writer ever tries other bytes under a key, and the log verifies after
// each.
func TestBucketTilesResumeWritesSameBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newTileStore()
	dir := t.TempDir()
	o := replOptions(st, Replicated)
	o.PublishTiles = true
	o.CheckpointInterval = -1
	o.SigningKeyFile = filepath.Join(t.TempDir(), "shared.key")
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	tiledLedger(t, db, st, info.ID)
	vkey := db.VerifierKey()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := bucketTiles(t, st, info.ID)
	st.mu.Lock()
	st.puts = map[string][][]byte{}
	st.mu.Unlock()

	// add appends n events to the ledger in db, stores its checkpoint and
	// verifies the bucket's log; it returns the DB's epoch.
	add := func(db *DB, n int) uint64 {
		t.Helper()
		appendAndCheckpoint(t, db, st, info.ID, n)
		lg := bucketLog(t, st, info.ID, vkey)
		head, _, err := lg.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int64{0, 299, 1500, head.N - 1} {
			e, err := lg.Entry(head, i)
			if err == nil && i != 299 {
				err = lg.VerifyEntry(head, i, e)
			}
			if err != nil {
				t.Fatalf("size %d, leaf %d: %v", head.N, i, err)
			}
		}
		s, err := db.ReplicaStatus("cash")
		if err != nil || s.Fenced || s.LastError != nil {
			t.Fatalf("replica status %+v, %v", s, err)
		}
		return s.Epoch
	}

	db, err = Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	epoch := add(db, 300)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	for key := range st.puts {
		if _, ok := before[key]; ok {
			t.Errorf("the reopened writer wrote %s again", key)
		}
	}
	st.mu.Unlock()

	// A takeover by a restored directory, the bucket's partial tiles of
	// its checkpoint gone: the resume finds them missing, and every full
	// tile is written again, create-only, with the same bytes.
	all := bucketTiles(t, st, info.ID)
	var full []string
	for _, k := range c2spTileKeys(1904) {
		key := replica.LedgerPrefix(info.ID) + k
		if _, ok := all[key]; !ok {
			t.Fatalf("%s is not in the bucket", key)
		}
		if !strings.Contains(k, ".p/") {
			full = append(full, key)
		} else if err := st.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	st.mu.Lock()
	st.puts = map[string][][]byte{}
	st.mu.Unlock()
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(ctx, restored, RestoreOptions{store: st, Options: &Options{SigningKeyFile: o.SigningKeyFile}}); err != nil {
		t.Fatal(err)
	}
	db, _, err = Takeover(ctx, restored, o)
	if err != nil {
		t.Fatal(err)
	}
	if e := add(db, 10); e <= epoch {
		t.Fatalf("the takeover's epoch is %d, the writer's before %d", e, epoch)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	after := bucketTiles(t, st, info.ID)
	for key, b := range all {
		if a, ok := after[key]; ok && !bytes.Equal(a, b) {
			t.Errorf("%s changed", key)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for key, datas := range st.puts {
		for _, d := range datas {
			if !bytes.Equal(d, after[key]) {
				t.Errorf("a writer tried other bytes under %s", key)
			}
		}
	}
	for _, key := range full {
		if len(st.puts[key]) == 0 {
			t.Errorf("the takeover did not write %s again", key)
		}
	}
}

// TestBucketTileOfOtherBytesStopsWriter: a full tile the writer is to
// write holds other bytes in the bucket (damage, or someone writing
// there): the writer does not overwrite it, stops as on damage (the
// error names the key), does not store the checkpoint that would refer
// to it, and the next append fails. Once the object is deleted, the DB
// reopened writes the tile and stores the checkpoint.
func TestBucketTileOfOtherBytesStopsWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db, info := openTiledLedger(t, Replicated)
	defer db.Close()
	key := replica.TileKey(info.ID, 0, 0, 256)
	planted := bytes.Repeat([]byte{7}, 8192)
	if _, err := st.Store.Put(ctx, key, planted, store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Checkpoint(ctx, "cash"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var s ReplicaStatus
	for {
		var err error
		if s, err = db.ReplicaStatus("cash"); err != nil {
			t.Fatal(err)
		}
		if s.LastError != nil && strings.Contains(s.LastError.Error(), key) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.LastError == nil || !strings.Contains(s.LastError.Error(), key) || !strings.Contains(s.LastError.Error(), "other bytes") {
		t.Fatalf("the writer's last error is %v, want the damage at %s", s.LastError, key)
	}
	if _, err := appendOne(ctx, db, "cash", 300); err == nil {
		t.Fatal("an append after the damage succeeded")
	}
	got, err := st.Get(ctx, key)
	if err != nil || !bytes.Equal(got.Data, planted) {
		t.Fatalf("%s was overwritten (%v)", key, err)
	}
	ck, err := st.Get(ctx, replica.CheckpointKey(info.ID))
	if err != nil {
		t.Fatal(err)
	}
	if n := checkpointTreeSize(ck.Data); n >= 256 {
		t.Fatalf("the bucket's checkpoint is of %d events, stored without its tile %s", n, key)
	}

	// The planted object deleted and the DB reopened: the writer writes
	// the tile, stores the checkpoint, and the log verifies.
	if err := st.Store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	dir, opts := db.dir, db.opts
	db.Close()
	db, err = Open(dir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Checkpoint(ctx, "cash")
	if err != nil {
		t.Fatal(err)
	}
	waitBucketCheckpoint(t, st, info.ID, c.Size)
	lg := bucketLog(t, st, info.ID, db.VerifierKey())
	head, _, err := lg.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.VerifyInclusion(head, 100); err != nil || head.N < 256 {
		t.Fatalf("after the planted tile was deleted and the DB reopened: size %d, leaf 100: %v", head.N, err)
	}
}

// TestBucketTilesVerifyWithJavaScript: the JavaScript verifier of the
// command's tests (cmd/annal/testdata/jsverify/verify.mjs, written from
// format.md alone) verifies the bucket's files, copied to a directory:
// the checkpoint, the root its tiles give, the inclusion of 100 leaves
// (the large one from leaf/), the consistency of the nine checkpoints
// before it; with one byte of a level-0 tile changed (leaf 769's hash),
// the inclusion of leaf 768 fails. It needs node
// (skipped without it, failed on CI).
func TestBucketTilesVerifyWithJavaScript(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is required on CI: %v", err)
		}
		t.Skipf("node is not on PATH: %v", err)
	}
	st, db, info := openTiledLedger(t, Shipped)
	defer db.Close()
	notes := tiledLedger(t, db, st, info.ID)
	leaves := []int{0, 255, 256, 299, 1603}
	for i := 1; len(leaves) < 100; i += 13 {
		leaves = append(leaves, i)
	}
	bucket, args := jsTilesArgs(t, bucketTiles(t, st, info.ID), info.ID, db.VerifierKey(), notes, leaves)
	out, err := exec.Command(node, args...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok: tiles: size 1604, 100 leaves included (1 from leaf/), 9 checkpoints consistent") {
		t.Fatalf("verify.mjs: %v\n%s", err, out)
	}
	t.Logf("verify.mjs: %s", out)
	tile := filepath.Join(bucket, "tile", "0", "003")
	b, err := os.ReadFile(tile)
	if err != nil {
		t.Fatal(err)
	}
	b[40] ^= 1
	if err := os.WriteFile(tile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(node, args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL: leaf 768: inclusion path leads to root") {
		t.Fatalf("verify.mjs with tile/0/003 changed: %v\n%s", err, out)
	}
}

// jsTilesArgs writes tiles (tile and leaf keys of ledger id, and their
// bytes) and the newest of notes as checkpoint to a directory, the other
// notes beside it, and returns it and the arguments that run verify.mjs
// on it with key vkey, the older notes and leaves.
func jsTilesArgs(t *testing.T, tiles map[string][]byte, id eventid.LedgerID, vkey string, notes [][]byte, leaves []int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	bucket := filepath.Join(dir, "bucket")
	for key, b := range tiles {
		writeBucketFile(t, bucket, strings.TrimPrefix(key, replica.LedgerPrefix(id)), b)
	}
	writeBucketFile(t, bucket, "checkpoint", notes[len(notes)-1])
	args := []string{"../cmd/annal/testdata/jsverify/verify.mjs", "--key", vkey, "--tiles", bucket}
	for i, n := range notes[:len(notes)-1] {
		name := filepath.Join(dir, fmt.Sprintf("note%d", i))
		if err := os.WriteFile(name, n, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--note", name)
	}
	for _, i := range leaves {
		args = append(args, "--leaf", fmt.Sprint(i))
	}
	return bucket, args
}

// writeBucketFile writes an object's bytes to dir/key.
func writeBucketFile(t *testing.T, dir, key string, b []byte) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTileObjects measures what the Writer's maintainer spends on
// one full level-0 tile and its entry bundle (256 events of about 200
// bytes as lines), made from a closed ledger's tree file and segments:
// the tile's hashes read (tlog.ReadTileData over the tree file) and the
// events' lines read and formatted (ledgerSource.Entries). The PUTs are
// not in it.
func BenchmarkTileObjects(b *testing.B) {
	ctx := context.Background()
	db, err := Open(b.TempDir(), &Options{SegmentSize: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		b.Fatal(err)
	}
	const tiles = 64
	for n := 0; n < tiles*256; n += 512 {
		events := make([]EventInput, 512)
		for i := range events {
			events[i] = EventInput{Entity: "acct", Key: fmt.Sprintf("a%d", i%7), Event: "credited", Data: []byte(fmt.Sprintf(`{"n":%d,"memo":"%s"}`, n+i, strings.Repeat("m", 60)))}
		}
		if _, err := db.Append(ctx, "cash", events, nil); err != nil {
			b.Fatal(err)
		}
	}
	l, err := db.ledger("cash")
	if err != nil {
		b.Fatal(err)
	}
	src := ledgerSource{l}
	b.ResetTimer()
	for i := range b.N {
		k := uint64(i % tiles)
		if _, err := tlog.ReadTileData(tlog.Tile{H: 8, L: 0, N: int64(k), W: 256}, src); err != nil {
			b.Fatal(err)
		}
		lines, err := src.Entries(k*256+1, k*256+256)
		if err != nil || len(lines) != 256 {
			b.Fatal(len(lines), err)
		}
	}
}

// TestBucketBundleEntryLimit: an event whose export line is exactly
// 65,535 bytes (the most an entry bundle's uint16 length holds) is in its
// bundle whole, with no leaf/ object; one of 65,536 bytes has an empty
// entry in the bundle, which fails, and its line under leaf/, which
// verifies as the entry (x/mod's tlog through tilecheck).
func TestBucketBundleEntryLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db, info := openTiledLedger(t, Replicated)
	defer db.Close()
	// The export line's length is the data's plus what the event's other
	// fields take, the same for each of these events but for the ID's
	// and time's digits: each is appended, measured, and appended again
	// resized until it is the length wanted.
	pad := 65000
	leafOf := map[int]int64{}
	for _, want := range []int{replica.MaxBundleEntry, replica.MaxBundleEntry + 1} {
		for try := 0; ; try++ {
			data := fmt.Sprintf(`{"pad":"%s"}`, strings.Repeat("x", pad))
			res, err := db.Append(ctx, "cash", []EventInput{{Entity: "acct", Key: "a", Event: "credited", Data: []byte(data)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			seq := res.FirstSeq
			got := len(exportLines(t, db, "cash")[seq-1])
			if got == want {
				leafOf[want] = int64(seq - 1)
				break
			}
			if try == 5 {
				t.Fatalf("no export line of %d bytes after %d tries (the last %d)", want, try, got)
			}
			pad += want - got
		}
	}
	if _, err := db.Checkpoint(ctx, "cash"); err != nil {
		t.Fatal(err)
	}
	lines := exportLines(t, db, "cash")
	waitBucketCheckpoint(t, st, info.ID, uint64(len(lines)))
	lg := bucketLog(t, st, info.ID, db.VerifierKey())
	head, _, err := lg.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}

	in := leafOf[replica.MaxBundleEntry]
	entry, err := lg.VerifyInclusion(head, in)
	if err != nil || !bytes.Equal(entry, lines[in]) {
		t.Fatalf("leaf %d, of 65,535 bytes: its bundle entry is %d bytes (%v), want the export line", in, len(entry), err)
	}
	if _, err := st.Get(ctx, replica.LeafKey(info.ID, uint64(in))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("leaf %d, of 65,535 bytes, has a leaf/ object too (%v)", in, err)
	}

	out := leafOf[replica.MaxBundleEntry+1]
	if entry, err := lg.VerifyInclusion(head, out); err == nil || len(entry) != 0 {
		t.Fatalf("leaf %d, of 65,536 bytes: its bundle entry is %d bytes and verifies (%v), want an empty entry that fails", out, len(entry), err)
	}
	whole, err := st.Get(ctx, replica.LeafKey(info.ID, uint64(out)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole.Data, lines[out]) {
		t.Fatalf("%s is %d bytes, not the export line", replica.LeafKey(info.ID, uint64(out)), len(whole.Data))
	}
	if err := lg.VerifyEntry(head, out, whole.Data); err != nil {
		t.Fatalf("leaf %d from %s: %v", out, replica.LeafKey(info.ID, uint64(out)), err)
	}
}

// partialTileOf parses a tile or bundle key of a ledger's folder: its
// level (entry bundles: 0, as the level-0 tile they go with), its index,
// and whether it is partial.
func partialTileOf(t *testing.T, key string) (level int, n int64, partial bool) {
	t.Helper()
	_, rest, ok := strings.Cut(key, "/tile/")
	if !ok {
		t.Fatalf("%s is not a tile", key)
	}
	lvl, path, _ := strings.Cut(rest, "/")
	if lvl != "entries" {
		var err error
		if level, err = strconv.Atoi(lvl); err != nil {
			t.Fatalf("%s: level %q: %v", key, lvl, err)
		}
	}
	path, _, partial = strings.Cut(path, ".p/")
	for _, e := range strings.Split(path, "/") {
		d, err := strconv.ParseInt(strings.TrimPrefix(e, "x"), 10, 64)
		if err != nil {
			t.Fatalf("%s: index element %q: %v", key, e, err)
		}
		n = n*1000 + d
	}
	return level, n, partial
}

// collectedTiles is what the bucket's tiles before (a tile key's bytes)
// become once the partial tiles whose full tile a tree of size n has are
// collected.
func collectedTiles(t *testing.T, before map[string][]byte, n int64) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	for key, b := range before {
		if !strings.Contains(key, "/tile/") {
			want[key] = b // leaf/
		} else if l, i, partial := partialTileOf(t, key); !partial || i >= n>>(8*(l+1)) {
			want[key] = b
		}
	}
	return want
}

// TestBucketPartialTilesCollectedAfterGrace: the partial tiles and
// bundles of old checkpoints are deleted once their full tile is in the
// bucket and a checkpoint covering it has been the bucket's for GCGrace
// (by the writer's clock), and no sooner: a new writer catches up with
// what the one before left (from the first tile), then collects as
// tiles fill. The newest checkpoint's partials, the level-1 partials
// whose full tile does not exist, every full tile and bundle and the
// leaf/ object stay, with their bytes. A client holding an old
// checkpoint then verifies inclusion in it and its consistency with the
// next and the newest through the full tiles (tilecheck, x/mod's tlog
// alone), and so does the JavaScript verifier.
func TestBucketPartialTilesCollectedAfterGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newTileStore()
	dir := t.TempDir()
	clock := &settableClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	advance := func(d time.Duration) { clock.set(clock.now().Add(d)) }
	o := replOptions(st, Shipped)
	o.PublishTiles = true
	o.CheckpointInterval = -1
	o.Now = clock.now
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	notes := tiledLedger(t, db, st, info.ID)
	vkey := db.VerifierKey()
	before := bucketTiles(t, st.Store, info.ID)
	// Short of the grace period, rounds later: nothing is deleted.
	advance(o.GCGrace - time.Second)
	time.Sleep(1500 * time.Millisecond) // the maintainer's rounds are a second apart
	if got := bucketTiles(t, st.Store, info.ID); len(got) != len(before) {
		t.Fatalf("%d tiles deleted before the grace period passed", len(before)-len(got))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	partials := 0
	for key := range before {
		if strings.Contains(key, ".p/") {
			partials++
		}
	}
	if partials < 20 {
		t.Fatalf("the bucket holds %d partial tiles after 10 checkpoints", partials)
	}
	for _, k := range c2spTileKeys(1604) {
		if _, ok := before[replica.LedgerPrefix(info.ID)+k]; !ok {
			t.Fatalf("%s is not in the bucket", k)
		}
	}

	// collected waits, the clock moving past the grace period of every
	// checkpoint stored, until the bucket holds what collecting at size
	// n leaves of want, and nothing else.
	collected := func(want map[string][]byte, n int64) map[string][]byte {
		t.Helper()
		want = collectedTiles(t, want, n)
		deadline := time.Now().Add(20 * time.Second)
		for {
			advance(o.GCGrace + time.Second)
			got := bucketTiles(t, st.Store, info.ID)
			if len(got) == len(want) {
				for key, b := range want {
					if !bytes.Equal(got[key], b) {
						t.Fatalf("%s: %d bytes, were %d", key, len(got[key]), len(b))
					}
				}
				return got
			}
			if len(got) < len(want) {
				for key := range want {
					if _, ok := got[key]; !ok {
						t.Errorf("%s was deleted", key)
					}
				}
				t.FailNow()
			}
			if time.Now().After(deadline) {
				var left []string
				for key := range got {
					if _, ok := want[key]; !ok {
						left = append(left, key)
					}
				}
				t.Fatalf("size %d: %d tiles left to collect: %v", n, len(left), left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A new writer: its first checkpoint (1,904 events), held for the
	// grace period, lets it collect what the writer before left.
	if db, err = Open(dir, o); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	step := func(n int) []byte { return appendAndCheckpoint(t, db, st, info.ID, n) }
	notes = append(notes, step(300))
	mid := collected(bucketTiles(t, st.Store, info.ID), 1904)
	// Then, as tiles fill (2,204 events: tile 7 is full), its own: it
	// lists each level from where it stopped, not from the first tile.
	st.mu.Lock()
	st.lists = nil
	st.mu.Unlock()
	notes = append(notes, step(300))
	final := collected(bucketTiles(t, st.Store, info.ID), 2204)
	st.mu.Lock()
	for _, l := range st.lists {
		if rel := strings.TrimPrefix(l[0], replica.LedgerPrefix(info.ID)); rel != "tile/0/" && rel != "tile/entries/" {
			t.Errorf("the writer listed %s after 2,204 events (only tile 7 of level 0 became full)", l[0])
		}
		if l[1] < l[0]+"006" {
			t.Errorf("the writer listed %s from %q, below tile 6, collected before", l[0], l[1])
		}
	}
	if len(st.lists) == 0 || len(st.lists) > 4 {
		t.Errorf("%d Lists of tiles to collect tile 7's partials: %v", len(st.lists), st.lists)
	}
	t.Logf("Lists to collect tile 7's partials: %v", st.lists)
	st.mu.Unlock()
	var gone []string
	for key := range mid {
		if _, ok := final[key]; !ok {
			gone = append(gone, strings.TrimPrefix(key, replica.LedgerPrefix(info.ID)))
		}
	}
	sort.Strings(gone)
	if want := []string{"tile/0/007.p/112", "tile/entries/007.p/112"}; !slices.Equal(gone, want) {
		t.Errorf("the second collection deleted %v, want %v", gone, want)
	}
	t.Logf("%d partial tiles after 10 checkpoints of 1,604 events; after 12 checkpoints of 2,204, collected: %d tile objects left", partials, len(final))

	lg := bucketLog(t, st, info.ID, vkey)
	head, _, err := lg.Checkpoint()
	if err != nil || head.N != 2204 {
		t.Fatalf("the bucket's checkpoint: %d events, %v", head.N, err)
	}
	verifyOlderCheckpoints(t, lg, notes, head)
	if lg.Fallbacks == 0 {
		t.Fatal("no partial tile was read from its full tile")
	}
	t.Logf("tilecheck: 11 old checkpoints verified, %d partial tiles read from full ones", lg.Fallbacks)

	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is required on CI: %v", err)
		}
		t.Logf("node is not on PATH: the JavaScript verifier is not run (%v)", err)
		return
	}
	_, args := jsTilesArgs(t, final, info.ID, vkey, notes, []int{0, 255, 256, 299, 1603, 2203})
	b, err := exec.Command(node, args...).CombinedOutput()
	out := string(b)
	if err != nil || !strings.HasPrefix(out, "ok: tiles: size 2204, 6 leaves included (1 from leaf/), 11 checkpoints consistent") || strings.Contains(out, " 0 partial tiles read") {
		t.Fatalf("verify.mjs: %v\n%s", err, out)
	}
	t.Logf("verify.mjs: %s", out)
}

// TestNoTilesUnlessPublished: without Options.PublishTiles (the
// default), a replicated ledger's bucket holds no tile, entry bundle or
// leaf/ object, whatever it appends and checkpoints; its checkpoint is
// stored as ever.
func TestNoTilesUnlessPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []Replication{Replicated, Shipped} {
		st := newTileStore()
		o := replOptions(st, mode)
		o.CheckpointInterval = -1
		db, err := Open(t.TempDir(), o)
		if err != nil {
			t.Fatal(err)
		}
		info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 600 {
			if _, err := appendOne(ctx, db, "cash", i); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Checkpoint(ctx, "cash"); err != nil {
			t.Fatal(err)
		}
		waitBucketCheckpoint(t, st, info.ID, 601)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if got := bucketTiles(t, st.Store, info.ID); len(got) != 0 {
			t.Fatalf("mode %v without PublishTiles: the bucket holds %d tile objects", mode, len(got))
		}
	}
}
