package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// TestAppendEventLine checks the Evently line: its escapes, and that the
// Evently examples ledger, parsed and written again line by line, is a
// ledger that verifies, with the same events.
func TestAppendEventLine(t *testing.T) {
	t.Parallel()
	ev := engine.Event{ID: eventid.MustParse("0005d5813bf9c44943545b8f9e961c04"), Entity: "a\"\\\n<&>", Key: "é📒", Event: "x",
		Meta: []byte(`{}`), Data: []byte(`[1,"\u2028"]`)}
	got := string(appendEventLine(nil, &ev))
	want := `{"entity":"a\"\\\n<&>","key":"é📒","event":"x","eventId":"0005d5813bf9c44943545b8f9e961c04","timestamp":"2022-01-14T02:05:17.275209Z","meta":{},"data":[1,"\u2028"]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}

	f, err := os.Open(vectorPath(t, "evently-examples-ledger.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var in []ndjson.Event
	var out []byte
	r := ndjson.NewReader(f)
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, *e)
		in[len(in)-1].Meta, in[len(in)-1].Data = bytes.Clone(e.Meta), bytes.Clone(e.Data)
		out = appendEventLine(out, &engine.Event{ID: e.ID, Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data})
		out = append(out, '\n')
	}
	v, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(out)))
	if err != nil || v.Count() != 11550 || v.Ledger().String() != "9e961c04" {
		t.Fatalf("the ledger written again: %v", err)
	}
	r = ndjson.NewReader(bytes.NewReader(out))
	for i := range in {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := in[i]
		if e.ID != a.ID || e.Micros != a.Micros || e.Entity != a.Entity || e.Key != a.Key || e.Event != a.Event || !bytes.Equal(e.Meta, a.Meta) || !bytes.Equal(e.Data, a.Data) {
			t.Fatalf("line %d: read %+v, wrote %+v", i+1, a, e)
		}
	}
}

// newDir returns a data directory with ledger "orders".
func newDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, errOut := annal(t, "", "--dir", dir, "create", "orders"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	return dir
}

// lockedBuffer is a bytes.Buffer safe for a command and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// copyDir copies the files of src to dst: what a crash of the process
// would leave on disk at this moment (the page cache survives it). A
// file the running process removes while the copy walks (Pebble drops
// an obsolete OPTIONS file) is left out, as a crash then would leave it.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != src {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// getEvents opens dir and returns the events with these IDs.
func getEvents(t *testing.T, dir string, ids ...string) []engine.Event {
	t.Helper()
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var evs []engine.Event
	for _, s := range ids {
		ev, err := db.Get(context.Background(), eventid.MustParse(s))
		if err != nil {
			t.Fatalf("event %s, printed by append, is not in %s: %v", s, dir, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestAppendPrintsIDWhenStored runs append in-process with standard input
// and output as pipes: an ID is printed while the command still waits for
// more input, and by then its event is in the files (a copy of the
// directory taken then has it), and after the command ends it is there.
func TestAppendPrintsIDWhenStored(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut lockedBuffer
	done := make(chan int)
	go func() {
		code := run([]string{"--dir", dir, "append", "orders"}, inR, outW, &errOut)
		outW.Close()
		done <- code
	}()
	out := bufio.NewReader(outR)
	readID := func() string {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an ID: %v; stderr %s", err, errOut.String())
		}
		return strings.TrimSuffix(line, "\n")
	}

	fmt.Fprintln(inW, `{"entity":"order","key":"o-1","event":"placed","data":{"n":1}}`)
	first := readID()
	snapshot := filepath.Join(t.TempDir(), "snapshot")
	copyDir(t, dir, snapshot) // the command is waiting for line 2 now
	if ev := getEvents(t, snapshot, first)[0]; ev.Key != "o-1" || string(ev.Data) != `{"n":1}` {
		t.Fatalf("snapshot: %+v", ev)
	}

	fmt.Fprintln(inW, `{"entity":"order","key":"o-2","event":"placed"}`)
	second := readID()
	inW.Close()
	if rest, _ := io.ReadAll(out); len(rest) != 0 {
		t.Fatalf("more output: %q", rest)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	evs := getEvents(t, dir, first, second)
	if evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("seqs %d, %d", evs[0].Seq, evs[1].Seq)
	}
}

// TestAppendKilled kills an append process (the test binary as annal, see
// TestMain) after it printed an ID: the event is there when the directory
// is opened again.
func TestAppendKilled(t *testing.T) {
	bin, err := exec.LookPath("annal")
	if err != nil {
		t.Fatalf("TestMain puts annal on PATH: %v", err)
	}
	dir := newDir(t)
	cmd := exec.Command(bin, "--dir", dir, "append", "orders")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut lockedBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	var ids []string
	for i := range 3 {
		fmt.Fprintf(stdin, `{"entity":"order","key":"o-%d","event":"placed"}`+"\n", i)
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading ID %d: %v; stderr %s", i, err, errOut.String())
		}
		ids = append(ids, strings.TrimSuffix(line, "\n"))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	evs := getEvents(t, dir, ids...)
	for i, ev := range evs {
		if ev.Key != fmt.Sprintf("o-%d", i) {
			t.Fatalf("event %s: %+v", ids[i], ev)
		}
	}
}

// countingWriter counts the writes to it.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestAppendBatches appends many lines at once: they are appended in
// batches (fewer flushes of IDs than events), every ID is printed once, in
// ledger order.
func TestAppendBatches(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	const n = 3000
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"entity":"acct","key":"a-%d","event":"deposit","data":{"i":%d}}`+"\n", i%7, i)
	}
	var out countingWriter
	var errOut bytes.Buffer
	if code := run([]string{"--dir", dir, "append", "orders"}, strings.NewReader(in.String()), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	ids := strings.Fields(out.String())
	if len(ids) != n {
		t.Fatalf("%d IDs printed, want %d", len(ids), n)
	}
	if out.writes >= n/2 {
		t.Errorf("%d writes for %d events: not batched", out.writes, n)
	}
	t.Logf("%d events in %d flushes", n, out.writes)
	code, scanOut, errText := annal(t, "", "--dir", dir, "scan", "orders", "--after", ids[0], "--limit", "1")
	if code != 0 || !strings.Contains(scanOut, ids[1]) {
		t.Fatalf("scan after the first: exit %d %s %s", code, scanOut, errText)
	}
	code, scanOut, _ = annal(t, "", "--dir", dir, "scan", "orders", "--format", "ndjson")
	lines := strings.Split(strings.TrimSpace(scanOut), "\n")[1:] // the genesis event first
	if code != 0 || len(lines) != n {
		t.Fatalf("scan: exit %d, %d events", code, len(lines))
	}
	for i, l := range lines {
		if !strings.Contains(l, `"eventId":"`+ids[i]+`"`) || !strings.Contains(l, fmt.Sprintf(`"data":{"i":%d}`, i)) {
			t.Fatalf("event %d: %s, printed ID %s", i, l, ids[i])
		}
	}
}

