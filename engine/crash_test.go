package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

var engineCrashRuns = flag.Int("engine-crash-runs", 8, "workloads of TestEngineCrashPoints")

// The crash tests run the engine on a memory file system that keeps track
// of what was synced (vfs.NewCrashableMem) for the segments and the index,
// and the metadata file (bbolt, which needs a real file) in a temporary
// directory. A crash point is a clone of the memory file system with only
// what was synced (or also a random part of what was not, as a disk that
// reorders writes leaves it) and a copy of the metadata file as it was.
// Each is reopened three ways for the index (as the crash left it, deleted,
// an older copy) and three for the metadata (as left, deleted, an older
// copy).

const crashDir = "/data"

// attempt is an event a writer tried to append; its data is unique.
type attempt struct {
	ledger, entity, key, event, data string
	batch                            int // the batch it was in
	batchLen                         int
	writer, n                        int // the writer and its n-th attempt
}

// acked is an acknowledged Sync append.
type acked struct {
	attempt
	id eventid.ID
}

type idemAck struct {
	ledger, key string
	ids         []eventid.ID
	events      []EventInput // what the first append appended
}

// crashState is what the workload has done and had acknowledged.
type crashState struct {
	mu       sync.Mutex
	attempts map[string]attempt // by data
	acked    []acked            // acknowledged Sync appends, in order of acknowledgement
	idem     []idemAck          // acknowledged idempotent Sync appends
	ledgers  []string           // acknowledged creates
	batches  int
}

// engineCrash is one simulated crash.
type engineCrash struct {
	fs      *vfs.MemFS
	meta    []byte // the metadata file at the crash
	acked   []acked
	idem    []idemAck
	ledgers []string
	partial bool // the clone kept a random part of the unsynced data
}

// TestEngineCrashPoints runs concurrent writers over several ledgers
// (Sync appends, single and batched, conditional on a stream, idempotent;
// some None and Interval appends; a ledger created mid-way; small segments
// so that they rotate) and simulates crashes at random moments. After
// reopening each crash, with the index and the metadata as the crash left
// them, deleted, or replaced by an older copy: every acknowledged Sync
// append is there and found by every kind of read, nothing is there that
// no writer wrote, batches are whole, idempotency keys still hold, the
// index and the metadata agree with the segments, Verify passes, and
// appends go on.
func TestEngineCrashPoints(t *testing.T) {
	t.Parallel()
	runs := *engineCrashRuns
	if testing.Short() || raceEnabled {
		runs = 1
	}
	seed := testSeed(t)
	points, partial, found := 0, 0, 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		st, crashes := crashWorkload(t, rng)
		if raceEnabled && len(crashes) > 4 {
			// Each reopen costs seconds under the race detector: the
			// workload runs whole, four of its crashes are checked.
			step := len(crashes) / 4
			for i := range 4 {
				crashes[i] = crashes[i*step]
			}
			crashes = crashes[:4]
		}
		var older *engineCrash
		for i, c := range crashes {
			indexMode, metaMode := i%3, (i/3)%3
			found += checkEngineCrash(t, rng, st, c, older, indexMode, metaMode)
			if t.Failed() {
				t.Fatalf("run %d, crash %d (index mode %d, metadata mode %d, partial %v) failed; seed %d", run, i, indexMode, metaMode, c.partial, seed)
			}
			points++
			if c.partial {
				partial++
			}
			if i%4 == 0 {
				older = c
			}
		}
	}
	t.Logf("%d crash points (%d keeping part of the unsynced data), %d acknowledged Sync events checked after reopen", points, partial, found)
	if points < 4*runs {
		t.Fatalf("only %d crash points in %d runs", points, runs)
	}
}

