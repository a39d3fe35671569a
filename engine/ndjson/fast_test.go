package ndjson

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFastTimestampAgreesWithTimeParse checks fastTimestamp against
// slowTimestamp (time.Parse) on valid timestamps of every kind and on
// mutations of them: whatever the fast parser accepts, time.Parse accepts
// with the same value, and it accepts every timestamp time.Parse does.
func TestFastTimestampAgreesWithTimeParse(t *testing.T) {
	check := func(s string) {
		t.Helper()
		fast, ok := fastTimestamp([]byte(s))
		slow, err := slowTimestamp([]byte(`"` + s + `"`))
		switch {
		case ok && (err != nil || fast != slow):
			t.Fatalf("%q: fast parser gives %d, time.Parse %d, %v", s, fast, slow, err)
		case !ok && err == nil:
			t.Fatalf("%q: fast parser refuses, time.Parse gives %d", s, slow)
		}
	}
	for _, s := range []string{
		"2022-01-14T02:05:17.275209Z", "2022-01-14T14:43:04.680Z", "1970-01-01T00:00:00.000Z",
		"1969-12-31T23:59:59.999999Z", "2000-02-29T12:00:00.000Z", "1900-02-29T12:00:00.000Z",
		"2100-02-29T12:00:00.000Z", "2024-02-29T23:59:59.999Z", "2023-02-29T00:00:00.000Z",
		"2023-04-31T00:00:00.000Z", "2023-12-31T23:59:60.000Z", "2023-12-31T24:00:00.000Z",
		"2023-13-01T00:00:00.000Z", "2023-00-01T00:00:00.000Z", "2023-01-00T00:00:00.000Z",
		"2023-01-32T00:00:00.000Z", "2023-01-01T00:60:00.000Z", "9999-12-31T23:59:59.999999Z",
		"0000-01-01T00:00:00.000Z", "2023-01-01t00:00:00.000Z", "2023-01-01T00:00:00.000z",
		"2023-01-01T00:00:00,000Z", "2023-01-01T00:00:00.00Z", "2023-01-01T00:00:00.0000Z",
		"2023-01-01T00:00:00.000+00:00", "+023-01-01T00:00:00.000Z", "2023-1-01T00:00:00.0000Z",
		"2023-01-01T00:00:00.-00Z", "2023-01-01T00:00:0a.000Z", "２023-01-01T00:00:00.000Z", "",
	} {
		check(s)
	}
	rng := rand.New(rand.NewPCG(15, 1))
	const alphabet = "0123456789-:.TZtz +a"
	for range 200000 {
		us := rng.Uint64N(253402300800000000)
		layout := "2006-01-02T15:04:05.000000Z"
		if rng.IntN(2) == 0 {
			layout = "2006-01-02T15:04:05.000Z"
			us -= us % 1000
		}
		s := []byte(time.UnixMicro(int64(us)).UTC().Format(layout))
		check(string(s))
		// One or two characters changed.
		for range 1 + rng.IntN(2) {
			s[rng.IntN(len(s))] = alphabet[rng.IntN(len(alphabet))]
		}
		check(string(s))
		// Digits changed only: dates and times out of range.
		s = []byte(time.UnixMicro(int64(us)).UTC().Format(layout))
		for _, p := range []int{5, 6, 8, 9, 11, 12, 14, 15, 17, 18} {
			if rng.IntN(4) == 0 {
				s[p] = byte('0' + rng.IntN(10))
			}
		}
		check(string(s))
	}
}

