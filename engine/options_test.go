package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOptionRanges: every option with a range is accepted just inside it
// and at its default (zero), and refused just outside it with ErrInvalid
// naming the option and its range, before anything is created.
func TestOptionRanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		set      func(o *Options, v int64)
		lo, hi   int64
		negative bool // whether negative values are checked (durations, sizes)
		rangeMsg string
	}{
		{"SyncInterval", func(o *Options, v int64) { o.SyncInterval = time.Duration(v) }, int64(time.Millisecond), int64(time.Hour), true, "0 (the default, 50ms) or 1ms to 1h0m0s"},
		{"WitnessInterval", func(o *Options, v int64) { o.WitnessInterval = time.Duration(v) }, int64(time.Millisecond), int64(time.Hour), true, "0 (the default, 1s) or 1ms to 1h0m0s"},
		{"CacheSize", func(o *Options, v int64) { o.CacheSize = v }, 8 << 20, 1 << 40, true, "0 (the default, 128 MiB) or 8 MiB (8388608) to 1 TiB (1099511627776)"},
		{"MaxEventSize", func(o *Options, v int64) { o.MaxEventSize = int(v) }, 1 << 10, 16 << 20, true, "0 (the default, 1 MiB) or 1 KiB (1024) to 16 MiB (16777216)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []int64{0, c.lo, c.hi} {
				var o Options
				c.set(&o, v)
				if d := o.withDefaults(); d.check() != nil {
					err := d.check()
					t.Errorf("%s %d: %v, want accepted", c.name, v, err)
				}
			}
			for _, v := range []int64{c.lo - 1, c.hi + 1, -1, -c.lo} {
				var o Options
				c.set(&o, v)
				dir := filepath.Join(t.TempDir(), "new")
				db, err := Open(dir, &o)
				if db != nil {
					db.Close()
				}
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "options: "+c.name+" ") || !strings.Contains(err.Error(), c.rangeMsg) {
					t.Errorf("%s %d: %v, want ErrInvalid naming %s and %q", c.name, v, err, c.name, c.rangeMsg)
				}
				if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("%s %d: Open created %s (%v)", c.name, v, dir, serr)
				}
			}
		})
	}
	// Durability and SegmentSize: the segment log's ranges.
	for _, o := range []Options{{Durability: None + 1}, {Durability: -1}, {SegmentSize: 1 << 30}} {
		d := o.withDefaults()
		if err := d.check(); (o.SegmentSize == 1<<30) != (err == nil) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (&Options{SegmentSize: 1<<30 + 1}).check(); !errors.Is(err, ErrInvalid) {
		t.Errorf("SegmentSize 1 GiB + 1: %v, want ErrInvalid", err)
	}
}

