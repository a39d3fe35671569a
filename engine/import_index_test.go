package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
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

// TestRebuildAcrossCatchUpBatches rebuilds the index of a ledger of many
// catchUp batches (the examples ledger, then idempotent batches that
// straddle the batches of 4096) and checks that the rebuilt index is the
// one the import and the appends built (its digest), that the tree file
// is rebuilt (with the root its checkpoint signed, or Open would refuse
// the ledger) and that no temporary tree file is left.
func TestRebuildAcrossCatchUpBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info := importBytes(t, db, vector(t, examplesFile), ImportOptions{})
	for i := range 7 {
		evs := make([]EventInput, 1500)
		for j := range evs {
			evs[j] = EventInput{Entity: "e", Key: strconv.Itoa(j % 17), Event: "x", Data: []byte(strconv.Itoa(i*10000 + j))}
		}
		if _, err := db.Append(ctx, info.Name, evs, &AppendOptions{IdempotencyKey: "batch-" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := db.ledger(info.Name)
	if err != nil {
		t.Fatal(err)
	}
	head := l.log.Head().Seq
	before, err := db.idx.Digest(ctx, info.ID, head)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var progress []int64
	db, err = Open(dir, &Options{RebuildIndex: true, Progress: func(_ string, done, _ int64) { progress = append(progress, done) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) != 0 {
		t.Fatalf("unavailable after the rebuild: %v", u)
	}
	if db.IndexRebuilt() == nil || db.TreeRebuilt()[info.Name] == nil {
		t.Fatalf("IndexRebuilt %v, TreeRebuilt %v: want both", db.IndexRebuilt(), db.TreeRebuilt())
	}
	after, err := db.idx.Digest(ctx, info.ID, head)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Fatalf("the rebuilt index differs from the one built by import and appends: %s", d)
	}
	var want []int64
	for n := int64(progressEvery); n < int64(head); n += progressEvery {
		want = append(want, n)
	}
	if want = append(want, int64(head)); fmt.Sprint(progress) != fmt.Sprint(want) {
		t.Fatalf("progress %v, want %v", progress, want)
	}
	if _, err := os.Stat(filepath.Join(db.ledgerDir(info.ID), treeFileName+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("the temporary tree file is left: %v", err)
	}
	// Every event is found, and proves against the rebuilt tree.
	ck, err := db.Checkpoint(ctx, info.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Size != head {
		t.Fatalf("checkpoint of %d events, want %d", ck.Size, head)
	}
}

// syntheticExport returns an export of n events (a genesis event, then
// events of 300 streams), each line's ID computed from its content and
// the line before, as annal's export writes them.
func syntheticExport(n int) []byte {
	var out []byte
	var ledger eventid.LedgerID
	var prev eventid.ID
	micros := uint64(1_700_000_000_000_000)
	for i := 0; i < n; i++ {
		entity, key, event := "order", "order-"+strconv.Itoa(i%300), "order-placed"
		meta := []byte(`{"actor":"user-` + strconv.Itoa(i%50) + `"}`)
		data := []byte(`{"n":` + strconv.Itoa(i) + `,"note":"some words"}`)
		if i == 0 {
			entity, key, event, data = "ledger", "synthetic", "ledger-created", []byte(`{"name":"synthetic"}`)
		}
		c := eventid.Content{Entity: entity, Key: key, Event: event, Meta: meta, Data: data}
		if i == 0 {
			ledger = c.LedgerID()
			prev = eventid.Genesis(ledger)
		}
		micros += 13
		id := c.ID(ledger, micros, prev)
		out = ndjson.AppendLine(out, id, micros, entity, key, event, meta, data)
		prev = id
	}
	return out
}

// TestImportFlushesDuringImport: an import whose index entries fill the
// smallest memtables several times (Pebble flushes during the import, and
// compactEarly flushes after it) stores what a rebuild of the index from
// its segments gives, and segments and tree that verify.
func TestImportFlushesDuringImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := 250_000
	if testing.Short() {
		n = 120_000
	}
	in := syntheticExport(n)
	dir := t.TempDir()
	opts := &Options{CacheSize: MinCacheSize}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := db.idx.FlushState()
	if err != nil {
		t.Fatal(err)
	}
	info := importBytes(t, db, in, ImportOptions{})
	if info.Count != uint64(n) {
		t.Fatalf("imported %d events, want %d", info.Count, n)
	}
	after, _, err := db.idx.FlushState()
	if err != nil {
		t.Fatal(err)
	}
	// Pebble's flush, compactEarly's, and the import's own at the end.
	if after-before < 3 {
		t.Fatalf("%d flushes during the import, want 3 or more (the test's input no longer fills the memtables)", after-before)
	}
	rep, err := db.Verify(ctx, info.Name, nil)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Events != uint64(n) {
		t.Fatalf("verified %d events, want %d", rep.Events, n)
	}
	imported, err := db.idx.Digest(ctx, info.ID, info.Count)
	if err != nil {
		t.Fatal(err)
	}
	reopenRebuilt(t, db, dir, opts, info, imported).Close()
}

// reopenRebuilt closes db, opens dir again with opts and RebuildIndex,
// and fails t unless the index rebuilt from the segments holds what
// imported (the digest of the imported ledger's index before) says.
func reopenRebuilt(t *testing.T, db *DB, dir string, opts *Options, info LedgerInfo, imported *index.Digest) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o := *opts
	o.RebuildIndex = true
	db, err := Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := db.idx.Digest(context.Background(), info.ID, info.Count)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if diff := imported.Diff(rebuilt); diff != "" || imported.Count != rebuilt.Count {
		db.Close()
		t.Fatalf("the imported index differs from the rebuilt one: %s", diff)
	}
	return db
}