// TestParseFastAgreesWithSlow checks that whatever line parseFast accepts,
// parseSlow accepts with the same Event, over the examples ledger and
// lines made from it with one byte changed, fields moved or spelled
// otherwise; and that it accepts the lines an export writes.
func TestParseFastAgreesWithSlow(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	lines := bytes.SplitAfter(data, []byte("\n"))
	all := readAll(NewReader(bytes.NewReader(data)), DefaultMaxLineBytes)
	if all.err != io.EOF {
		t.Fatal(all.err)
	}
	var exported [][]byte
	for i := range all.events {
		exported = append(exported, bytes.TrimSuffix(AppendEvent(nil, &all.events[i]), []byte("\n")))
	}
	var fastP, slowP lineParser
	fastCount := 0
	check := func(line []byte) {
		t.Helper()
		var fast, slow Event
		if !fastP.parseFast(line, &fast, false) {
			return
		}
		fastCount++
		if err := slowP.parseSlow(line, &slow); err != nil {
			t.Fatalf("parseFast accepts %q, parseSlow refuses it: %v", line, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: parseFast gives %+v, parseSlow %+v", line, fast, slow)
		}
	}
	for _, l := range exported {
		check(l)
	}
	if fastCount != len(exported) {
		t.Fatalf("parseFast accepted %d of the %d exported lines", fastCount, len(exported))
	}
	rng := rand.New(rand.NewPCG(15, 2))
	const alphabet = "{}[]\",:\\0123456789.eE-+ abnulltrue\x00\x1f\xff\xc3\xa9"
	for i := range 50000 {
		src := exported[rng.IntN(len(exported))]
		if i%3 == 0 {
			src = bytes.TrimRight(lines[rng.IntN(len(lines))], "\r\n")
		}
		line := bytes.Clone(src)
		if len(line) == 0 {
			continue
		}
		switch rng.IntN(4) {
		case 0, 1:
			for range 1 + rng.IntN(3) {
				line[rng.IntN(len(line))] = alphabet[rng.IntN(len(alphabet))]
			}
		case 2:
			p := rng.IntN(len(line))
			line = append(line[:p:p], append([]byte(alphabet[rng.IntN(len(alphabet)):][:1]), src[p:]...)...)
		default:
			p := rng.IntN(len(line))
			line = append(line[:p:p], src[min(p+1+rng.IntN(4), len(src)):]...)
		}
		check(line)
	}
	// Fields in another order, escaped names, spaces: the slow path's.
	for _, l := range []string{
		`{"data":{},"meta":{},"timestamp":"2022-01-14T02:05:17.275209Z","eventId":"0005d5813bf9c44943545b8f9e961c04","event":"e","key":"k","entity":"x"}`,
		`{"entity":"\u0078","key":"k","event":"e","eventId":"0005d5813bf9c44943545b8f9e961c04","timestamp":"2022-01-14T02:05:17.275209Z","meta":{},"data":{}}`,
		`{"entity":"x","key":"k","event":"e","eventId":"0005d5813bf9c44943545b8f9e961c04","timestamp":"2022-01-14T02:05:17.275209Z","meta":{},"data":{},"extra":1}`,
		`{"entity":"x","key":"k","event":"e","eventId":"0005d5813bf9c44943545b8f9e961c04","timestamp":"2022-01-14T02:05:17.275209Z","meta":{},"meta":{},"data":{}}`,
		`{"entity":"x","key":"k","event":"e","eventId":"0005d5813bf9c44943545b8f9e961c04","timestamp":"2022-01-14T02:05:17.275209Z","meta":[],"data":{}}`,
	} {
		check([]byte(l))
	}
}

// TestChunkReaderMatchesReader reads inputs with a ChunkReader, in chunks
// small enough that lines and errors fall in later chunks, and checks that
// it gives the events a Reader gives, then the same error at the same line
// (or io.EOF).
func TestChunkReaderMatchesReader(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	lines := strings.SplitAfter(string(data), "\n")
	lines = lines[:len(lines)-1] // the last is empty
	bad := func(n int, line string) string {
		c := append([]string(nil), lines...)
		c[n-1] = line
		return strings.Join(c, "")
	}
	long := `{"entity":"` + strings.Repeat("x", 3000) + `"}` + "\n"
	inputs := map[string]string{
		"whole":               string(data),
		"no final newline":    strings.TrimSuffix(string(data), "\n"),
		"crlf":                strings.ReplaceAll(string(data), "\n", "\r\n"),
		"bad line 9000":       bad(9000, "{\"entity\":1}\n"),
		"bad json 11000":      bad(11000, "{\n"),
		"empty line 5000":     bad(5000, "\n"),
		"unknown field 7":     bad(7, `{"x":1}`+"\n"),
		"too long 10000":      bad(10000, long),
		"too long last":       strings.Join(lines[:100], "") + strings.Repeat("y", 5000),
		"empty":               "",
		"only newline":        "\n",
		"not canonical 3":     bad(3, strings.Replace(lines[2], `"meta":{`, `"meta": {`, 1)),
		"bad timestamp 10500": bad(10500, strings.Replace(lines[10499], `","meta"`, `X","meta"`, 1)),
	}
	for name, in := range inputs {
		// What a Reader gives, once per input (it does not depend on the
		// chunk size).
		want := readAll(NewReader(strings.NewReader(in)), 2048)
		for _, chunk := range []int{1, 100, 4096, 65536, 1 << 22} {
			cr := newChunkReader(strings.NewReader(in), 2, chunk, 2048, nil, nil, 0)
			got := readChunks(cr)
			cr.Close()
			if !sameEvents(got.events, want.events) || fmt.Sprint(got.err) != fmt.Sprint(want.err) {
				t.Errorf("%s, chunks of %d: ChunkReader gives %d events, %v; Reader %d events, %v",
					name, chunk, len(got.events), got.err, len(want.events), want.err)
			}
			if got.end != int64(len(in)) && want.err == io.EOF {
				t.Errorf("%s, chunks of %d: the last chunk ends at %d, the input is %d bytes", name, chunk, got.end, len(in))
			}
			// With a limit, holding chunks as an import does and
			// releasing them: the same lines, whose memory is reused.
			cr = newChunkReader(strings.NewReader(in), 2, chunk, 2048, nil, nil, 4)
			got = readChunksHeld(cr, 2)
			cr.Close()
			if !sameEvents(got.events, want.events) || fmt.Sprint(got.err) != fmt.Sprint(want.err) {
				t.Errorf("%s, chunks of %d, limit 4: ChunkReader gives %d events, %v; Reader %d events, %v",
					name, chunk, len(got.events), got.err, len(want.events), want.err)
			}
		}
	}
	// A read error: after every whole line, at the next line.
	for _, chunk := range []int{100, 1 << 22} {
		cr := newChunkReader(&failingReader{strings.NewReader(strings.Join(lines[:50], "") + `{"ent`)}, 2, chunk, DefaultMaxLineBytes, nil, nil, 0)
		got := readChunks(cr)
		cr.Close()
		var le *LineError
		if len(got.events) != 50 || !errors.Is(got.err, ErrRead) || !errors.As(got.err, &le) || le.Line != 51 {
			t.Errorf("chunks of %d: %d events, %v; want 50 events and ErrRead at line 51", chunk, len(got.events), got.err)
		}
	}
}

// sameEvents reports whether a and b hold the same events, every field
// equal, a nil Meta or Data only where the other has nil: what
// reflect.DeepEqual says of them, without its bookkeeping of the slices
// it visited, which made it a quarter of TestChunkReaderMatchesReader's
// time (and much more under -race). TestSameEventsIsDeepEqual keeps the
// two in step.
func sameEvents(a, b []Event) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	same := func(x, y []byte) bool { return bytes.Equal(x, y) && (x == nil) == (y == nil) }
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Entity != y.Entity || x.Key != y.Key || x.Event != y.Event || x.ID != y.ID || x.Micros != y.Micros ||
			!same(x.Meta, y.Meta) || !same(x.Data, y.Data) {
			return false
		}
	}
	return true
}