// crashWorkload runs the writers and takes crash points while they run.
func crashWorkload(t *testing.T, rng *rand.Rand) (*crashState, []*engineCrash) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	metaPath := filepath.Join(t.TempDir(), metaFile)
	opts := &Options{fs: mem, metaPath: metaPath, SegmentSize: 8 << 10, SyncInterval: time.Millisecond}
	db, err := Open(crashDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := &crashState{attempts: map[string]attempt{}}
	for _, name := range []string{"a", "b"} {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
		st.ledgers = append(st.ledgers, name)
	}

	const writers = 4
	opsPerWriter := 150 + rng.IntN(100)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wseed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := crashWriter(ctx, db, st, w, opsPerWriter, rand.New(rand.NewPCG(wseed, 1))); err != nil {
				errs <- fmt.Errorf("writer %d: %w", w, err)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()

	var crashes []*engineCrash
	crng := rand.New(rand.NewPCG(rng.Uint64(), 2))
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		case <-time.After(time.Duration(crng.IntN(1000)) * time.Microsecond):
		}
		crashes = append(crashes, takeCrash(t, db, mem, st, crng))
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return st, crashes
}

// takeCrash simulates a crash now. What was acknowledged is read first,
// so that everything in it was synced before the clone; then the
// metadata, as of its last commit (a bbolt commit is synced: a crash
// keeps it); then the clone of the file system. The metadata is taken
// before the clone so that it knows no ledger the clone lacks, as in a
// real crash, where CreateLedger writes the metadata only after the
// segments are synced.
func takeCrash(t *testing.T, db *DB, mem *vfs.MemFS, st *crashState, rng *rand.Rand) *engineCrash {
	st.mu.Lock()
	c := &engineCrash{acked: slices.Clone(st.acked), idem: slices.Clone(st.idem), ledgers: slices.Clone(st.ledgers)}
	st.mu.Unlock()
	var meta bytes.Buffer
	if err := db.meta.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(&meta)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.meta = meta.Bytes()
	cfg := vfs.CrashCloneCfg{}
	if rng.IntN(2) == 0 {
		c.partial = true
		cfg.UnsyncedDataPercent = 1 + rng.IntN(99)
		cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), 3))
	}
	c.fs = mem.CrashClone(cfg)
	return c
}

// crashWriter is one writer: n operations of random kinds.
func crashWriter(ctx context.Context, db *DB, st *crashState, w, n int, rng *rand.Rand) error {
	ledgers := []string{"a", "b"}
	var condHead = map[string]eventid.ID{} // per ledger, the head of this writer's conditional stream
	var idemKeys []idemAck
	for i := range n {
		if w == 0 && i == n/2 {
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "c", Description: "created mid-way"}); err != nil {
				return err
			}
			st.mu.Lock()
			st.ledgers = append(st.ledgers, "c")
			st.mu.Unlock()
		}
		st.mu.Lock()
		if slices.Contains(st.ledgers, "c") && !slices.Contains(ledgers, "c") {
			ledgers = append(ledgers, "c")
		}
		st.mu.Unlock()
		ledger := ledgers[rng.IntN(len(ledgers))]
		var o AppendOptions
		size := 1
		kind := rng.IntN(10)
		switch {
		case kind < 3:
		case kind < 5:
			size = 2 + rng.IntN(8)
		case kind == 5:
			o.Durability = None
		case kind == 6:
			o.Durability = Interval
			size = 1 + rng.IntN(3)
		case kind == 7:
			o.ExpectedStreams = []ExpectedStream{{Entity: "account", Key: fmt.Sprintf("w%d", w), Head: condHead[ledger]}}
		case kind == 8:
			o.IdempotencyKey = fmt.Sprintf("w%d-%d", w, i)
			size = 1 + rng.IntN(3)
		case kind == 9 && len(idemKeys) > 0:
			// A retry: same key, same ledger, same events, must return
			// the first IDs.
			k := idemKeys[rng.IntN(len(idemKeys))]
			ids, err := idsOf(db.Append(ctx, k.ledger, k.events, &AppendOptions{IdempotencyKey: k.key}))
			if err != nil {
				return err
			}
			if !slices.Equal(ids, k.ids) {
				return fmt.Errorf("retry of %q gave %v, the first append %v", k.key, ids, k.ids)
			}
			continue
		}
		st.mu.Lock()
		st.batches++
		batch := st.batches
		events := make([]EventInput, size)
		atts := make([]attempt, size)
		for j := range events {
			a := attempt{ledger: ledger, entity: "order", key: fmt.Sprintf("w%d-k%d", w, rng.IntN(3)), event: []string{"placed", "paid", "shipped"}[rng.IntN(3)],
				data: fmt.Sprintf(`{"n":%d,"w":%d}`, i*100+j, w), batch: batch, batchLen: size, writer: w, n: i*100 + j}
			if o.ExpectedStreams != nil {
				a.entity, a.key = "account", fmt.Sprintf("w%d", w)
			}
			atts[j] = a
			st.attempts[a.data] = a
			events[j] = EventInput{Entity: a.entity, Key: a.key, Event: a.event, Meta: []byte(`{"by":"crash-test"}`), Data: []byte(a.data)}
		}
		st.mu.Unlock()
		ids, err := idsOf(db.Append(ctx, ledger, events, &o))
		if err != nil {
			return err
		}
		if o.ExpectedStreams != nil {
			condHead[ledger] = ids[len(ids)-1]
		}
		if o.Durability != Sync && o.Durability != 0 {
			continue
		}
		st.mu.Lock()
		for j, id := range ids {
			st.acked = append(st.acked, acked{atts[j], id})
		}
		if o.IdempotencyKey != "" {
			k := idemAck{ledger: ledger, key: o.IdempotencyKey, ids: ids, events: events}
			st.idem = append(st.idem, k)
			idemKeys = append(idemKeys, k)
		}
		st.mu.Unlock()
	}
	return nil
}