// TestOpenRefusesForeignDirectory: Open refuses a non-empty directory
// with no annal data, naming it and some of what it holds, and creates
// nothing in it; it opens a missing, an empty (or lost+found only) and a
// data directory, a partial one (only some of its files left) included.
func TestOpenRefusesForeignDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	foreign := t.TempDir()
	for _, n := range []string{"notes.txt", "photo.jpg", "a", "b", "c", "d"} {
		writeFile(t, filepath.Join(foreign, n), []byte("mine"))
	}
	db, err := Open(foreign, nil)
	if db != nil {
		db.Close()
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), foreign) || !strings.Contains(err.Error(), `"notes.txt"`) ||
		!strings.Contains(err.Error(), "(6 entries)") {
		t.Fatalf("Open of a foreign directory: %v, want ErrInvalid naming it and its entries", err)
	}
	if names, _ := os.ReadDir(foreign); len(names) != 6 {
		t.Fatalf("Open of a foreign directory left %d entries, want the 6 it had", len(names))
	}
	if ok, err := IsDataDir(foreign); ok || err != nil {
		t.Fatalf("IsDataDir(foreign) = %v, %v", ok, err)
	}

	// Missing, empty, lost+found only: created.
	base := t.TempDir()
	lf := filepath.Join(base, "mnt")
	if err := os.MkdirAll(filepath.Join(lf, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "missing", "deeper"), t.TempDir(), lf} {
		db, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("Open(%s): %v", dir, err)
		}
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if ok, err := IsDataDir(dir); !ok || err != nil {
			t.Fatalf("IsDataDir(%s) after Open = %v, %v", dir, ok, err)
		}
	}

	// A data directory with only some of its files left, and files of
	// someone else's beside them: annal's, it opens and recovers.
	for _, keep := range dataDirMarkers {
		dir := t.TempDir()
		db := openTest(t, dir)
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if keep == indexDir+".broken" {
			if err := os.Rename(filepath.Join(dir, indexDir), filepath.Join(dir, keep)); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range dataDirMarkers {
			if m != keep {
				if err := os.RemoveAll(filepath.Join(dir, m)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if keep == ledgersDir {
			// signing.key is gone: the checkpoint it signed would make
			// Open fail (ErrSigningKeyMissing); removed, the genesis-only
			// ledger is signed at Open with a new key.
			cks, _ := filepath.Glob(filepath.Join(dir, ledgersDir, "*", checkpointFileName))
			for _, c := range cks {
				os.Remove(c)
			}
		}
		if keep != lockFile {
			// LOCK counts only alone: other stores have one too
			// (TestOpenRefusesAnotherStoresDirectory).
			writeFile(t, filepath.Join(dir, "README"), []byte("x"))
		}
		if ok, err := IsDataDir(dir); !ok || err != nil {
			t.Fatalf("only %s left: IsDataDir = %v, %v", keep, ok, err)
		}
		db, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("only %s left: Open: %v", keep, err)
		}
		if _, err := db.Ledger("l"); (keep == ledgersDir) != (err == nil) {
			t.Errorf("only %s left: ledger: %v", keep, err)
		}
		db.Close()
	}
}

// TestOpenRefusesAnotherStoresDirectory: a LOCK file is not annal's alone:
// Pebble, LevelDB and RocksDB directories have one. Opening the index
// directory of a closed DB (a plausible slip: DIR/index for DIR), or
// another store's directory, is refused with ErrInvalid and nothing is
// created in it; a directory holding only LOCK (an Open that crashed
// right after taking it) is still annal's.
func TestOpenRefusesAnotherStoresDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	idx := filepath.Join(dir, indexDir)
	before, _ := os.ReadDir(idx)
	if ok, err := IsDataDir(idx); ok || err != nil {
		t.Errorf("IsDataDir(DIR/index) = %v, %v; want false", ok, err)
	}
	db2, err := Open(idx, nil)
	if err == nil {
		db2.Close()
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(DIR/index): %v, want ErrInvalid", err)
	}
	after, _ := os.ReadDir(idx)
	if len(after) != len(before) {
		var names []string
		for _, e := range after {
			names = append(names, e.Name())
		}
		t.Errorf("Open(DIR/index) changed it: %d entries before, now %v", len(before), names)
	}
	// A LevelDB-like directory.
	ldb := t.TempDir()
	for _, n := range []string{"LOCK", "CURRENT", "LOG", "MANIFEST-000002", "000003.ldb"} {
		if err := os.WriteFile(filepath.Join(ldb, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(ldb, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(a LevelDB directory): %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(filepath.Join(ldb, metaFile)); err == nil {
		t.Errorf("meta.db created in a LevelDB directory")
	}
	// LOCK alone (and lost+found): annal's, opened.
	lone := t.TempDir()
	os.WriteFile(filepath.Join(lone, lockFile), nil, 0o600)
	os.Mkdir(filepath.Join(lone, "lost+found"), 0o700)
	if ok, err := IsDataDir(lone); !ok || err != nil {
		t.Errorf("IsDataDir(LOCK alone) = %v, %v; want true", ok, err)
	}
	db3, err := Open(lone, nil)
	if err != nil {
		t.Fatalf("Open(LOCK alone): %v", err)
	}
	db3.Close()
	names, _ := os.ReadDir(lone)
	if !slices.ContainsFunc(names, func(e os.DirEntry) bool { return e.Name() == metaFile }) {
		t.Errorf("LOCK alone: not initialised")
	}
}