// TestSameEventsIsDeepEqual: sameEvents compares every field of Event
// (a field added to Event fails here until sameEvents compares it), and
// agrees with reflect.DeepEqual on events that differ in one field, or in
// nil against empty.
func TestSameEventsIsDeepEqual(t *testing.T) {
	if n := reflect.TypeFor[Event]().NumField(); n != 7 {
		t.Fatalf("Event has %d fields; sameEvents compares 7", n)
	}
	base := Event{Entity: "e", Key: "k", Event: "v", ID: [16]byte{1}, Micros: 5, Meta: []byte("{}"), Data: []byte("1")}
	variants := []func(*Event){
		func(e *Event) {},
		func(e *Event) { e.Entity = "f" }, func(e *Event) { e.Key = "l" }, func(e *Event) { e.Event = "w" },
		func(e *Event) { e.ID[15] = 1 }, func(e *Event) { e.Micros = 6 },
		func(e *Event) { e.Meta = []byte("{ }") }, func(e *Event) { e.Data = []byte("2") },
		func(e *Event) { e.Meta = nil }, func(e *Event) { e.Meta = []byte{} },
		func(e *Event) { e.Data = nil }, func(e *Event) { e.Data = []byte{} },
	}
	for i, f := range variants {
		for j, g := range variants {
			a, b := base, base
			f(&a)
			g(&b)
			x, y := []Event{base, a}, []Event{base, b}
			if got, want := sameEvents(x, y), reflect.DeepEqual(x, y); got != want {
				t.Errorf("variants %d and %d: sameEvents %v, reflect.DeepEqual %v", i, j, got, want)
			}
		}
	}
	for _, c := range [][2][]Event{{nil, {}}, {nil, nil}, {{}, {}}, {{base}, nil}, {{base}, {base, base}}} {
		if got, want := sameEvents(c[0], c[1]), reflect.DeepEqual(c[0], c[1]); got != want {
			t.Errorf("%d and %d events (nil %v, %v): sameEvents %v, reflect.DeepEqual %v", len(c[0]), len(c[1]), c[0] == nil, c[1] == nil, got, want)
		}
	}
}