// copyMemTree copies the files under dir of src into dst.
func copyMemTree(t *testing.T, src, dst vfs.FS, dir string) {
	t.Helper()
	if err := dst.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	walkMemTree(t, src, dir, func(p string, isDir bool) {
		var err error
		if isDir {
			err = dst.MkdirAll(p, 0o700)
		} else {
			err = vfs.CopyAcrossFS(src, p, dst, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

// walkMemTree calls f with each directory and file under dir of fs, in
// the order of their names, a directory before what it holds.
func walkMemTree(t *testing.T, fs vfs.FS, dir string, f func(path string, isDir bool)) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	for _, name := range names {
		p := fs.PathJoin(dir, name)
		fi, err := fs.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		f(p, fi.IsDir())
		if fi.IsDir() {
			walkMemTree(t, fs, p, f)
		}
	}
}

// checkEngineCrash reopens a crash and checks it; it returns how many
// acknowledged events it found.
func checkEngineCrash(t *testing.T, rng *rand.Rand, st *crashState, c *engineCrash, older *engineCrash, indexMode, metaMode int) int {
	t.Helper()
	ctx := context.Background()
	// Work on a copy, so that an older copy of this crash's index stays
	// available to later crash points.
	fs := vfs.NewMem()
	copyMemTree(t, c.fs, fs, crashDir)
	indexPath := filepath.Join(crashDir, indexDir)
	switch indexMode {
	case 1:
		if err := fs.RemoveAll(indexPath); err != nil {
			t.Fatal(err)
		}
	case 2:
		if older != nil {
			if err := fs.RemoveAll(indexPath); err != nil {
				t.Fatal(err)
			}
			copyMemTree(t, older.fs, fs, indexPath)
		}
	}
	metaPath := filepath.Join(t.TempDir(), metaFile)
	switch {
	case metaMode == 0:
		writeFile(t, metaPath, c.meta)
	case metaMode == 2 && older != nil:
		writeFile(t, metaPath, older.meta)
	}
	opts := &Options{fs: fs, metaPath: metaPath, SegmentSize: 8 << 10}
	db, err := Open(crashDir, opts)
	if err != nil {
		t.Fatalf("open after crash: %v", err)
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("ledgers unavailable after a crash: %v", u)
	}

	// Every ledger as the segments have it, read by a full scan.
	stored := map[string][]Event{}
	for _, info := range db.Ledgers() {
		evs := collect(t, db.Scan(ctx, info.Name, ScanOptions{}))
		stored[info.Name] = evs
		if len(evs) == 0 || evs[0].ID != info.Genesis {
			t.Fatalf("ledger %s: scan does not start with its genesis", info.Name)
		}
		if uint64(len(evs)) != info.Count || evs[len(evs)-1].ID != info.Head {
			t.Fatalf("ledger %s: info says %d events, head %s; the scan finds %d, last %s", info.Name, info.Count, info.Head, len(evs), evs[len(evs)-1].ID)
		}
		// Nothing that no writer wrote; batches whole; each writer's
		// events in the order it wrote them.
		seen := map[int]int{}
		last := map[int]int{}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("ledger %s: event %d has sequence number %d", info.Name, i, e.Seq)
			}
			if i == 0 {
				continue
			}
			a, ok := st.attempts[string(e.Data)]
			if !ok || a.ledger != info.Name || a.entity != e.Entity || a.key != e.Key || a.event != e.Event {
				t.Fatalf("ledger %s #%d: %s/%s/%s %s was never written there", info.Name, e.Seq, e.Entity, e.Key, e.Event, e.Data)
			}
			if n, ok := last[a.writer]; ok && a.n <= n {
				t.Fatalf("ledger %s #%d: writer %d's event %d after its event %d", info.Name, e.Seq, a.writer, a.n, n)
			}
			last[a.writer] = a.n
			seen[a.batch]++
		}
		for b, n := range seen {
			var want int
			for _, a := range st.attempts {
				if a.batch == b {
					want = a.batchLen
					break
				}
			}
			if n != want {
				t.Fatalf("ledger %s: batch %d is there with %d of its %d events", info.Name, b, n, want)
			}
		}
		if _, err := db.Verify(ctx, info.Name, nil); err != nil {
			t.Fatalf("verify %s: %v", info.Name, err)
		}
	}
	for _, name := range c.ledgers {
		if _, ok := stored[name]; !ok {
			t.Fatalf("acknowledged ledger %s is missing", name)
		}
	}

	// Every acknowledged Sync event, by every kind of read.
	for _, a := range c.acked {
		e, err := db.Get(ctx, a.id)
		if err != nil {
			t.Fatalf("acknowledged %s (%s) lost: %v", a.id, a.data, err)
		}
		if string(e.Data) != a.data || e.Ledger != a.ledger {
			t.Fatalf("%s: got %s in %s, want %s in %s", a.id, e.Data, e.Ledger, a.data, a.ledger)
		}
		if s, err := db.GetSeq(ctx, a.ledger, e.Seq); err != nil || s.ID != a.id {
			t.Fatalf("GetSeq(%s, %d) = %s, %v; want %s", a.ledger, e.Seq, s.ID, err, a.id)
		}
		if p, err := db.GetPrefix(ctx, a.id.String()[:20]); err != nil || p.ID != a.id {
			t.Fatalf("GetPrefix(%s) = %s, %v", a.id.String()[:20], p.ID, err)
		}
	}
	// Time scans, replays by stream and by event name, on a sample.
	for k := 0; k < 5 && len(c.acked) > 0; k++ {
		a := c.acked[rng.IntN(len(c.acked))]
		byTime := collect(t, db.Scan(ctx, a.ledger, ScanOptions{From: a.id.Time(), To: a.id.Time()}))
		if len(byTime) != 1 || byTime[0].ID != a.id {
			t.Fatalf("scan of %s's microsecond found %d events", a.id, len(byTime))
		}
		if !containsID(collect(t, db.Replay(ctx, a.ledger, ReplayOptions{Entity: a.entity, Keys: []string{a.key}})), a.id) {
			t.Fatalf("replay of %s/%s misses %s", a.entity, a.key, a.id)
		}
		if !containsID(collect(t, db.Replay(ctx, a.ledger, ReplayOptions{Events: []string{a.event}})), a.id) {
			t.Fatalf("replay of event %s misses %s", a.event, a.id)
		}
	}
	// Idempotency keys hold: a retry appends nothing and returns the IDs;
	// one with other events fails with the first IDs (the digest survived
	// the crash, in the index or computed again from the segments).
	for _, k := range c.idem {
		before, _ := db.Ledger(k.ledger)
		ids, err := idsOf(db.Append(ctx, k.ledger, k.events, &AppendOptions{IdempotencyKey: k.key}))
		if err != nil || !slices.Equal(ids, k.ids) {
			t.Fatalf("retry of %q after the crash: %v, %v; want %v", k.key, ids, err, k.ids)
		}
		_, err = db.Append(ctx, k.ledger, []EventInput{ev("retry", "r", "after-crash")}, &AppendOptions{IdempotencyKey: k.key})
		var me *IdempotencyMismatchError
		if !errors.As(err, &me) || !errors.Is(err, ErrIdempotencyMismatch) || !slices.Equal(me.First.IDs, k.ids) {
			t.Fatalf("retry of %q with other events after the crash: %v; want an IdempotencyMismatchError with %v", k.key, err, k.ids)
		}
		if after, _ := db.Ledger(k.ledger); after.Head != before.Head {
			t.Fatalf("retry of %q appended", k.key)
		}
	}
	// Appends go on, and a conditional append sees the stream heads.
	for name, evs := range stored {
		var head eventid.ID
		for _, e := range evs {
			if e.Entity == "account" && e.Key == "w0" {
				head = e.ID
			}
		}
		if _, err := db.Append(ctx, name, []EventInput{ev("account", "w0", "after-crash")}, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "w0", Head: head}}}); err != nil {
			t.Fatalf("append to %s after the crash: %v", name, err)
		}
	}
	// The metadata agrees with the segments after a close.
	want := map[string]LedgerInfo{}
	for _, info := range db.Ledgers() {
		want[info.Name] = info
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = nil
	checkMetaFile(t, metaPath, want)
	n := 0
	for range c.acked {
		n++
	}
	return n
}

