package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/spf13/cobra"
)

// TestProtectIDArgsLeavesValues: a flag's value, and a positional argument
// of a command that does not take IDs, are never rewritten, though each
// reads as a base64 ID; the positional IDs of id and
// get are, wherever the flags put them. idargs.txtar runs the same cases
// end to end.
func TestProtectIDArgsLeavesValues(t *testing.T) {
	t.Parallel()
	const v = "-Quarterly_report_2026" // the base64 form of 1bea6df9ab7c7e977ab5d37e650c10c7
	const hex = "1bea6df9ab7c7e977ab5d37e650c10c7"
	const b64 = "--0SL0Dzb3HJCJLsyT_Wk3"
	const b64hex = "0005d5813bf9c44943545b8f9e961c04"
	same := [][]string{
		{"create", "--description", v, "mylog"},
		{"create", "--actor", v, "mylog"},
		{"--dir", v, "create", "mylog"},
		{"create", "--dir", v, "mylog"},
		{"--format", "json", "--dir", v, "ledgers"},
		{"append", "mylog", "--entity", v, "--key", v, "--event", v},
		{"append", "mylog", "--entity", "e", "--key", "k", "--event", "v", "--idempotency-key", v},
		{"append", "mylog", "--data", `"x"`, "--meta", "{}", "--entity", "e", "--key", "k", "--event", v},
		{"append", "mylog", "--expect-head", b64},
		{"scan", "mylog", "--entity", v, "--key", v, "--event", v},
		{"scan", "mylog", "--after", b64, "--from", b64, "--to", v},
		{"tail", "mylog", "--after", b64},
		{"export", "mylog", "-o", v},
		{"export", "mylog", "--after", b64, "--output", v},
		{"import", "--name", v, "file.ndjson"},
		{"import", v},
		{"verify-file", v},
		{"create", "--", v},
		{"id", "--", v},
		{"get", "--", b64},
		// get's and id's own flags keep their values too.
		{"get", "--dir", v, "--format", "json", hex},
		{"id", "--format", "json", hex},
	}
	root := newRootCmd()
	for _, args := range same {
		if got := protectIDArgs(root, args); !slices.Equal(got, args) {
			t.Errorf("annal %q was rewritten to %q", args, got)
		}
	}
	rewritten := []struct{ args, want []string }{
		{[]string{"id", v}, []string{"id", hex}},
		{[]string{"id", b64, v, "--format", "json"}, []string{"id", b64hex, hex, "--format", "json"}},
		{[]string{"--dir", v, "id", "--format", "text", b64}, []string{"--dir", v, "id", "--format", "text", b64hex}},
		{[]string{"get", b64}, []string{"get", b64hex}},
		{[]string{"--format", "json", "get", "--dir", v, b64}, []string{"--format", "json", "get", "--dir", v, b64hex}},
		{[]string{"--dir=" + v, "get", b64}, []string{"--dir=" + v, "get", b64hex}},
	}
	for _, c := range rewritten {
		if got := protectIDArgs(root, c.args); !slices.Equal(got, c.want) {
			t.Errorf("annal %q: got %q, want %q", c.args, got, c.want)
		}
	}
}

