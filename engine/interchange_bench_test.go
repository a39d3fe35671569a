package engine

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

var interchangeEvents = flag.Int("interchange.events", 1_000_000,
	"events of the synthetic ledger of BenchmarkImport and BenchmarkExport (with -short: 50,000)")

func benchEvents() int {
	if testing.Short() {
		return min(*interchangeEvents, 50_000)
	}
	return *interchangeEvents
}

// writeSyntheticLedger writes a ledger of n events to a file in dir, in the
// shape of the examples ledger: its events' content over and over, starting
// with its genesis event, with timestamps advancing as in the original (and
// by at least 1 µs), and IDs computed afresh so that the chain holds. It
// returns the file's path and size.
func writeSyntheticLedger(b *testing.B, dir string, n int) (string, int64) {
	b.Helper()
	var evs []ndjson.Event
	r := ndjson.NewReader(bytes.NewReader(vector(b, examplesFile)))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		e := *ev
		e.Meta, e.Data = bytes.Clone(ev.Meta), bytes.Clone(ev.Data)
		evs = append(evs, e)
	}
	path := filepath.Join(dir, "synthetic.ndjson")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	c := evs[0].Content()
	ledger := c.LedgerID()
	prev := eventid.Genesis(ledger)
	micros := evs[0].Micros
	var line []byte
	for i := range n {
		e := &evs[i%len(evs)]
		if i > 0 {
			step := uint64(1)
			if j := i % len(evs); j > 0 && e.Micros > evs[j-1].Micros {
				step = e.Micros - evs[j-1].Micros
			}
			micros += step
		}
		c := e.Content()
		id := c.ID(ledger, micros, prev)
		line = ndjson.AppendLine(line[:0], id, micros, e.Entity, e.Key, e.Event, e.Meta, e.Data)
		if _, err := w.Write(line); err != nil {
			b.Fatal(err)
		}
		prev = id
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, fi.Size()
}

func importFile(b *testing.B, db *DB, path string) LedgerInfo {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	info, err := db.Import(context.Background(), f, ImportOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return info
}

// BenchmarkImport imports a synthetic ledger of -interchange.events events
// (a million by default) from a file into a new directory: reading,
// verifying every line, writing the segments (synced once at the end),
// indexing and writing the metadata. The file is made before the timer
// starts.
func BenchmarkImport(b *testing.B) {
	n := benchEvents()
	path, size := writeSyntheticLedger(b, b.TempDir(), n)
	b.SetBytes(size)
	var i int
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "data")
		db, err := Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		i++
		b.StartTimer()
		info := importFile(b, db, path)
		b.StopTimer()
		if info.Count != uint64(n) {
			b.Fatalf("imported %d events, want %d", info.Count, n)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(i)/b.Elapsed().Seconds(), "events/s")
}

// importedLedger imports a synthetic ledger of benchEvents events into a
// new directory and reopens it, so that the index's compactions after the
// import (which run in the background, and allocate) are done or stopped
// and the kernel has written back the import's dirty pages.
func importedLedger(b *testing.B) (*DB, LedgerInfo, int) {
	return importedLedgerOf(b, benchEvents())
}

// importedLedgerOf is importedLedger of n events.
func importedLedgerOf(b *testing.B, n int) (*DB, LedgerInfo, int) {
	tmp := b.TempDir()
	path, _ := writeSyntheticLedger(b, tmp, n)
	dir := filepath.Join(tmp, "data")
	db, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	info := importFile(b, db, path)
	os.Remove(path)
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	if db, err = Open(dir, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db, info, n
}

// BenchmarkExport exports the ledger of importedLedger to io.Discard.
func BenchmarkExport(b *testing.B) {
	db, info, n := importedLedger(b)
	var written int64
	b.ReportAllocs()
	var i int
	for b.Loop() {
		i++
		count, err := db.Export(context.Background(), info.Name, io.Discard, ExportOptions{Progress: func(_, bytes int64) { written = bytes }})
		if err != nil {
			b.Fatal(err)
		}
		if count != int64(n) {
			b.Fatalf("exported %d events, want %d", count, n)
		}
	}
	b.SetBytes(written)
	b.ReportMetric(float64(n)*float64(i)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkVerify runs Verify (what annal verify --full runs) over the
// ledger of importedLedger: every record, and every index family. MB/s
// are of the segment files.
func BenchmarkVerify(b *testing.B) { benchVerify(b, benchEvents()) }
