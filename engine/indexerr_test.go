package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIndexDiskFullNoHang: the index is removed and the disk is full, so
// the index that Open rebuilds from the segments cannot be flushed. Pebble
// holds writes back until its memtables are flushed and retries a failed
// flush for ever: Open (whose re-indexing fills several memtables, with a
// small cache) and Close (which flushes) used to wait until space came
// back. Each must return, within a bound, an error that matches
// syscall.ENOSPC; once space is back, everything is there.
func TestIndexDiskFullNoHang(t *testing.T) {
	const batches, perBatch = 120, 1000
	// The ledger each case reopens, built once, the first time a case
	// needs it (a case skips where it cannot mount): its index is removed,
	// so the cache it was built with does not matter.
	var built string
	parent := t
	ledger := func(t *testing.T) string {
		t.Helper()
		if built != "" {
			return built
		}
		ctx := context.Background()
		dir := filepath.Join(parent.TempDir(), "data") // kept for the next case
		db, err := Open(dir, &Options{Durability: None})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "big"}); err != nil {
			t.Fatal(err)
		}
		for b := range batches {
			evs := make([]EventInput, perBatch)
			for i := range evs {
				evs[i] = EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", b*perBatch+i), Event: "placed",
					Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"n":%d}`, b*perBatch+i))}
			}
			if _, err := db.Append(ctx, "big", evs, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
			t.Fatal(err)
		}
		built = dir
		return built
	}
	for _, tc := range []struct {
		name  string
		cache int64
	}{
		{"memtables of 4 MiB, rebuilt in Open", 16 << 20},
		{"default cache, flushed in Close", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := faultfs.MountTmpfs(t, "96m")
			ctx := context.Background()
			dir := filepath.Join(mnt, "data")
			copyTree(t, ledger(t), dir)
			// Full, but for 1 MiB: enough for Pebble to open, not to flush.
			fill(t, filepath.Join(mnt, "slack"), 1<<20)
			faultfs.FillUp(t, filepath.Join(mnt, "filler"))
			if err := os.Remove(filepath.Join(mnt, "slack")); err != nil {
				t.Fatal(err)
			}

			type result struct {
				openErr, closeErr error
				unavailable       map[string]error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				db, err := Open(dir, &Options{CacheSize: tc.cache})
				if err != nil {
					r.openErr = err
					done <- r
					return
				}
				r.unavailable = db.Unavailable()
				db.Ledgers()
				r.closeErr = db.Close()
				done <- r
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(90 * time.Second):
				buf := make([]byte, 1<<20)
				t.Fatalf("Open and Close on the full disk did not return in 90 s; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			}
			t.Logf("open: %v; unavailable: %v; close: %v", r.openErr, r.unavailable, r.closeErr)
			var errs []error
			if r.openErr != nil {
				errs = append(errs, r.openErr)
			}
			for _, err := range r.unavailable {
				errs = append(errs, err)
			}
			if r.closeErr != nil {
				errs = append(errs, r.closeErr)
			}
			if err := errors.Join(errs...); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Open and Close on the full disk: %v; want an error matching syscall.ENOSPC", err)
			}
			if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
				t.Fatal(err)
			}
			// The call given up on was left inside Pebble, which the
			// Index closes when it returns: now that space is back.
			lockPath := filepath.Join(dir, indexDir, "LOCK")
			deadline := time.Now().Add(60 * time.Second)
			for {
				l, err := vfs.Default.Lock(lockPath)
				if err == nil {
					l.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the index is still locked 60 s after space came back: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			db2, err := Open(dir, &Options{CacheSize: tc.cache})
			if err != nil {
				t.Fatalf("reopen once space is back: %v", err)
			}
			defer db2.Close()
			if u := db2.Unavailable(); len(u) > 0 {
				t.Fatalf("unavailable after reopen: %v", u)
			}
			info, err := db2.Ledger("big")
			if err != nil {
				t.Fatal(err)
			}
			if info.Count != batches*perBatch+1 {
				t.Fatalf("after reopen the ledger has %d events, want %d", info.Count, batches*perBatch+1)
			}
			if _, err := db2.Verify(ctx, "big", nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIndexNotWritable: the index directory is on a read-only mount (a
// bind mount of it, remounted read-only: what mode 0500 does to a user
// other than root, which permission bits cannot do to root). Open used to
// take the failure for damage and try to move the index aside (or, with
// mode 0500, to end in Pebble's "panic: MANIFEST create failed"); it must
// return an error that says the index is not writable, and change
// nothing. (index.TestOpenNotWritable covers EACCES and EPERM on every
// machine.)
func TestIndexNotWritable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, indexDir)
	if out, err := exec.Command("mount", "--bind", idx, idx).CombinedOutput(); err != nil {
		t.Skipf("not root / mount not permitted: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", idx).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", idx, err, out)
		}
	})
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", idx).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	before, _ := os.ReadDir(idx)
	db, err = Open(dir, nil)
	if err == nil {
		db.Close()
		t.Fatal("Open with a read-only index directory succeeded")
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, index.ErrNotWritable) || !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), idx+" is not writable") {
		t.Fatalf("Open: %v; want index.ErrNotWritable, EROFS, and %q", err, idx+" is not writable")
	}
	if _, err := os.Stat(filepath.Join(dir, indexDir+".broken")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open moved the index aside: %v", err)
	}
	if after, _ := os.ReadDir(idx); len(after) != len(before) {
		t.Fatalf("the index directory changed: %d entries, %d before", len(after), len(before))
	}
}

// TestVerifyIndexDamaged: a damaged block in one of the index's tables,
// which Open does not read, is found by Verify. The error used to be
// Pebble's (a stack of lines and "<corruption detail carrier>") with a
// report of 0 events, and no word that the segments are intact or that
// the index can be rebuilt. It must match ErrIndexDamaged, be one line,
// say the events are intact and how to rebuild, and come with the count
// of verified events; Options.RebuildIndex then rebuilds the index, with
// progress, and Verify passes.
func TestVerifyIndexDamaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	damageIndexTable(t, dir, "acct")
	const n = 20000 // the events damageIndexTable appends
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.IndexRebuilt(); err != nil {
		t.Fatalf("Open found the damage (%v): the test must damage what only Verify reads", err)
	}
	rep, err := db.Verify(ctx, "acct", nil)
	t.Logf("Verify: %v", err)
	switch {
	case err == nil:
		t.Fatal("Verify passed a damaged index")
	case !errors.Is(err, ErrIndexDamaged):
		t.Fatalf("Verify: %v; want ErrIndexDamaged", err)
	case errors.Is(err, segment.ErrCorruption) && !strings.Contains(err.Error(), "disagrees"):
		t.Errorf("Verify: %v: a damaged index is not a damaged segment", err)
	case strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "detail carrier"):
		t.Errorf("Verify's error is not one line: %q", err)
	}
	for _, want := range []string{"ledger acct", "the events in the segments are intact (20001 verified)", "RebuildIndex", "annal reindex"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Verify: %q does not say %q", err, want)
		}
	}
	if rep.Events != n+1 {
		t.Errorf("Verify's report: %d events, want the %d the segments hold", rep.Events, n+1)
	}
	// Reads that reach the damage say the index is damaged and can be
	// rebuilt, in one line.
	var readErrs []error
	for what, seq := range map[string]func(func(Event, error) bool){
		"Scan reverse":  db.Scan(ctx, "acct", ScanOptions{Reverse: true}),
		"Replay entity": db.Replay(ctx, "acct", ReplayOptions{Entity: "order"}),
		"Replay events": db.Replay(ctx, "acct", ReplayOptions{Events: []string{"placed"}}),
	} {
		for _, err := range seq {
			if err != nil {
				t.Logf("%s: %v", what, err)
				readErrs = append(readErrs, err)
				break
			}
		}
	}
	for seq := uint64(1); seq <= n+1; seq++ {
		if _, err := db.GetSeq(ctx, "acct", seq); err != nil {
			t.Logf("GetSeq %d: %v", seq, err)
			readErrs = append(readErrs, err)
			break
		}
	}
	for _, err := range db.idx.Entity(ctx, db.byName["acct"].meta.ID, []byte("order"), 0) {
		if err != nil {
			t.Logf("index streams: %v", err)
			readErrs = append(readErrs, err)
			break
		}
	}
	if len(readErrs) == 0 {
		t.Error("no read reached the damaged block")
	}
	for _, err := range readErrs {
		if !errors.Is(err, index.ErrCorruption) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "can be rebuilt") {
			t.Errorf("a read of the damaged index: %q; want one line matching index.ErrCorruption that says it can be rebuilt", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Logf("Close: %v", err)
	}

	var calls []int64
	db, err = Open(dir, &Options{RebuildIndex: true, Progress: func(what string, done, total int64) {
		if what != "index ledger acct" || total != n+1 || done > total {
			t.Errorf("Progress(%q, %d, %d)", what, done, total)
		}
		calls = append(calls, done)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.IndexRebuilt(); err == nil || !strings.Contains(err.Error(), "as asked") {
		t.Errorf("IndexRebuilt after RebuildIndex: %v", err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != n+1 {
		t.Errorf("Progress was called with %v; want it to end at %d", calls, n+1)
	}
	if _, err := os.Stat(filepath.Join(dir, indexDir+".broken")); err != nil {
		t.Errorf("the old index was not kept: %v", err)
	}
	if rep, err := db.Verify(ctx, "acct", nil); err != nil || rep.Events != n+1 {
		t.Fatalf("Verify after the rebuild: %+v, %v", rep, err)
	}
}

// TestIndexOpenDiskFullMovesNothing: an index that cannot be opened
// because the disk is full (ENOSPC creating its files) is not damaged: Open
// fails with ENOSPC and leaves it where it is, rather than moving it to
// index.broken to rebuild it (which the full disk would refuse too). Once
// space is back, the same index opens with every event.
func TestIndexOpenDiskFullMovesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	metaPath := filepath.Join(t.TempDir(), "meta.db")
	ffs := faultfs.Wrap(vfs.Default)
	opts := &Options{fs: ffs, metaPath: metaPath}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{order(1), order(2)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, indexDir)
	ffs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
		if op.Kind == faultfs.Create && strings.HasPrefix(op.Path, index+string(filepath.Separator)) {
			return faultfs.ENOSPC
		}
		return faultfs.NoFault
	}))
	if db, err := Open(dir, opts); err == nil || !errors.Is(err, syscall.ENOSPC) {
		if err == nil {
			db.Close()
		}
		t.Fatalf("Open with a full disk under index/: %v, want ENOSPC", err)
	}
	if _, err := os.Stat(filepath.Join(dir, indexDir+".broken")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the index was moved aside on a full disk (stat index.broken: %v)", err)
	}
	ffs.SetInjector(nil)
	db, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.IndexRebuilt() != nil {
		t.Errorf("the index was rebuilt: %v", db.IndexRebuilt())
	}
	if info, err := db.Ledger("l"); err != nil || info.Count != 3 {
		t.Fatalf("ledger l after the disk was freed: %+v, %v; want 3 events", info, err)
	}
}

// damageIndexTable makes in dir a ledger of 20,000 "order" events, closes
// it, and flips 16 bytes in the middle of the index's largest table (a
// data block).
func damageIndexTable(t *testing.T, dir, ledger string) {
	t.Helper()
	// The 20,000 events, appended once for every test that damages them.
	built := fixtureDir(t, "index-table-"+ledger, func(t *testing.T, dir string) {
		ctx := context.Background()
		db := openTest(t, dir)
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: ledger}); err != nil {
			t.Fatal(err)
		}
		const n = 20000
		for b := range n / 1000 {
			evs := make([]EventInput, 1000)
			for i := range evs {
				evs[i] = EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", b*1000+i), Event: "placed",
					Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"n":%d}`, b*1000+i))}
			}
			if _, err := db.Append(ctx, ledger, evs, &AppendOptions{Durability: None}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	})
	copyTree(t, built, dir)
	entries, err := os.ReadDir(filepath.Join(dir, indexDir))
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	var size int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".sst") && info.Size() > size {
			victim, size = filepath.Join(dir, indexDir, e.Name()), info.Size()
		}
	}
	if victim == "" {
		t.Fatal("no index table")
	}
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 3; i < len(b)/3+16; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(victim, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
