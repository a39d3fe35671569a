package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/index"
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
	for _, tc := range []struct {
		name  string
		cache int64
	}{
		{"memtables of 4 MiB, rebuilt in Open", 16 << 20},
		{"default cache, flushed in Close", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := mountTmpfs(t, "96m")
			ctx := context.Background()
			dir := filepath.Join(mnt, "data")
			db, err := Open(dir, &Options{Durability: None, CacheSize: tc.cache})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "big"}); err != nil {
				t.Fatal(err)
			}
			const batches, perBatch = 120, 1000
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
			// Full, but for 1 MiB: enough for Pebble to open, not to flush.
			fill(t, filepath.Join(mnt, "slack"), 1<<20)
			fillUp(t, filepath.Join(mnt, "filler"))
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
				t.Fatal("Open and Close on the full disk did not return in 90 s")
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
