package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

func TestExportAfterAndFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := vector(t, examplesFile)
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := importBytes(t, db, in, ImportOptions{})
	full, _ := exportBytes(t, db, "preview", ExportOptions{})
	lines := splitLines(full)
	_, ids := rewrite(t, in)

	from := func(i int) []byte { return bytes.Join(lines[i:], nil) }
	// After the 100th event: lines 101 on; they verify with a resumed
	// verifier, not as a whole ledger.
	out, n := exportBytes(t, db, "preview", ExportOptions{After: ids[99]})
	if n != int64(len(ids)-100) || !bytes.Equal(out, from(100)) {
		t.Fatalf("export after event 100: %d events", n)
	}
	if _, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(out))); !errors.Is(err, ndjson.ErrMismatch) {
		t.Fatalf("a partial export verifies as a whole ledger: %v", err)
	}
	v := ndjson.ResumeVerifier(info.ID, ids[99], 100)
	r := ndjson.NewReader(bytes.NewReader(out))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(ev); err != nil {
			t.Fatalf("line %d: %v", r.Line(), err)
		}
	}
	if v.Count() != 11550 || v.Head() != info.Head {
		t.Fatalf("resumed verification: %d events, head %s", v.Count(), v.Head())
	}

	// From the time of event 200: lines 200 on. One µs later: 201 on.
	t200 := ids[199].Time()
	if out, _ := exportBytes(t, db, "preview", ExportOptions{From: t200}); !bytes.Equal(out, from(199)) {
		t.Fatal("export from the time of event 200")
	}
	if out, _ := exportBytes(t, db, "preview", ExportOptions{From: t200.Add(time.Microsecond)}); !bytes.Equal(out, from(200)) {
		t.Fatal("export from just after event 200")
	}
	// Both: the later bound wins.
	if out, _ := exportBytes(t, db, "preview", ExportOptions{From: t200, After: ids[299]}); !bytes.Equal(out, from(300)) {
		t.Fatal("export from event 200 and after event 300")
	}
	if out, _ := exportBytes(t, db, "preview", ExportOptions{From: ids[399].Time(), After: ids[299]}); !bytes.Equal(out, from(399)) {
		t.Fatal("export after event 300 and from event 400")
	}
	// Nothing after the head, nothing from later.
	for _, o := range []ExportOptions{{After: info.Head}, {From: info.Last.Add(time.Second)}} {
		if out, n := exportBytes(t, db, "preview", o); n != 0 || len(out) != 0 {
			t.Fatalf("export %+v: %d events, %d bytes", o, n, len(out))
		}
	}
	// From before the genesis: everything.
	if out, _ := exportBytes(t, db, "preview", ExportOptions{From: time.Unix(0, 0)}); !bytes.Equal(out, full) {
		t.Fatal("export from 1970")
	}
	// Bad After.
	var buf bytes.Buffer
	if _, err := db.Export(ctx, "preview", &buf, ExportOptions{After: eventid.MustParse("0005d5813bf9c4498e2a8b74e95bff80")}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("after an ID of another ledger: %v", err)
	}
	missing := eventid.New(ids[10].Micros()+1, 12345, info.ID)
	if _, err := db.Export(ctx, "preview", &buf, ExportOptions{After: missing}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after an ID that is not in the ledger: %v", err)
	}
	if _, err := db.Export(ctx, "nope", &buf, ExportOptions{}); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("export of a missing ledger: %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("failed exports wrote %d bytes", buf.Len())
	}
}

type failingWriter struct{ n, limit int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.limit {
		return 0, errors.New("disk full")
	}
	w.n += len(p)
	return len(p), nil
}

func TestExportErrors(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	importBytes(t, db, vector(t, examplesFile), ImportOptions{})
	n, err := db.Export(context.Background(), "preview", &failingWriter{limit: 1 << 20}, ExportOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "preview") || n == 0 || n >= 11550 {
		t.Fatalf("export to a failing writer: %d events, %v", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var events int64
	n, err = db.Export(ctx, "preview", io.Discard, ExportOptions{Progress: func(e, _ int64) {
		events = e
		cancel()
	}})
	if !errors.Is(err, context.Canceled) || n < events || events == 0 || n >= 11550 {
		t.Fatalf("cancelled export: %d events, %v", n, err)
	}
}

// TestExportStreams checks that an export does not hold the ledger in
// memory: beyond what reading the segments allocates (the segment iterator
// makes a few small allocations a record), it allocates a constant, its
// buffers, however many events it writes.
func TestExportStreams(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	importBytes(t, db, vector(t, examplesFile), ImportOptions{})
	// Reopen, so that no compaction after the import allocates meanwhile.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	l, err := db.ledger("preview")
	if err != nil {
		t.Fatal(err)
	}
	var written int64
	export := func() {
		n, err := db.Export(context.Background(), "preview", io.Discard, ExportOptions{Progress: func(_, b int64) { written = b }})
		if err != nil || n != 11550 {
			t.Fatalf("export: %d events, %v", n, err)
		}
	}
	read := func() {
		it := l.log.NewIterator(1, segment.FirstOffset)
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil || n != 11550 {
			t.Fatalf("reading the segments: %d records, %v", n, it.Err())
		}
	}
	measure := func(f func()) (allocs float64, bytes uint64) {
		f()
		allocs = testing.AllocsPerRun(3, f)
		// TotalAlloc counts the whole process, so a background
		// allocation (Pebble, the checkpointer) can land in one run: the
		// least of five runs is what the call itself allocates.
		bytes = math.MaxUint64
		for range 5 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			f()
			runtime.ReadMemStats(&after)
			bytes = min(bytes, after.TotalAlloc-before.TotalAlloc)
		}
		return allocs, bytes
	}
	exportAllocs, exportBytes := measure(export)
	readAllocs, readBytes := measure(read)
	t.Logf("exporting 11,550 events (%d bytes): %v allocations, %d bytes; reading the segments alone: %v, %d bytes",
		written, exportAllocs, exportBytes, readAllocs, readBytes)
	// AllocsPerRun counts the whole process, Pebble's background work
	// included, so the bound leaves room for noise (a run under -race saw
	// 111): one allocation an event would add 11,550.
	if extra := exportAllocs - readAllocs; extra > 1000 {
		t.Fatalf("an export of 11,550 events makes %v allocations more than reading the segments", extra)
	}
	// The writer's buffer (256 KiB) and little else; the 3 MB written
	// are not kept.
	if exportBytes > readBytes+512<<10 {
		t.Fatalf("an export of %d bytes allocates %d bytes, reading the segments %d", written, exportBytes, readBytes)
	}
}
