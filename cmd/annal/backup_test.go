package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
)

// TestBackupCommand: annal backup copies the data directory to a new
// directory, which verifies and lists the same ledgers; a non-empty
// target and a target inside the data directory are usage errors that
// leave them as they were.
func TestBackupCommand(t *testing.T) {
	t.Parallel()
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

// TestBackupCommandBesideHeldDirectory: while another DB holds the data
// directory, annal backup copies it read-only beside it, says so, and the
// copy opens with no refusal and verifies. It refused before (exit 1,
// "in use by").
func TestBackupCommandBesideHeldDirectory(t *testing.T) {
	t.Parallel()
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
	if _, err := db.Append(context.Background(), "orders", []engine.EventInput{{Entity: "order", Key: "o-1", Event: "placed", Data: []byte(`{}`)}}, nil); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(tmp, "copy")
	code, out, errOut := annal(t, "", "backup", target, "--dir", dir)
	if code != 0 || !strings.Contains(errOut, "in use by") || !strings.Contains(errOut, "read-only") || !strings.Contains(out, "orders\t2 events") {
		t.Fatalf("backup of a held directory: exit %d: stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := annal(t, "", "verify", "--full", "--dir", target); code != 0 {
		t.Fatalf("verify --full of the copy: exit %d: %s", code, errOut)
	}
}

// TestBackupCommandBesideAppendProcess: a backup of a directory a writer
// is appending to, with real processes: annal append runs in a child process,
// fed events without pause, while annal backup (another child) copies its
// directory a few times. Every copy opens with no refusal and no note,
// verifies, is a prefix of the ledger, and holds every event whose ID
// annal append printed before the backup began. It failed before: the
// command refused the held directory (exit 1).
func TestBackupCommandBesideAppendProcess(t *testing.T) {
	bin, err := exec.LookPath("annal") // the test binary, put in $PATH by TestMain
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	if code, _, errOut := runAnnal(t, bin, dir, "", "create", "acct"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	p, in, stdout, pErr := startAppend(t, bin, dir, "acct")
	var (
		mu      sync.Mutex
		printed []string
		stop    = make(chan struct{})
		fed     = make(chan struct{})
	)
	go func() {
		defer close(fed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				in.Close()
				return
			default:
			}
			if _, err := fmt.Fprintf(in, `{"entity":"e","key":"k-%d","event":"placed"}`+"\n", i%50); err != nil {
				return
			}
			if i%10 == 9 {
				time.Sleep(time.Millisecond) // fewer events for the checks to read
			}
		}
	}()
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			printed = append(printed, sc.Text())
			mu.Unlock()
		}
	}()
	type taken struct {
		dir    string
		before int
	}
	var copies []taken
	// The first backup once annal append acknowledged something (its
	// start may take long on a loaded machine), the others 100 ms apart.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(printed)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			p.Process.Kill()
			p.Wait()
			t.Fatalf("annal append printed no ID in 30 s; stderr: %s", pErr.String())
		}
	}
	for i := 0; i < 4; i++ {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		before := len(printed)
		mu.Unlock()
		target := filepath.Join(tmp, fmt.Sprintf("copy-%d", i))
		code, out, errOut := runAnnal(t, bin, dir, "", "backup", target)
		if code != 0 {
			close(stop)
			p.Process.Kill()
			t.Fatalf("backup %d beside annal append (process %d): exit %d: stdout %q, stderr %q", i, p.Process.Pid, code, out, errOut)
		}
		if !strings.Contains(errOut, fmt.Sprintf("in use by process %d", p.Process.Pid)) {
			t.Errorf("backup %d: stderr %q does not name the writer", i, errOut)
		}
		copies = append(copies, taken{target, before})
	}
	close(stop)
	<-fed
	<-read
	if err := p.Wait(); err != nil {
		t.Fatalf("annal append: %v; stderr: %s", err, pErr.String())
	}
	if len(printed) == 0 || copies[0].before == 0 {
		t.Fatalf("annal append printed %d IDs, %d before the first backup", len(printed), copies[0].before)
	}
	t.Logf("%d events appended; backups after %d..%d", len(printed), copies[0].before, copies[len(copies)-1].before)
	all := scanIDs(t, dir, "acct")
	for i, c := range copies {
		got := scanIDs(t, c.dir, "acct") // its first open, which builds its index
		if code, _, errOut := runAnnal(t, bin, c.dir, "", "verify", "--full"); code != 0 || errOut != "" {
			t.Fatalf("copy %d: verify --full: exit %d: %s", i, code, errOut)
		}
		if len(got) > len(all) || !slices.Equal(got, all[:len(got)]) {
			t.Fatalf("copy %d holds %d events, not a prefix of the ledger's %d", i, len(got), len(all))
		}
		have := map[string]bool{}
		for _, id := range got {
			have[id] = true
		}
		for _, id := range printed[:c.before] {
			if !have[id] {
				t.Fatalf("copy %d: event %s, printed before the backup began, is missing", i, id)
			}
		}
	}
}

// scanIDs opens dir with engine.Open, checks that it refuses nothing and
// notes nothing, and returns the IDs of the ledger's events after its
// genesis event.
func scanIDs(t *testing.T, dir, ledger string) []string {
	t.Helper()
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("%s: refused %v", dir, u)
	}
	if db.IndexRebuilt() != nil || db.MetaRebuilt() != nil || len(db.TreeRebuilt()) > 0 {
		t.Fatalf("%s: notes at open: %v %v %v", dir, db.IndexRebuilt(), db.MetaRebuilt(), db.TreeRebuilt())
	}
	var ids []string
	for ev, err := range db.Scan(context.Background(), ledger, engine.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq > 1 {
			ids = append(ids, ev.ID.String())
		}
	}
	return ids
}

// TestLiveCopyCommandsNameBackup: verify and reindex of a directory copied
// file by file under a writer (its ledger's folder copied before the
// writer rotated on, meta.db after) exit 3 and name annal backup as the
// way to copy a live directory.
func TestLiveCopyCommandsNameBackup(t *testing.T) {
	t.Parallel()
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
