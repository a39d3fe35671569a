package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// Crash and kill tests of the Merkle tree and the checkpoints. After each
// simulated crash (a memory file system dropping what was not synced, at
// every file-system operation of a scripted history, or at random moments
// of a concurrent workload) and after each SIGKILL of a child process,
// the directory is reopened and, for every ledger:
//
//   - Verify passes, the tree included;
//   - the tree file holds one leaf per event, and its root at the head is
//     the root of the events' leaves computed apart (tree.Builder over
//     their export lines);
//   - every checkpoint seen before the crash (returned by Checkpoint or
//     LatestCheckpoint, or read from the checkpoint file while the
//     workload ran) covers no more events than survived (a checkpoint
//     never covers events a crash can lose: None and Interval appends
//     included), and is consistent with the ledger after the crash: a
//     consistency proof from ProveConsistency checks with
//     tree.VerifyConsistency, and VerifyCheckpoint passes.
//
// Sizes: ANNAL_TREE_KILLS=<n> sets the kills of TestTreeKillLoop (default
// 3, 2 with -short or -race); -tree-crash-runs the workloads of
// TestTreeCrashRandom (default 2, 1 with -short or -race);
// -tree-crash-every=K makes TestTreeCrashAtEveryOperation check every K-th
// crash point (default 8, from a random one; 1 in the campaign).

// crashSigner signs the checkpoints of the tests on a memory file system
// (which cannot keep a key file owner-only): a fixed Ed25519 key given as
// Options.Signer, as a KMS would be.
var crashSigner = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{14}, ed25519.SeedSize))

var (
	treeCrashRuns  = flag.Int("tree-crash-runs", 2, "workloads of TestTreeCrashRandom")
	treeCrashEvery = flag.Int("tree-crash-every", 8, "TestTreeCrashAtEveryOperation checks every K-th crash point (from a random one); 1 for all")
)

const (
	treeKillChildEnv = "ANNAL_TREE_KILL_CHILD"
	treeKillSeedEnv  = "ANNAL_TREE_KILL_SEED"
	treeKillsEnv     = "ANNAL_TREE_KILLS"
)

// seenCheckpoints collects the signed notes of checkpoints seen, by
// ledger, without duplicates.
type seenCheckpoints struct {
	mu    sync.Mutex
	notes map[string][][]byte
}

func (s *seenCheckpoints) add(ledger string, note []byte) {
	if len(note) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notes == nil {
		s.notes = map[string][][]byte{}
	}
	for _, n := range s.notes[ledger] {
		if bytes.Equal(n, note) {
			return
		}
	}
	s.notes[ledger] = append(s.notes[ledger], bytes.Clone(note))
}

func (s *seenCheckpoints) clone() map[string][][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string][][]byte{}
	for k, v := range s.notes {
		m[k] = slices.Clone(v)
	}
	return m
}

