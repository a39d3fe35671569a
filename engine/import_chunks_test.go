package engine

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
