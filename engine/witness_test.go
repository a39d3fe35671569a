package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// lostTailLedger is a directory with ledger "l" (300 Sync events in 4 KiB
// segments) and ledger "other", closed cleanly.
type lostTailLedger struct {
	dir  string
	id   eventid.LedgerID
	segs int   // segments of l
	mid  int64 // a record boundary in the middle of l's last segment
	size int64 // the size of l's last segment
	// earlyMeta is a copy of the metadata file after the first 10 events
	// of l, before other existed.
	earlyMeta []byte
}

func (lt *lostTailLedger) seg(dir string, n int) string {
	return filepath.Join(dir, ledgersDir, lt.id.String(), fmt.Sprintf("%020d.seg", n))
}

func newLostTailLedger(t *testing.T) *lostTailLedger {
	t.Helper()
	ctx := context.Background()
	lt := &lostTailLedger{dir: t.TempDir()}
	db, err := Open(lt.dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	lt.id = info.ID
	for i := range 299 {
		if _, err := db.Append(ctx, "l", []EventInput{order(i)}, &AppendOptions{Durability: Sync}); err != nil {
			t.Fatal(err)
		}
		if i == 9 {
			var b bytes.Buffer
			if err := db.meta.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&b); return err }); err != nil {
				t.Fatal(err)
			}
			lt.earlyMeta = b.Bytes()
		}
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "other", []EventInput{order(1), order(2)}, nil); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	head := l.log.Head()
	if head.Seq != 300 {
		t.Fatalf("ledger l has %d events, want 300", head.Seq)
	}
	lt.segs = int(head.Loc.Segment)
	var offs []int64
	it := l.log.NewIterator(head.Loc.Segment, segment.FirstOffset)
	for it.Next() {
		offs = append(offs, it.Location().Offset)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(offs) < 3 || lt.segs < 3 {
		t.Fatalf("the last of %d segments holds %d records: too few for the test", lt.segs, len(offs))
	}
	lt.mid, lt.size = offs[len(offs)/2], head.Loc.End()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return lt
}

// hashTree returns the SHA-256 of every file under root, by path.
func hashTree(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(a, b map[string][32]byte) string {
	var d []string
	for p, h := range a {
		if g, ok := b[p]; !ok {
			d = append(d, p+" removed")
		} else if g != h {
			d = append(d, p+" changed")
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p+" added")
		}
	}
	return strings.Join(d, "; ")
}