// checkTreeAfterCrash checks every ledger of a reopened DB (see the top
// of the file); notes are the checkpoints seen before the crash.
func checkTreeAfterCrash(t *testing.T, db *DB, notes map[string][][]byte, where string) {
	t.Helper()
	ctx := context.Background()
	v, err := tree.NewVerifier(db.VerifierKey())
	if err != nil {
		t.Fatalf("%s: the DB's key %q: %v", where, db.VerifierKey(), err)
	}
	for _, info := range db.Ledgers() {
		rep, err := db.Verify(ctx, info.Name, nil)
		if err != nil {
			t.Fatalf("%s: verify %s: %v", where, info.Name, err)
		}
		if rep.TreeSize != info.Count {
			t.Fatalf("%s: ledger %s: verify checked a tree of %d leaves, the ledger has %d events", where, info.Name, rep.TreeSize, info.Count)
		}
		root := eventsRoot(t, db, info.Name, info.Count)
		l, err := db.ledger(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		tf, n, err := l.readTree()
		if err != nil || n != info.Count || tf.Size() != info.Count {
			t.Fatalf("%s: ledger %s: the tree file has %d leaves (%v), the ledger %d events", where, info.Name, n, err, info.Count)
		}
		if got, err := tf.Root(info.Count); err != nil || got != root {
			t.Fatalf("%s: ledger %s: the tree file's root at %d is %x (%v), the events give %x", where, info.Name, info.Count, got[:], err, root[:])
		}
		all := notes[info.Name]
		if cp, err := db.LatestCheckpoint(info.Name); err == nil {
			all = append(slices.Clone(all), cp.Note)
		} else if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: ledger %s: latest checkpoint: %v", where, info.Name, err)
		}
		// VerifyCheckpoint reads the events up to the checkpoint's size:
		// for a sample of them (and the latest); the proofs for all.
		step := max(1, len(all)/12)
		for k, note := range all {
			c, err := tree.OpenCheckpoint(note, v)
			if err != nil {
				t.Fatalf("%s: ledger %s: a checkpoint seen before the crash does not verify: %v\n%s", where, info.Name, err, note)
			}
			if c.Size > info.Count {
				t.Fatalf("%s: ledger %s: a checkpoint seen before the crash covers %d events, %d survived it: it covered events that were not durable", where, info.Name, c.Size, info.Count)
			}
			p, err := db.ProveConsistency(ctx, info.Name, c.Size, info.Count)
			if err != nil {
				t.Fatalf("%s: ledger %s: prove consistency %d -> %d: %v", where, info.Name, c.Size, info.Count, err)
			}
			if p.OldRoot != c.Root || p.NewRoot != root {
				t.Fatalf("%s: ledger %s: the consistency proof %d -> %d is between other roots", where, info.Name, c.Size, info.Count)
			}
			if err := tree.VerifyConsistency(c.Size, info.Count, c.Root, root, p.Hashes); err != nil {
				t.Fatalf("%s: ledger %s: the checkpoint of size %d is not consistent with the ledger after the crash: %v", where, info.Name, c.Size, err)
			}
			if k%step != 0 && k != len(all)-1 {
				continue
			}
			if err := db.VerifyCheckpoint(ctx, info.Name, note, ""); err != nil {
				t.Fatalf("%s: ledger %s: verify checkpoint of size %d: %v", where, info.Name, c.Size, err)
			}
		}
	}
}