// TestEscape: what a table or a message shows of a name or a value that
// would act on a terminal, forge a row or hide itself.
func TestEscape(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, name, text, json string }{
		{"orders", "orders", "orders", "orders"},
		{"\x1b[2J\x1b[Hfake", `\x1b[2J\x1b[Hfake`, `\x1b[2J\x1b[Hfake`, `\u001b[2J\u001b[Hfake`},
		{"a\rb\nc\td", `a\rb\nc\td`, `a\rb\nc\td`, `a\u000db\u000ac\u0009d`},
		{"nul\x00del\x7f", `nul\x00del\x7f`, `nul\x00del\x7f`, `nul\u0000del\u007f`},
		{"c1\u0085\u009b2J", `c1\u0085\u009b2J`, `c1\u0085\u009b2J`, `c1\u0085\u009b2J`},
		{"orders\u202e", `orders\u202e`, `orders\u202e`, `orders\u202e`},
		{"\u202agnp.exe\u202c \u2066x\u2069", `\u202agnp.exe\u202c \u2066x\u2069`, `\u202agnp.exe\u202c \u2066x\u2069`, `\u202agnp.exe\u202c \u2066x\u2069`},
		{"zero\u200bwidth\u200c\u200d\u200e\u200f\ufeff", `zero\u200bwidth\u200c\u200d\u200e\u200f\ufeff`, `zero\u200bwidth\u200c\u200d\u200e\u200f\ufeff`, `zero\u200bwidth\u200c\u200d\u200e\u200f\ufeff`},
		{"line\u2028para\u2029", `line\u2028para\u2029`, `line\u2028para\u2029`, `line\u2028para\u2029`},
		{"tag\U000e0041", `tag\U000e0041`, `tag\U000e0041`, `tag\udb40\udc41`},
		{"caf\xe9", `caf\xe9`, `caf\xe9`, `caf\ufffd`},
		{`back\slash`, `back\\slash`, `back\slash`, `back\slash`},
		{"é📒 日本 ok", "é📒 日本 ok", "é📒 日本 ok", "é📒 日本 ok"},
	}
	for _, c := range cases {
		if got := safeName(c.in); got != c.name {
			t.Errorf("safeName(%q) = %q, want %q", c.in, got, c.name)
		}
		if got := safeText(c.in); got != c.text {
			t.Errorf("safeText(%q) = %q, want %q", c.in, got, c.text)
		}
		if got := safeJSON(c.in); got != c.json {
			t.Errorf("safeJSON(%q) = %q, want %q", c.in, got, c.json)
		}
	}
	// Escaped JSON is the same JSON value.
	raw := "{\"a\":\"\u202e\u2028\x7f\u0085\ufeff\"}"
	var a, b any
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(safeJSON(raw)), &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("safeJSON(%q) = %q: %v, %v; %v", raw, safeJSON(raw), a, b, err)
	}
}

// hostile is what an event's names and data may hold that the engine lets
// an append store (control characters it refuses; format characters in
// names, and anything in JSON strings, it takes).
var hostile = engine.EventInput{Entity: "order\u202e", Key: "k\u200b-1\ufeff", Event: "placed",
	Meta: []byte("{\"by\":\"\u2066x\u2069\"}"), Data: []byte("{\"note\":\"\u202e1 row\u2028\x7f\u0085\"}")}

// TestTablesEscape: scan, get, tail and stats tables of a ledger whose
// event has bidirectional, zero-width and separator characters in its
// names and data show them escaped, one row an event.
func TestTablesEscape(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Append(context.Background(), "orders", []engine.EventInput{hostile}, nil)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(what, out string, rows int) {
		t.Helper()
		for _, r := range "\u202e\u200b\ufeff\u2066\u2069\u2028\x7f\u0085\x1b\r" {
			if strings.ContainsRune(out, r) {
				t.Errorf("%s prints %U raw:\n%s", what, r, out)
			}
		}
		for _, want := range []string{`order\u202e`, `k\u200b-1\ufeff`, `\u202e1 row\u2028\u007f\u0085`} {
			if !strings.Contains(out, want) {
				t.Errorf("%s does not show %s:\n%s", what, want, out)
			}
		}
		if n := strings.Count(out, "\n"); rows >= 0 && n != rows {
			t.Errorf("%s has %d lines, want %d:\n%s", what, n, rows, out)
		}
	}
	code, out, errOut := annal(t, "", "--dir", dir, "--format", "table", "scan", "orders")
	if code != 0 {
		t.Fatalf("scan: exit %d: %s", code, errOut)
	}
	check("scan", out, 3)
	code, out, errOut = annal(t, "", "--dir", dir, "--format", "table", "get", res.IDs[0].String())
	if code != 0 {
		t.Fatalf("get: exit %d: %s", code, errOut)
	}
	check("get", out, 9)
	if !strings.Contains(out, `\u2066x\u2069`) {
		t.Errorf("get does not escape meta:\n%s", out)
	}
	code, out, errOut = annal(t, "", "--dir", dir, "--format", "table", "scan", "orders", "--entity", hostile.Entity)
	if code != 0 {
		t.Fatalf("scan --entity: exit %d: %s", code, errOut)
	}
	check("scan --entity", out, 2)

	ctx, cancel := context.WithCancel(context.Background())
	var tailOut syncBuffer
	done := make(chan int)
	go func() {
		done <- runContext(ctx, []string{"--dir", dir, "--format", "table", "tail", "orders", "--from-start"}, strings.NewReader(""), &tailOut, io.Discard)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tailOut.String(), res.IDs[0].String()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail: exit %d", code)
	}
	check("tail", tailOut.String(), 3)
}

