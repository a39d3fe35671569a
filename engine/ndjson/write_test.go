package ndjson

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

// evently reconstructs the line Evently wrote from the line AppendEvent
// writes for the same event, and says what it had to change. Evently's
// lines differ from annal's in two ways only, both outside what the ID
// covers:
//
//   - the timestamp: Evently writes 3 fraction digits when the last three
//     are zeros ("…04.680Z"); annal always writes 6 ("…04.680000Z");
//   - the data: Evently writes the object as its client sent it (for
//     example {"name":…,"description":…}); annal writes the canonical form,
//     members sorted ({"description":…,"name":…}), which is what the
//     checksum covers and what the engine stores.
//
// Meta, entity, key, event and eventId are written by Evently exactly as
// annal writes them (in the vectors: checked below, line by line).
func expectedLine(t *testing.T, lineNo int, in []byte) (want []byte, msTimestamp, dataChanged bool) {
	t.Helper()
	var ts, data []byte
	if err := canon.Members(in, func(name string, value []byte) error {
		switch name {
		case "timestamp":
			ts = value
		case "data":
			data = value
		}
		return nil
	}); err != nil {
		t.Fatalf("line %d: %v", lineNo, err)
	}
	want = bytes.Clone(in)
	if len(ts) == len(`"2022-01-14T14:43:04.680Z"`) {
		msTimestamp = true
		at := bytes.Index(want, ts)
		fixed := string(ts[:len(ts)-2]) + `000Z"`
		want = append(want[:at:at], append([]byte(fixed), want[at+len(ts):]...)...)
	}
	canonical, err := canon.Append(nil, data)
	if err != nil {
		t.Fatalf("line %d: data: %v", lineNo, err)
	}
	if !bytes.Equal(canonical, data) {
		dataChanged = true
		// data is the last member in the vectors: the line ends with it.
		suffix := append(bytes.Clone(data), '}')
		if !bytes.HasSuffix(want, suffix) {
			t.Fatalf("line %d: data is not the last member", lineNo)
		}
		want = append(want[:len(want)-len(suffix)], append(canonical, '}')...)
	}
	return append(want, '\n'), msTimestamp, dataChanged
}

// TestAppendLineRoundTripsVectors reads every event of the reference
// ledgers and writes it back with AppendEvent. The output is the input
// byte for byte except, exactly, on the lines with a 3-digit timestamp
// (written with 6 digits) and the lines whose data Evently did not write
// in canonical form (written canonical): see expectedLine. The counts of
// those lines are fixed by the vectors (their sha256 is in
// vectors/README.md), so the test also fails if any other line changes.
func TestAppendLineRoundTripsVectors(t *testing.T) {
	for _, tc := range []struct {
		file                  string
		events, ms, dataLines int
	}{
		{"evently-examples-ledger.ndjson", 11550, 15, 225},
		{"evently-cli-two-events.ndjson", 2, 0, 2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := readVector(t, tc.file)
			lines := bytes.SplitAfter(in, []byte("\n"))
			if len(lines[len(lines)-1]) == 0 {
				lines = lines[:len(lines)-1]
			}
			r := NewReader(bytes.NewReader(in))
			var out []byte
			n, ms, dataLines := 0, 0, 0
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				start := len(out)
				out = AppendEvent(out, ev)
				got := out[start:]
				want, isMS, dataChanged := expectedLine(t, n+1, bytes.TrimSuffix(lines[n], []byte("\n")))
				if !bytes.Equal(got, want) {
					t.Fatalf("line %d:\n got %s\nwant %s\n  in %s", n+1, got, want, lines[n])
				}
				if !isMS && !dataChanged && !bytes.Equal(got, lines[n]) {
					t.Fatalf("line %d differs from the input", n+1)
				}
				if isMS {
					ms++
				}
				if dataChanged {
					dataLines++
				}
				n++
			}
			if n != tc.events || n != len(lines) {
				t.Fatalf("%d events read, %d lines, want %d", n, len(lines), tc.events)
			}
			if ms != tc.ms || dataLines != tc.dataLines {
				t.Fatalf("%d lines with a 3-digit timestamp and %d with non-canonical data, want %d and %d", ms, dataLines, tc.ms, tc.dataLines)
			}
			// What was written is a valid ledger with the same head.
			v, err := VerifyAll(NewReader(bytes.NewReader(out)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := VerifyAll(NewReader(bytes.NewReader(in)))
			if err != nil {
				t.Fatal(err)
			}
			if v.Count() != want.Count() || v.Head() != want.Head() {
				t.Fatalf("rewritten: %d events, head %s; input: %d, %s", v.Count(), v.Head(), want.Count(), want.Head())
			}
			// And writing it again changes nothing.
			var again []byte
			r = NewReader(bytes.NewReader(out))
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				again = AppendEvent(again, ev)
			}
			if !bytes.Equal(again, out) {
				t.Fatal("writing the written lines again gives other bytes")
			}
		})
	}
}