// lostTailCases are six ways to lose a ledger's tail after a clean close.
func lostTailCases() []struct {
	name   string
	damage func(t *testing.T, lt *lostTailLedger, dir string)
} {
	truncate := func(t *testing.T, path string, size int64) {
		t.Helper()
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
	}
	return []struct {
		name   string
		damage func(t *testing.T, lt *lostTailLedger, dir string)
	}{
		{"last segment removed", func(t *testing.T, lt *lostTailLedger, dir string) {
			if err := os.Remove(lt.seg(dir, lt.segs)); err != nil {
				t.Fatal(err)
			}
		}},
		{"last two segments removed", func(t *testing.T, lt *lostTailLedger, dir string) {
			for _, n := range []int{lt.segs, lt.segs - 1} {
				if err := os.Remove(lt.seg(dir, n)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"last segment truncated to 0 bytes", func(t *testing.T, lt *lostTailLedger, dir string) {
			truncate(t, lt.seg(dir, lt.segs), 0)
		}},
		{"last segment truncated to its header", func(t *testing.T, lt *lostTailLedger, dir string) {
			truncate(t, lt.seg(dir, lt.segs), segment.FirstOffset)
		}},
		{"last segment cut at a record boundary", func(t *testing.T, lt *lostTailLedger, dir string) {
			truncate(t, lt.seg(dir, lt.segs), lt.mid)
		}},
		{"last 40 bytes zeroed", func(t *testing.T, lt *lostTailLedger, dir string) {
			f, err := os.OpenFile(lt.seg(dir, lt.segs), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 40), lt.size-40); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// TestLostTailAfterCleanClose: a ledger of 300
// Sync events in 4 KiB segments, closed cleanly, then its tail lost in
// six ways. Open (with and without FullVerifyOnOpen) refuses the ledger as
// corruption naming it, with what was expected and what was found; the
// other ledger opens and verifies; no byte under ledgers/ changes.
func TestLostTailAfterCleanClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLostTailLedger(t)
	for _, c := range lostTailCases() {
		for _, full := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/full=%v", c.name, full), func(t *testing.T) {
				dir := t.TempDir()
				copyTree(t, lt.dir, dir)
				c.damage(t, lt, dir)
				ledgers := filepath.Join(dir, ledgersDir)
				before := hashTree(t, ledgers)
				db, err := Open(dir, &Options{SegmentSize: 4096, FullVerifyOnOpen: full})
				if err != nil {
					t.Fatal(err)
				}
				bad := db.Unavailable()["l"]
				if bad == nil {
					info, _ := db.Ledger("l")
					db.Close()
					t.Fatalf("ledger l opened with %d events: the lost tail was accepted", info.Count)
				}
				for _, want := range []error{ErrLedgerUnavailable, segment.ErrCorruption} {
					if !errors.Is(bad, want) {
						t.Errorf("error %v does not match %v", bad, want)
					}
				}
				var cerr *segment.CorruptionError
				if !errors.As(bad, &cerr) || cerr.Expected == "" || cerr.Found == "" {
					t.Errorf("error %v is not a CorruptionError with expected and found values", bad)
				}
				for _, want := range []string{lt.id.String(), "acknowledged events lost", "#300"} {
					if !strings.Contains(bad.Error(), want) {
						t.Errorf("error %q does not say %q", bad, want)
					}
				}
				if _, err := db.Verify(ctx, "l", nil); !errors.Is(err, ErrLedgerUnavailable) {
					t.Errorf("Verify of l: %v, want ErrLedgerUnavailable", err)
				}
				if _, err := db.Append(ctx, "l", []EventInput{order(1)}, nil); !errors.Is(err, ErrLedgerUnavailable) {
					t.Errorf("Append to l: %v, want ErrLedgerUnavailable", err)
				}
				// Lost events are not a checkpoint to accept.
				if _, err := db.AcceptLedger(ctx, "l"); !errors.Is(err, ErrInvalid) || !errors.Is(err, segment.ErrCorruption) {
					t.Errorf("AcceptLedger of l: %v, want ErrInvalid wrapping the corruption", err)
				}
				if r, err := db.Verify(ctx, "other", nil); err != nil || r.Events != 3 {
					t.Errorf("Verify of other: %+v, %v", r, err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if d := sameTree(before, hashTree(t, ledgers)); d != "" {
					t.Fatalf("files under ledgers/ changed: %s", d)
				}
				// And again: the metadata kept the witness.
				db, err = Open(dir, &Options{SegmentSize: 4096})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if !errors.Is(db.Unavailable()["l"], segment.ErrCorruption) {
					t.Fatalf("second open: l is %v", db.Unavailable()["l"])
				}
			})
		}
	}
}

// TestLostTailWitnessFromIndex: the index's progress marker carries the
// durable head too, so the lost tails of TestLostTailAfterCleanClose are
// found with the metadata file removed, or replaced by a copy from before
// the appends (an operator's "restore"), as long as the index is there.
func TestLostTailWitnessFromIndex(t *testing.T) {
	t.Parallel()
	lt := newLostTailLedger(t)
	for _, c := range lostTailCases() {
		for _, meta := range []string{"removed", "older"} {
			t.Run(c.name+"/meta "+meta, func(t *testing.T) {
				dir := t.TempDir()
				copyTree(t, lt.dir, dir)
				metaPath := filepath.Join(dir, metaFile)
				switch meta {
				case "removed":
					if err := os.Remove(metaPath); err != nil {
						t.Fatal(err)
					}
				case "older":
					writeFile(t, metaPath, lt.earlyMeta)
				}
				c.damage(t, lt, dir)
				before := hashTree(t, filepath.Join(dir, ledgersDir))
				db, err := Open(dir, &Options{SegmentSize: 4096})
				if err != nil {
					t.Fatal(err)
				}
				var bad error
				for _, err := range db.Unavailable() {
					if strings.Contains(err.Error(), lt.id.String()) {
						bad = err
					}
				}
				db.Close()
				if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
					t.Fatalf("ledger l: %v, want corruption", bad)
				}
				if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
					t.Fatalf("files under ledgers/ changed: %s", d)
				}
			})
		}
	}
}

// TestTornTailAfterWitnessIsCut: after a clean close the metadata's witness
// is the head, and a torn write after it (never acknowledged) is still cut.
func TestTornTailAfterWitnessIsCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLostTailLedger(t)
	last := lt.seg(lt.dir, lt.segs)
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	// Half of a copy of the segment's middle record, after its end: a
	// frame that runs past the end of the file.
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b[lt.mid : lt.mid+30]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := Open(lt.dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) != 0 {
		t.Fatalf("unavailable: %v", u)
	}
	if r, err := db.Verify(ctx, "l", nil); err != nil || r.Events != 300 {
		t.Fatalf("verify: %+v, %v", r, err)
	}
	if fi, err := os.Stat(last); err != nil || fi.Size() != lt.size {
		t.Fatalf("the torn write was not cut: %v, %v (want %d bytes)", fi.Size(), err, lt.size)
	}
}

// The crash-then-lost-tail test runs the test binary as a child that
// appends Sync events, says so, and waits to be killed.
const witnessChildEnv = "ANNAL_WITNESS_CHILD"

// TestWitnessChild is the child of TestCrashThenLostTail; it returns at
// once unless ANNAL_WITNESS_CHILD is set.
func TestWitnessChild(t *testing.T) {
	dir := os.Getenv(witnessChildEnv)
	if dir == "" {
		return
	}
	if err := witnessChild(dir); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	select {} // until killed
}

func witnessChild(dir string) error {
	ctx := context.Background()
	db, err := Open(dir, &Options{SegmentSize: 4096, WitnessInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		return err
	}
	for i := range 200 {
		ids, err := idsOf(db.Append(ctx, "l", []EventInput{order(i)}, &AppendOptions{Durability: Sync}))
		if err != nil {
			return err
		}
		fmt.Println(ids[0])
	}
	fmt.Println("done")
	return nil
}

// crashWitnessChild runs the child on dir, waits until it has appended
// and then for wait, kills it (SIGKILL), and returns the IDs it
// acknowledged.
func crashWitnessChild(t *testing.T, dir string, wait time.Duration) []eventid.ID {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWitnessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), witnessChildEnv+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGKILL)
	var ids []eventid.ID
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "done" {
			break
		}
		id, err := eventid.Parse(sc.Text())
		if err != nil {
			t.Fatalf("child printed %q: %v", sc.Text(), err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 200 {
		t.Fatalf("the child acknowledged %d events (stderr: %s)", len(ids), stderr.String())
	}
	time.Sleep(wait)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestCrashThenLostTail: a writer acknowledges Sync events, lives longer
// than WitnessInterval after them, and is killed (SIGKILL: no Close, so
// the metadata has only what the witness writer wrote). Removing the last
// segment then is corruption at Open; without the removal everything is
// there.
func TestCrashThenLostTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ids := crashWitnessChild(t, dir, 500*time.Millisecond)

	intact := t.TempDir()
	copyTree(t, dir, intact)
	db, err := Open(intact, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := db.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged %s: %v", id, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	segs, err := filepath.Glob(filepath.Join(dir, ledgersDir, "*", "*.seg"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	if err := os.Remove(segs[len(segs)-1]); err != nil { // Glob sorts: the last
		t.Fatal(err)
	}
	before := hashTree(t, filepath.Join(dir, ledgersDir))
	db, err = Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	bad := db.Unavailable()["l"]
	db.Close()
	if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
		t.Fatalf("after the last segment was removed: %v, want corruption", bad)
	}
	if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
		t.Fatalf("files under ledgers/ changed: %s", d)
	}
}