// syncBuffer is a bytes.Buffer for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCloseFailsAfterAppend: closing the data directory fails after append
// printed IDs (the disk filled up after the append, so the index's
// checkpoint or the metadata's write at close fails). Those IDs are
// stored: with --durability sync append exits 0 and warns that the close
// failed and that the events are stored, so that nobody appends them again
// (it once exited 1); with --durability none it exits 1 and
// says the events may not be on stable storage. Either way the events are
// there once space is back. A real full disk: a small tmpfs (root only).
func TestCloseFailsAfterAppend(t *testing.T) {
	mnt := faultfs.MountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "data")
	if code, _, errOut := annal(t, "", "--dir", dir, "create", "full"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	filler := filepath.Join(mnt, "filler")
	for _, durability := range []string{"sync", "none"} {
		// Standard input gives one event, waits for its ID on standard
		// output, fills the disk and ends: the command then closes.
		out := &lineSignal{first: make(chan struct{})}
		in := &fillingReader{line: `{"entity":"order","key":"o-1","event":"placed"}` + "\n", printed: out.first,
			fill: func() {
				faultfs.FillUp(t, filler)
				// A Sync append leaves zeros ahead of its records in
				// the segment (segment zeroFill), which the log's Close
				// cuts before the index and the metadata are written,
				// freeing their space: cut them first, as Close would,
				// and fill that space too.
				cutZeroTails(t, filepath.Join(dir, "ledgers"))
				faultfs.FillUp(t, filler+"-more")
			}}
		var errOut bytes.Buffer
		code := run([]string{"--dir", dir, "append", "full", "--durability", durability}, in, out, &errOut)
		id := strings.TrimSpace(out.String())
		t.Logf("--durability %s: exit %d, stdout %q, stderr:\n%s", durability, code, id, errOut.String())
		if !strings.Contains(errOut.String(), "clos") {
			t.Fatalf("--durability %s: the close did not fail on the full disk (stderr %q): the fault this test needs was not reached", durability, errOut.String())
		}
		switch durability {
		case "sync":
			if code != 0 || !strings.Contains(errOut.String(), "annal: warning: closing the data directory failed: ") ||
				!strings.Contains(errOut.String(), "annal: warning: the event whose ID was printed is stored (it was on stable storage before its ID was printed): do not append it again\n") {
				t.Errorf("--durability sync: exit %d, want 0 with a warning that the events are stored", code)
			}
		case "none":
			if code != 1 || !strings.Contains(errOut.String(), "may not be on it") {
				t.Errorf("--durability none: exit %d, want 1 and that the events may not be on stable storage", code)
			}
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		os.Remove(filler + "-more")
		if code, got, errOut := annal(t, "", "--dir", dir, "get", id); code != 0 || !strings.Contains(got, id) {
			t.Fatalf("--durability %s: the printed ID %s once space is back: exit %d, %s%s", durability, id, code, got, errOut)
		}
	}
}

// cutZeroTails cuts the zeros after the last non-zero byte of the last
// segment of each ledger under dir: the zeros a writer keeps ahead of its
// records (the last record of TestCloseFailsAfterAppend ends with its
// JSON, not a zero).
func cutZeroTails(t *testing.T, dir string) {
	t.Helper()
	ledgers, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ledgers {
		segs, err := filepath.Glob(filepath.Join(dir, l.Name(), "*.seg"))
		if err != nil || len(segs) == 0 {
			continue
		}
		last := segs[len(segs)-1]
		b, err := os.ReadFile(last)
		if err != nil {
			t.Fatal(err)
		}
		end := len(b)
		for end > 0 && b[end-1] == 0 {
			end--
		}
		if err := os.Truncate(last, int64(end)); err != nil {
			t.Fatal(err)
		}
	}
}

// fillingReader is standard input for TestCloseFailsAfterAppend.
type fillingReader struct {
	line    string
	printed <-chan struct{}
	fill    func()
	state   int
}

func (r *fillingReader) Read(p []byte) (int, error) {
	switch r.state {
	case 0:
		r.state++
		return copy(p, r.line), nil
	case 1:
		r.state++
		select {
		case <-r.printed:
		case <-time.After(30 * time.Second):
		}
		r.fill()
	}
	return 0, io.EOF
}

// lineSignal is standard output that closes first at the first newline.
type lineSignal struct {
	syncBuffer
	first chan struct{}
	once  sync.Once
}

func (w *lineSignal) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if bytes.IndexByte(p, '\n') >= 0 {
		w.once.Do(func() { close(w.first) })
	}
	return n, err
}

