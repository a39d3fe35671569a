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

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/faultfs"
)

// fill writes a file of n bytes of non-zero data (tmpfs allocates its pages
// as they are written) and syncs it.
func fill(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte(strings.Repeat("filler-", 1<<16/7+1))[:1<<16]
	for n > 0 {
		k := min(n, len(buf))
		if _, err := f.Write(buf[:k]); err != nil {
			t.Fatalf("filling %s: %v", path, err)
		}
		n -= k
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDiskFullForReal runs the engine, with default options on real
// files, on a small tmpfs (8 MiB) whose space runs out: Sync appends in
// batches until one fails with ENOSPC. The error must be clean (it matches
// syscall.ENOSPC and says which ledger); everything acknowledged stays
// readable (Get, Scan, Verify) while the disk is full; a CreateLedger
// fails cleanly or succeeds; once space is freed (a 2 MiB filler file
// written beforehand is deleted) appends go on; after Close and a reopen
// every acknowledged event is there and the ledgers verify. What the index
// (Pebble) and the metadata (bbolt) do when they meet the full disk is
// logged.
func TestDiskFullForReal(t *testing.T) {
	mnt := faultfs.MountTmpfs(t, "8m")
	ctx := context.Background()
	fill(t, filepath.Join(mnt, "filler"), 2<<20)
	dir := filepath.Join(mnt, "data")
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "full"}); err != nil {
		t.Fatal(err)
	}

	// Append until the disk is full.
	var acked []eventid.ID
	data := []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("d", 900)))
	batch := func(b, n int) []EventInput {
		evs := make([]EventInput, n)
		for i := range evs {
			evs[i] = EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", (b*n+i)%97), Event: "placed",
				Meta: []byte(fmt.Sprintf(`{"batch":%d,"i":%d}`, b, i)), Data: data}
		}
		return evs
	}
	var full error
	for b := 0; b < 100000; b++ {
		ids, err := idsOf(db.Append(ctx, "full", batch(b, 20), nil))
		if err != nil {
			full = err
			t.Logf("append %d failed after %d events acknowledged: %v", b, len(acked), err)
			break
		}
		acked = append(acked, ids...)
	}
	switch {
	case full == nil:
		t.Fatal("the disk never filled up")
	case !errors.Is(full, syscall.ENOSPC):
		t.Fatalf("the append that met the full disk: %v, want an error matching syscall.ENOSPC", full)
	case !strings.Contains(full.Error(), `append to full`):
		t.Errorf("the error does not say which ledger: %v", full)
	}
	failed := errors.Is(full, segment.ErrFailed)
	t.Logf("the segment log failed (ErrFailed: a sync or the undo of the write failed): %v", failed)

	// While the disk is full: another append fails the same way, reads
	// go on.
	if ids, err := idsOf(db.Append(ctx, "full", batch(-1, 1), nil)); err == nil {
		t.Log("a single-event append fit in what was left")
		acked = append(acked, ids...)
	} else if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, segment.ErrFailed) {
		t.Errorf("a second append on the full disk: %v", err)
	}
	checkReadable(t, db, "full", acked, "while the disk is full")
	// Whatever space the failed append left (part of a page), taken too.
	faultfs.FillUp(t, filepath.Join(mnt, "topup"))
	if info, err := db.CreateLedger(ctx, LedgerSpec{Name: "later"}); err != nil {
		t.Logf("CreateLedger on the full disk: %v", err)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("CreateLedger on the full disk: %v, want an error matching syscall.ENOSPC", err)
		}
		if _, err := db.Ledger("later"); !errors.Is(err, ErrLedgerNotFound) {
			t.Errorf("after the failed CreateLedger, Ledger(later): %v", err)
		}
		if names, _ := os.ReadDir(filepath.Join(dir, ledgersDir)); len(names) != 1 {
			t.Errorf("the failed CreateLedger left %d entries in %s", len(names), filepath.Join(dir, ledgersDir))
		}
	} else {
		t.Logf("CreateLedger on the full disk succeeded: %s", info.ID)
	}

	checkReadable(t, db, "full", acked, "after CreateLedger on the full disk")

	// Space comes back: appends go on in the same session (after a
	// failed fsync, only after a reopen).
	for _, name := range []string{"filler", "topup"} {
		if err := os.Remove(filepath.Join(mnt, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if failed {
		if _, err := db.Append(ctx, "full", batch(-2, 1), nil); !errors.Is(err, segment.ErrFailed) {
			t.Fatalf("append to a failed ledger once space is back: %v, want segment.ErrFailed", err)
		}
		if err := db.Close(); err == nil {
			t.Error("Close of a DB with a failed ledger returned nil")
		}
		if db, err = Open(dir, nil); err != nil {
			db = nil
			t.Fatalf("reopen once space is back: %v", err)
		}
	}
	for b := range 20 {
		ids, err := idsOf(db.Append(ctx, "full", batch(1000+b, 20), nil))
		if err != nil {
			t.Fatalf("append once space is back: %v", err)
		}
		acked = append(acked, ids...)
	}
	if _, err := db.Ledger("later"); errors.Is(err, ErrLedgerNotFound) {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "later"}); err != nil {
			t.Fatalf("CreateLedger once space is back: %v", err)
		}
	}
	checkReadable(t, db, "full", acked, "once space is back")

	// The disk fills up again, this time with the DB idle: Close must
	// return (its index flush and metadata write may fail), and what
	// Open does on the full disk is logged.
	filler := filepath.Join(mnt, "filler2")
	faultfs.FillUp(t, filler)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close on the full disk: %v", err)
	case <-time.After(30 * time.Second):
		db = nil
		t.Fatal("Close on the full disk hangs")
	}
	db = nil
	// Open on the full disk runs in a child process: Pebble may end it
	// (see TestDiskFullOpenChild).
	child, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(child, os.Args[0], "-test.run=^TestDiskFullOpenChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), diskFullChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var report []string
	for _, l := range lines {
		if strings.HasPrefix(l, "child:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			report = append(report, l)
		}
	}
	t.Logf("Open on the full disk, in a child process (exit: %v): %s", err, strings.Join(report, " | "))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, nil); err != nil {
		db = nil
		t.Fatalf("reopen once space is back: %v", err)
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable after reopen: %v", u)
	}
	if err := db.IndexRebuilt(); err != nil {
		t.Logf("the index was rebuilt on reopen: %v", err)
	}
	checkReadable(t, db, "full", acked, "after reopen")
	if _, err := db.Verify(ctx, "later", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "full", batch(2000, 5), nil); err != nil {
		t.Fatalf("append after reopen: %v", err)
	}
	t.Logf("%d events acknowledged, all there after reopen", len(acked))
}