func containsID(evs []Event, id eventid.ID) bool {
	return slices.ContainsFunc(evs, func(e Event) bool { return e.ID == id })
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkMetaFile reads the metadata file and compares it with the ledgers.
func checkMetaFile(t *testing.T, path string, want map[string]LedgerInfo) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	metas, err := meta.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != len(want) {
		t.Fatalf("metadata has %d ledgers, the directory %d", len(metas), len(want))
	}
	for _, m := range metas {
		w, ok := want[m.Name]
		if !ok {
			t.Fatalf("metadata has ledger %q, the directory does not", m.Name)
		}
		if m.ID != w.ID || m.Genesis != w.Genesis || m.Head != w.Head || m.Count != w.Count {
			t.Fatalf("metadata of %s: id %s genesis %s head %s count %d; the ledger: %s %s %s %d",
				m.Name, m.ID, m.Genesis, m.Head, m.Count, w.ID, w.Genesis, w.Head, w.Count)
		}
	}
}

// TestCrashAtEveryOperation simulates a crash before every file-system
// operation of a scripted history: opening a new directory, creating two
// ledgers, appending in Sync, Interval and None mode, single and batched,
// with segment rotation, a conditional and an idempotent append, importing
// an Evently ledger, closing, reopening and appending again. Each crash is
// cloned twice (only the synced data; also a random part of the rest) and
// reopened: the directory opens with every ledger available, whatever was
// acknowledged before the crash is there (a Sync append, or an earlier
// Interval or None append once a later Sync append or Close returned), a
// ledger whose creation or import had not returned is whole or absent (and
// can then be created), no batch is there in part, every stored event is one
// the history appended, and every ledger verifies (segments, and every
// index family against them). A crash point whose image (files, metadata,
// what was acknowledged) is the same as an earlier one's is not reopened
// again: about nine in ten are (a crash before a read, or before a write no
// sync has covered yet, leaves what the last sync left).
func TestCrashAtEveryOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	ffs := faultfs.Wrap(mem)
	metaPath := filepath.Join(t.TempDir(), metaFile)
	rng := rand.New(rand.NewPCG(testSeed(t), 1))

	// What was acknowledged, as of each crash.
	type progress struct {
		ledgers []string
		events  []eventid.ID
	}
	var (
		mu       sync.Mutex
		now      progress
		db       atomic.Pointer[DB]
		lastMeta []byte // the last metadata snapshot, kept while the DB is closed
		points   []*engineCrash
		states   []progress
	)
	ffs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
		mu.Lock()
		defer mu.Unlock()
		c := &engineCrash{}
		if d := db.Load(); d != nil {
			var meta bytes.Buffer
			if err := d.meta.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&meta); return err }); err != nil {
				t.Error(err)
			}
			lastMeta = meta.Bytes()
		}
		c.meta = lastMeta
		for _, partial := range []bool{false, true} {
			cfg := vfs.CrashCloneCfg{}
			if partial {
				cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + rng.IntN(99), RNG: rand.New(rand.NewPCG(rng.Uint64(), 2))}
			}
			cc := *c
			cc.fs, cc.partial = mem.CrashClone(cfg), partial
			points = append(points, &cc)
			states = append(states, progress{slices.Clone(now.ledgers), slices.Clone(now.events)})
		}
		return faultfs.NoFault
	}))
	ack := func(ledger string, ids ...eventid.ID) {
		mu.Lock()
		defer mu.Unlock()
		if ledger != "" {
			now.ledgers = append(now.ledgers, ledger)
		}
		now.events = append(now.events, ids...)
	}

	opts := &Options{fs: ffs, metaPath: metaPath, SegmentSize: 4 << 10, SyncInterval: time.Hour}
	d, err := Open(crashDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	db.Store(d)
	// batches holds every batch appended, by the data of its events.
	batches := map[string]int{} // data -> batch
	batchLen := map[int]int{}
	var unsynced []eventid.ID // None and Interval appends no Sync has covered yet
	appendBatch := func(ledger string, evs []EventInput, o *AppendOptions) []eventid.ID {
		t.Helper()
		mu.Lock()
		b := len(batchLen)
		batchLen[b] = len(evs)
		for _, e := range evs {
			batches[string(e.Data)] = b
		}
		mu.Unlock()
		ids, err := idsOf(d.Append(ctx, ledger, evs, o))
		if err != nil {
			t.Fatal(err)
		}
		if o != nil && (o.Durability == None || o.Durability == Interval) {
			unsynced = append(unsynced, ids...)
			return ids
		}
		// A Sync append syncs the segment: what was written before it is
		// durable too.
		ack("", append(unsynced, ids...)...)
		unsynced = nil
		return ids
	}
	n := 0
	ev := func() EventInput {
		n++
		return EventInput{Entity: "order", Key: fmt.Sprintf("k%d", n%3), Event: "placed", Meta: []byte(`{"by":"every-op"}`), Data: []byte(fmt.Sprintf(`{"n":%d,"pad":"%0100d"}`, n, 0))}
	}
	for _, name := range []string{"a", "b"} {
		info, err := d.CreateLedger(ctx, LedgerSpec{Name: name, Description: "ledger " + name})
		if err != nil {
			t.Fatal(err)
		}
		ack(name, info.Genesis)
		appendBatch(name, []EventInput{ev()}, nil)
		appendBatch(name, []EventInput{ev(), ev(), ev(), ev()}, nil)
		appendBatch(name, []EventInput{ev(), ev()}, &AppendOptions{Durability: None})
		appendBatch(name, []EventInput{ev()}, &AppendOptions{Durability: Interval})
		cond := ev()
		cond.Entity, cond.Key = "account", "acc-1"
		appendBatch(name, []EventInput{cond}, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1"}}})
		appendBatch(name, []EventInput{ev(), ev(), ev()}, &AppendOptions{IdempotencyKey: "idem-" + name})
		// Enough for the 4 KiB segments to rotate.
		for range 3 {
			appendBatch(name, []EventInput{ev(), ev(), ev(), ev(), ev(), ev()}, nil)
		}
	}
	imported, err := d.Import(ctx, bytes.NewReader(vector(t, twoEventFile)), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ack(imported.Name, imported.Head)
	appendBatch("a", []EventInput{ev(), ev()}, &AppendOptions{Durability: None})
	// Close syncs: from here the crash clones keep the last metadata
	// snapshot, an older copy, while the DB is closed.
	db.Store(nil)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ack("", unsynced...)
	unsynced = nil
	if d, err = Open(crashDir, opts); err != nil {
		t.Fatal(err)
	}
	db.Store(d)
	appendBatch("b", []EventInput{ev(), ev(), ev()}, nil)
	ffs.SetInjector(nil)
	db.Store(nil)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// The crash points are independent (each reopens its own clone, with
	// its own copy of the metadata) and wait mostly on the metadata file's
	// fsyncs: a few subtests check them at once, each a run of 4 points in
	// every checkers runs.
	const checkers = 4
	var (
		imagesMu   sync.Mutex
		images     = map[[sha256.Size]byte]bool{}
		duplicates atomic.Int64
	)
	seen := func(key [sha256.Size]byte) bool {
		imagesMu.Lock()
		defer imagesMu.Unlock()
		if images[key] {
			return true
		}
		images[key] = true
		return false
	}
	runSubtests(t, checkers, checkers, func(w int) string { return fmt.Sprintf("points of worker %d", w) }, func(t *testing.T, w int) {
		for i, c := range points {
			if i/4%checkers != w {
				continue
			}
			st := states[i]
			fs := c.fs
			// A point whose image is one already checked (a crash before a
			// read, or before a write that no sync has covered, keeps the
			// same synced files) would prove nothing more.
			if key := crashImageKey(t, fs, c.meta, len(st.ledgers), len(st.events)); seen(key) {
				duplicates.Add(1)
				continue
			}
			mp := filepath.Join(t.TempDir(), metaFile)
			if c.meta != nil {
				writeFile(t, mp, c.meta)
			}
			re, err := Open(crashDir, &Options{fs: fs, metaPath: mp, SegmentSize: 4 << 10})
			if err != nil {
				t.Fatalf("crash %d (partial %v): open: %v", i, c.partial, err)
			}
			if u := re.Unavailable(); len(u) > 0 {
				t.Fatalf("crash %d (partial %v): unavailable: %v", i, c.partial, u)
			}
			for _, name := range st.ledgers {
				if _, err := re.Ledger(name); err != nil {
					t.Fatalf("crash %d: acknowledged ledger %s: %v", i, name, err)
				}
			}
			for _, id := range st.events {
				if _, err := re.Get(ctx, id); err != nil {
					t.Fatalf("crash %d (partial %v): acknowledged event %s: %v", i, c.partial, id, err)
				}
			}
			// No batch in part; nothing that was not appended.
			for _, info := range re.Ledgers() {
				if info.Name == "preview" || info.Name == imported.Name {
					continue
				}
				seen := map[int]int{}
				for e, err := range re.Scan(ctx, info.Name, ScanOptions{}) {
					if err != nil {
						t.Fatalf("crash %d: scan %s: %v", i, info.Name, err)
					}
					if e.Seq == 1 {
						continue
					}
					b, ok := batches[string(e.Data)]
					if !ok {
						t.Fatalf("crash %d: %s #%d %s was never appended", i, info.Name, e.Seq, e.Data)
					}
					seen[b]++
				}
				for b, k := range seen {
					if k != batchLen[b] {
						t.Fatalf("crash %d (partial %v): ledger %s holds %d of the %d events of batch %d", i, c.partial, info.Name, k, batchLen[b], b)
					}
				}
			}
			for _, info := range re.Ledgers() {
				if _, err := re.Verify(ctx, info.Name, nil); err != nil {
					t.Fatalf("crash %d (partial %v): verify %s: %v", i, c.partial, info.Name, err)
				}
			}
			for _, name := range []string{"a", "b"} {
				if _, err := re.Ledger(name); errors.Is(err, ErrLedgerNotFound) {
					if _, err := re.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
						t.Fatalf("crash %d: create %s again: %v", i, name, err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if _, err := re.Verify(ctx, name, nil); err != nil {
					t.Fatalf("crash %d (partial %v): verify %s: %v", i, c.partial, name, err)
				}
			}
			if err := re.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("%d crash points, one before each of %d file-system operations; %d not reopened, their image (files, metadata, what was acknowledged) the same as another's", len(points), len(points)/2, duplicates.Load())
}

// crashImageKey is a digest of what reopening a crash image depends on: the
// names and contents of the files under crashDir on fs, the metadata file,
// and how many ledgers and events had been acknowledged (each a prefix of
// the workload's, so the counts name them).
func crashImageKey(t *testing.T, fs vfs.FS, meta []byte, ledgers, events int) [sha256.Size]byte {
	t.Helper()
	h := sha256.New()
	fmt.Fprintf(h, "meta %d\x00%s\x00ledgers %d events %d\x00", len(meta), meta, ledgers, events)
	if _, err := fs.Stat(crashDir); err != nil {
		return [sha256.Size]byte(h.Sum(nil))
	}
	walkMemTree(t, fs, crashDir, func(path string, isDir bool) {
		if isDir {
			fmt.Fprintf(h, "dir %s\x00", path)
			return
		}
		f, err := fs.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "file %s %d\x00", path, len(b))
		h.Write(b)
	})
	return [sha256.Size]byte(h.Sum(nil))
}
