package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
)

// TestBackupCommand: annal backup copies the data directory to a new
// directory, which verifies and lists the same ledgers; a non-empty
// target and a target inside the data directory are usage errors that
// leave them as they were.
func TestBackupCommand(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	if code, _, errOut := annal(t, "", "create", "orders", "--dir", dir); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	events := strings.Repeat(`{"entity":"order","key":"o-1","event":"order-placed","data":{"total":1}}`+"\n", 50)
	if code, _, errOut := annal(t, events, "append", "orders", "--dir", dir); code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	target := filepath.Join(tmp, "backups", "monday")
	code, out, errOut := annal(t, "", "backup", target, "--dir", dir)
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "orders\t51 events\tsigned checkpoint at 51") || !strings.Contains(out, "backup "+target+": 1 ledgers") {
		t.Fatalf("backup printed %q", out)
	}
	// verify writes nothing: it notes the index that the backup leaves out
	// (the copy's first writer's open builds it), and nothing else.
	if code, out, errOut := annal(t, "", "verify", "--full", "--dir", target); code != 0 || strings.Count(errOut, "\n") != strings.Count(errOut, "index is missing: the next writer's open rebuilds it") {
		t.Fatalf("verify --full of the backup: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := annal(t, "", "ledgers", "--format", "ndjson", "--dir", target); code != 0 || !strings.Contains(out, `"count":51`) {
		t.Fatalf("ledgers of the backup: exit %d: %s%s", code, out, errOut)
	}

	// The same target again: not empty.
	code, _, errOut = annal(t, "", "backup", target, "--dir", dir)
	if code != exitUsage || !strings.Contains(errOut, "not empty") {
		t.Fatalf("backup over a backup: exit %d: %s", code, errOut)
	}
	// Inside the data directory.
	inside := filepath.Join(dir, "ledgers", "copy")
	code, _, errOut = annal(t, "", "backup", inside, "--dir", dir)
	if code != exitUsage || !strings.Contains(errOut, "inside the data directory") {
		t.Fatalf("backup inside the data directory: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(inside); !os.IsNotExist(err) {
		t.Fatalf("a refused backup made %s: %v", inside, err)
	}
}

// TestBackupCommandRefusesHeldDirectory: while another DB holds the data
// directory, annal backup refuses, names the holder and the way to copy a
// live directory, and writes nothing.
func TestBackupCommandRefusesHeldDirectory(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	if code, _, errOut := annal(t, "", "create", "orders", "--dir", dir); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	target := filepath.Join(tmp, "copy")
	code, _, errOut := annal(t, "", "backup", target, "--dir", dir)
	if code != exitError || !strings.Contains(errOut, "in use by") || !strings.Contains(errOut, "DB.Backup") || !strings.Contains(errOut, "cp or rsync") {
		t.Fatalf("backup of a held directory: exit %d: %s", code, errOut)
	}
	if names, _ := os.ReadDir(tmp); len(names) != 1 {
		t.Fatalf("a refused backup left %v", names)
	}
}

// TestLiveCopyCommandsNameBackup: verify and reindex of a directory copied
// file by file under a writer (its ledger's folder copied before the
// writer rotated on, meta.db after) exit 3 and name annal backup as the
// way to copy a live directory.
func TestLiveCopyCommandsNameBackup(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	ctx := context.Background()
	db, err := engine.Open(dir, &engine.Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "acct"})
	if err != nil {
		t.Fatal(err)
	}
	ev := []engine.EventInput{{Entity: "a", Key: "k", Event: "e", Data: []byte(`{"n":1}`)}}
	ldir := filepath.Join(dir, "ledgers", info.ID.String())
	early := filepath.Join(tmp, "early")
	for i := 0; i < 200; i++ {
		if i == 40 {
			if err := os.CopyFS(early, os.DirFS(ldir)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Append(ctx, "acct", ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ldir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(early, ldir); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify"}, {"reindex"}} {
		code, _, errOut := annal(t, "", append(args, "--dir", dir)...)
		if code != exitVerification || !strings.Contains(errOut, "acknowledged events lost") || !strings.Contains(errOut, "annal backup") {
			t.Fatalf("%s of a live copy: exit %d: %s", args[0], code, errOut)
		}
	}
}