// TestTail runs tail in-process and ends it as a signal would.
func TestTail(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	code, out, errOut := annal(t, "{\"entity\":\"e\",\"key\":\"k\",\"event\":\"v\"}\n{\"entity\":\"e\",\"key\":\"k\",\"event\":\"w\"}\n", "--dir", dir, "append", "orders")
	if code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	ids := strings.Fields(out)

	for _, c := range []struct {
		args []string
		want []string // event names, in order
	}{
		{[]string{"--from-start"}, []string{"ledger-created", "v", "w"}},
		{[]string{"--after", ids[0]}, []string{"w"}},
		{nil, nil}, // from the current head: nothing yet
	} {
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int)
		var errOut lockedBuffer
		go func() {
			code := runContext(ctx, append([]string{"--dir", dir, "tail", "orders"}, c.args...), strings.NewReader(""), outW, &errOut)
			outW.Close()
			done <- code
		}()
		lines := bufio.NewScanner(outR)
		for _, name := range c.want {
			if !lines.Scan() {
				t.Fatalf("tail %q: output ended before event %s; stderr %s", c.args, name, errOut.String())
			}
			if !strings.Contains(lines.Text(), `"event":"`+name+`"`) {
				t.Fatalf("tail %q: %s, want event %s", c.args, lines.Text(), name)
			}
		}
		cancel()
		if lines.Scan() {
			t.Fatalf("tail %q: more output: %s", c.args, lines.Text())
		}
		if code := <-done; code != 0 {
			t.Fatalf("tail %q: exit %d: %s", c.args, code, errOut.String())
		}
	}
}

