package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// watchSegSize: small segments, so that a few appends seal some.
const watchSegSize = 1 << 10

// watchFixture is a writer with ledger "l" of several segments (the last
// active) and a bystander ledger "other".
type watchFixture struct {
	dir, ledgerDir string
	db             *DB
	closed         bool
}

func newWatchFixture(t *testing.T) *watchFixture {
	t.Helper()
	f := &watchFixture{dir: t.TempDir()}
	var err error
	// No background checkpointer: the cases say when a checkpoint is
	// written.
	if f.db, err = Open(f.dir, &Options{SegmentSize: watchSegSize, CheckpointInterval: -1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !f.closed {
			f.db.Close()
		}
	})
	ctx := context.Background()
	info, err := f.db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	f.ledgerDir = f.db.ledgerDir(info.ID)
	for i := 0; len(f.segments(t)) < 3; i++ {
		f.append(t, i)
	}
	return f
}

// append appends event i to "l" and fails the test if it fails.
func (f *watchFixture) append(t *testing.T, i int) eventid.ID {
	t.Helper()
	res, err := f.db.Append(context.Background(), "l", []EventInput{order(i)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.IDs[0]
}

// segments returns the paths of the segment files of "l", in order.
func (f *watchFixture) segments(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(f.ledgerDir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// wantStopped waits past the watch interval since the change and checks
// that no append, to "l" or to another ledger, and no CreateLedger
// succeeds any more, naming what, and that Close reports it.
func (f *watchFixture) wantStopped(t *testing.T, what string) {
	t.Helper()
	// The watch looks at the files at most every watchInterval: past it
	// since the change, the next append looks.
	time.Sleep(watchInterval + 10*time.Millisecond)
	for i, ledger := range []string{"l", "l", "other"} {
		_, err := f.db.Append(context.Background(), ledger, []EventInput{order(i)}, nil)
		if !errors.Is(err, ErrDirectoryChanged) || !strings.Contains(err.Error(), what) {
			t.Fatalf("append %d (to %s) after the change: %v, want ErrDirectoryChanged naming %q", i, ledger, err, what)
		}
	}
	if _, err := f.db.CreateLedger(context.Background(), LedgerSpec{Name: "m"}); !errors.Is(err, ErrDirectoryChanged) {
		t.Fatalf("CreateLedger after the change: %v, want ErrDirectoryChanged", err)
	}
	if _, err := f.db.Checkpoint(context.Background(), "l"); !errors.Is(err, ErrDirectoryChanged) {
		t.Fatalf("Checkpoint after the change: %v, want ErrDirectoryChanged", err)
	}
	f.closed = true
	if err := f.db.Close(); !errors.Is(err, ErrDirectoryChanged) {
		t.Fatalf("Close after the change: %v, want ErrDirectoryChanged", err)
	}
}

// snapshotFiles returns the content of every file under dir, by path.
func snapshotFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWriterStopsWhenLedgerFilesChange: a ledger's own files (its
// directory, its segments sealed and active, NAME, tree, checkpoint)
// removed, moved or replaced under a running writer, by hand or by a
// restore: once the watch interval has passed, no append succeeds (they
// would be acknowledged and lost), and Close writes nothing into what
// was put in their place.
func TestWriterStopsWhenLedgerFilesChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// change changes the files and returns what the error must name,
		// and the file or directory that must not change from then on
		// ("" if none is left): a ledger's directory and segments once
		// they changed; a file put in the place of NAME or checkpoint.
		change func(t *testing.T, f *watchFixture) (what, untouched string)
	}{
		{"active segment removed", func(t *testing.T, f *watchFixture) (string, string) {
			segs := f.segments(t)
			rm(t, segs[len(segs)-1])
			return segs[len(segs)-1], f.ledgerDir
		}},
		{"sealed segment removed", func(t *testing.T, f *watchFixture) (string, string) {
			segs := f.segments(t)
			rm(t, segs[1])
			return segs[1], f.ledgerDir
		}},
		{"every segment removed", func(t *testing.T, f *watchFixture) (string, string) {
			segs := f.segments(t)
			for _, s := range segs {
				rm(t, s)
			}
			return segs[0], f.ledgerDir
		}},
		{"ledger directory removed", func(t *testing.T, f *watchFixture) (string, string) {
			if err := os.RemoveAll(f.ledgerDir); err != nil {
				t.Fatal(err)
			}
			return f.ledgerDir + " was removed", ""
		}},
		{"ledger directory moved", func(t *testing.T, f *watchFixture) (string, string) {
			aside := filepath.Join(f.dir, "aside")
			if err := os.Rename(f.ledgerDir, aside); err != nil {
				t.Fatal(err)
			}
			return f.ledgerDir + " was removed", aside
		}},
		{"ledger directory restored from a copy", func(t *testing.T, f *watchFixture) (string, string) {
			// rm -rf and cp -a of a copy taken a few appends ago.
			backup := filepath.Join(t.TempDir(), "backup")
			copyTree(t, f.ledgerDir, backup)
			for i := range 5 {
				f.append(t, 100+i)
			}
			if err := os.RemoveAll(f.ledgerDir); err != nil {
				t.Fatal(err)
			}
			copyTree(t, backup, f.ledgerDir)
			return f.ledgerDir + " was replaced", f.ledgerDir
		}},
		{"older copy written over the active segment", func(t *testing.T, f *watchFixture) (string, string) {
			active := f.segments(t)[len(f.segments(t))-1]
			older := readFile(t, active)
			f.append(t, 100)
			overwrite(t, active, older) // in place: the same inode
			return active, f.ledgerDir
		}},
		{"older copy written over the active segment, appended to before the check", func(t *testing.T, f *watchFixture) (string, string) {
			active := f.segments(t)[len(f.segments(t))-1]
			if err := f.db.checkDir(true); err != nil {
				t.Fatal(err)
			}
			older := readFile(t, active)
			f.append(t, 100)
			// The check sees the record just written; then the copy
			// goes back, and an append lands past its end before the
			// next check.
			if err := f.db.checkDir(true); err != nil {
				t.Fatal(err)
			}
			overwrite(t, active, older)
			if _, err := f.db.Append(context.Background(), "l", []EventInput{order(101)}, nil); err != nil && !errors.Is(err, ErrDirectoryChanged) {
				t.Fatal(err)
			}
			return active, ""
		}},
		{"older copy written over a sealed segment", func(t *testing.T, f *watchFixture) (string, string) {
			segs := f.segments(t)
			sealed := segs[len(segs)-2]
			b := readFile(t, sealed)
			overwrite(t, sealed, b[:len(b)-100])
			return sealed, f.ledgerDir
		}},
		{"NAME replaced", func(t *testing.T, f *watchFixture) (string, string) {
			path := filepath.Join(f.ledgerDir, nameFile)
			replace(t, path, []byte("l"))
			return path, path
		}},
		{"tree removed", func(t *testing.T, f *watchFixture) (string, string) {
			path := filepath.Join(f.ledgerDir, treeFileName)
			rm(t, path)
			return path, ""
		}},
		{"checkpoint rolled back", func(t *testing.T, f *watchFixture) (string, string) {
			path := filepath.Join(f.ledgerDir, checkpointFileName)
			older := readFile(t, path)
			f.append(t, 100)
			// The writer's own checkpoint replaces the file: not a change.
			if _, err := f.db.Checkpoint(context.Background(), "l"); err != nil {
				t.Fatal(err)
			}
			if err := f.db.checkDir(true); err != nil {
				t.Fatalf("the writer's own checkpoint: %v", err)
			}
			replace(t, path, older)
			return path, path
		}},
		{"checkpoint removed", func(t *testing.T, f *watchFixture) (string, string) {
			path := filepath.Join(f.ledgerDir, checkpointFileName)
			rm(t, path)
			return path, ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newWatchFixture(t)
			// The writer's own rotations are not changes.
			if err := f.db.checkDir(true); err != nil {
				t.Fatal(err)
			}
			what, untouched := tc.change(t, f)
			var before map[string][]byte
			if untouched != "" {
				before = snapshotFiles(t, untouched)
			}
			f.wantStopped(t, what)
			if untouched != "" {
				after := snapshotFiles(t, untouched)
				for p, b := range before {
					if !bytes.Equal(after[p], b) {
						t.Errorf("%s changed after the watch stopped the writer (%d bytes, were %d)", p, len(after[p]), len(b))
					}
				}
				for p := range after {
					if _, ok := before[p]; !ok {
						t.Errorf("%s was created after the watch stopped the writer", p)
					}
				}
			}
		})
	}
}

// TestWriterDoesNotAcknowledgeAfterTheWatchFired: a Sync append whose
// group was written and synced into a segment removed meanwhile, and
// whose watch found it before the append returned, is not acknowledged:
// the watch looks again after the fsync.
func TestWriterDoesNotAcknowledgeAfterTheWatchFired(t *testing.T) {
	t.Parallel()
	f := newWatchFixture(t)
	fired := false
	f.db.test.appended = func() {
		if fired {
			return
		}
		fired = true
		// While the append's group is stored, before it returns: the
		// active segment goes, and another goroutine's check finds it.
		segs := f.segments(t)
		rm(t, segs[len(segs)-1])
		if err := f.db.checkDir(true); !errors.Is(err, ErrDirectoryChanged) {
			t.Errorf("forced check: %v, want ErrDirectoryChanged", err)
		}
	}
	res, err := f.db.Append(context.Background(), "l", []EventInput{order(1)}, &AppendOptions{Durability: Sync})
	if !errors.Is(err, ErrDirectoryChanged) {
		t.Fatalf("append stored in a removed segment once the watch knew: %+v, %v; want ErrDirectoryChanged", res, err)
	}
}

// TestWriterWatchIgnoresItsOwnWrites: rotations, checkpoints and a
// ledger created or imported after Open are the writer's own changes:
// its appends go on.
func TestWriterWatchIgnoresItsOwnWrites(t *testing.T) {
	t.Parallel()
	f := newWatchFixture(t)
	ctx := context.Background()
	if _, err := f.db.CreateLedger(ctx, LedgerSpec{Name: "new"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		n := len(f.segments(t))
		for len(f.segments(t)) == n {
			f.append(t, i)
		}
		if _, err := f.db.Checkpoint(ctx, "l"); err != nil {
			t.Fatal(err)
		}
		if err := f.db.checkDir(true); err != nil {
			t.Fatalf("after rotation %d: %v", i, err)
		}
	}
	if _, err := f.db.Append(ctx, "new", []EventInput{order(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.db.checkDir(true); err != nil {
		t.Fatal(err)
	}
	f.closed = true
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriterOpenedThroughSymlink: a writer opened through a symbolic
// link works in the directory the link named at Open: the link pointed
// elsewhere later sends no file there, and every event is in the first.
func TestWriterOpenedThroughSymlink(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	first, second, link := filepath.Join(base, "first"), filepath.Join(base, "second"), filepath.Join(base, "link")
	for _, d := range []string{first, second} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(first, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := Open(link, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		db.Close()
		t.Fatal(err)
	}
	// The link now names the second directory.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(second, link); err != nil {
		t.Fatal(err)
	}
	var ids []eventid.ID
	for i := range 20 {
		res, err := db.Append(ctx, "l", []EventInput{order(i)}, nil)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
		if i == 10 {
			time.Sleep(watchInterval + 10*time.Millisecond) // a check of the files in between
		}
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "m"}); err != nil {
		db.Close()
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if names, err := os.ReadDir(second); err != nil || len(names) != 0 {
		t.Fatalf("the directory the link was pointed to holds %v (%v), want nothing", names, err)
	}
	db2, err := Open(first, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	for _, id := range ids {
		if _, err := db2.Get(ctx, id); err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
	}
	if _, err := db2.Ledger("m"); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// overwrite writes b over the file at path in place (its inode kept), as
// cp onto an existing file does.
func overwrite(t *testing.T, path string, b []byte) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if now, err := os.Lstat(path); err != nil || !os.SameFile(fi, now) {
		t.Fatalf("%s: not written in place (%v)", path, err)
	}
}

// replace puts a new file with b at path, as an editor or a restore does.
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestWriterStopsWhenLedgerFileOverwrittenInPlace: as
// TestWriterStopsWhenLedgerFilesChange ("tree removed", "NAME replaced",
// "checkpoint rolled back": each by rename or removal), with the file
// written over in place, as `cp OTHER FILE` does (the same inode): another
// ledger's tree file over this one's, another ledger's checkpoint, an
// older checkpoint. The watch sees only a new inode or a missing file, so
// the writer goes on acknowledging: with the tree overwritten, annal
// append acknowledged 134,600 events in 11 s while every checkpoint was
// refused by the signer (not a consistent extension), said only as a
// warning at Close.
func TestWriterStopsWhenLedgerFileOverwrittenInPlace(t *testing.T) {
	t.Parallel()
	for _, file := range []string{treeFileName, checkpointFileName} {
		t.Run(file+" of another ledger", func(t *testing.T) {
			f := newWatchFixture(t)
			if err := f.db.checkDir(true); err != nil {
				t.Fatal(err)
			}
			info, err := f.db.Ledger("other")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(f.ledgerDir, file)
			overwrite(t, path, readFile(t, filepath.Join(f.db.ledgerDir(info.ID), file)))
			f.wantStopped(t, path)
		})
	}
	t.Run("older checkpoint", func(t *testing.T) {
		f := newWatchFixture(t)
		path := filepath.Join(f.ledgerDir, checkpointFileName)
		older := readFile(t, path)
		f.append(t, 100)
		if _, err := f.db.Checkpoint(context.Background(), "l"); err != nil {
			t.Fatal(err)
		}
		if err := f.db.checkDir(true); err != nil {
			t.Fatal(err)
		}
		overwrite(t, path, older)
		f.wantStopped(t, path)
	})
}
