package eventid

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/crc32"
)

// vectorsDir is ../shared/vectors from the module root: test vectors that no
// one on this project wrote.
const vectorsDir = "../../shared/vectors"

func openVector(t *testing.T, name string) *os.File {
	t.Helper()
	if _, err := os.Stat(vectorsDir); os.IsNotExist(err) {
		t.Skipf("test vectors folder %s is absent (it sits beside the module in ../shared/vectors)", vectorsDir)
	}
	f, err := os.Open(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// vectorLine is one event of a ledger in the Evently download format.
type vectorLine struct {
	Entity    string          `json:"entity"`
	Key       string          `json:"key"`
	Event     string          `json:"event"`
	EventID   string          `json:"eventId"`
	Timestamp string          `json:"timestamp"`
	Meta      json.RawMessage `json:"meta"`
	Data      json.RawMessage `json:"data"`
}

// canonicalForTest re-encodes JSON compactly with object keys sorted and no
// HTML escaping, keeping numbers as written. It stands in for package canon
// (which eventid must not import) and is enough for these vectors: their
// keys are not array indices and their numbers are already in shortest form.
func canonicalForTest(t *testing.T, raw []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// parseVectorTimestamp parses an ISO-8601 UTC timestamp with 3 or 6
// fraction digits to microseconds since the Unix epoch.
func parseVectorTimestamp(t *testing.T, s string) uint64 {
	t.Helper()
	dot := strings.IndexByte(s, '.')
	if digits := len(s) - dot - 2; dot < 0 || !strings.HasSuffix(s, "Z") || (digits != 3 && digits != 6) {
		t.Fatalf("timestamp %q: want 3 or 6 fraction digits and Z", s)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(tm.UnixMicro())
}

// verifyLedger checks every line of an NDJSON ledger: the ledger ID comes
// from line 1, and each line's ID, recomputed from its content, timestamp
// and the previous line's ID, must equal its eventId.
func verifyLedger(t *testing.T, name string, wantLines int, wantLedger LedgerID) {
	sc := bufio.NewScanner(openVector(t, name))
	sc.Buffer(nil, 1<<20)
	var ledger LedgerID
	var prev ID
	lines := 0
	for sc.Scan() {
		lines++
		var l vectorLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s:%d: %v", name, lines, err)
		}
		c := Content{Entity: l.Entity, Key: l.Key, Event: l.Event,
			Meta: canonicalForTest(t, l.Meta), Data: canonicalForTest(t, l.Data)}
		if lines == 1 {
			ledger = c.LedgerID()
			if ledger != wantLedger {
				t.Fatalf("%s: ledger ID %s, want %s", name, ledger, wantLedger)
			}
			prev = Genesis(ledger)
		}
		want, err := Parse(l.EventID)
		if err != nil {
			t.Fatalf("%s:%d: %v", name, lines, err)
		}
		us := parseVectorTimestamp(t, l.Timestamp)
		got := c.ID(ledger, us, prev)
		if got != want {
			t.Errorf("%s:%d: computed ID %s, want %s (meta %s, data %s)", name, lines, got, want, c.Meta, c.Data)
		}
		if got.Micros() != us || got.Ledger() != ledger || got.Version() != 0 {
			t.Errorf("%s:%d: ID %s does not hold timestamp %d and ledger %s", name, lines, got, us, ledger)
		}
		if lines > 1 && !prev.Less(want) {
			t.Errorf("%s:%d: ID %s does not sort after the previous %s", name, lines, want, prev)
		}
		prev = want
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != wantLines {
		t.Errorf("%s: %d lines, want %d", name, lines, wantLines)
	}
}

func TestVectorExamplesLedger(t *testing.T) {
	verifyLedger(t, "evently-examples-ledger.ndjson", 11550, 0x9e961c04)
}

func TestVectorCLITwoEvents(t *testing.T) {
	verifyLedger(t, "evently-cli-two-events.ndjson", 2, 0xe95bff80)
}

// TestWorkedExample follows the worked example of vectors/README.md step by
// step.
func TestWorkedExample(t *testing.T) {
	c := Content{
		Entity: "📒",
		Key:    "Evently Examples⑆preview",
		Event:  "刅",
		Meta:   []byte(`{"created":"2022-01-14T02:05:17.252Z","tenantId":"Evently Examples"}`),
		Data:   []byte(`{"description":"Show and Tell.","name":"preview"}`),
	}
	if got := c.contentCRC(); got != 0x9e961c05 {
		t.Errorf("CRC32C of steps 1-5 = %08x, want 9e961c05", got)
	}
	ledger := c.LedgerID()
	if ledger != 0x9e961c04 || ledger.String() != "9e961c04" {
		t.Errorf("ledger ID = %s, want 9e961c04", ledger)
	}
	prev := Genesis(ledger)
	if prev.String() != "0000000000000000000000009e961c04" {
		t.Errorf("genesis = %s, want 0000000000000000000000009e961c04", prev)
	}
	const us = 0x0005d5813bf9c449
	if got := c.Checksum(ledger, us, prev); got != 0x43545b8f {
		t.Errorf("checksum = %08x, want 43545b8f", got)
	}
	if got := c.ID(ledger, us, prev).String(); got != "0005d5813bf9c44943545b8f9e961c04" {
		t.Errorf("ID = %s, want 0005d5813bf9c44943545b8f9e961c04", got)
	}
}

// TestCRC32CCheckValues runs vectors/crc32c.txt through the table the
// checksum uses, fed in two parts to exercise the running CRC as well.
func TestCRC32CCheckValues(t *testing.T) {
	sc := bufio.NewScanner(openVector(t, "crc32c.txt"))
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("bad line %q", line)
		}
		in, want := f[0], f[1]
		var data []byte
		if s, ok := strings.CutPrefix(in, "ascii:"); ok {
			data = []byte(s)
		} else {
			var err error
			if data, err = hex.DecodeString(in); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
		}
		w, err := strconv.ParseUint(want, 16, 32)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		half := len(data) / 2
		c := Content{Entity: string(data[:half]), Data: data[half:]}
		if got := c.contentCRC(); got != uint32(w) {
			t.Errorf("CRC32C(%s) = %08x, want %s", in, got, want)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Errorf("checked %d values, want the 7 of the file", n)
	}
}

// TestChecksumIsOneRunningCRC checks Checksum against the definition, with
// steps 6-8 formatted by fmt and fed to crc32.Update after steps 1-5.
func TestChecksumIsOneRunningCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		c := Content{Entity: randomText(r), Key: randomText(r), Event: randomText(r),
			Meta: []byte(randomText(r)), Data: []byte(randomText(r))}
		ledger, us, prev := LedgerID(r.Uint32()), r.Uint64()>>r.IntN(64), randomID(r)
		all := c.Entity + c.Key + c.Event + string(c.Meta) + string(c.Data)
		steps := fmt.Sprintf("%08x%016x%x", uint32(ledger), us, prev[:])
		want := crc32.Update(0, crc32.MakeTable(crc32.Castagnoli), []byte(all+steps))
		if got := c.Checksum(ledger, us, prev); got != want {
			t.Fatalf("Checksum(%+v, %s, %x, %s) = %08x, want %08x", c, ledger, us, prev, got, want)
		}
		wantLedger := LedgerID(crc32.Checksum([]byte(all), crc32.MakeTable(crc32.Castagnoli)) & 0xfffffffc)
		if got := c.LedgerID(); got != wantLedger {
			t.Fatalf("LedgerID(%+v) = %s, want %s", c, got, wantLedger)
		}
		if id := c.ID(ledger, us, prev); id != New(us, want, ledger) {
			t.Fatalf("ID = %s, want %s", id, New(us, want, ledger))
		}
	}
}

func randomText(r *rand.Rand) string {
	b := make([]byte, r.IntN(40))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}