type readResult struct {
	events []Event
	err    error
	end    int64
}

func readAll(r *Reader, maxLine int) readResult {
	r.SetMaxLineBytes(maxLine)
	var res readResult
	for {
		ev, err := r.Next()
		if err != nil {
			res.err = err
			return res
		}
		e := *ev
		e.Meta, e.Data = bytes.Clone(ev.Meta), bytes.Clone(ev.Data)
		res.events = append(res.events, e)
	}
}

func readChunks(cr *ChunkReader) readResult { return readChunksHeld(cr, -1) }

// readChunksHeld is readChunks that, if hold is not negative, keeps the
// last hold chunks unreleased and releases the others (the events it
// returns are copies).
func readChunksHeld(cr *ChunkReader, hold int) readResult {
	var res readResult
	var held []*Chunk
	for {
		c, err := cr.Next()
		if err != nil {
			res.err = err
			return res
		}
		if c.FirstLine != len(res.events)+1 {
			res.err = fmt.Errorf("chunk at line %d after %d events", c.FirstLine, len(res.events))
			return res
		}
		for _, e := range c.Events {
			e.Entity, e.Key, e.Event = strings.Clone(e.Entity), strings.Clone(e.Key), strings.Clone(e.Event)
			e.Meta, e.Data = bytes.Clone(e.Meta), bytes.Clone(e.Data)
			res.events = append(res.events, e)
		}
		res.end = c.End
		if held = append(held, c); hold >= 0 && len(held) > hold {
			cr.Release(held[0])
			held = held[1:]
		}
	}
}

