package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileState is what dirState records of a file: its bytes' hash, size,
// mode and modification time.
type fileState struct {
	sum   [32]byte
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

// dirState returns the state of every file and directory under dir (the
// directories' own modification times included: a file created and
// removed changes its directory's).
func dirState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{size: fi.Size(), mode: fi.Mode(), mtime: fi.ModTime()}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.sum = sha256.Sum256(b)
		} else {
			st.size = 0
		}
		out[p] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameState(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s removed", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed: %+v, was %+v", what, p, a, b)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s created", what, p)
		}
	}
}

// closedLedgers makes a closed data directory with ledgers "shop" (n
// events over several segments) and "other", and returns it with the IDs
// of shop's events and shop's ledger ID.
func closedLedgers(t *testing.T, n int) (string, []eventid.ID, eventid.LedgerID) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	ids := appendEvents(t, db, "shop", n, appendSpec{Batch: batchesOf(10), Options: unsynced})
	if _, err := db.Checkpoint(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, ids, info.ID
}

// TestReadOnlyUseIndexChangesNothing: with UseIndex, a read-only open of
// a directory that no process holds reads the directory's own index
// (no private one), holds the directory until Close (a writer's Open is
// ErrLocked meanwhile), serves Get and Scan, and changes no file, no
// modification time and no directory listing; with CacheDir the next
// open skips the sealed segments the first verified, and a segment
// changed in place since is read again and refused.
func TestReadOnlyUseIndexChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, ids, shop := closedLedgers(t, 300)
	// As a writer killed in its session leaves it: no stamps of what it
	// wrote (TestReadAfterWriterClosedSkipsWhatItWrote has them).
	if err := os.Remove(filepath.Join(dir, ledgersDir, shop.String(), writtenStampsFileName)); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	opts := &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: cache}
	before := dirState(t, dir)

	open := func() *DB {
		t.Helper()
		ro, err := OpenReadOnly(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return ro
	}
	ro := open()
	if ro.idx == nil || ro.idx != ro.ro.wIdx {
		t.Fatal("the read-only DB does not read the directory's own index")
	}
	if _, err := os.Stat(filepath.Join(ro.ro.temp, indexDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a private index was made: %v", err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("a writer's Open while the reader holds the directory: %v, want ErrLocked", err)
	}
	ev, err := ro.Get(ctx, ids[150])
	if err != nil || ev.ID != ids[150] {
		t.Fatalf("Get: %v, %v", ev.ID, err)
	}
	var first []uint64
	for ev, err := range ro.Scan(ctx, "shop", ScanOptions{Limit: 1}) {
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		first = append(first, ev.Seq)
	}
	if len(first) != 1 || first[0] != 1 {
		t.Fatalf("Scan with Limit 1: %v, want [1]", first)
	}
	from, _ := ro.byName["shop"].log.VerifiedFrom()
	if from != 1 {
		t.Fatalf("first open verified from #%d, want #1 (no stamps yet)", from)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	sameState(t, "after the first read-only open", before, dirState(t, dir))
	cached, err := os.ReadFile(ro.readerCachePath(shop))
	if err != nil {
		t.Fatalf("no stamps kept in the cache: %v", err)
	}
	stamps, err := segment.UnmarshalStamps(cached)
	if err != nil || len(stamps) < 2 {
		t.Fatalf("cached stamps: %d, %v", len(stamps), err)
	}

	ro = open()
	from, _ = ro.byName["shop"].log.VerifiedFrom()
	if want := stamps[len(stamps)-1].Last.Seq + 1; from != want {
		t.Errorf("second open verified from #%d, want #%d (after the stamped segments)", from, want)
	}
	if ev, err := ro.Get(ctx, ids[299]); err != nil || ev.ID != ids[299] {
		t.Fatalf("Get after stamps: %v, %v", ev.ID, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	sameState(t, "after the second read-only open", before, dirState(t, dir))

	// A sealed segment damaged in place: its stamp no longer matches.
	seg := filepath.Join(dir, ledgersDir, shop.String(), "00000000000000000002.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-30] ^= 1
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ro = open()
	defer ro.Close()
	if err := ro.Unavailable()["shop"]; !errors.Is(err, segment.ErrCorruption) {
		t.Fatalf("a stamped segment damaged in place: %v, want corruption", err)
	}
}

// TestReadOnlyUseIndexBesideWriter: with UseIndex, a reader beside a
// writer (in this process) builds its private index, as without it, and
// lets the writer append.
func TestReadOnlyUseIndexBesideWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, ids, _ := closedLedgers(t, 50)
	w, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if ro.ro.wIdx != nil || ro.ro.wHold != nil {
		t.Fatal("the reader holds the directory or its index beside a writer")
	}
	if ev, err := ro.Get(ctx, ids[10]); err != nil || ev.ID != ids[10] {
		t.Fatalf("Get: %v, %v", ev.ID, err)
	}
	if _, err := w.Append(ctx, "shop", []EventInput{order(1)}, nil); err != nil {
		t.Fatalf("the writer's append beside the reader: %v", err)
	}
}

// TestReadOnlyCachedIndexExtendedOrRebuilt: beside a writer, a read-only
// DB with CacheDir keeps its index there between opens: the next open
// starts from where the last one stopped and indexes only what the writer
// appended since. When the ledger was replaced (a copy from before put
// back, and other events appended), the kept index's marker is not in the
// segments: the ledger is indexed again, and an event of the discarded
// history is not found.
func TestReadOnlyCachedIndexExtendedOrRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, _, _ := closedLedgers(t, 20)
	backup := filepath.Join(t.TempDir(), "backup")
	copyTree(t, dir, backup)
	cache := t.TempDir()
	read := func(check func(ro *DB)) {
		t.Helper()
		ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
		}()
		if ro.idx == nil || ro.ro.wIdx != nil {
			t.Fatal("beside a writer, the reader does not read an index of its own")
		}
		check(ro)
	}
	w, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := appendEvents(t, w, "shop", 30, appendSpec{From: 100, Batch: batchesOf(5)})
	read(func(ro *DB) {
		if ev, err := ro.Get(ctx, b[29]); err != nil || ev.ID != b[29] {
			t.Fatalf("Get: %v, %v", ev.ID, err)
		}
	})
	more := appendEvents(t, w, "shop", 10, appendSpec{From: 200})
	read(func(ro *DB) {
		l := ro.byName["shop"]
		if got := l.visible().Seq; got != 51 {
			t.Fatalf("the kept index: at the open, indexed to #%d, want #51 (what the last reader indexed)", got)
		}
		if ev, err := ro.Get(ctx, more[9]); err != nil || ev.ID != more[9] {
			t.Fatalf("Get of an event appended since: %v, %v", ev.ID, err)
		}
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// The ledger replaced by its copy from before, and other events
	// appended in place of the discarded ones.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, backup, dir)
	if w, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := appendEvents(t, w, "shop", 40, appendSpec{From: 300, Batch: batchesOf(5)})
	read(func(ro *DB) {
		if got := ro.byName["shop"].visible().Seq; got != 0 {
			t.Fatalf("the kept index of a replaced ledger: taken to #%d, want it indexed again", got)
		}
		if _, err := ro.Get(ctx, b[29]); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of an event of the discarded history: %v, want ErrNotFound", err)
		}
		if ev, err := ro.Get(ctx, c[39]); err != nil || ev.ID != c[39] {
			t.Fatalf("Get after the replacement: %v, %v", ev.ID, err)
		}
	})
}

// TestReadOnlyUseIndexBehindLetsGo: with UseIndex, a directory whose index
// does not cover the segments (an older copy of the index put back, as a
// writer killed before its index caught up leaves it) is read through the
// reader's own index, and the reader lets the directory go at once: a
// writer's Open then succeeds while the reader is open (neither the
// directory's flock nor bbolt's lock on meta.db is kept).
func TestReadOnlyUseIndexBehindLetsGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, _, _ := closedLedgers(t, 20)
	oldIndex := filepath.Join(t.TempDir(), "index")
	copyTree(t, filepath.Join(dir, indexDir), oldIndex)
	w, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	later := appendEvents(t, w, "shop", 10, appendSpec{From: 100})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
		t.Fatal(err)
	}
	copyTree(t, oldIndex, filepath.Join(dir, indexDir))

	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if ro.ro.wHold != nil || ro.ro.wIdx != nil || ro.ro.metaInPlace {
		t.Fatal("the reader holds the directory, its index or meta.db, though the index does not cover the segments")
	}
	if ev, err := ro.Get(ctx, later[9]); err != nil || ev.ID != later[9] {
		t.Fatalf("Get of an event the directory's index lacks: %v, %v", ev.ID, err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := Open(dir, nil)
		if err == nil {
			err = w.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a writer's Open beside the reader: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a writer's Open beside the reader waits")
	}
}

// TestReadAfterWriterClosedSkipsWhatItWrote: a writer's Close stamps the
// segments its session wrote (writtenStampsFileName), so the first
// read-only open after it reads none of them (it verifies from past the
// ledger's head) and serves every event; a stamped segment changed in
// place since is read again and refused; the writer's own Open does not
// take those stamps: it reads the segments, and stamps them as its own.
func TestReadAfterWriterClosedSkipsWhatItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, ids, shop := closedLedgers(t, 300)
	written, err := os.ReadFile(filepath.Join(dir, ledgersDir, shop.String(), writtenStampsFileName))
	if err != nil {
		t.Fatalf("the writer's Close left no stamps of what it wrote: %v", err)
	}
	stamps, err := segment.UnmarshalStamps(written)
	if err != nil || len(stamps) < 3 {
		t.Fatalf("written stamps: %d, %v; want every segment's", len(stamps), err)
	}
	if last := stamps[len(stamps)-1].Last; last.Seq != uint64(len(ids))+1 {
		t.Fatalf("the last written stamp ends at #%d, the ledger at #%d", last.Seq, len(ids)+1)
	}
	opts := &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: t.TempDir()}
	ro, err := OpenReadOnly(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if from, _ := ro.byName["shop"].log.VerifiedFrom(); from != uint64(len(ids))+2 {
		t.Errorf("the first read after the writer closed verified from #%d, want #%d (nothing read)", from, len(ids)+2)
	}
	for _, i := range []int{0, 150, len(ids) - 1} {
		if ev, err := ro.Get(ctx, ids[i]); err != nil || ev.ID != ids[i] {
			t.Fatalf("Get #%d: %v, %v", i, ev.ID, err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	// The writer's Open reads them and stamps them itself.
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sealed := readStamps(vfs.Default, filepath.Join(dir, ledgersDir, shop.String()))
	if len(sealed) != len(stamps)-1 {
		t.Fatalf("the writer's Open stamped %d sealed segments, want %d", len(sealed), len(stamps)-1)
	}

	// A segment changed in place: its stamp no longer matches.
	seg := filepath.Join(dir, ledgersDir, shop.String(), "00000000000000000002.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-30] ^= 1
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err = OpenReadOnly(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Unavailable()["shop"]; !errors.Is(err, segment.ErrCorruption) {
		t.Fatalf("a stamped segment damaged in place: %v, want corruption", err)
	}
}