// TestCrashThenTornTail: after a crash, bytes after the witness that are a
// torn write (never acknowledged) are cut as before.
func TestCrashThenTornTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ids := crashWitnessChild(t, dir, 200*time.Millisecond)
	segs, err := filepath.Glob(filepath.Join(dir, ledgersDir, "*", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	// A write that never reached the disk: zeros after the end.
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 700)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) != 0 {
		t.Fatalf("unavailable: %v", u)
	}
	for _, id := range ids {
		if _, err := db.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged %s: %v", id, err)
		}
	}
	// The writer kept zeros ahead of its records (segment zeroFill): the
	// crash left the file longer than its records, and recovery cuts it
	// to their end, the zeros written after it with it.
	after, err := os.Stat(last)
	if err != nil || after.Size() > fi.Size() {
		t.Fatalf("the torn write was not cut: %d bytes, want at most %d (%v)", after.Size(), fi.Size(), err)
	}
	info, err := db.Ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total != info.Bytes {
		t.Fatalf("segments of %d bytes after recovery, their records %d: not cut to the records' end", total, info.Bytes)
	}
}

// TestWitnessWriter: the witness writer writes once an interval while
// appends go on, not at all when nothing is appended, and stops in Close.
func TestWitnessWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{WitnessInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	var last eventid.ID
	for i := range 20 {
		ids, err := idsOf(db.Append(ctx, "l", []EventInput{order(i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		last = ids[0]
		time.Sleep(3 * time.Millisecond)
	}
	// The metadata has the witness within an interval (and a commit).
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := readMetaRecord(t, db.meta, "l")
		if m.Witness.ID == last && m.Witness.Seq == 21 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness is %+v after 10 s, want #21 %s", m.Witness, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The writer counts its transaction just after the commit that the
	// loop above saw: give it that moment.
	time.Sleep(50 * time.Millisecond)
	n := db.witnessWrites.Load()
	if n == 0 {
		t.Fatal("no witness write counted")
	}
	time.Sleep(100 * time.Millisecond)
	if m := db.witnessWrites.Load(); m != n {
		t.Fatalf("%d witness writes while nothing was appended", m-n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// No fsync on the append path: a Sync append is one fsync of its
	// segment, and no metadata transaction runs within the interval.
	db, err = Open(t.TempDir(), &Options{WitnessInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	syncs := l.log.Stats().Syncs
	for i := range 50 {
		if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.log.Stats().Syncs - syncs; n != 50 || db.witnessWrites.Load() != 0 {
		t.Fatalf("50 Sync appends: %d segment fsyncs, %d metadata transactions; want 50 and 0", n, db.witnessWrites.Load())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.TempDir(), &Options{WitnessInterval: -time.Second}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a negative WitnessInterval: %v, want ErrInvalid", err)
	}
}

// TestWitnessWriterRacesClose: Close while appends and the witness writer
// run (go test -race finds a data race; a write after the metadata closed
// fails the Close or panics).
func TestWitnessWriterRacesClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for range 5 {
		db, err := Open(t.TempDir(), &Options{WitnessInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}

func readMetaRecord(t *testing.T, b *bolt.DB, name string) ledgerMeta {
	t.Helper()
	metas, err := meta.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metas {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no metadata record for %q", name)
	return ledgerMeta{}
}

// rawMeta returns the records of the metadata file at path, by key.
func rawMeta(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := map[string][]byte{}
	err = b.View(func(tx *bolt.Tx) error {
		return tx.Bucket(meta.BucketLedgers).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func putRawMeta(t *testing.T, path, key string, v []byte) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(func(tx *bolt.Tx) error { return tx.Bucket(meta.BucketLedgers).Put([]byte(key), v) }); err != nil {
		t.Fatal(err)
	}
}

// legacyJSON is a record as annal wrote it before msgpack.
func legacyJSON(t *testing.T, m ledgerMeta) []byte {
	t.Helper()
	v, err := json.Marshal(struct {
		Name        string           `json:"name"`
		ID          eventid.LedgerID `json:"id"`
		Genesis     eventid.ID       `json:"genesis"`
		Description string           `json:"description"`
		Actor       string           `json:"actor"`
		Created     time.Time        `json:"created"`
		Head        eventid.ID       `json:"head"`
		Count       uint64           `json:"count"`
		LastMicros  uint64           `json:"lastMicros"`
	}{m.Name, m.ID, m.Genesis, m.Description, m.Actor, m.Created, m.Head, m.Count, m.LastMicros})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMetaJSONRewrittenAsMsgpack: a metadata file of the JSON records
// annal wrote before version 1 is read, and Open rewrites every record as
// msgpack (a refused ledger's too); the head and count of a JSON record
// serve as its witness.
func TestMetaJSONRewrittenAsMsgpack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLostTailLedger(t)
	metaPath := filepath.Join(lt.dir, metaFile)
	for key, v := range rawMeta(t, metaPath) {
		if v[0] == '{' {
			t.Fatalf("record %s is JSON: %s", key, v)
		}
		m, err := meta.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		putRawMeta(t, metaPath, key, legacyJSON(t, m))
	}
	intact := t.TempDir()
	copyTree(t, lt.dir, intact)

	// Intact: both open, and the records are msgpack again.
	db, err := Open(intact, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := db.Unavailable(); len(u) != 0 {
		t.Fatalf("unavailable: %v", u)
	}
	info, err := db.Ledger("l")
	if err != nil || info.Count != 300 || info.Description != "" || info.Created.IsZero() {
		t.Fatalf("ledger l: %+v, %v", info, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for key, v := range rawMeta(t, filepath.Join(intact, metaFile)) {
		var r meta.Record
		if v[0] == '{' || msgpack.Unmarshal(v, &r) != nil || r.Version != meta.Version || r.Witness == nil {
			t.Fatalf("record %s was not rewritten as msgpack version %d with a witness: %q", key, meta.Version, v)
		}
	}

	// The tail lost (a cut at a record boundary): the JSON record's count
	// is a witness, and the refused ledger's record is rewritten too.
	if err := os.Truncate(lt.seg(lt.dir, lt.segs), lt.mid); err != nil {
		t.Fatal(err)
	}
	db, err = Open(lt.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := db.Unavailable()["l"]
	if _, err := db.Verify(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "#300") {
		t.Fatalf("a lost tail under a JSON record: %v, want corruption naming #300", bad)
	}
	for key, v := range rawMeta(t, metaPath) {
		m, err := meta.Decode(v)
		if v[0] == '{' || err != nil || m.Witness.Seq == 0 {
			t.Fatalf("record %s: %q, %v", key, v, err)
		}
	}
}

// TestMetaBadRecord: a record that is not msgpack of a known version, or
// whose CRC does not match (a changed witness would refuse an intact
// ledger), is a clear error naming the file and the ledger, not a silent
// rebuild.
func TestMetaBadRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newer, err := msgpack.Marshal(&meta.Record{Version: meta.Version + 1, Name: "l", Genesis: make([]byte, 16), Head: make([]byte, 16)})
	if err != nil {
		t.Fatal(err)
	}
	half := func(v []byte) []byte { return v[:len(v)/2] }
	flip := func(v []byte) []byte { // a bit of the witness's sequence number
		v = bytes.Clone(v)
		i := bytes.Index(v, []byte("\xa3seq\xcf"))
		v[i+12] ^= 0x04
		return v
	}
	for _, c := range []struct {
		name   string
		v      []byte
		change func([]byte) []byte
		msg    string
	}{
		{"garbage", []byte("\xc1\x00garbage"), nil, "unreadable"},
		{"truncated", nil, half, "unreadable"},
		{"witness bit flipped", nil, flip, "CRC mismatch"},
		{"newer version", newer, nil, "newer annal"},
		{"broken JSON", []byte(`{"name":`), nil, "unreadable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			metaPath := filepath.Join(dir, metaFile)
			v := c.v
			if v == nil {
				v = c.change(rawMeta(t, metaPath)[info.ID.String()])
			}
			putRawMeta(t, metaPath, info.ID.String(), v)
			_, err = Open(dir, nil)
			if err == nil {
				t.Fatal("Open accepted the record")
			}
			for _, want := range []string{metaPath, info.ID.String(), c.msg} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
