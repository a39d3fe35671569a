package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReaderCachePruned: the reader's caches (CacheDir) of a data
// directory that was deleted, or that no read-only open used for
// readerCacheIdle, are removed by a later read-only open of another
// directory, at most once every readerPruneEvery; an index another
// reader has open is kept, and so is the cache of the directory being
// opened. A directory whose cache was removed reads as before.
func TestReaderCachePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cache := t.TempDir()
	a, aIDs, _ := closedLedgers(t, 10)
	b, _, _ := closedLedgers(t, 10)
	c, _, _ := closedLedgers(t, 10)
	key := func(dir string) string {
		k, _ := (&DB{dir: dir}).readerCacheKey()
		return k
	}
	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(cache, readerIndexSub, key(dir)))
		return err == nil
	}
	readBeside := func(dir string) *DB {
		t.Helper()
		ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), UseIndex: true, CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		return ro
	}
	closeAll := func(dbs ...*DB) {
		t.Helper()
		for _, db := range dbs {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Readers beside writers keep an index of a, b and c in the cache.
	wa, err := Open(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := Open(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := Open(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeAll(readBeside(a), readBeside(b), wb)
	if !has(a) || !has(b) {
		t.Fatalf("the cache holds a's index %v, b's %v: want both", has(a), has(b))
	}
	mark := filepath.Join(cache, readerPruneMark)
	age := func(p string, d time.Duration) {
		t.Helper()
		then := time.Now().Add(-d)
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
	}

	// b deleted: its cache stays until a prune is due.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	closeAll(readBeside(c))
	if !has(b) {
		t.Fatal("a prune ran within readerPruneEvery of the last")
	}
	// Due: b's cache goes; a's, unused for longer than readerCacheIdle
	// but open in a reader, stays.
	roA := readBeside(a)
	age(filepath.Join(cache, readerDirsSub, key(a)), readerCacheIdle+time.Hour)
	age(mark, readerPruneEvery+time.Minute)
	closeAll(readBeside(c))
	if has(b) {
		t.Fatal("the cache of a deleted data directory was kept")
	}
	for _, sub := range []string{readerDirsSub, readerCacheSub} {
		if _, err := os.Stat(filepath.Join(cache, sub, key(b))); !os.IsNotExist(err) {
			t.Fatalf("%s/ of a deleted data directory: %v, want it removed", sub, err)
		}
	}
	if !has(a) {
		t.Fatal("an index a reader has open was removed")
	}
	if !has(c) {
		t.Fatal("the cache of the directory being opened was removed")
	}
	closeAll(roA)
	// a idle, closed: removed at the next due prune, and read again as
	// before.
	age(mark, readerPruneEvery+time.Minute)
	closeAll(readBeside(c))
	if has(a) {
		t.Fatal("the cache of a directory unused for readerCacheIdle was kept")
	}
	ro := readBeside(a)
	if ev, err := ro.Get(ctx, aIDs[5]); err != nil || ev.ID != aIDs[5] {
		t.Fatalf("Get after the cache was pruned: %v, %v", ev.ID, err)
	}
	closeAll(ro, wa, wc)
}
