package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// TestImportBadLineInLaterChunk imports inputs whose bad line falls in a
// later chunk of the parallel parser (chunks of a few KB): the error names
// the right line of the whole input and nothing is stored.
func TestImportBadLineInLaterChunk(t *testing.T) {
	smallBatches(t, 32<<10)
	in := vector(t, examplesFile)
	lines := splitLines(in)
	with := func(i int, line []byte) []byte {
		ls := append([][]byte(nil), lines...)
		ls[i-1] = line
		return bytes.Join(ls, nil)
	}
	tampered := bytes.Clone(lines[8999])
	at := bytes.Index(tampered, []byte(`"data":`)) + len(`"data":`)
	for tampered[at] < 'a' || tampered[at] > 'y' {
		at++
	}
	tampered[at]++
	for _, chunk := range []int{1, 777, 8 << 10} {
		old := importChunkBytes
		importChunkBytes = chunk
		t.Cleanup(func() { importChunkBytes = old })
		for _, tc := range []struct {
			name string
			in   []byte
			line int
			is   error
		}{
			{"data changed in line 9000", with(9000, tampered), 9000, ndjson.ErrMismatch},
			{"not JSON at line 6000", with(6000, []byte("hello\n")), 6000, nil},
			{"unknown member at line 11000", with(11000, bytes.Replace(lines[10999], []byte(`{"entity"`), []byte(`{"x":1,"entity"`), 1)), 11000, ndjson.ErrUnknownField},
			{"empty line 4321", with(4321, []byte("\r\n")), 4321, ndjson.ErrEmptyLine},
			{"meta not canonical and bad at line 7777", with(7777, bytes.Replace(lines[7776], []byte(`"meta":{`), []byte(`"meta": {"a":01,`), 1)), 7777, nil},
		} {
			t.Run(fmt.Sprintf("%s, chunks of %d", tc.name, chunk), func(t *testing.T) {
				dir := t.TempDir()
				db := openTest(t, dir)
				_, err := db.Import(context.Background(), bytes.NewReader(tc.in), ImportOptions{})
				var le *ndjson.LineError
				if !errors.Is(err, ErrInvalid) || tc.is != nil && !errors.Is(err, tc.is) || !errors.As(err, &le) || le.Line != tc.line {
					t.Fatalf("got %v, want ErrInvalid (%v) at line %d", err, tc.is, tc.line)
				}
				if want := "line " + strconv.Itoa(tc.line) + ":"; !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
				db = checkNothingImported(t, db, dir, eventid.LedgerID(0x9e961c04))
				db.Close()
			})
		}
	}
	// The same input without the bad line imports whole, in small chunks.
	importChunkBytes = 777
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	if info := importBytes(t, db, in, ImportOptions{}); info.Count != uint64(len(lines)) {
		t.Fatalf("imported %d events, want %d", info.Count, len(lines))
	}
}

// TestRebuildAcrossCatchUpBatches rebuilds the index of a ledger of many
// catchUp batches (the examples ledger, then idempotent batches that
// straddle the batches of 4096) and checks that the rebuilt index is the
// one the import and the appends built (its digest), that the tree file
// is rebuilt (with the root its checkpoint signed, or Open would refuse
// the ledger) and that no temporary tree file is left.
func TestRebuildAcrossCatchUpBatches(t *testing.T) {
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