// TestCloseOutcome: how a command ends when closing the data directory
// fails, for every command that stores something (append, create, import).
func TestCloseOutcome(t *testing.T) {
	t.Parallel()
	closeErr := errors.New("index: flush: no space left on device")
	cmdErr := &exitErr{code: exitCondition, err: errors.New("condition failed")}
	cases := []struct {
		name           string
		cmdErr         error
		stored, unsure string
		code           int
		stderr, errMsg string
	}{
		{"stored", nil, "the event whose ID was printed is stored", "", exitOK,
			"annal: warning: closing the data directory failed: index: flush: no space left on device\nannal: warning: the event whose ID was printed is stored\n", ""},
		{"nothing stored", nil, "", "", exitError, "", "close: index: flush: no space left on device"},
		{"unsure", nil, "", "may not be on it", exitError, "", "close: index: flush: no space left on device (may not be on it)"},
		{"the command failed", cmdErr, "stored", "", exitCondition, "", "condition failed"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		err := closeOutcome(c.cmdErr, closeErr, c.stored, c.unsure, &stderr)
		code, msg := exitOK, ""
		var ee *exitErr
		if errors.As(err, &ee) {
			code, msg = ee.code, ee.err.Error()
		}
		if code != c.code || msg != c.errMsg || stderr.String() != c.stderr {
			t.Errorf("%s: exit %d %q, stderr %q; want exit %d %q, stderr %q", c.name, code, msg, stderr.String(), c.code, c.errMsg, c.stderr)
		}
	}
	if err := closeOutcome(nil, nil, "stored", "", io.Discard); err != nil {
		t.Errorf("a clean close: %v", err)
	}
	// A checkpoint the signer refused: the command fails even though
	// events are stored (they are not signed), and says both.
	refused := fmt.Errorf("engine: checkpoint of ledger acct at size 5: %w", engine.ErrSignerRefused)
	var stderr bytes.Buffer
	err := closeOutcome(nil, refused, "the events whose IDs were printed are stored", "", &stderr)
	var ee *exitErr
	if !errors.As(err, &ee) || ee.code != exitError || !errors.Is(err, engine.ErrSignerRefused) || !strings.Contains(err.Error(), "are stored") || stderr.Len() != 0 {
		t.Errorf("a close whose checkpoint the signer refused: %v (stderr %q); want exit %d, ErrSignerRefused, saying what is stored", err, stderr.String(), exitError)
	}
}

// TestPanicIsNotUsage: a panic of a command (a bug; Pebble once panicked
// on a read-only index directory) is reported in one line and exits 1:
// exit code 2 means a usage error only, and an uncaught panic exits 2.
func TestPanicIsNotUsage(t *testing.T) {
	root := newRootCmd()
	root.AddCommand(&cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		panic(errors.New("MANIFEST create failed\ngoroutine 1 [running]:\nmain.boom()\n\t/src/x.go:1"))
	}})
	t.Setenv("GOTRACEBACK", "")
	var out, errOut bytes.Buffer
	code := execute(context.Background(), root, []string{"boom"}, strings.NewReader(""), &out, &errOut)
	want := "annal: internal error (a bug in annal; please report it): panic: MANIFEST create failed\n"
	if code != exitError || errOut.String() != want {
		t.Fatalf("exit %d, stderr %q; want exit 1, stderr %q", code, errOut.String(), want)
	}
}

