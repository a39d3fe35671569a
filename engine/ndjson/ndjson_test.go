package ndjson

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// vectorsDir returns ../shared/vectors beside the module root, skipping the
// test with a reason when it is absent (it is present in CI).
func vectorsDir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "vectors")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("test vectors not found at %s (they live in ../shared/vectors beside the module): %v", dir, err)
	}
	return dir
}

func readVector(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorsDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyVectors(t *testing.T) {
	for _, tc := range []struct {
		file   string
		count  int64
		ledger string
		head   string
	}{
		{"evently-examples-ledger.ndjson", 11550, "9e961c04", ""},
		{"evently-cli-two-events.ndjson", 2, "e95bff80", "0005d5814ce488843dc5de3ee95bff80"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data := readVector(t, tc.file)
			v, err := VerifyAll(NewReader(bytes.NewReader(data)))
			if err != nil {
				t.Fatalf("VerifyAll: %v", err)
			}
			if v.Count() != tc.count || v.Ledger().String() != tc.ledger {
				t.Fatalf("got %d events of ledger %s, want %d of %s", v.Count(), v.Ledger(), tc.count, tc.ledger)
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			last := lines[len(lines)-1]
			if want := last[strings.Index(last, `"eventId":"`)+11:][:32]; v.Head().String() != want {
				t.Fatalf("head %s, want %s", v.Head(), want)
			}
			if tc.head != "" && v.Head().String() != tc.head {
				t.Fatalf("head %s, want %s", v.Head(), tc.head)
			}
		})
	}
}

// TestVerifyDetectsEveryTamperedLine changes one character of the meta or
// data of many lines, one at a time, and requires the verification to fail at
// exactly that line with a mismatch.
func TestVerifyDetectsEveryTamperedLine(t *testing.T) {
	lines := strings.SplitAfter(string(readVector(t, "evently-examples-ledger.ndjson")), "\n")
	step := 97
	if testing.Short() {
		step = 997
	}
	tried := 0
	for i := 0; i < len(lines); i += step {
		for _, field := range []string{`"meta":{`, `"data":`} {
			at := strings.Index(lines[i], field)
			if at < 0 {
				t.Fatalf("line %d has no %s", i+1, field)
			}
			// The first letter or digit inside the field's value.
			pos := at + len(field)
			for pos < len(lines[i]) && !isAlnum(lines[i][pos]) {
				pos++
			}
			if pos >= len(lines[i]) {
				continue
			}
			mutated := append([]string(nil), lines...)
			b := []byte(lines[i])
			b[pos] = flip(b[pos])
			mutated[i] = string(b)
			_, err := VerifyAll(NewReader(strings.NewReader(strings.Join(mutated, ""))))
			var le *LineError
			if !errors.As(err, &le) || le.Line != i+1 || !errors.Is(err, ErrMismatch) {
				t.Fatalf("changing %q at byte %d of line %d (%s): got %v, want a mismatch at line %d", lines[i][pos], pos, i+1, field, err, i+1)
			}
			tried++
		}
	}
	if tried < 20 {
		t.Fatalf("only %d tampered lines tried", tried)
	}
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func flip(c byte) byte {
	switch {
	case c == 'z' || c == 'Z' || c == '9':
		return c - 1
	default:
		return c + 1
	}
}

const twoEvents = `{"entity":"test","key":"first-event-key","event":"tested","eventId":"0005d5813bf9c4498e2a8b74e95bff80","timestamp":"2022-01-14T02:05:17.275209Z","meta":{"actor":"Evently CLI Tester"},"data":{"tested":true,"description":"This first event is for validating ledger downloads."}}
{"entity":"test","key":"second-event-key","event":"tested","eventId":"0005d5814ce488843dc5de3ee95bff80","timestamp":"2022-01-14T02:10:01.096324Z","meta":{"actor":"Evently CLI Tester"},"data":{"tested":true,"description":"This is a second event after the initial download."}}
`

func TestVerifyErrors(t *testing.T) {
	first, second, _ := strings.Cut(twoEvents, "\n")
	_ = second
	for _, tc := range []struct {
		name string
		in   string
		line int
		want error
	}{
		{"empty input", "", 0, ErrNoEvents},
		{"only a newline", "\n", 1, ErrEmptyLine},
		{"blank line between", first + "\n\n" + second, 2, ErrEmptyLine},
		{"not json", "hello\n", 1, nil},
		{"unknown field", strings.Replace(first, `"entity"`, `"x":1,"entity"`, 1), 1, ErrUnknownField},
		{"missing field", strings.Replace(first, `"event":"tested",`, ``, 1), 1, ErrMissingField},
		{"duplicate field", strings.Replace(first, `"event":"tested",`, `"event":"tested","event":"tested",`, 1), 1, nil},
		{"entity not a string", strings.Replace(first, `"entity":"test"`, `"entity":7`, 1), 1, ErrFieldType},
		{"short eventId", strings.Replace(first, `4498e2a8b74e95bff80"`, `4498e2a8b74e95bff8"`, 1), 1, ErrFieldType},
		{"uuid eventId", strings.Replace(first, `"0005d5813bf9c4498e2a8b74e95bff80"`, `"0005d581-3bf9-c449-8e2a-8b74e95bff80"`, 1), 1, ErrFieldType},
		{"timestamp without zone", strings.Replace(first, `17.275209Z`, `17.275209`, 1), 1, ErrTimestamp},
		{"timestamp with 4 digits", strings.Replace(first, `17.275209Z`, `17.2752Z`, 1), 1, ErrTimestamp},
		{"timestamp off by 1µs", strings.Replace(first, `17.275209Z`, `17.275208Z`, 1), 1, ErrMismatch},
		{"meta not an object", strings.Replace(first, `"meta":{"actor":"Evently CLI Tester"}`, `"meta":["actor"]`, 1), 1, nil},
		{"second line altered", first + "\n" + strings.Replace(second, "second", "2nd", 1), 2, ErrMismatch},
		{"lines swapped", second + "\n" + first, 1, ErrMismatch},
		{"line repeated", first + "\n" + first, 2, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyAll(NewReader(strings.NewReader(tc.in)))
			if err == nil {
				t.Fatal("verified, want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var le *LineError
			if tc.line == 0 {
				if errors.As(err, &le) {
					t.Fatalf("got %v, want no line", err)
				}
				return
			}
			if !errors.As(err, &le) || le.Line != tc.line {
				t.Fatalf("got %v, want an error at line %d", err, tc.line)
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error %q does not start with the line", err)
			}
		})
	}
}

func TestReaderAcceptsFormattingVariants(t *testing.T) {
	first, second, _ := strings.Cut(twoEvents, "\n")
	// Reordered fields, whitespace, escapes and CRLF change no canonical byte.
	variant := `  { "data" : {"description":"This first event is for validating ledger downloads.","tested":true},` +
		` "meta":{"actor":"Evently CLI \u0054ester"}, "timestamp":"2022-01-14T02:05:17.275209Z",` +
		` "eventId":"0005D5813BF9C4498E2A8B74E95BFF80", "event":"tested", "key":"first-event-key", "entity":"te\u0073t" } ` + "\r\n" + second
	v, err := VerifyAll(NewReader(strings.NewReader(variant)))
	if err != nil {
		t.Fatal(err)
	}
	if v.Count() != 2 || v.Head().String() != "0005d5814ce488843dc5de3ee95bff80" {
		t.Fatalf("got %d events, head %s", v.Count(), v.Head())
	}
	_ = first
}

func TestReaderMillisecondTimestamp(t *testing.T) {
	r := NewReader(strings.NewReader(`{"entity":"e","key":"k","event":"x","eventId":"00000000000000000000000000000000","timestamp":"2022-01-14T14:43:04.680Z","meta":{},"data":null}`))
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Micros != 1642171384680000 {
		t.Fatalf("micros %d, want 1642171384680000", ev.Micros)
	}
	if string(ev.Meta) != "{}" || string(ev.Data) != "null" {
		t.Fatalf("meta %s data %s", ev.Meta, ev.Data)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("second Next: %v, want io.EOF", err)
	}
}

func TestReaderLineTooLong(t *testing.T) {
	r := NewReader(strings.NewReader(twoEvents))
	r.SetMaxLineBytes(100)
	_, err := r.Next()
	if !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("got %v, want ErrLineTooLong", err)
	}
}

type failingReader struct{ data io.Reader }

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.data.Read(p)
	if err == io.EOF {
		return n, errors.New("disk on fire")
	}
	return n, err
}

func TestReadErrorIsNotABadLine(t *testing.T) {
	_, err := VerifyAll(NewReader(&failingReader{strings.NewReader(twoEvents)}))
	if !errors.Is(err, ErrRead) {
		t.Fatalf("got %v, want ErrRead", err)
	}
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 {
		t.Fatalf("got %v, want the error at line 3", err)
	}
}

func TestResumeVerifier(t *testing.T) {
	first, second, _ := strings.Cut(twoEvents, "\n")
	_ = first
	v := ResumeVerifier(eventid.MustParse("0005d5813bf9c4498e2a8b74e95bff80").Ledger(), eventid.MustParse("0005d5813bf9c4498e2a8b74e95bff80"), 1)
	r := NewReader(strings.NewReader(second))
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ev); err != nil {
		t.Fatal(err)
	}
	if v.Count() != 2 {
		t.Fatalf("count %d", v.Count())
	}
	// The same event cannot follow itself.
	if err := v.Verify(ev); !errors.Is(err, ErrMismatch) {
		t.Fatalf("got %v, want a mismatch", err)
	}
}

func BenchmarkVerifyExamplesLedger(b *testing.B) {
	data := readVector(b, "evently-examples-ledger.ndjson")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyAll(NewReader(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*11550/b.Elapsed().Seconds(), "events/s")
}