// TestChunkReaderLimit: with a limit, a ChunkReader reads no further
// ahead than the chunks it may hold (those the caller holds count), goes
// on as the caller releases them, and reuses their memory.
func TestChunkReaderLimit(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	var read atomic.Int64
	r := &countBytes{r: bytes.NewReader(data), n: &read}
	cr := NewChunkReaderLimit(r, 2, 1000, nil, nil, 4)
	defer cr.Close()
	var held []*Chunk
	for range 3 {
		c, err := cr.Next()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Three held: one more chunk may be read, not more (without the
	// limit the reader would queue three more and read a fourth).
	time.Sleep(100 * time.Millisecond)
	if n := read.Load(); n > 4*1000 {
		t.Fatalf("holding 3 chunks of a limit of 4, the reader read %d bytes, more than 4 chunks of 1000", n)
	}
	for _, c := range held {
		cr.Release(c)
	}
	for {
		c, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after releasing: %v", err)
		}
		cr.Release(c)
	}
	if read.Load() != int64(len(data)) {
		t.Fatalf("read %d bytes of %d", read.Load(), len(data))
	}

	// Memory reused: reading some MB in chunks of 64 KB, releasing
	// each, allocates a fraction of it (the buffers of the limit's chunks
	// and copies of slow-path values), where a chunk of its own each
	// allocates the input's size at least.
	big := bytes.Repeat(data, max(1, (8<<20)/len(data)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cr2 := NewChunkReaderLimit(bytes.NewReader(big), 2, 64<<10, nil, nil, 4)
	n := 0
	for {
		c, err := cr2.Next()
		if err != nil {
			break
		}
		n += len(c.Events)
		cr2.Release(c)
	}
	cr2.Close()
	runtime.ReadMemStats(&after)
	if n == 0 {
		t.Fatal("no events")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(big))/4 {
		t.Fatalf("reading %d bytes with their chunks released allocated %d bytes", len(big), alloc)
	}
}

// countBytes counts the bytes read from r.
type countBytes struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countBytes) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestChunkReaderStop stops a ChunkReader after some reads: it reads no
// more, and Next returns the lines read, then the stop error as it is.
func TestChunkReaderStop(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	errStop := errors.New("stop")
	reads := 0
	r := &countReads{r: bytes.NewReader(data), n: &reads}
	cr := newChunkReader(r, 2, 1000, DefaultMaxLineBytes, func() error {
		if reads >= 5 {
			return errStop
		}
		return nil
	}, nil, 0)
	defer cr.Close()
	got := readChunks(cr)
	if got.err != errStop || reads != 5 || len(got.events) == 0 || got.end > 5000 {
		t.Fatalf("%d reads, %d events up to %d, %v; want 5 reads, the events of up to 5000 bytes, the stop error", reads, len(got.events), got.end, got.err)
	}
}

type countReads struct {
	r io.Reader
	n *int
}

func (c *countReads) Read(p []byte) (int, error) {
	*c.n++
	return c.r.Read(p[:min(len(p), 1000)])
}

// TestChunkReaderClose closes a ChunkReader before reading all of it.
func TestChunkReaderClose(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	cr := NewChunkReader(bytes.NewReader(data), 2, 1000, nil)
	if _, err := cr.Next(); err != nil {
		t.Fatal(err)
	}
	cr.Close()
	cr.Close()
}

// BenchmarkParseLine parses the lines of the examples ledger as an export
// writes them, by the old parser alone (slow) and by the fast path (fast),
// and reads them through a Reader and a ChunkReader.
func BenchmarkParseLine(b *testing.B) {
	data := readVector(b, "evently-examples-ledger.ndjson")
	all := readAll(NewReader(bytes.NewReader(data)), DefaultMaxLineBytes)
	var export []byte
	for i := range all.events {
		export = AppendEvent(export, &all.events[i])
	}
	lines := bytes.Split(bytes.TrimSuffix(export, []byte("\n")), []byte("\n"))
	for _, fast := range []bool{false, true} {
		b.Run(map[bool]string{false: "slow", true: "fast"}[fast], func(b *testing.B) {
			var p lineParser
			var ev Event
			b.SetBytes(int64(len(export)))
			for b.Loop() {
				for _, l := range lines {
					var err error
					if fast {
						err = p.parse(l, &ev, true)
					} else {
						err = p.parseSlow(l, &ev)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N)*float64(len(lines))/b.Elapsed().Seconds(), "lines/s")
		})
	}
	b.Run("Reader", func(b *testing.B) {
		b.SetBytes(int64(len(export)))
		for b.Loop() {
			if res := readAll(NewReader(bytes.NewReader(export)), DefaultMaxLineBytes); res.err != io.EOF {
				b.Fatal(res.err)
			}
		}
	})
	b.Run("ChunkReader", func(b *testing.B) {
		b.SetBytes(int64(len(export)))
		for b.Loop() {
			cr := NewChunkReader(bytes.NewReader(export), 2, 0, nil)
			if res := readChunks(cr); res.err != io.EOF {
				b.Fatal(res.err)
			}
			cr.Close()
		}
	})
}

// TestChunkReaderSum: a ChunkReader with a Sum function gives, in each
// chunk, the sum of each of its events, in order.
func TestChunkReaderSum(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	sum := func(e *Event) [32]byte { return sha256.Sum256(AppendEvent(nil, e)) }
	cr := NewChunkReaderSum(bytes.NewReader(data), 2, 5000, nil, sum)
	defer cr.Close()
	n := 0
	for {
		c, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Sums) != len(c.Events) {
			t.Fatalf("chunk at line %d: %d sums for %d events", c.FirstLine, len(c.Sums), len(c.Events))
		}
		for i := range c.Events {
			if c.Sums[i] != sum(&c.Events[i]) {
				t.Fatalf("line %d: sum %x, want %x", c.FirstLine+i, c.Sums[i], sum(&c.Events[i]))
			}
		}
		n += len(c.Events)
	}
	if n < 10000 {
		t.Fatalf("%d events summed", n)
	}
}
