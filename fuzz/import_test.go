package fuzz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// vectorFile reads a file of ../shared/vectors (beside the module root).
func vectorFile(tb testing.TB, name string) []byte {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "shared", "vectors", name)
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Skipf("test vectors not found at %s (they live in ../shared/vectors beside the module): %v", path, err)
	}
	return b
}

// firstLines returns the first n lines of b.
func firstLines(b []byte, n int) []byte {
	end := 0
	for range n {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			return b
		}
		end += i + 1
	}
	return b[:end]
}

// importTarget is the data directory FuzzImport imports into. A failed
// import must leave it as it was, empty, so it serves the next input; a
// successful one leaves a ledger, and the next input gets a new directory.
type importTarget struct {
	parent string
	n      int
	dir    string
	db     *engine.DB
}

func (it *importTarget) open(t *testing.T) *engine.DB {
	t.Helper()
	if it.db == nil {
		it.n++
		it.dir = filepath.Join(it.parent, fmt.Sprint(it.n))
		db, err := engine.Open(it.dir, &engine.Options{SegmentSize: 4 << 10})
		if err != nil {
			t.Fatal(err)
		}
		it.db = db
	}
	return it.db
}

// discard closes and removes the directory.
func (it *importTarget) discard(t *testing.T) {
	t.Helper()
	if it.db == nil {
		return
	}
	err := it.db.Close()
	it.db = nil
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := os.RemoveAll(it.dir); err != nil {
		t.Fatal(err)
	}
}

// checkEmpty checks that the directory holds no ledger: none open, none
// unavailable, nothing under ledgers/.
func (it *importTarget) checkEmpty(t *testing.T, when string) {
	t.Helper()
	if ls := it.db.Ledgers(); len(ls) != 0 {
		t.Fatalf("%s: %d ledgers, the first %q (%d events)", when, len(ls), ls[0].Name, ls[0].Count)
	}
	if u := it.db.Unavailable(); len(u) != 0 {
		t.Fatalf("%s: unavailable ledgers: %v", when, u)
	}
	entries, err := os.ReadDir(filepath.Join(it.dir, "ledgers"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("%s: ledgers/ holds %s (%d entries)", when, entries[0].Name(), len(entries))
	}
}

// FuzzImport imports an NDJSON ledger (seeded with the Evently vectors,
// whole and tampered with). Import must not panic. It fails with ErrInvalid
// and a message and leaves nothing behind (no ledger, nothing under
// ledgers/, nothing after a reopen either), or it succeeds with exactly the
// input's events: the input then verifies line for line, the ledger
// verifies, and its export verifies and holds the input's events in order,
// field for field.
func FuzzImport(f *testing.F) {
	two := vectorFile(f, "evently-cli-two-events.ndjson")
	examples := firstLines(vectorFile(f, "evently-examples-ledger.ndjson"), 20)
	lines := bytes.SplitAfter(examples, []byte("\n"))
	var seeds [][]byte
	for _, b := range [][]byte{two, examples} {
		seeds = append(seeds,
			b,
			firstLines(b, 1),
			b[:len(b)/2],
			bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")),
			bytes.ReplaceAll(b, []byte(`":"`), []byte(`" : "`)),
			bytes.ReplaceAll(b, []byte(`Z"`), []byte(`0Z"`)),
			append(bytes.Clone(b), b...),                                      // every line twice
			bytes.Replace(b, []byte(`"data":{`), []byte(`"data":{"x":1,`), 2), // line 2's content changed
		)
	}
	seeds = append(seeds,
		examples[bytes.IndexByte(examples, '\n')+1:],                      // no genesis line
		bytes.Join([][]byte{lines[0], lines[2], lines[1], lines[3]}, nil), // two lines swapped
		append(bytes.Clone(examples), "{}\n"...),
		append(bytes.Clone(examples), two...), // another ledger's lines after
		bytes.ReplaceAll(examples, []byte(`"key":"`), []byte(`"key":"\u0000`)),
		bytes.ReplaceAll(examples, []byte(`.`), []byte(`,`)),
		[]byte{},
		[]byte("\n"),
	)
	// Each as it is, and re-signed (see resign): then content changes
	// give a ledger that verifies, and reach what Import does with it.
	for _, b := range seeds {
		f.Add(b, false)
		f.Add(b, true)
	}

	target := &importTarget{parent: f.TempDir()}
	f.Cleanup(func() {
		if target.db != nil {
			target.db.Close()
		}
	})
	f.Fuzz(func(t *testing.T, data []byte, sign bool) {
		ctx := context.Background()
		if sign {
			data = resign(data)
		}
		db := target.open(t)
		info, err := db.Import(ctx, bytes.NewReader(data), engine.ImportOptions{})
		if err != nil {
			checkFailedImport(t, target, data, err)
			return
		}
		defer target.discard(t)
		want, rerr := readAll(t, data)
		if rerr != nil {
			t.Fatalf("Import accepted an input that does not verify: %v", rerr)
		}
		if info.Count != uint64(len(want)) {
			t.Fatalf("imported %d events, the input has %d", info.Count, len(want))
		}
		if ls := db.Ledgers(); len(ls) != 1 || ls[0].ID != info.ID {
			t.Fatalf("after Import: ledgers %v", ls)
		}
		if _, err := db.Verify(ctx, info.Name, nil); err != nil {
			t.Fatalf("Verify of the imported ledger: %v", err)
		}
		var out bytes.Buffer
		n, err := db.Export(ctx, info.Name, &out, engine.ExportOptions{})
		if err != nil || n != int64(len(want)) {
			t.Fatalf("Export: %d events, %v", n, err)
		}
		if _, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(out.Bytes()))); err != nil {
			t.Fatalf("the export does not verify: %v", err)
		}
		got, err := readAll(t, out.Bytes())
		if err != nil || len(got) != len(want) {
			t.Fatalf("reading the export: %d events, %v", len(got), err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("line %d exported differs:\n got %+v\nwant %+v", i+1, got[i], want[i])
			}
		}
	})
}