// TestErrorLine: an error's message as the command prints it is one line,
// without the stack traces and the "<corruption detail carrier>" that
// Pebble's errors can carry, with what would act on a terminal escaped.
func TestErrorLine(t *testing.T) {
	t.Parallel()
	pebbleVerbose := "pebble: file 000010: block 48868/1984: crc32c checksum mismatch 370361de != c5e1ad10\n" +
		"(1) path: /d/index/000010.sst\nWraps: (2) attached stack trace\n  -- stack trace:\n" +
		"  | github.com/cockroachdb/pebble/v2/sstable/block.(*Reader).doRead\n  | \t/root/go/pkg/mod/block.go:598\n" +
		"Error types: (1) *hintdetail.withHint (2) *withstack.withStack"
	cases := []struct{ err, want string }{
		{"plain", "plain"},
		{"pebble: file 000010: crc32c checksum mismatch\n<corruption detail carrier>", "pebble: file 000010: crc32c checksum mismatch"},
		{"a\n<corruption detail carrier>\na\n<corruption detail carrier>", "a"},
		{pebbleVerbose, "pebble: file 000010: block 48868/1984: crc32c checksum mismatch 370361de != c5e1ad10"},
		{"close: index: flush: no space\nwrite meta.db: no space", `close: index: flush: no space; write meta.db: no space`},
		{"ledger \"x\x1b[2J\": bad\rfake", `ledger "x\x1b[2J": bad\rfake`},
		{"name \"orders\u202e\"", `name "orders\u202e"`},
	}
	for _, c := range cases {
		if got := errorText(errors.New(c.err)); got != c.want {
			t.Errorf("errorText(%q) = %q, want %q", c.err, got, c.want)
		}
	}
	var errOut bytes.Buffer
	code := execute(context.Background(), newRootCmd(), []string{"get", "--dir", t.TempDir() + "/nope\x1b[2J", "x#1"}, strings.NewReader(""), io.Discard, &errOut)
	if code != exitError || strings.ContainsRune(errOut.String(), 0x1b) || !strings.Contains(errOut.String(), `nope\x1b[2J does not exist`) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// TestLedgerTablesEscape: the ledgers, stats and verify tables, and the
// warning about an unavailable ledger, escape a ledger's name. Such names
// can no longer be created (an imported ledger's name once could be
// anything), so the tables are written from crafted values.
func TestLedgerTablesEscape(t *testing.T) {
	t.Parallel()
	const name = "orders\x1b[2J\r\nfake\t row\u202e\\"
	const want = `orders\x1b[2J\r\nfake\t row\u202e\\`
	var b bytes.Buffer
	info := engine.LedgerInfo{Name: name}
	if err := writeLedgers(&b, formatTable, []engine.LedgerInfo{info}); err != nil {
		t.Fatal(err)
	}
	row := statsRow{Name: name}
	if err := writeStats(&b, formatTable, []statsRow{row}, statsRow{Total: true}); err != nil {
		t.Fatal(err)
	}
	if err := writeVerifyResults(&b, formatTable, []verifyResult{{Name: name, err: errors.New("bad\x1b[31m"), segments: partFailed, index: partUnchecked}}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 8 { // three headers, three rows, the totals, what verify checked
		t.Errorf("%d lines, want 8:\n%s", len(lines), b.String())
	}
	for _, i := range []int{1, 3, 6} {
		if !strings.HasPrefix(lines[i], want+"  ") {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], want)
		}
	}
	if strings.ContainsAny(b.String(), "\x1b\r\u202e") {
		t.Errorf("raw control or format characters:\n%q", b.String())
	}
}

// TestIndexErrorHint: an error of the index alone, met by any command,
// says that the events are not affected and how the index is rebuilt.
func TestIndexErrorHint(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("engine: get: %w: key T…: value is 3 bytes, want 20", index.ErrCorruption),
		fmt.Errorf("%w: ledger orders: the index disagrees with the segments (index against segments): ids: 3 against 4", segment.ErrCorruption),
	} {
		got := errorText(ledgerError("d", "orders", err))
		want := "; the index is damaged, not the events in the segments: it is derived from them: annal reindex --dir d rebuilds it from the segments"
		if !strings.HasSuffix(got, want) {
			t.Errorf("%v: %s", err, got)
		}
	}
	if got := errorText(ledgerError("d", "orders", fmt.Errorf("%w: frame CRC mismatch", segment.ErrCorruption))); strings.Contains(got, "index") {
		t.Errorf("a segment's damage is called the index's: %s", got)
	}
}