// memCheckpointNotes reads the checkpoint file of every ledger directory
// of a memory file system (as a reader outside annal would, while it
// runs) and adds what it finds.
func memCheckpointNotes(fs vfs.FS, db *DB, seen *seenCheckpoints) {
	for _, info := range db.Ledgers() {
		f, err := fs.Open(filepath.Join(crashDir, ledgersDir, info.ID.String(), "checkpoint"))
		if err != nil {
			continue
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err == nil {
			seen.add(info.Name, b)
		}
	}
}

// reopenCrash opens a crash clone with the metadata as it was.
func reopenCrash(t *testing.T, c *engineCrash, segmentSize int64) *DB {
	t.Helper()
	mp := filepath.Join(t.TempDir(), metaFile)
	if c.meta != nil {
		writeFile(t, mp, c.meta)
	}
	db, err := Open(crashDir, &Options{fs: c.fs, metaPath: mp, SegmentSize: segmentSize, CheckpointInterval: -1, Signer: crashSigner})
	if err != nil {
		t.Fatalf("open after the crash (partial %v): %v", c.partial, err)
	}
	if u := db.Unavailable(); len(u) > 0 {
		db.Close()
		t.Fatalf("unavailable after the crash: %v", u)
	}
	return db
}

// TestTreeCrashAtEveryOperation simulates a crash before every
// file-system operation of a scripted history (create a ledger, Sync,
// Interval and None appends with segment rotation, checkpoints on request
// with appends between them, Close, which checkpoints, reopen, more
// appends and a checkpoint), each cloned twice (the synced data only;
// also a random part of the rest). A crash inside a checkpoint's write
// (its tree sync, its file's write and rename) is among them. Each is
// reopened and checked (see the top of the file) with the checkpoints
// returned before the crash.
func TestTreeCrashAtEveryOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	ffs := faultfs.Wrap(mem)
	metaPath := filepath.Join(t.TempDir(), metaFile)
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	var (
		mu       sync.Mutex
		db       *DB
		lastMeta []byte
		points   []*engineCrash
		notes    []map[string][][]byte
		seen     seenCheckpoints
	)
	ffs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
		mu.Lock()
		defer mu.Unlock()
		if db != nil {
			var meta bytes.Buffer
			if err := db.meta.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&meta); return err }); err != nil {
				t.Error(err)
			}
			lastMeta = meta.Bytes()
		}
		for _, partial := range []bool{false, true} {
			cfg := vfs.CrashCloneCfg{}
			if partial {
				cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + rng.IntN(99), RNG: rand.New(rand.NewPCG(rng.Uint64(), 2))}
			}
			points = append(points, &engineCrash{fs: mem.CrashClone(cfg), meta: lastMeta, partial: partial})
			notes = append(notes, seen.clone())
		}
		return faultfs.NoFault
	}))
	setDB := func(d *DB) {
		mu.Lock()
		db = d
		mu.Unlock()
	}
	opts := &Options{fs: ffs, metaPath: metaPath, SegmentSize: 4 << 10, SyncInterval: time.Hour, CheckpointInterval: 100 * time.Millisecond, Signer: crashSigner}
	d, err := Open(crashDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	setDB(d)
	n := 0
	ev := func() EventInput {
		n++
		return EventInput{Entity: "order", Key: fmt.Sprintf("k%d", n%3), Event: "placed", Meta: []byte(`{"by":"tree-every-op"}`), Data: []byte(fmt.Sprintf(`{"n":%d,"pad":"%0100d"}`, n, 0))}
	}
	appendOne := func(durability Durability, k int) {
		evs := make([]EventInput, k)
		for i := range evs {
			evs[i] = ev()
		}
		if _, err := d.Append(ctx, "t", evs, &AppendOptions{Durability: durability}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func() {
		cp, err := d.Checkpoint(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		seen.add("t", cp.Note)
	}
	if _, err := d.CreateLedger(ctx, LedgerSpec{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	appendOne(Sync, 1)
	checkpoint()
	appendOne(None, 2)
	appendOne(Interval, 1)
	checkpoint() // covers the None and Interval appends: it syncs them first
	appendOne(Sync, 4)
	for range 4 { // enough for the 4 KiB segments to rotate
		appendOne(Sync, 5)
	}
	appendOne(None, 3)
	checkpoint()
	// Unsynced events while the background checkpointer runs: it must
	// not sign them (a crash loses them), so it signs nothing new.
	appendOne(None, 2)
	appendOne(Interval, 1)
	time.Sleep(250 * time.Millisecond)
	if cp, err := d.LatestCheckpoint("t"); err == nil {
		seen.add("t", cp.Note)
	}
	appendOne(Sync, 1) // now they are durable: the checkpointer signs them
	time.Sleep(250 * time.Millisecond)
	if cp, err := d.LatestCheckpoint("t"); err == nil {
		seen.add("t", cp.Note)
	}
	appendOne(None, 2) // unsynced when Close begins: Close syncs, then checkpoints
	setDB(nil)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(crashDir, opts); err != nil {
		t.Fatal(err)
	}
	setDB(d)
	if cp, err := d.LatestCheckpoint("t"); err == nil {
		seen.add("t", cp.Note)
	} else {
		t.Fatalf("the checkpoint of Close, after a reopen: %v", err)
	}
	appendOne(Interval, 2)
	checkpoint()
	appendOne(Sync, 1)
	ffs.SetInjector(nil)
	setDB(nil)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	every := *treeCrashEvery
	if raceEnabled {
		every *= 4 // each reopen is slow under the race detector
	}
	offset := rng.IntN(every) // over many runs, every point
	checked := 0
	count := func(m map[string][][]byte) (n int) {
		for _, v := range m {
			n += len(v)
		}
		return n
	}
	for i, c := range points {
		// Every every-th point, and the first two after each checkpoint
		// seen (the moments a checkpoint that covers too much would be
		// caught, before later syncs make it true).
		fresh := i >= 2 && count(notes[i]) != count(notes[i-2])
		if i%every != offset && !fresh {
			continue
		}
		re := reopenCrash(t, c, 4<<10)
		checkTreeAfterCrash(t, re, notes[i], fmt.Sprintf("crash %d (partial %v)", i, c.partial))
		if err := re.Close(); err != nil {
			t.Fatal(err)
		}
		checked++
	}
	t.Logf("%d crash points, one before each of %d file-system operations; %d checked (every %d-th)", len(points), len(points)/2, checked, every)
}

// TestTreeCrashRandom runs concurrent writers (Sync, None and Interval
// appends, single and batched, small segments) on two ledgers, with a
// goroutine issuing checkpoints on request, the background checkpointer
// every 100 ms and a reader of the checkpoint files, and
// simulates crashes at random moments; each is reopened and checked (see
// the top of the file) with every checkpoint seen before it.
func TestTreeCrashRandom(t *testing.T) {
	t.Parallel()
	runs := *treeCrashRuns
	if testing.Short() || raceEnabled {
		runs = 1
	}
	seed := testSeed(t)
	points := 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		crashes, notes := treeCrashWorkload(t, rng)
		for i, c := range crashes {
			if raceEnabled && i%3 != 0 {
				continue
			}
			re := reopenCrash(t, c, 8<<10)
			checkTreeAfterCrash(t, re, notes[i], fmt.Sprintf("run %d crash %d (partial %v), seed %d", run, i, c.partial, seed))
			if err := re.Close(); err != nil {
				t.Fatal(err)
			}
			points++
		}
	}
	t.Logf("%d crash points checked", points)
}

func treeCrashWorkload(t *testing.T, rng *rand.Rand) ([]*engineCrash, []map[string][][]byte) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	metaPath := filepath.Join(t.TempDir(), metaFile)
	db, err := Open(crashDir, &Options{fs: mem, metaPath: metaPath, SegmentSize: 8 << 10, SyncInterval: 50 * time.Millisecond, CheckpointInterval: 100 * time.Millisecond, Signer: crashSigner})
	if err != nil {
		t.Fatal(err)
	}
	ledgers := []string{"a", "b"}
	for _, name := range ledgers {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	var seen seenCheckpoints
	done := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 3 {
		wseed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(wseed, 1))
			for i := range 150 {
				ledger := ledgers[r.IntN(2)]
				k := 1 + r.IntN(4)
				evs := make([]EventInput, k)
				for j := range evs {
					evs[j] = EventInput{Entity: "order", Key: fmt.Sprintf("w%d", w), Event: "placed", Data: []byte(fmt.Sprintf(`{"w":%d,"i":%d,"j":%d}`, w, i, j))}
				}
				// Mostly unsynced appends: the background checkpointer
				// runs while events are not durable yet.
				d := []Durability{Sync, None, None, Interval, Interval}[r.IntN(5)]
				if _, err := db.Append(ctx, ledger, evs, &AppendOptions{Durability: d}); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(r.IntN(4)) * time.Millisecond)
				if r.IntN(25) == 0 {
					cp, err := db.Checkpoint(ctx, ledger)
					if err != nil {
						errs <- err
						return
					}
					seen.add(ledger, cp.Note)
				}
			}
		}()
	}
	// A reader of the checkpoints, as a client polling them.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Microsecond):
			}
			memCheckpointNotes(mem, db, &seen)
			for _, name := range ledgers {
				if cp, err := db.LatestCheckpoint(name); err == nil {
					seen.add(name, cp.Note)
				}
			}
		}
	}()
	go func() { wg.Wait(); close(done) }()

	var crashes []*engineCrash
	var notes []map[string][][]byte
	st := &crashState{attempts: map[string]attempt{}}
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		case <-time.After(time.Duration(5+rng.IntN(40)) * time.Millisecond):
		}
		// What was seen is taken before the clone: all of it was seen
		// before the crash.
		n := seen.clone()
		crashes = append(crashes, takeCrash(t, db, mem, st, rng))
		notes = append(notes, n)
	}
	<-readerDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return crashes, notes
}

