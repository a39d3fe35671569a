package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
)

// The tests in this file import ledgers that annal did not write:
// ledgers made by testdata/jsledger/make.mjs, a writer of Evently ledgers
// in JavaScript from the Event ID design alone, whose entity, key and
// event names hold tabs, NULs, U+2028 and the other control characters,
// and the reference ledgers of ../shared/vectors. Like the tests of
// verify.mjs, they need node (v18 or later): without it they skip, saying
// so, except on CI, where they fail (nodePath).

// jsLedgerWriter returns the path of make.mjs.
func jsLedgerWriter(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "jsledger", "make.mjs")
}

// runJSWriter runs make.mjs with args.
func runJSWriter(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(nodePath(t), append([]string{jsLedgerWriter(t)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node make.mjs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// jsLine is a line of a ledger as encoding/json reads it.
type jsLine struct {
	Entity  string `json:"entity"`
	Key     string `json:"key"`
	Event   string `json:"event"`
	EventID string `json:"eventId"`
	text    []byte // the line, with its newline
}

func readJSLines(t *testing.T, b []byte) []jsLine {
	t.Helper()
	var lines []jsLine
	for _, text := range bytes.SplitAfter(b, []byte("\n")) {
		if len(text) == 0 {
			continue
		}
		var l jsLine
		if err := json.Unmarshal(text, &l); err != nil {
			t.Fatalf("line %d: %v", len(lines)+1, err)
		}
		l.text = text
		lines = append(lines, l)
	}
	return lines
}

// rawTerminalChars returns the characters of s a terminal would act on or
// hide (what safeName escapes), but a newline; "" if there are none.
func rawTerminalChars(s string) string {
	var raw []rune
	for _, r := range s {
		if r != '\n' && (mustEscape(r) || r == utf8.RuneError) {
			raw = append(raw, r)
		}
	}
	return string(raw)
}

// TestImportKeepsJSLedgerNames imports with `annal import` each ledger
// make.mjs writes, whose names hold a tab, a NUL, U+2028, every C0 and C1
// control character, DEL, and a mix with format and bidirectional
// characters, and checks that annal keeps it byte for byte: `export` writes
// the file itself, `verify` passes, `get --format ndjson` of each event
// and `scan --format ndjson` of each stream (those a command line can name:
// no NUL) and of the ledger print its lines as they are (a NUL as \u0000),
// `tail` follows it, the tables show the names escaped, and the engine's
// Replay and StreamHead read every stream, the NUL-holding neighbours
// ("a\x00"/"b", "a"/"\x00b", "a"/"b\x00") apart.
func TestImportKeepsJSLedgerNames(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	runJSWriter(t, "--ledgers", src)
	dir := filepath.Join(t.TempDir(), "data")
	files := []string{"tab", "nul", "u2028", "controls", "mix"}
	imported := map[string][]jsLine{} // by ledger name
	for _, f := range files {
		path := filepath.Join(src, f+".ndjson")
		in, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := readJSLines(t, in)
		name := "js-" + f
		if f == "mix" {
			// Its genesis event names it "js\tmix", which a ledger name
			// cannot be: the command says so, the name escaped, and
			// takes --name.
			code, _, errOut := annal(t, "", "--dir", dir, "import", path)
			if code == 0 || !strings.Contains(errOut, `ledger name "js\tmix" has a control character`) || rawTerminalChars(errOut) != "" {
				t.Fatalf("import of a genesis named \"js\\tmix\": exit %d: %q", code, errOut)
			}
		}
		if code, _, errOut := annal(t, "", "--dir", dir, "import", "--name", name, path); code != 0 {
			t.Fatalf("import %s: exit %d: %s", f, code, errOut)
		}
		imported[name] = lines
		out := filepath.Join(t.TempDir(), f+".export")
		if code, _, errOut := annal(t, "", "--dir", dir, "export", name, "-o", out); code != 0 {
			t.Fatalf("export %s: exit %d: %s", name, code, errOut)
		}
		if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, in) {
			t.Fatalf("export of %s is not the file imported (%v):\n%q\nwant\n%q", name, err, got, in)
		}
		if code, out, errOut := annal(t, "", "--dir", dir, "verify", name); code != 0 {
			t.Fatalf("verify %s: exit %d: %s%s", name, code, out, errOut)
		}
		if code, out, errOut := annal(t, "", "--dir", dir, "--format", "ndjson", "scan", name); code != 0 || out != string(in) {
			t.Fatalf("scan %s: exit %d: %s\n%q\nwant\n%q", name, code, errOut, out, in)
		}
		for _, l := range lines {
			code, out, errOut := annal(t, "", "--dir", dir, "--format", "ndjson", "get", l.EventID)
			if code != 0 || out != string(l.text) {
				t.Errorf("get %s: exit %d: %s\n%q\nwant %q", l.EventID, code, errOut, out, l.text)
			}
			code, out, errOut = annal(t, "", "--dir", dir, "--format", "table", "get", l.EventID)
			if code != 0 || rawTerminalChars(out) != "" {
				t.Errorf("get %s as a table: exit %d: %s; raw %q in\n%s", l.EventID, code, errOut, rawTerminalChars(out), out)
			}
			for _, want := range []string{safeName(l.Entity), safeName(l.Key), safeName(l.Event)} {
				if !strings.Contains(out, want) {
					t.Errorf("get %s as a table does not show %s:\n%s", l.EventID, want, out)
				}
			}
			if strings.ContainsRune(l.Entity+l.Key, 0) {
				continue // a command line cannot hold a NUL: read below
			}
			var want string
			for _, o := range lines {
				if o.Entity == l.Entity && o.Key == l.Key {
					want += string(o.text)
				}
			}
			code, out, errOut = annal(t, "", "--dir", dir, "--format", "ndjson", "scan", name, "--entity", l.Entity, "--key", l.Key)
			if code != 0 || out != want {
				t.Errorf("scan %s --entity %q --key %q: exit %d: %s\n%q\nwant\n%q", name, l.Entity, l.Key, code, errOut, out, want)
			}
		}
		code, out, errOut := annal(t, "", "--dir", dir, "--format", "table", "scan", name)
		if code != 0 || rawTerminalChars(out) != "" || strings.Count(out, "\n") != len(lines)+1 {
			t.Errorf("scan %s as a table: exit %d: %s; raw %q; %d lines for %d events:\n%s", name, code, errOut, rawTerminalChars(out), strings.Count(out, "\n"), len(lines), out)
		}
	}
	if !strings.Contains(string(imported["js-nul"][1].text), `"entity":"nul\u0000entity"`) {
		t.Fatalf("make.mjs wrote a NUL otherwise than as \\u0000: %s", imported["js-nul"][1].text)
	}

	// tail follows a ledger with such names: its NDJSON is the file.
	ctx, cancel := context.WithCancel(context.Background())
	var tailOut syncBuffer
	done := make(chan int)
	go func() {
		done <- runContext(ctx, []string{"--dir", dir, "--format", "ndjson", "tail", "js-controls", "--from-start"}, strings.NewReader(""), &tailOut, io.Discard)
	}()
	var want string
	for _, l := range imported["js-controls"] {
		want += string(l.text)
	}
	for deadline := time.Now().Add(10 * time.Second); tailOut.String() != want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 || tailOut.String() != want {
		t.Fatalf("tail js-controls: exit %d:\n%q\nwant\n%q", code, tailOut.String(), want)
	}

	// Every stream, entity and event name by the engine, which takes a NUL.
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, lines := range imported {
		for _, l := range lines {
			id, err := eventid.Parse(l.EventID)
			if err != nil {
				t.Fatal(err)
			}
			var stream, entity, event []eventid.ID
			for _, o := range lines {
				oid, _ := eventid.Parse(o.EventID)
				if o.Entity == l.Entity && o.Key == l.Key {
					stream = append(stream, oid)
				}
				if o.Entity == l.Entity {
					entity = append(entity, oid)
				}
				if o.Event == l.Event {
					event = append(event, oid)
				}
			}
			for what, c := range map[string]struct {
				o    engine.ReplayOptions
				want []eventid.ID
			}{
				"stream":     {engine.ReplayOptions{Entity: l.Entity, Keys: []string{l.Key}}, stream},
				"entity":     {engine.ReplayOptions{Entity: l.Entity}, entity},
				"event name": {engine.ReplayOptions{Events: []string{l.Event}}, event},
			} {
				var got []eventid.ID
				for ev, err := range db.Replay(context.Background(), name, c.o) {
					if err != nil {
						t.Fatalf("%s: replay of the %s of %s: %v", name, what, id, err)
					}
					got = append(got, ev.ID)
				}
				if !slices.Equal(got, c.want) {
					t.Errorf("%s: replay of the %s of %s (%q %q %q): %v, want %v", name, what, id, l.Entity, l.Key, l.Event, got, c.want)
				}
			}
			h, err := db.StreamHead(context.Background(), name, l.Entity, l.Key)
			if err != nil || h.ID != stream[len(stream)-1] {
				t.Errorf("%s: StreamHead(%q, %q) = %s, %v; want %s", name, l.Entity, l.Key, h.ID, err, stream[len(stream)-1])
			}
		}
	}
}

// TestReferenceLedgersRoundTrip imports each reference ledger of
// ../shared/vectors with `annal import` and checks that its export is the
// file as annal writes it, as make.mjs --rewrite writes it (sorted objects,
// six fraction digits; every Event ID checked in JavaScript), that
// `verify` passes, and that the export imported again into another data
// directory exports byte for byte the same.
func TestReferenceLedgersRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"evently-cli-two-events.ndjson", "evently-examples-ledger.ndjson"} {
		path := vectorPath(t, f)
		rewritten := filepath.Join(t.TempDir(), "rewritten")
		runJSWriter(t, "--rewrite", path, rewritten)
		want, err := os.ReadFile(rewritten)
		if err != nil {
			t.Fatal(err)
		}
		in := path
		for round := 1; round <= 2; round++ {
			dir := filepath.Join(t.TempDir(), "data")
			if code, _, errOut := annal(t, "", "--dir", dir, "import", "--name", "ref", in); code != 0 {
				t.Fatalf("%s, round %d: import: exit %d: %s", f, round, code, errOut)
			}
			if code, out, errOut := annal(t, "", "--dir", dir, "verify", "ref"); code != 0 {
				t.Fatalf("%s, round %d: verify: exit %d: %s%s", f, round, code, out, errOut)
			}
			out := filepath.Join(t.TempDir(), "export")
			if code, _, errOut := annal(t, "", "--dir", dir, "export", "ref", "-o", out); code != 0 {
				t.Fatalf("%s, round %d: export: exit %d: %s", f, round, code, errOut)
			}
			got, err := os.ReadFile(out)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s, round %d: the export (%d bytes, %v) is not the file in annal's form (%d bytes)", f, round, len(got), err, len(want))
			}
			in = out
		}
	}
}