// checkFailedImport checks what a failed Import left: nothing. A failure
// past the first line (when Import may have written segments, the index
// or the metadata) is also checked after a reopen.
func checkFailedImport(t *testing.T, target *importTarget, data []byte, err error) {
	t.Helper()
	var errno syscall.Errno
	var pathErr *fs.PathError
	ioErr := errors.As(err, &errno) || errors.As(err, &pathErr)
	if err.Error() == "" || !errors.Is(err, engine.ErrInvalid) && !ioErr {
		t.Fatalf("Import failed with %q (%T), neither ErrInvalid nor an I/O error", err, err)
	}
	var le *ndjson.LineError
	if errors.As(err, &le) && le.Line == 1 {
		// The first line's failure: nothing can have been written yet;
		// still, check what can be seen cheaply.
		target.checkEmpty(t, "after a failed Import")
		return
	}
	if evs, rerr := readAll(t, data); rerr == nil && len(evs) > 0 && !ioErr && !engineLimit(err) {
		t.Fatalf("every line verifies, and Import refused it: %v", err)
	}
	target.checkEmpty(t, "after a failed Import")
	if cerr := target.db.Close(); cerr != nil {
		target.db = nil
		t.Fatalf("Close after a failed Import: %v", cerr)
	}
	db, oerr := engine.Open(target.dir, &engine.Options{SegmentSize: 4 << 10})
	if oerr != nil {
		target.db = nil
		t.Fatalf("reopening after a failed Import: %v", oerr)
	}
	target.db = db
	target.checkEmpty(t, "after a failed Import and a reopen")
}

// engineLimit reports whether a failed Import's error is one of the
// limits the engine applies beyond what ndjson verifies (documented at
// Import): the genesis event names the ledger with a name a ledger cannot
// have, an entity, key or event name that no ledger may hold (empty, longer
// than the segment format's 65,535 bytes), an event larger than
// Options.MaxEventSize. A name with a control character is not one: Import
// keeps every name that verifies.
func engineLimit(err error) bool {
	for _, s := range []string{"the genesis event names the ledger, but", "bytes, the limit is", "Options.MaxEventSize", " is empty"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// resign rewrites the eventId of each line, from the first as long as
// lines parse, to the ID its content, timestamp and the line before give,
// keeping everything else as it is. The fuzzer cannot forge a CRC: this
// lets a change to a name, to meta or data, to a timestamp or to the
// spelling of the JSON reach past verification.
func resign(data []byte) []byte {
	out := make([]byte, 0, len(data))
	var ledger eventid.LedgerID
	var prev eventid.ID
	for i := 0; len(data) > 0; i++ {
		line := data
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			line = data[:j+1]
		}
		ev, err := ndjson.NewReader(bytes.NewReader(line)).Next()
		// The value of the eventId member: the first string after the key.
		start, end := -1, -1
		if at := bytes.Index(line, []byte(`"eventId"`)); at >= 0 {
			if v := bytes.IndexByte(line[at+len(`"eventId"`):], '"'); v >= 0 {
				start = at + len(`"eventId"`) + v + 1
				end = bytes.IndexByte(line[start:], '"')
			}
		}
		if err != nil || end < 0 {
			break
		}
		data = data[len(line):]
		c := ev.Content()
		if i == 0 {
			ledger, prev = c.LedgerID(), eventid.Genesis(c.LedgerID())
		}
		id := c.ID(ledger, ev.Micros, prev)
		out = append(append(append(out, line[:start]...), id.String()...), line[start+end:]...)
		prev = id
	}
	return append(out, data...)
}