// TestFollow checks that tail's follow prints each event as it commits, in
// the format asked for, with events appended by the same process.
func TestFollow(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, format := range []string{formatNDJSON, formatJSON, formatTable} {
		head, err := db.Ledger("orders")
		if err != nil {
			t.Fatal(err)
		}
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			err := follow(ctx, db, "orders", head.Head, outW, format)
			outW.Close()
			done <- err
		}()
		lines := bufio.NewScanner(outR)
		if format == formatTable {
			if !lines.Scan() || !strings.HasPrefix(lines.Text(), "TIME ") {
				t.Fatalf("table: no header: %q", lines.Text())
			}
		}
		for i := range 3 {
			res, err := db.Append(ctx, "orders", []engine.EventInput{{Entity: "e", Key: "k", Event: fmt.Sprintf("n%d", i), Meta: []byte("{}"), Data: []byte(`{"a":1}`)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !lines.Scan() {
				t.Fatalf("%s: no line for event %d", format, i)
			}
			line := lines.Text()
			switch format {
			case formatTable:
				if f := strings.Fields(line); len(f) != 7 || f[2] != "e" || f[4] != fmt.Sprintf("n%d", i) || f[5] != res.IDs[0].String() || f[6] != `{"a":1}` {
					t.Fatalf("table row %q", line)
				}
			default: // json is written as ndjson: a stream has no end
				if want := `"eventId":"` + res.IDs[0].String() + `"`; !strings.HasPrefix(line, `{"entity":"e",`) || !strings.Contains(line, want) {
					t.Fatalf("%s: line %q, want %s", format, line, want)
				}
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%s: follow: %v", format, err)
		}
	}
}

// TestVerifyProgress checks that verify --full moves its progress bar over
// the ledger's bytes, in IEC units, and then shows the check of the index
// as a phase of its own (the bar once stalled at 70-82%
// while the index was checked).
func TestVerifyProgress(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	var in strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&in, `{"entity":"e","key":"k","event":"v","data":{"i":%d}}`+"\n", i)
	}
	if code, _, errOut := annal(t, in.String(), "--dir", dir, "append", "orders"); code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ledgers := db.Ledgers()
	var bar lockedBuffer
	v := &verifier{db: db, full: true, meter: newVerifyMeter(&bar, ledgers)}
	v.meter.delay = 0 // draw from the first value: this test is not about the rate
	r := v.verify(context.Background(), &ledgers[0])
	if r.err != nil || r.Events != 2001 {
		t.Fatalf("verify: %+v", r)
	}
	if v.done != ledgers[0].Bytes || v.meter.value != ledgers[0].Bytes {
		t.Fatalf("progress %d of %d bytes", v.meter.value, ledgers[0].Bytes)
	}
	v.meter.finish()
	// It draws at most every 100 ms: at least the start, with the total,
	// and the index's phase.
	if s := bar.String(); !strings.Contains(s, "verify orders") || !strings.Contains(s, " KiB)") ||
		!strings.Contains(s, "verify orders: segments ok; checking the index against them…") || strings.Contains(s, " kB") {
		t.Fatalf("progress bar drew %q", s)
	}
}

// TestVerifyQuickSaysWhatItChecked: each result says which events it read
// and points to --full, in the table and in JSON (it once
// said "ok" after a byte of the checkpointed part was flipped, and not
// that it had not read it). Verify opens the directory
// read-only, and the quick check reads every record, as every read-only
// open does; on a copy of a live directory (what a crash leaves) it
// changes no byte: the second run sees what the first saw (it used to
// recover the copy, which then read as closed cleanly).
func TestVerifyQuickSaysWhatItChecked(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := db.Append(context.Background(), "orders", []engine.EventInput{{Entity: "e", Key: "k", Event: fmt.Sprint("v", i), Meta: []byte("{}"), Data: []byte("{}")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// What a crash would leave: the index's progress marker is the one of the
	// last close, after the genesis event.
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	db.Close()
	before := hashDir(t, crashed)

	code, out, errOut := annal(t, "", "--dir", crashed, "verify", "--format", "json")
	if code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errOut)
	}
	var res []map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 {
		t.Fatalf("verify: %v: %s", err, out)
	}
	r := res[0]
	checked, _ := r["checked"].(string)
	if r["full"] != false || r["checked_from"] != 1.0 || r["checked_to"] != 6.0 ||
		!strings.Contains(checked, "events #1..#6") || !strings.Contains(checked, "--full") {
		t.Fatalf("quick verify of a crashed directory: %s", out)
	}

	code, out, errOut = annal(t, "", "--dir", crashed, "verify", "--format", "table")
	if code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^orders +[0-9a-f]{8} +6 +[0-9a-f]{32} +#1..#6 +ok +ok +ok +ok$`).MatchString(out) ||
		!strings.Contains(out, "run annal verify --full to check the Merkle tree file and the index against them too") {
		t.Fatalf("quick verify, table:\n%s", out)
	}
	code, out, _ = annal(t, "", "--dir", crashed, "verify", "--full", "--format", "ndjson")
	if code != 0 || !regexp.MustCompile(`"full":true,"checked":"every record \(events #1..#6\), the Merkle tree file against them \(\d+ leaves\)[^"]*, and [^"]*","checked_from":1,"checked_to":6,"tree_size":\d+`).MatchString(out) {
		t.Fatalf("verify --full: exit %d: %s", code, out)
	}
	if d := diffHashes(before, hashDir(t, crashed)); d != "" {
		t.Fatalf("verify changed the directory: %s", d)
	}
}

// TestUsageErrorNamesItsHelp: a usage error points to the help of the
// command that was run (it once said "Run 'annal --help'"
// for every command), and a malformed argument of get is one (it exited 1).
func TestUsageErrorNamesItsHelp(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	for _, c := range []struct {
		args []string
		help string
	}{
		{[]string{"append", "orders", "--durability", "fast"}, "annal append"},
		{[]string{"scan", "orders", "--from", "soon"}, "annal scan"},
		{[]string{"get", "abc"}, "annal get"},
		{[]string{"get", "orders#x"}, "annal get"},
		{[]string{"id", "--format", "xml", "0005d5813bf9c44943545b8f9e961c04"}, "annal id"},
		{[]string{"verify", "--fast"}, "annal verify"},
		{[]string{"frobnicate"}, "annal"},
	} {
		code, _, errOut := annal(t, "", append([]string{"--dir", dir}, c.args...)...)
		want := "Run '" + c.help + " --help' for usage.\n"
		if code != exitUsage || !strings.HasSuffix(errOut, want) || strings.Count(errOut, "\n") != 2 {
			t.Errorf("annal %q: exit %d, stderr %q; want exit 2, one line and %q", c.args, code, errOut, want)
		}
	}
}

// TestIDFormatTable: id takes --format table (the listing) and ndjson (the
// JSON lines), as the other commands do.
func TestIDFormatTable(t *testing.T) {
	t.Parallel()
	const hex = "0005d5813bf9c44943545b8f9e961c04"
	_, text, _ := annal(t, "", "id", hex)
	code, table, errOut := annal(t, "", "id", "--format", "table", hex)
	if code != 0 || table != text || !strings.HasPrefix(table, "id        "+hex+"\n") {
		t.Fatalf("id --format table: exit %d, stdout %q, stderr %q; want the listing %q", code, table, errOut, text)
	}
	_, js, _ := annal(t, "", "id", "--format", "json", hex)
	code, nd, errOut := annal(t, "", "id", "--format", "ndjson", hex)
	if code != 0 || nd != js || !strings.HasPrefix(nd, `{"id":"`+hex+`"`) {
		t.Fatalf("id --format ndjson: exit %d, stdout %q, stderr %q", code, nd, errOut)
	}
}

// TestErrorsSayEachThingOnce: an error names each thing once (errors
// once read "engine: append to l: engine: condition failed", and verify's
// "verify orders: engine: verify orders: segment: …"), and the sentinels
// still match.
func TestErrorsSayEachThingOnce(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.Ledger("orders")
	if err != nil {
		t.Fatal(err)
	}
	ev := []engine.EventInput{{Entity: "e", Key: "k", Event: "v", Meta: []byte("{}"), Data: []byte("{}")}}
	if _, err := db.Append(context.Background(), "orders", ev, nil); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*engine.AppendOptions{
		{ExpectedHead: info.Head},
		{ExpectedStreams: []engine.ExpectedStream{{Entity: "e", Key: "k"}}},
	} {
		_, err := db.Append(context.Background(), "orders", ev, o)
		var ce *engine.ConditionError
		msg := fmt.Sprint(err)
		if !errors.Is(err, engine.ErrConditionFailed) || !errors.As(err, &ce) ||
			strings.Count(msg, "engine:") != 1 || strings.Count(msg, "condition failed") != 1 || !strings.HasPrefix(msg, "engine: append to orders: condition failed: ") {
			t.Errorf("a failed condition: %q (matches ErrConditionFailed: %v)", msg, errors.Is(err, engine.ErrConditionFailed))
		}
	}
	db.Close()

	seg := filepath.Join(dir, "ledgers", info.ID.String(), "00000000000000000001.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff // in the genesis event's record
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := annal(t, "", "--dir", dir, "verify", "--full")
	first, _, _ := strings.Cut(errOut, "\n")
	if code != exitVerification || strings.Count(first, "verify orders") != 1 || !strings.HasPrefix(first, "annal: verify orders: engine: ledger unavailable: ledger "+info.ID.String()+": segment: corruption in ") {
		t.Errorf("verify --full of a damaged ledger: exit %d, stderr %q", code, errOut)
	}
}

// TestTailTableLinesUp: every row of tail's table lines up with the header
// above it (the header once was as wide as the column
// names, and the first key longer than "KEY" pushed every row off it). The
// columns start as wide as the last events need; a wider cell later widens
// its column and writes the header again.
func TestTailTableLinesUp(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	appendOne := func(entity, key, event string) {
		t.Helper()
		if _, err := db.Append(context.Background(), "orders", []engine.EventInput{{Entity: entity, Key: key, Event: event, Meta: []byte("{}"), Data: []byte(`{"n":1}`)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		appendOne("order", fmt.Sprintf("order-%d", i), "placed")
	}
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		err := follow(ctx, db, "orders", eventid.ID{}, outW, formatTable)
		outW.Close()
		done <- err
	}()
	lines := bufio.NewScanner(outR)
	var got []string
	next := func() {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("tail ended; got %q", got)
		}
		got = append(got, lines.Text())
	}
	for range 1 + 13 { // the header, the genesis event and 12 events
		next()
	}
	appendOne("order", "order-12", "paid")                               // fits
	appendOne("a-much-longer-entity", "a-much-longer-key-than-any", "x") // does not
	appendOne("order", "order-13", "last")
	for !strings.Contains(got[len(got)-1], " last ") { // a row, a header, two rows
		next()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Each cell starts where its column's name does in the header above.
	var starts []int
	headers := 0
	for _, line := range got {
		if strings.HasPrefix(line, "TIME ") {
			headers++
			starts = starts[:0]
			for _, name := range eventColumns {
				starts = append(starts, strings.Index(line, " "+name+" ")+1)
			}
			starts[0] = 0
			starts[len(starts)-1] = strings.Index(line, " DATA") + 1
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != len(eventColumns) {
			t.Fatalf("row %q", line)
		}
		at := 0
		for i, f := range fields {
			at += strings.Index(line[at:], f)
			if at != starts[i] {
				t.Errorf("row %q: %s starts at %d, its column %s at %d in the header above", line, f, at, eventColumns[i], starts[i])
			}
			at += len(f)
		}
	}
	if headers != 2 {
		t.Errorf("%d headers, want 2 (the second above the row that widened the table):\n%s", headers, strings.Join(got, "\n"))
	}
}

// TestStatsRate: the rate is given per the largest unit the span covers,
// never extrapolated from seconds to a day (10^6
// events in 7 seconds showed "1000001.0" events a day).
func TestStatsRate(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 11, 23, 11, 18, 20, 0, time.UTC)
	for _, c := range []struct {
		count  uint64
		span   time.Duration
		rate   string
		perDay bool
	}{
		{1_000_001, 7 * time.Second, "142857.3/s", false},
		{5, 500 * time.Millisecond, "10.0/s", false},
		{600, 10 * time.Minute, "60.0/min", false},
		{7200, 2 * time.Hour, "3600.0/h", false},
		{30, 3 * 24 * time.Hour, "10.0/day", true},
		{1, 0, "-", false},
	} {
		r := statsRow{Count: c.count, First: jsonTime(first), Last: jsonTime(first.Add(c.span))}
		r.finish()
		if got := r.rate(); got != c.rate || (r.EventsPerDay != nil) != c.perDay {
			t.Errorf("%d events over %v: rate %q, events a day %v; want %q, a day's rate given: %v", c.count, c.span, got, r.EventsPerDay, c.rate, c.perDay)
		}
	}
}
