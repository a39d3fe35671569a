package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	examplesFile = "evently-examples-ledger.ndjson"
	twoEventFile = "evently-cli-two-events.ndjson"
)

// vector returns a file of ../../shared/vectors (beside the module root),
// skipping the test when the directory is absent, as the tests of package
// ndjson do.
func vector(t testing.TB, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "shared", "vectors")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("test vectors not found at %s (they live in ../shared/vectors beside the module): %v", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitLines returns the lines of an NDJSON text, each with its "\n".
func splitLines(b []byte) [][]byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// rewrite reads an NDJSON ledger and writes every event back with
// ndjson.AppendEvent: what an export of its import must be, byte for byte.
// It also returns the IDs in order.
func rewrite(t testing.TB, in []byte) ([]byte, []eventid.ID) {
	t.Helper()
	r := ndjson.NewReader(bytes.NewReader(in))
	var out []byte
	var ids []eventid.ID
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return out, ids
		}
		if err != nil {
			t.Fatal(err)
		}
		out = ndjson.AppendEvent(out, ev)
		ids = append(ids, ev.ID)
	}
}

// evently reports whether an input line is one that annal writes with other
// bytes: a timestamp with 3 fraction digits (annal writes 6), or data not in
// canonical form (annal writes it canonical). See ndjson's write_test.go.
func evently(t testing.TB, line []byte) bool {
	t.Helper()
	differs := false
	if err := canon.Members(bytes.TrimSpace(line), func(name string, v []byte) error {
		switch name {
		case "timestamp":
			differs = differs || len(v) == len(`"2022-01-14T14:43:04.680Z"`)
		case "data":
			c, err := canon.Append(nil, v)
			if err != nil {
				return err
			}
			differs = differs || !bytes.Equal(c, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return differs
}

// checkExport checks an export of the ledger imported from in: it is what
// ndjson.AppendEvent writes for in, byte for byte; line by line it equals
// the input except on the lines evently names; it has the same IDs in the
// same order; and it verifies as a whole ledger.
func checkExport(t *testing.T, in, out []byte) {
	t.Helper()
	want, ids := rewrite(t, in)
	if !bytes.Equal(out, want) {
		inLines, outLines, wantLines := splitLines(in), splitLines(out), splitLines(want)
		for i := range min(len(outLines), len(wantLines)) {
			if !bytes.Equal(outLines[i], wantLines[i]) {
				t.Fatalf("export line %d:\n got %s\nwant %s\n  in %s", i+1, outLines[i], wantLines[i], inLines[i])
			}
		}
		t.Fatalf("export has %d lines, want %d", len(outLines), len(wantLines))
	}
	inLines, outLines := splitLines(in), splitLines(out)
	if len(inLines) != len(outLines) {
		t.Fatalf("export has %d lines, input %d", len(outLines), len(inLines))
	}
	changed := 0
	for i := range inLines {
		if evently(t, inLines[i]) {
			changed++
			continue
		}
		if !bytes.Equal(inLines[i], outLines[i]) {
			t.Fatalf("line %d: exported %s, input %s", i+1, outLines[i], inLines[i])
		}
	}
	r := ndjson.NewReader(bytes.NewReader(out))
	for i := 0; ; i++ {
		ev, err := r.Next()
		if err == io.EOF {
			if i != len(ids) {
				t.Fatalf("%d events exported, want %d", i, len(ids))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID != ids[i] {
			t.Fatalf("line %d: eventId %s, input %s", i+1, ev.ID, ids[i])
		}
	}
	v, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(out)))
	if err != nil {
		t.Fatalf("the export does not verify: %v", err)
	}
	if v.Count() != int64(len(ids)) || v.Head() != ids[len(ids)-1] {
		t.Fatalf("export verifies as %d events up to %s", v.Count(), v.Head())
	}
	t.Logf("%d lines, %d of them with Evently's 3-digit timestamp or non-canonical data", len(inLines), changed)
}

func importBytes(t *testing.T, db *DB, in []byte, opts ImportOptions) LedgerInfo {
	t.Helper()
	info, err := db.Import(context.Background(), bytes.NewReader(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func exportBytes(t *testing.T, db *DB, ledger string, opts ExportOptions) ([]byte, int64) {
	t.Helper()
	var buf bytes.Buffer
	n, err := db.Export(context.Background(), ledger, &buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), n
}

// smallBatches makes imports append a few events at a time, so that a
// failing import has written segments before it fails.
func smallBatches(t *testing.T, n int) {
	old := importBatchBytes
	importBatchBytes = n
	t.Cleanup(func() { importBatchBytes = old })
}

func TestImportExportExamplesLedger(t *testing.T) {
	smallBatches(t, 64<<10)
	ctx := context.Background()
	in := vector(t, examplesFile)
	_, ids := rewrite(t, in)
	dir := t.TempDir()
	// Small segments, so that the import spans many of them.
	db, err := Open(dir, &Options{SegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	var lastEvents, lastBytes int64
	info, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{Progress: func(events, bytes int64) {
		if events < lastEvents || bytes < lastBytes {
			t.Errorf("progress went back: %d events %d bytes after %d %d", events, bytes, lastEvents, lastBytes)
		}
		calls++
		lastEvents, lastBytes = events, bytes
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 10 || lastEvents != 11550 || lastBytes != int64(len(in)) {
		t.Fatalf("progress: %d calls, last %d events %d bytes; want >= 10 calls, 11550 events, %d bytes", calls, lastEvents, lastBytes, len(in))
	}
	if info.Name != "preview" || info.ID.String() != "9e961c04" || info.Count != 11550 ||
		info.Genesis != ids[0] || info.Head != ids[len(ids)-1] || info.Description != "Show and Tell." {
		t.Fatalf("imported: %+v", info)
	}
	if want := time.Date(2022, 1, 14, 2, 5, 17, 252e6, time.UTC); !info.Created.Equal(want) {
		t.Fatalf("created %v, want the genesis meta's %v", info.Created, want)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, ledgersDir, "9e961c04", "*.seg"))
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several", len(segs))
	}

	out, n := exportBytes(t, db, "preview", ExportOptions{})
	if n != 11550 {
		t.Fatalf("exported %d events", n)
	}
	checkExport(t, in, out)

	// Reads of the imported ledger.
	for _, i := range []int{0, 1, 5000, len(ids) - 1} {
		ev, err := db.Get(ctx, ids[i])
		if err != nil || ev.Seq != uint64(i+1) || ev.ID != ids[i] {
			t.Fatalf("Get %s: %+v %v", ids[i], ev, err)
		}
		bySeq, err := db.GetSeq(ctx, "preview", uint64(i+1))
		if err != nil || bySeq.ID != ids[i] {
			t.Fatalf("GetSeq %d: %v %v", i+1, bySeq.ID, err)
		}
	}
	if ev, err := db.GetPrefix(ctx, ids[0].String()[:20]); err != nil || ev.ID != ids[0] {
		t.Fatalf("GetPrefix: %v %v", ev.ID, err)
	}
	all := collect(t, db.Scan(ctx, "preview", ScanOptions{}))
	if len(all) != len(ids) {
		t.Fatalf("Scan: %d events", len(all))
	}
	for i := range all {
		if all[i].ID != ids[i] {
			t.Fatalf("Scan event %d: %s, want %s", i, all[i].ID, ids[i])
		}
	}
	// Replay the stream of the 100th event; compare with a filter of the scan.
	e := all[99]
	var want []eventid.ID
	for _, a := range all {
		if a.Entity == e.Entity && a.Key == e.Key {
			want = append(want, a.ID)
		}
	}
	got := collect(t, db.Replay(ctx, "preview", ReplayOptions{Entity: e.Entity, Keys: []string{e.Key}}))
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("Replay %s/%s: %d events, want %d", e.Entity, e.Key, len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i] {
			t.Fatalf("Replay event %d: %s, want %s", i, got[i].ID, want[i])
		}
	}
	rep, err := db.Verify(ctx, "preview", nil)
	if err != nil || rep.Events != 11550 || rep.Head != ids[len(ids)-1] {
		t.Fatalf("Verify: %+v %v", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Appends continue after a reopen: a new event chains after the head.
	db = openTest(t, dir)
	defer db.Close()
	newIDs, err := idsOf(db.Append(ctx, "preview", []EventInput{order(1), order(2)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := db.Get(ctx, newIDs[0]); err != nil || ev.Seq != 11551 {
		t.Fatalf("new event: %+v %v", ev, err)
	}
	out2, _ := exportBytes(t, db, "preview", ExportOptions{})
	if !bytes.HasPrefix(out2, out) {
		t.Fatal("the export after the append does not begin with the export before it")
	}
	v, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(out2)))
	if err != nil || v.Count() != 11552 || v.Head() != newIDs[1] {
		t.Fatalf("export after the append: %v, %d events, head %s (want %s)", err, v.Count(), v.Head(), newIDs[1])
	}
	if rep, err := db.Verify(ctx, "preview", nil); err != nil || rep.Events != 11552 {
		t.Fatalf("Verify after the append: %+v %v", rep, err)
	}

	// The export imports into another directory as the same ledger.
	db2 := openTest(t, t.TempDir())
	defer db2.Close()
	info2 := importBytes(t, db2, out, ImportOptions{})
	if info2.ID != info.ID || info2.Genesis != info.Genesis || info2.Head != info.Head || info2.Count != info.Count || info2.Name != "preview" {
		t.Fatalf("re-imported: %+v, want %+v", info2, info)
	}
	out3, _ := exportBytes(t, db2, "preview", ExportOptions{})
	if !bytes.Equal(out3, out) {
		t.Fatal("the export of the re-imported ledger differs from the first export")
	}
}

func TestImportExportTwoEvents(t *testing.T) {
	t.Parallel()
	in := vector(t, twoEventFile)
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := importBytes(t, db, in, ImportOptions{})
	// The genesis data has no "name": the ledger is named by its key.
	if info.Name != "first-event-key" || info.ID.String() != "e95bff80" || info.Count != 2 ||
		info.Genesis.String() != "0005d5813bf9c4498e2a8b74e95bff80" || info.Head.String() != "0005d5814ce488843dc5de3ee95bff80" {
		t.Fatalf("imported: %+v", info)
	}
	out, n := exportBytes(t, db, "first-event-key", ExportOptions{})
	if n != 2 {
		t.Fatalf("exported %d events", n)
	}
	checkExport(t, in, out)
	// By ledger ID too.
	if out2, _ := exportBytes(t, db, "e95bff80", ExportOptions{}); !bytes.Equal(out2, out) {
		t.Fatal("export by ledger ID differs")
	}
}

// checkNothingImported checks that a failed import left nothing: no
// ledger, no directory under ledgers/, no index entry, no metadata; also
// after a reopen. It returns the reopened DB.
func checkNothingImported(t *testing.T, db *DB, dir string, ledger eventid.LedgerID) *DB {
	t.Helper()
	check := func(db *DB) {
		t.Helper()
		if ls := db.Ledgers(); len(ls) != 0 {
			t.Fatalf("ledgers after a failed import: %+v", ls)
		}
		if u := db.Unavailable(); len(u) != 0 {
			t.Fatalf("unavailable ledgers after a failed import: %v", u)
		}
		entries, err := os.ReadDir(filepath.Join(dir, ledgersDir))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Fatalf("%s holds %s after a failed import", ledgersDir, entries[0].Name())
		}
		if _, found, err := db.idx.Progress(ledger); err != nil || found {
			t.Fatalf("index progress of %s after a failed import: found %v, %v", ledger, found, err)
		}
		if _, _, found, err := db.idx.Lookup(eventid.MustParse("0005d5813bf9c44943545b8f9e961c04")); err != nil || found {
			t.Fatalf("the genesis event is in the index after a failed import: %v %v", found, err)
		}
		metas, err := meta.Load(db.meta)
		if err != nil || len(metas) != 0 {
			t.Fatalf("metadata after a failed import: %+v %v", metas, err)
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	check(db)
	return db
}

func TestImportRefusesBadInput(t *testing.T) {
	smallBatches(t, 32<<10)
	in := vector(t, examplesFile)
	lines := splitLines(in)
	other := splitLines(vector(t, twoEventFile))
	join := func(ls [][]byte) []byte { return bytes.Join(ls, nil) }
	with := func(i int, line []byte) [][]byte {
		ls := append([][]byte(nil), lines...)
		ls[i] = line
		return ls
	}
	// Change one character inside line n's data.
	tamper := func(n int) []byte {
		l := bytes.Clone(lines[n-1])
		at := bytes.Index(l, []byte(`"data":`)) + len(`"data":`)
		for l[at] < 'a' || l[at] > 'y' {
			at++
		}
		l[at]++
		return join(with(n-1, l))
	}
	insert := func(i int, line []byte) []byte {
		ls := append([][]byte(nil), lines[:i]...)
		ls = append(ls, line)
		return join(append(ls, lines[i:]...))
	}
	// Line 42's timestamp, its last digit changed.
	l42 := bytes.Clone(lines[41])
	at := bytes.Index(l42, []byte(`Z","meta"`)) - 1
	if l42[at] == '0' {
		l42[at] = '1'
	} else {
		l42[at]--
	}
	offByOne := join(with(41, l42))
	swapped := append([][]byte(nil), lines...)
	swapped[7000], swapped[7001] = swapped[7001], swapped[7000]
	last := lines[len(lines)-1]

	for _, tc := range []struct {
		name string
		in   []byte
		line int
		is   error // besides ErrInvalid
	}{
		{"data changed in line 1", tamper(1), 1, ndjson.ErrMismatch},
		{"data changed in line 2", tamper(2), 2, ndjson.ErrMismatch},
		{"data changed in line 9000", tamper(9000), 9000, ndjson.ErrMismatch},
		{"data changed in the last line", tamper(len(lines)), len(lines), ndjson.ErrMismatch},
		{"a line of another ledger", insert(5000, other[1]), 5001, ndjson.ErrMismatch},
		{"another ledger's genesis", insert(5000, other[0]), 5001, ndjson.ErrMismatch},
		{"truncated last line", join(append(append([][]byte(nil), lines[:len(lines)-1]...), last[:len(last)/2])), len(lines), nil},
		{"duplicated line", insert(3000, lines[2999]), 3001, ndjson.ErrMismatch},
		{"reordered lines", join(swapped), 7001, ndjson.ErrMismatch},
		{"unknown member", join(with(99, bytes.Replace(lines[99], []byte(`{"entity"`), []byte(`{"x":1,"entity"`), 1))), 100, ndjson.ErrUnknownField},
		{"empty line", insert(6000, []byte("\n")), 6001, ndjson.ErrEmptyLine},
		{"not JSON", insert(6000, []byte("hello\n")), 6001, nil},
		{"timestamp off by 1 µs", offByOne, 42, ndjson.ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir)
			_, err := db.Import(context.Background(), bytes.NewReader(tc.in), ImportOptions{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want %v", err, tc.is)
			}
			var le *ndjson.LineError
			if !errors.As(err, &le) || le.Line != tc.line {
				t.Fatalf("got %v, want an error at line %d", err, tc.line)
			}
			if want := "line " + strconv.Itoa(tc.line) + ":"; !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
			db = checkNothingImported(t, db, dir, eventid.LedgerID(0x9e961c04))
			defer db.Close()
			// The good file imports afterwards.
			info := importBytes(t, db, in, ImportOptions{})
			if info.Count != 11550 {
				t.Fatalf("import after the failure: %+v", info)
			}
		})
	}
}

func TestImportEmptyAndUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	_, err := db.Import(context.Background(), strings.NewReader(""), ImportOptions{})
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ndjson.ErrNoEvents) {
		t.Fatalf("empty input: %v", err)
	}
	in := vector(t, twoEventFile)
	_, err = db.Import(context.Background(), &failingReader{data: bytes.NewReader(in)}, ImportOptions{})
	var le *ndjson.LineError
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ndjson.ErrRead) || !errors.As(err, &le) || le.Line != 3 {
		t.Fatalf("unreadable input: %v, want ErrInvalid and ErrRead at line 3", err)
	}
	db = checkNothingImported(t, db, dir, eventid.LedgerID(0xe95bff80))
	db.Close()
}

type failingReader struct{ data io.Reader }

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.data.Read(p)
	if err == io.EOF {
		return n, errors.New("disk on fire")
	}
	return n, err
}

func TestImportExistingLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := vector(t, examplesFile)
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	importBytes(t, db, in, ImportOptions{})
	entries := func() []string {
		es, err := os.ReadDir(filepath.Join(dir, ledgersDir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	// The same ledger again, under its name or another: the ID exists.
	for _, name := range []string{"", "other"} {
		_, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{Name: name})
		if !errors.Is(err, ErrLedgerExists) || !strings.Contains(err.Error(), "9e961c04") {
			t.Fatalf("second import (name %q): %v", name, err)
		}
	}
	// Another ledger under a name that exists.
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	_, err := db.Import(ctx, bytes.NewReader(vector(t, twoEventFile)), ImportOptions{Name: "taken"})
	if !errors.Is(err, ErrLedgerExists) || !strings.Contains(err.Error(), `"taken"`) {
		t.Fatalf("import under a taken name: %v", err)
	}
	if got := entries(); len(got) != 2 {
		t.Fatalf("ledgers dir: %v, want the two ledgers only", got)
	}
	if ls := db.Ledgers(); len(ls) != 2 || ls[0].Name != "preview" || ls[1].Name != "taken" {
		t.Fatalf("ledgers: %+v", ls)
	}
	// A bad name.
	if _, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{Name: "a\x00b"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("import under a bad name: %v", err)
	}
}

// TestConcurrentImports imports one ledger from several goroutines at once:
// one succeeds, the others fail with ErrLedgerExists and leave nothing.
func TestConcurrentImports(t *testing.T) {
	smallBatches(t, 256<<10)
	in := vector(t, examplesFile)
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = db.Import(context.Background(), bytes.NewReader(in), ImportOptions{})
		})
	}
	// Meanwhile, another ledger is created and read.
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "side"}); err != nil {
		t.Fatal(err)
	}
	collect(t, db.Scan(context.Background(), "side", ScanOptions{}))
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrLedgerExists):
			t.Fatalf("concurrent import: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d imports succeeded, want 1: %v", ok, errs)
	}
	es, _ := os.ReadDir(filepath.Join(dir, ledgersDir))
	if len(es) != 2 {
		t.Fatalf("%d entries in %s, want 2", len(es), ledgersDir)
	}
	out, _ := exportBytes(t, db, "preview", ExportOptions{})
	checkExport(t, in, out)
}

func TestImportCancelled(t *testing.T) {
	smallBatches(t, 32<<10)
	in := vector(t, examplesFile)
	dir := t.TempDir()
	db := openTest(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("import with a cancelled context: %v", err)
	}
	// Cancelled halfway, after batches were written.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	written := int64(0)
	_, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{Progress: func(events, _ int64) {
		written = events
		if events > 5000 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || written <= 5000 || written >= 11550 {
		t.Fatalf("import cancelled halfway: %v after %d events", err, written)
	}
	db = checkNothingImported(t, db, dir, eventid.LedgerID(0x9e961c04))
	defer db.Close()
	importBytes(t, db, in, ImportOptions{})
}

// TestImportName checks the name of an imported ledger, and what a rebuild
// of the metadata from the segments makes of it.
func TestImportName(t *testing.T) {
	t.Parallel()
	in := vector(t, examplesFile)
	for _, tc := range []struct{ opt, want, rebuilt string }{
		{"", "preview", "preview"},
		{"examples", "examples", "examples"}, // the rebuild reads the name from the ledger's NAME file
	} {
		dir := t.TempDir()
		db := openTest(t, dir)
		info := importBytes(t, db, in, ImportOptions{Name: tc.opt})
		if info.Name != tc.want {
			t.Fatalf("name %q, want %q", info.Name, tc.want)
		}
		db.Close()
		db = openTest(t, dir)
		if _, err := db.Ledger(tc.want); err != nil {
			t.Fatalf("after reopen: %v", err)
		}
		db.Close()
		if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
			t.Fatal(err)
		}
		db = openTest(t, dir)
		got, err := db.Ledger("9e961c04")
		if err != nil || got.Name != tc.rebuilt || got.Count != 11550 {
			t.Fatalf("after losing the metadata: %+v %v, want the name %q", got, err, tc.rebuilt)
		}
		db.Close()
	}
}

// TestImportLeftoverDirectory leaves the temporary directory of an
// interrupted import (with a segment in it) in ledgers/: Open ignores it,
// and removeImportLeftovers removes it.
func TestImportLeftoverDirectory(t *testing.T) {
	t.Parallel()
	in := vector(t, twoEventFile)
	dir := t.TempDir()
	db := openTest(t, dir)
	importBytes(t, db, in, ImportOptions{})
	db.Close()
	// A leftover: a copy of a real ledger directory, under an import name.
	leftover := filepath.Join(dir, ledgersDir, importDirPrefix+"0123456789abcdef")
	copyTree(t, filepath.Join(dir, ledgersDir, "e95bff80"), leftover)
	if err := os.WriteFile(filepath.Join(dir, ledgersDir, importDirPrefix+"file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	if ls, u := db.Ledgers(), db.Unavailable(); len(ls) != 1 || len(u) != 0 || ls[0].Count != 2 {
		t.Fatalf("with a leftover: ledgers %+v, unavailable %v", ls, u)
	}
	// An import works beside it.
	importBytes(t, db, vector(t, examplesFile), ImportOptions{})
	db.Close()
	fs := privateFS{vfs.Default}
	listing, err := fs.List(filepath.Join(dir, ledgersDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := removeImportLeftovers(fs, filepath.Join(dir, ledgersDir), listing); err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(filepath.Join(dir, ledgersDir))
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "9e961c04 e95bff80" {
		t.Fatalf("after removeImportLeftovers: %v", names)
	}
	db = openTest(t, dir)
	defer db.Close()
	if ls := db.Ledgers(); len(ls) != 2 {
		t.Fatalf("ledgers: %+v", ls)
	}
}

// TestImportTimestamps records what the segment log requires of imported
// timestamps: strictly increasing, as the Verifier does. (The reference
// ledgers have no two events at the same microsecond.)
func TestImportTimestamps(t *testing.T) {
	t.Parallel()
	_, ids := rewrite(t, vector(t, examplesFile))
	for i := 1; i < len(ids); i++ {
		if ids[i].Micros() <= ids[i-1].Micros() {
			t.Fatalf("events %d and %d of the examples ledger are at %d and %d µs", i, i+1, ids[i-1].Micros(), ids[i].Micros())
		}
	}
	// Two events at the same microsecond, with correct IDs, are refused
	// by the Verifier (and would be by the segment log), at the second.
	genesis := segment.Entry{Entity: "e", Key: "k", Event: "created", Meta: []byte(`{}`), Data: []byte(`{"name":"same-time"}`)}
	c := eventid.Content{Entity: genesis.Entity, Key: genesis.Key, Event: genesis.Event, Meta: genesis.Meta, Data: genesis.Data}
	ledger := c.LedgerID()
	id1 := c.ID(ledger, 1000, eventid.Genesis(ledger))
	c2 := eventid.Content{Entity: "e", Key: "k", Event: "again", Meta: []byte(`{}`), Data: []byte(`1`)}
	id2 := c2.ID(ledger, 1000, id1)
	var in []byte
	in = ndjson.AppendLine(in, id1, 1000, c.Entity, c.Key, c.Event, c.Meta, c.Data)
	in = ndjson.AppendLine(in, id2, 1000, c2.Entity, c2.Key, c2.Event, c2.Meta, c2.Data)
	db := openTest(t, t.TempDir())
	defer db.Close()
	_, err := db.Import(context.Background(), bytes.NewReader(in), ImportOptions{})
	var le *ndjson.LineError
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ndjson.ErrTimeOrder) || !errors.As(err, &le) || le.Line != 2 {
		t.Fatalf("equal timestamps: %v, want ErrTimeOrder at line 2", err)
	}
}
