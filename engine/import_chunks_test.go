package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// tinyChunks makes imports parse their input in chunks of n bytes.
func tinyChunks(t *testing.T, n int) {
	old := importChunkBytes
	importChunkBytes = n
	t.Cleanup(func() { importChunkBytes = old })
}

// importWithin is importBytes that fails the test, rather than hanging,
// if the import does not end within a minute (the reader waiting for a
// chunk the importer never releases).
func importWithin(t *testing.T, db *DB, in []byte) LedgerInfo {
	t.Helper()
	type result struct {
		info LedgerInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := db.Import(context.Background(), bytes.NewReader(in), ImportOptions{})
		done <- result{info, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.info
	case <-time.After(time.Minute):
		t.Fatal("the import did not end within a minute")
		return LedgerInfo{}
	}
}

// TestImportReleasesChunks imports the examples ledger in chunks of 777
// bytes with batches that never fill up by size (1 GB): the importer must
// write a batch once it holds importChunksHeld chunks, or the reader,
// limited to a few chunks in memory, waits for ever. The ledger exported
// equals the one a default import gives, byte for byte: no chunk's memory
// was reused while the batch still pointed into it.
func TestImportReleasesChunks(t *testing.T) {
	in := vector(t, examplesFile)
	ref := openTest(t, t.TempDir())
	defer ref.Close()
	want, _ := exportBytes(t, ref, importBytes(t, ref, in, ImportOptions{}).Name, ExportOptions{})

	tinyChunks(t, 777)
	smallBatches(t, 1<<30)
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := importWithin(t, db, in)
	if info.Count != 11550 {
		t.Fatalf("imported %d events, want 11550", info.Count)
	}
	got, _ := exportBytes(t, db, info.Name, ExportOptions{})
	if !bytes.Equal(got, want) {
		t.Fatalf("the export of the import in small chunks differs from the reference export (%d and %d bytes)", len(got), len(want))
	}
	if _, err := db.Get(context.Background(), info.Head); err != nil {
		t.Fatal(err)
	}
}

// TestImportWriteFaultInLaterChunk fails a write of the import's segments,
// or of its tree file, deep into an input read in small chunks (chunks in
// flight, held and reused around the failing batch): the import fails
// with the write's error, and nothing is left behind (no ledger, no
// directory, no index entry, no metadata, also after a reopen).
func TestImportWriteFaultInLaterChunk(t *testing.T) {
	in := vector(t, examplesFile)
	tinyChunks(t, 8<<10)
	smallBatches(t, 32<<10)
	for _, tc := range []struct {
		name  string
		file  string
		after int64 // the faulty write is the first past this offset
	}{
		{"segment write", ".seg", 1 << 20},
		{"tree write", "/" + treeFileName, 128 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := faultfs.Wrap(vfs.Default)
			var hit atomic.Int32
			ffs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
				// The import's are the only segments and tree here.
				if op.Kind == faultfs.WriteAt && strings.HasSuffix(op.Path, tc.file) &&
					op.Offset > tc.after && hit.Add(1) == 1 {
					return faultfs.EIO
				}
				return faultfs.NoFault
			}))
			db, err := Open(dir, &Options{fs: ffs, metaPath: filepath.Join(dir, metaFile)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = db.Import(context.Background(), bytes.NewReader(in), ImportOptions{})
			if !errors.Is(err, syscall.EIO) || hit.Load() != 1 {
				t.Fatalf("import with a failing %s: %v (%d faults injected), want EIO", tc.name, err, hit.Load())
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, dir)
			db = checkNothingImported(t, db, dir, eventid.LedgerID(0x9e961c04))
			db.Close()
		})
	}
}

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