func TestAppendTimestamp(t *testing.T) {
	for _, tc := range []struct {
		micros uint64
		want   string
	}{
		{0, "1970-01-01T00:00:00.000000Z"},
		{1, "1970-01-01T00:00:00.000001Z"},
		{1642125917275209, "2022-01-14T02:05:17.275209Z"},
		{1642171384680000, "2022-01-14T14:43:04.680000Z"},
		{951782400000000, "2000-02-29T00:00:00.000000Z"},
		{253402300799999999, "9999-12-31T23:59:59.999999Z"},
		{253402300800000000, "10000-01-01T00:00:00.000000Z"},
	} {
		if got := string(AppendTimestamp(nil, tc.micros)); got != tc.want {
			t.Errorf("AppendTimestamp(%d) = %s, want %s", tc.micros, got, tc.want)
		}
	}
	// Every day from 1970 to 2243 (leap years, century years), at its
	// first and last microsecond, against the time package.
	for d := uint64(0); d < 100_000; d++ {
		for _, us := range []uint64{d * 86_400_000_000, (d+1)*86_400_000_000 - 1} {
			got := string(AppendTimestamp(nil, us))
			if want := time.UnixMicro(int64(us)).UTC().Format("2006-01-02T15:04:05.000000Z"); got != want {
				t.Fatalf("AppendTimestamp(%d) = %s, want %s", us, got, want)
			}
		}
	}
	// Against the time package, and read back by the Reader.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		us := rng.Uint64N(253402300800000000)
		got := string(AppendTimestamp(nil, us))
		if want := time.UnixMicro(int64(us)).UTC().Format("2006-01-02T15:04:05.000000Z"); got != want {
			t.Fatalf("AppendTimestamp(%d) = %s, want %s", us, got, want)
		}
		back, err := timestamp([]byte(`"` + got + `"`))
		if err != nil || back != us {
			t.Fatalf("Reader reads %s as %d, %v; want %d", got, back, err, us)
		}
	}
}

// TestAppendLineEscapes writes names that need escaping and reads them
// back.
func TestAppendLineEscapes(t *testing.T) {
	names := []string{`"quoted"`, `back\slash`, "tab\tnew\nline\x01\x1f", "\u2028\u2029</script>&", "📒～⑆", ""}
	id := eventid.MustParse("0005d5813bf9c4498e2a8b74e95bff80")
	for _, s := range names {
		line := AppendLine(nil, id, id.Micros(), s, s+"k", s+"e", []byte(`{"a":"\u0000"}`), []byte(`[1,"x",null]`))
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("%q: not one line: %q", s, line)
		}
		ev, err := NewReader(bytes.NewReader(line)).Next()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if ev.Entity != s || ev.Key != s+"k" || ev.Event != s+"e" || ev.ID != id || ev.Micros != id.Micros() ||
			string(ev.Meta) != `{"a":"\u0000"}` || string(ev.Data) != `[1,"x",null]` {
			t.Fatalf("%q: read back %+v", s, ev)
		}
		if want := `{"entity":` + string(canon.AppendString(nil, s)) + `,"key":`; !strings.HasPrefix(string(line), want) {
			t.Fatalf("%q: line %s, want it to begin %s", s, line, want)
		}
	}
}

func TestAppendLineAllocatesNothing(t *testing.T) {
	r := NewReader(strings.NewReader(twoEvents))
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = AppendEvent(buf[:0], ev) }); n != 0 {
		t.Fatalf("AppendEvent allocates %v times per line", n)
	}
}

func BenchmarkAppendLine(b *testing.B) {
	data := readVector(b, "evently-examples-ledger.ndjson")
	all := readAll(NewReader(bytes.NewReader(data)), DefaultMaxLineBytes)
	if all.err != io.EOF {
		b.Fatal(all.err)
	}
	evs := all.events
	buf := make([]byte, 0, 64<<10)
	var n int64
	b.ReportAllocs()
	for b.Loop() {
		for i := range evs {
			buf = AppendEvent(buf[:0], &evs[i])
			n += int64(len(buf))
		}
	}
	b.SetBytes(n / int64(b.N))
	b.ReportMetric(float64(b.N)*float64(len(evs))/b.Elapsed().Seconds(), "events/s")
}
