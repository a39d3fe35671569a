package fuzz

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// event is what a verified line commits to: everything its checksum covers.
type event struct {
	entity, key, name string
	id                eventid.ID
	micros            uint64
	meta, data        string
}

func readAll(t testing.TB, data []byte) ([]event, error) {
	t.Helper()
	r := ndjson.NewReader(bytes.NewReader(data))
	v := ndjson.NewVerifier()
	var out []event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if err := v.Verify(ev); err != nil {
			return out, &ndjson.LineError{Line: r.Line(), Err: err}
		}
		out = append(out, event{ev.Entity, ev.Key, ev.Event, ev.ID, ev.Micros, string(ev.Meta), string(ev.Data)})
	}
}

// FuzzNDJSONTamper mutates a real two-event Evently ledger. Whatever the
// mutation, reading and verifying must not panic, and every event that
// verifies must be, field for field in canonical form, an event of the
// original ledger at the same position: an edit can change formatting
// (whitespace, key order, escapes) or cut the ledger short, but it cannot
// change what an event says and still verify.
func FuzzNDJSONTamper(f *testing.F) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "shared", "vectors", "evently-cli-two-events.ndjson")
	orig, err := os.ReadFile(path)
	if err != nil {
		f.Skipf("test vectors not found at %s (they live in ../shared/vectors beside the module): %v", path, err)
	}
	want, err := readAll(f, orig)
	if err != nil || len(want) != 2 {
		f.Fatalf("the reference ledger does not verify: %v (%d events)", err, len(want))
	}
	f.Add(orig)
	f.Add(bytes.ReplaceAll(orig, []byte(`":"`), []byte(`" : "`)))
	f.Add(bytes.ReplaceAll(orig, []byte(`"tested":true`), []byte(`"tested":1`)))
	f.Add(bytes.ReplaceAll(orig, []byte(`Z"`), []byte(`0Z"`)))
	f.Add(bytes.ReplaceAll(orig, []byte("\n"), []byte("\r\n")))
	f.Add(orig[:len(orig)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readAll(t, data)
		var le *ndjson.LineError
		if err != nil && !errors.As(err, &le) {
			t.Fatalf("error without a line number: %v", err)
		}
		if len(got) > len(want) {
			t.Fatalf("%d events verified, the original has %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("event %d verified with altered content:\n got %+v\nwant %+v", i+1, got[i], want[i])
			}
		}
	})
}
