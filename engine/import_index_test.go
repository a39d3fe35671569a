package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
)

// TestImportIndexEqualsRebuilt imports the examples ledger into many small
// segments, in small batches: the index the import wrote as it went (not
// read back from the segments) equals, by index.Digest, the index Open
// rebuilds from the segments, and every event is found by ID.
func TestImportIndexEqualsRebuilt(t *testing.T) {
	smallBatches(t, 48<<10)
	ctx := context.Background()
	in := vector(t, examplesFile)
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	info := importBytes(t, db, in, ImportOptions{})
	segs, err := filepath.Glob(filepath.Join(dir, ledgersDir, info.ID.String(), "*.seg"))
	if err != nil || len(segs) < 4 {
		t.Fatalf("the import wrote %d segments (%v), want several", len(segs), err)
	}
	imported, err := db.idx.Digest(ctx, info.ID, info.Count)
	if err != nil {
		t.Fatal(err)
	}
	db = reopenRebuilt(t, db, dir, &Options{SegmentSize: 256 << 10}, info, imported)
	defer db.Close()
	var empty index.Digest
	if imported.Count == empty.Count {
		t.Fatal("the imported index is empty")
	}
	// Every event, by its ID.
	r := ndjson.NewReader(bytes.NewReader(in))
	n := 0
	for {
		want, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := db.Get(ctx, want.ID)
		if err != nil || ev.ID != want.ID {
			t.Fatalf("get %s: %s, %v", want.ID, ev.ID, err)
		}
		n++
	}
	if n != int(info.Count) {
		t.Fatalf("%d lines, %d events imported", n, info.Count)
	}
}

// The child process of TestImportKilledIndexDeleted.
const (
	importKillDirEnv   = "ANNAL_IMPORT_KILL_DIR"
	importKillInputEnv = "ANNAL_IMPORT_KILL_INPUT"
)

// TestImportKillChild is the child process of TestImportKilledIndexDeleted;
// it returns at once unless ANNAL_IMPORT_KILL_DIR is set. It imports a
// file in small batches and, once more than 5000 events are written (and
// indexed: an import indexes what it writes), flushes the index to disk
// and kills itself with SIGKILL.
func TestImportKillChild(t *testing.T) {
	dir := os.Getenv(importKillDirEnv)
	if dir == "" {
		return
	}
	smallBatches(t, 32<<10)
	in, err := os.ReadFile(os.Getenv(importKillInputEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	db, err := Open(dir, nil)
	if err == nil {
		_, err = db.Import(context.Background(), bytes.NewReader(in), ImportOptions{Progress: func(events, _ int64) {
			if events > 5000 {
				// The queued batch committed: wait for the index to
				// hold the events written, then make them durable.
				for {
					if _, _, found, _ := db.idx.Lookup(eventid.MustParse("0005d5813bf9c44943545b8f9e961c04")); found {
						break
					}
					time.Sleep(time.Millisecond)
				}
				if err := db.idx.Flush(); err != nil {
					fmt.Fprintln(os.Stderr, "child: flush:", err)
					os.Exit(3)
				}
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}})
	}
	fmt.Fprintln(os.Stderr, "child: not killed:", err)
	os.Exit(3)
}

// TestImportKilledIndexDeleted: an import killed halfway leaves its
// temporary directory and, on disk, the index entries of the events it
// wrote; Open removes both (no event of it is found), and the same input
// imports whole afterwards.
func TestImportKilledIndexDeleted(t *testing.T) {
	in := vector(t, examplesFile)
	input := filepath.Join(t.TempDir(), "in.ndjson")
	if err := os.WriteFile(input, in, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runKilledChild(t, "TestImportKillChild", importKillDirEnv+"="+dir, importKillInputEnv+"="+input)
	names, err := os.ReadDir(filepath.Join(dir, ledgersDir))
	if err != nil || len(names) != 1 || !strings.HasPrefix(names[0].Name(), importDirPrefix+"9e961c04-") {
		t.Fatalf("after the kill, %s holds %v (%v), want the import's temporary directory", ledgersDir, names, err)
	}
	db := checkNothingImported(t, openTest(t, dir), dir, eventid.LedgerID(0x9e961c04))
	defer db.Close()
	info := importBytes(t, db, in, ImportOptions{})
	if info.Count != 11550 {
		t.Fatalf("imported again: %d events, want 11550", info.Count)
	}
	if _, err := db.Verify(context.Background(), info.Name, nil); err != nil {
		t.Fatal(err)
	}
}