// TestTreeKillChild is the child process of TestTreeKillLoop; it returns
// at once unless ANNAL_TREE_KILL_CHILD is set (then it appends and
// checkpoints until it is killed, and never returns).
func TestTreeKillChild(t *testing.T) {
	dir := os.Getenv(treeKillChildEnv)
	if dir == "" {
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv(treeKillSeedEnv), 10, 64)
	if err := treeKillChild(dir, seed); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// treeKillChild appends (Sync, None, Interval) to a ledger from two
// goroutines, with the background checkpointer every 100 ms and checkpoints
// on request; after each checkpoint returned it writes "cp <base64 of the
// note>" on one line.
func treeKillChild(dir string, seed uint64) error {
	ctx := context.Background()
	db, err := Open(dir, &Options{SegmentSize: 64 << 10, SyncInterval: 5 * time.Millisecond, CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := db.Ledger("t"); err != nil {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "t"}); err != nil {
			return err
		}
	}
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	report := func(note []byte) {
		outMu.Lock()
		fmt.Fprintf(out, "cp %s\n", base64.StdEncoding.EncodeToString(note))
		out.Flush()
		outMu.Unlock()
	}
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ; i++ {
				n := 1 + rng.IntN(6)
				evs := make([]EventInput, n)
				for j := range evs {
					evs[j] = EventInput{Entity: "order", Key: fmt.Sprintf("k%d", rng.IntN(20)), Event: "placed", Data: []byte(fmt.Sprintf(`{"seed":"%d","w":%d,"i":%d,"j":%d}`, seed, w, i, j))}
				}
				d := []Durability{Sync, None, Interval}[rng.IntN(3)]
				if _, err := db.Append(ctx, "t", evs, &AppendOptions{Durability: d}); err != nil {
					errs <- err
					return
				}
				if rng.IntN(10) == 0 {
					cp, err := db.Checkpoint(ctx, "t")
					if err != nil {
						errs <- err
						return
					}
					report(cp.Note)
				} else if cp, err := db.LatestCheckpoint("t"); err == nil && rng.IntN(5) == 0 {
					report(cp.Note)
				}
			}
		}()
	}
	return <-errs
}

