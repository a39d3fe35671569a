package canon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// vectorsDir is ../shared/vectors relative to the module root.
const vectorsDir = "../../shared/vectors"

// ledgerLine is one event of an Evently ledger download, with meta and data
// kept as the raw text of the file.
type ledgerLine struct {
	Entity  string          `json:"entity"`
	Key     string          `json:"key"`
	Event   string          `json:"event"`
	EventID string          `json:"eventId"`
	Meta    json.RawMessage `json:"meta"`
	Data    json.RawMessage `json:"data"`
}

// readLedger returns the meta and data texts of every line of an NDJSON
// ledger in vectorsDir, skipping the test when the folder is absent.
func readLedger(tb testing.TB, name string) []ledgerLine {
	tb.Helper()
	f, err := os.Open(filepath.Join(vectorsDir, name))
	if os.IsNotExist(err) {
		if _, dirErr := os.Stat(vectorsDir); os.IsNotExist(dirErr) {
			tb.Skipf("test vectors folder %s is absent: canonical JSON of the real ledgers not checked", vectorsDir)
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var lines []ledgerLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l ledgerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			tb.Fatalf("%s line %d: %v", name, len(lines)+1, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(lines) == 0 {
		tb.Fatalf("%s has no lines", name)
	}
	return lines
}

func TestVectors(t *testing.T) {
	matches, err := filepath.Glob(filepath.Join(vectorsDir, "*.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) == 0 {
		if _, err := os.Stat(vectorsDir); os.IsNotExist(err) {
			t.Skipf("test vectors folder %s is absent: canonical JSON of the real ledgers not checked", vectorsDir)
		}
		t.Fatalf("no *.ndjson in %s", vectorsDir)
	}
	for _, path := range matches {
		name := filepath.Base(path)
		for n, l := range readLedger(t, name) {
			meta, err := AppendObject(nil, l.Meta)
			if err != nil {
				t.Errorf("%s line %d: meta %s: %v", name, n+1, l.Meta, err)
			}
			data, err := Append(nil, l.Data)
			if err != nil {
				t.Errorf("%s line %d: data %s: %v", name, n+1, l.Data, err)
			}
			for _, out := range [][]byte{meta, data} {
				if again, err := Append(nil, out); err != nil || !bytes.Equal(again, out) {
					t.Errorf("%s line %d: %s is not stable: %s, %v", name, n+1, out, again, err)
				}
			}
		}
	}

	// The genesis event of the examples ledger, whose checksum the vectors
	// README works through.
	genesis := readLedger(t, "evently-examples-ledger.ndjson")[0]
	for _, tc := range []struct {
		what string
		in   []byte
		want string
	}{
		{"meta", genesis.Meta, `{"created":"2022-01-14T02:05:17.252Z","tenantId":"Evently Examples"}`},
		{"data", genesis.Data, `{"description":"Show and Tell.","name":"preview"}`},
	} {
		got, err := Append(nil, tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("genesis %s %s canonicalizes to %s, %v; want %s", tc.what, tc.in, got, err, tc.want)
		}
	}
}

// TestVectorChecksums recomputes the checksum inside every event ID of the
// vector ledgers (DESIGN.md, "The Event ID"). The checksum covers the
// canonical meta and data, so a single byte of difference between canon's
// output and what Evently wrote shows up as a wrong checksum.
func TestVectorChecksums(t *testing.T) {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, name := range []string{"evently-examples-ledger.ndjson", "evently-cli-two-events.ndjson"} {
		prev := ""
		for n, l := range readLedger(t, name) {
			if len(l.EventID) != 32 {
				t.Fatalf("%s line %d: event ID %q is not 32 hex characters", name, n+1, l.EventID)
			}
			ledger, ts, want := l.EventID[24:], l.EventID[:16], l.EventID[16:24]
			if n == 0 {
				prev = "000000000000000000000000" + ledger
			}
			var buf []byte
			buf = append(buf, l.Entity+l.Key+l.Event...)
			buf, err := AppendObject(buf, l.Meta)
			if err != nil {
				t.Fatalf("%s line %d: meta: %v", name, n+1, err)
			}
			if buf, err = Append(buf, l.Data); err != nil {
				t.Fatalf("%s line %d: data: %v", name, n+1, err)
			}
			buf = append(buf, ledger+ts+prev...)
			if got := fmt.Sprintf("%08x", crc32.Checksum(buf, castagnoli)); got != want {
				t.Errorf("%s line %d: checksum over canonical meta %s and data %s is %s, the event ID says %s",
					name, n+1, l.Meta, l.Data, got, want)
			}
			prev = l.EventID
		}
	}
}
