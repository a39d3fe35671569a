package engine

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/segment"
)

// copyTree copies the files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := copyTreeErr(src, dst); err != nil {
		t.Fatal(err)
	}
}

// copyLiveTree is copyTree of a directory a DB has open: a file that its
// index removes while the copy runs (a compaction's input) makes it copy
// again, into an empty dst, as a crash image is the files of one instant.
func copyLiveTree(t *testing.T, src, dst string) {
	t.Helper()
	for try := 0; ; try++ {
		err := copyTreeErr(src, dst)
		if err == nil {
			return
		}
		if !errors.Is(err, fs.ErrNotExist) || try == 20 {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
	}
}

// copyTreeErr copies the files under src to dst.
func copyTreeErr(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
}

func replaceTree(t *testing.T, dst, src string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	copyTree(t, src, dst)
}

// TestStaleIndexAndMetadata restores older copies of the index and the
// metadata file (as a crash that lost their unsynced writes leaves them):
// Open brings both up to the segments, and every acknowledged event is
// found by every kind of read.
func TestStaleIndexAndMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	old := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	first, err := idsOf(db.Append(ctx, "l", []EventInput{order(1), order(2)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	copyTree(t, filepath.Join(dir, indexDir), filepath.Join(old, indexDir))
	copyTree(t, filepath.Join(dir, metaFile), filepath.Join(old, metaFile))

	db = openTest(t, dir)
	later, err := idsOf(db.Append(ctx, "l", []EventInput{order(3), order(4), order(5)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "newer"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	replaceTree(t, filepath.Join(dir, indexDir), filepath.Join(old, indexDir))
	replaceTree(t, filepath.Join(dir, metaFile), filepath.Join(old, metaFile))

	db = openTest(t, dir)
	defer db.Close()
	if _, err := db.Ledger("newer"); err != nil {
		t.Fatalf("a ledger the stale metadata did not know: %v", err)
	}
	all := append(first, later...)
	for i, id := range all {
		ev, err := db.Get(ctx, id)
		if err != nil || ev.Seq != uint64(i)+2 {
			t.Fatalf("event %d after restoring a stale index: %+v %v", i, ev, err)
		}
	}
	if got := collect(t, db.Replay(ctx, "l", ReplayOptions{Entity: "order"})); len(got) != len(all) {
		t.Fatalf("replay found %d events, want %d", len(got), len(all))
	}
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatal(err)
	}
}

// TestIndexAheadOfSegments restores an older copy of a ledger's segments
// (as a machine crash in None mode may leave them, while the index kept
// more): Open rebuilds the index from the segments, the events the
// segments lost are not found, and the ledger verifies and takes appends.
// The metadata is restored with the segments, as such a crash leaves its
// durable witness: before the appends that were never synced. With the
// metadata of the later clean close, whose witness covers them, the same
// segments are lost acknowledged events: corruption.
func TestIndexAheadOfSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	old := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := idsOf(db.Append(ctx, "l", []EventInput{order(1)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	segs := filepath.Join(dir, ledgersDir, info.ID.String())
	copyTree(t, segs, old)
	oldMeta, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	lost, err := idsOf(db.Append(ctx, "l", []EventInput{order(2), order(3)}, &AppendOptions{Durability: None}))
	if err != nil {
		t.Fatal(err)
	}
	// The machine crash: the index flushed (with these events, but its
	// witness from before their sync), the segments not synced. (Close
	// would write the exact witness to the index too.)
	if err := db.idx.Flush(); err != nil {
		t.Fatal(err)
	}
	crashed := t.TempDir()
	copyLiveTree(t, dir, crashed)
	db.Close()
	replaceTree(t, segs, old)

	witnessed := t.TempDir()
	copyTree(t, dir, witnessed)
	db = openTest(t, witnessed)
	if err := db.Unavailable()["l"]; !errors.Is(err, segment.ErrCorruption) {
		t.Fatalf("segments without events the witness covers: %v, want corruption", err)
	}
	db.Close()

	replaceTree(t, filepath.Join(crashed, ledgersDir, info.ID.String()), old)
	writeFile(t, filepath.Join(crashed, metaFile), oldMeta)
	db = openTest(t, crashed)
	defer db.Close()
	if _, err := db.Get(ctx, kept[0]); err != nil {
		t.Fatal(err)
	}
	for _, id := range lost {
		if _, err := db.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an event the segments lost: %v, want ErrNotFound", err)
		}
	}
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{order(4)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatal(err)
	}
}

// TestUnopenableIndexIsRebuilt damages the index so that Pebble cannot
// open it (its manifest deleted, or its CURRENT marker garbled): Open
// moves it to index.broken, rebuilds it from the segments and says so
// through IndexRebuilt; every event is found and the ledger verifies.
func TestUnopenableIndexIsRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, damage := range []string{"manifest deleted", "marker garbled"} {
		dir := t.TempDir()
		db := openTest(t, dir)
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			t.Fatal(err)
		}
		ids, err := idsOf(db.Append(ctx, "l", []EventInput{order(1), order(2)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if db.IndexRebuilt() != nil {
			t.Fatalf("a new index reported as rebuilt: %v", db.IndexRebuilt())
		}
		db.Close()
		entries, err := os.ReadDir(filepath.Join(dir, indexDir))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			p := filepath.Join(dir, indexDir, e.Name())
			switch {
			case damage == "manifest deleted" && strings.HasPrefix(e.Name(), "MANIFEST-"):
				err = os.Remove(p)
			case damage == "marker garbled" && strings.HasPrefix(e.Name(), "marker.manifest."):
				err = os.Rename(p, filepath.Join(dir, indexDir, "marker.manifest.000001.MANIFEST-999999"))
			default:
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n == 0 {
			t.Fatalf("%s: nothing to damage in %v", damage, entries)
		}
		db = openTest(t, dir)
		if err := db.IndexRebuilt(); err == nil {
			t.Fatalf("%s: IndexRebuilt is nil", damage)
		}
		if _, err := os.Stat(filepath.Join(dir, indexDir+".broken")); err != nil {
			t.Fatalf("%s: the broken index was not kept: %v", damage, err)
		}
		for _, id := range ids {
			if _, err := db.Get(ctx, id); err != nil {
				t.Fatalf("%s: %v", damage, err)
			}
		}
		if _, err := db.Verify(ctx, "l", nil); err != nil {
			t.Fatalf("%s: %v", damage, err)
		}
		db.Close()
	}
}