// TestTreeKillLoop kills the child again and again on one directory and
// checks it after each kill with every checkpoint the child returned in
// this and earlier lives.
func TestTreeKillLoop(t *testing.T) {
	kills := killCount(t, treeKillsEnv, 3, 2)
	seed := testSeed(t)
	t.Logf("%d kills", kills)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	var seen seenCheckpoints
	total := 0
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTreeKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), treeKillChildEnv+"="+dir, fmt.Sprintf("%s=%d", treeKillSeedEnv, rng.Uint64()))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(150+rng.IntN(350)) * time.Millisecond
		timer := time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			b64note, ok := strings.CutPrefix(sc.Text(), "cp ")
			if !ok {
				continue
			}
			note, err := base64.StdEncoding.DecodeString(b64note)
			if err != nil {
				continue // a line cut by the kill
			}
			seen.add("t", note)
			total++
		}
		err = cmd.Wait()
		timer.Stop()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: the child ended by itself: %v\n%s", k, err, stderr.String())
		}
		db, err := Open(dir, &Options{CheckpointInterval: -1})
		if err != nil {
			t.Fatalf("kill %d: open: %v", k, err)
		}
		checkTreeAfterCrash(t, db, seen.clone(), fmt.Sprintf("kill %d, seed %d", k, seed))
		if err := db.Close(); err != nil {
			t.Fatalf("kill %d: close: %v", k, err)
		}
	}
	t.Logf("%d kills, %d checkpoints reported by the child (%d distinct), all consistent with the ledger after each kill", kills, total, len(seen.clone()["t"]))
}