const diskFullChildEnv = "ANNAL_DISKFULL_CHILD"

// TestDiskFullOpenChild is a child process of TestDiskFullForReal: it
// returns at once unless ANNAL_DISKFULL_CHILD names a data directory; then
// it opens it (on a full disk), scans and verifies every ledger, closes
// it, and says what happened on its output.
func TestDiskFullOpenChild(t *testing.T) {
	dir := os.Getenv(diskFullChildEnv)
	if dir == "" {
		return
	}
	ctx := context.Background()
	db, err := Open(dir, nil)
	if err != nil {
		fmt.Println("child: open:", err)
		os.Exit(2)
	}
	fmt.Printf("child: opened (unavailable %v, index rebuilt: %v)\n", db.Unavailable(), db.IndexRebuilt())
	for _, info := range db.Ledgers() {
		evs, err := scanAll(ctx, db, info.Name)
		_, verr := db.Verify(ctx, info.Name, nil)
		fmt.Printf("child: ledger %s: %d events scanned (%v), verify: %v\n", info.Name, len(evs), err, verr)
	}
	fmt.Println("child: close:", db.Close())
	os.Exit(0)
}

// checkReadable reads every acknowledged event by ID, scans the ledger
// (which must hold exactly them after its genesis) and verifies it.
func checkReadable(t *testing.T, db *DB, ledger string, acked []eventid.ID, when string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range acked {
		if _, err := db.Get(ctx, id); err != nil {
			t.Fatalf("%s: Get %s: %v", when, id, err)
		}
	}
	evs, err := scanAll(ctx, db, ledger)
	if err != nil {
		t.Fatalf("%s: Scan: %v", when, err)
	}
	if len(evs) != len(acked)+1 {
		t.Fatalf("%s: the scan finds %d events, %d acknowledged after the genesis", when, len(evs), len(acked))
	}
	for i, id := range acked {
		if evs[i+1].ID != id {
			t.Fatalf("%s: event %d is %s, acknowledged %s", when, i+1, evs[i+1].ID, id)
		}
	}
	if _, err := db.Verify(ctx, ledger, nil); err != nil {
		t.Fatalf("%s: Verify: %v", when, err)
	}
}
