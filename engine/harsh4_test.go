package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOpenRefusesAnotherStoresDirectory: a LOCK file is not annal's alone:
// Pebble, LevelDB and RocksDB directories have one. Opening the index
// directory of a closed DB (a plausible slip: DIR/index for DIR), or
// another store's directory, is refused with ErrInvalid and nothing is
// created in it; a directory holding only LOCK (an Open that crashed
// right after taking it) is still annal's.
func TestOpenRefusesAnotherStoresDirectory(t *testing.T) {
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
