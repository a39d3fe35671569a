package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rounds returns one result per value, round numbers from 1.
func rounds(workload, params, store, unit string, higher bool, values ...float64) []Result {
	var rs []Result
	for i, v := range values {
		rs = append(rs, Result{
			Workload: workload, Params: params, Store: store,
			Round: i + 1, Value: v, Unit: unit, Higher: higher,
		})
	}
	return rs
}

// find returns the summary of store in the group (workload, params).
func find(t *testing.T, ss []Summary, workload, params, store string) Summary {
	t.Helper()
	for _, s := range ss {
		if s.Workload == workload && s.Params == params && s.Store == store {
			return s
		}
	}
	t.Fatalf("no summary for %s %s %s", workload, params, store)
	return Summary{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestCSVRoundTrip(t *testing.T) {
	rs := []Result{
		{Workload: "append-batch", Params: "batch=100 mode=sync", Store: "annal", Round: 1,
			Value: 123456.789, Unit: "events/s", Higher: true,
			P50: 12.5, P99: 1 / 3.0, P999: 1e-7, MaxRSS: 123 << 20},
		{Workload: "open-crash", Params: "events=1000000", Store: "bbolt", Round: 2,
			Unit: "ms", Err: "open: \"db\", locked,\nsee line 2"},
		{Workload: "get", Params: "", Store: "wal", Round: 3, Unit: "events/s", Higher: true, Err: NA},
		{Workload: "scan", Params: "range=1%", Store: "pebble", Round: 0,
			Value: math.MaxFloat64, Unit: "MB/s", Higher: true, P50: math.SmallestNonzeroFloat64,
			MaxRSS: math.MaxInt64},
		{Workload: "verify", Params: " leading and trailing ", Store: "sqlite", Round: -1,
			Value: -0.1, Unit: "µs", Err: ""},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "workload,params,store,round,value,unit,higher,") {
		t.Errorf("no header row: %q", buf.String())
	}
	got, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, rs)
	}

	// Empty: a header only, and no results back.
	buf.Reset()
	if err := WriteCSV(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCSV(&buf); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v", got, err)
	}
}

func TestReadCSVColumnsByName(t *testing.T) {
	in := "err,store,workload,params,round,value,unit,higher,p50_us,p99_us,p999_us,max_rss_bytes,extra\n" +
		",annal,get,,1,2.5,events/s,true,1,2,3,4,ignored\n"
	got, err := ReadCSV(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Workload: "get", Store: "annal", Round: 1, Value: 2.5, Unit: "events/s",
		Higher: true, P50: 1, P99: 2, P999: 3, MaxRSS: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestReadCSVErrors(t *testing.T) {
	header := strings.Join(csvHeader, ",") + "\n"
	for name, in := range map[string]string{
		"empty":          "",
		"missing column": "workload,params,store\n",
		"bad round":      header + "w,p,s,x,1,u,true,0,0,0,0,\n",
		"bad value":      header + "w,p,s,1,fast,u,true,0,0,0,0,\n",
		"bad higher":     header + "w,p,s,1,1,u,yes please,0,0,0,0,\n",
		"bad rss":        header + "w,p,s,1,1,u,true,0,0,0,1.5,\n",
		"short row":      header + "w,p,s,1\n",
	} {
		if _, err := ReadCSV(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1, 1000, 11}, 10},
	} {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !reflect.DeepEqual(in, c.in) {
			t.Errorf("Median modified its input: %v, was %v", c.in, in)
		}
	}
}

func TestSummarize(t *testing.T) {
	var rs []Result
	// Odd number of rounds, given out of order.
	rs = append(rs, rounds("append-batch", "batch=100", "annal", "events/s", true, 110, 90, 100, 130, 95)...)
	// Even number of rounds.
	rs = append(rs, rounds("append-batch", "batch=100", "wal", "events/s", true, 40, 60, 50, 70)...)
	for i := range rs {
		rs[i].P50, rs[i].P99, rs[i].P999 = float64(i+1), float64(10*(i+1)), 0
		rs[i].MaxRSS = int64(1000 * (i + 1))
	}

	ss := Summarize(rs)
	if len(ss) != 2 {
		t.Fatalf("%d summaries, want 2: %+v", len(ss), ss)
	}
	a := find(t, ss, "append-batch", "batch=100", "annal")
	if a.Rounds != 5 || a.Failed != 0 || a.Median != 100 || a.Min != 90 || a.Max != 130 {
		t.Errorf("annal: %+v", a)
	}
	if !near(a.Spread, 0.4) { // (130-90)/100
		t.Errorf("annal spread %v, want 0.4", a.Spread)
	}
	if a.P50 != 3 || a.P99 != 30 || a.P999 != 0 || a.MaxRSS != 5000 {
		t.Errorf("annal latencies/RSS: %+v", a)
	}
	if a.Unit != "events/s" || !a.Higher || a.Err != "" || !a.OK() {
		t.Errorf("annal: %+v", a)
	}

	w := find(t, ss, "append-batch", "batch=100", "wal")
	if w.Rounds != 4 || w.Median != 55 || w.Min != 40 || w.Max != 70 {
		t.Errorf("wal: %+v", w)
	}
	if !near(w.Spread, 30.0/55) {
		t.Errorf("wal spread %v, want %v", w.Spread, 30.0/55)
	}
	if w.P50 != 7.5 || w.P99 != 75 || w.MaxRSS != 9000 { // rounds 6..9
		t.Errorf("wal latencies/RSS: %+v", w)
	}
}

func TestSummarizeOrder(t *testing.T) {
	var rs []Result
	rs = append(rs, rounds("scan", "range=1%", "pebble", "MB/s", true, 1)...)
	rs = append(rs, rounds("get", "", "annal", "events/s", true, 1)...)
	rs = append(rs, rounds("scan", "range=1%", "annal", "MB/s", true, 1)...)
	rs = append(rs, rounds("get", "", "pebble", "events/s", true, 1)...)
	rs = append(rs, rounds("scan", "range=10%", "bbolt", "MB/s", true, 1)...)
	rs = append(rs, rounds("get", "", "bbolt", "events/s", true, 1)...)
	rs = append(rs, rounds("scan", "range=1%", "pebble", "MB/s", true, 2)...) // a second round

	var got []string
	for _, s := range Summarize(rs) {
		got = append(got, s.Workload+"/"+s.Params+"/"+s.Store)
	}
	want := []string{
		// Groups in first-seen order, stores in their global first-seen
		// order: pebble, annal, bbolt.
		"scan/range=1%/pebble", "scan/range=1%/annal",
		"get//pebble", "get//annal", "get//bbolt",
		"scan/range=10%/bbolt",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order:\n got %v\nwant %v", got, want)
	}
}

func TestRatioOrientation(t *testing.T) {
	var rs []Result
	// Higher is better: annal 200 events/s, wal 100 (annal 2x better),
	// pebble 400 (annal half as good).
	rs = append(rs, rounds("append", "", "annal", "events/s", true, 200)...)
	rs = append(rs, rounds("append", "", "wal", "events/s", true, 100)...)
	rs = append(rs, rounds("append", "", "pebble", "events/s", true, 400)...)
	// Lower is better: annal 10 ms, wal 30 ms (annal 3x better), pebble
	// 5 ms (annal half as good).
	rs = append(rs, rounds("open", "", "annal", "ms", false, 10)...)
	rs = append(rs, rounds("open", "", "wal", "ms", false, 30)...)
	rs = append(rs, rounds("open", "", "pebble", "ms", false, 5)...)

	ss := Summarize(rs)
	for _, c := range []struct {
		workload, store string
		want            float64
	}{
		{"append", "annal", 1}, {"append", "wal", 2}, {"append", "pebble", 0.5},
		{"open", "annal", 1}, {"open", "wal", 3}, {"open", "pebble", 0.5},
	} {
		s := find(t, ss, c.workload, "", c.store)
		if !near(s.Ratio, c.want) || !s.HasRatio() {
			t.Errorf("%s %s: ratio %v, want %v", c.workload, c.store, s.Ratio, c.want)
		}
	}
}

func TestRatioNA(t *testing.T) {
	var rs []Result
	// A peer without the workload, a peer whose rounds all erred, and a
	// peer with one round of two erred (still measured).
	rs = append(rs, rounds("get", "", "annal", "events/s", true, 100, 100)...)
	na := rounds("get", "", "wal", "events/s", true, 0, 0)
	for i := range na {
		na[i].Err = NA
	}
	rs = append(rs, na...)
	failed := rounds("get", "", "bbolt", "events/s", true, 0, 0)
	failed[0].Err, failed[1].Err = "disk full", "disk still full"
	rs = append(rs, failed...)
	half := rounds("get", "", "sqlite", "events/s", true, 50, 0)
	half[1].Err = "timeout"
	rs = append(rs, half...)
	// A group without annal.
	rs = append(rs, rounds("scan", "", "pebble", "MB/s", true, 10)...)
	// A group where annal erred.
	bad := rounds("replay", "", "annal", "events/s", true, 0)
	bad[0].Err = "boom"
	rs = append(rs, bad...)
	rs = append(rs, rounds("replay", "", "pebble", "events/s", true, 10)...)

	ss := Summarize(rs)
	if s := find(t, ss, "get", "", "wal"); s.Err != NA || s.Rounds != 0 || s.Failed != 2 || s.HasRatio() || s.OK() {
		t.Errorf("wal: %+v", s)
	}
	if s := find(t, ss, "get", "", "bbolt"); s.Err != "disk full" || s.HasRatio() {
		t.Errorf("bbolt: %+v", s)
	}
	if s := find(t, ss, "get", "", "sqlite"); s.Err != "" || s.Rounds != 1 || s.Failed != 1 || !near(s.Ratio, 2) {
		t.Errorf("sqlite: %+v", s)
	}
	if s := find(t, ss, "scan", "", "pebble"); s.HasRatio() {
		t.Errorf("pebble without annal: %+v", s)
	}
	if s := find(t, ss, "replay", "", "annal"); s.Err != "boom" || s.HasRatio() {
		t.Errorf("annal erred: %+v", s)
	}
	if s := find(t, ss, "replay", "", "pebble"); s.HasRatio() {
		t.Errorf("pebble with annal erred: %+v", s)
	}
	if got := RatioString(0); got != NA {
		t.Errorf("RatioString(0) = %q", got)
	}

	// The tables say so.
	var b strings.Builder
	if err := Table(&b, ss); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n/a", "error", "disk full", "1/2", "2.00x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567, "events/s", "1.23M events/s"},
		{456000, "events/s", "456k events/s"},
		{999.7, "events/s", "1.00k events/s"},
		{12.34, "events/s", "12.3 events/s"},
		{0, "events/s", "0 events/s"},
		{12.34, "ms", "12.3 ms"},
		{0.85, "ms", "850 µs"},
		{1500, "ms", "1.50 s"},
		{1234.6, "MB/s", "1235 MB/s"},
		{12.345, "MB/s", "12.3 MB/s"},
		{0.0123, "", "0.0123"},
	} {
		if got := Human(c.v, c.unit); got != c.want {
			t.Errorf("Human(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
	for us, want := range map[float64]string{0: "-", 0.25: "250 ns", 12.34: "12.3 µs", 4560: "4.56 ms", 1.2e6: "1.20 s"} {
		if got := Micros(us); got != want {
			t.Errorf("Micros(%v) = %q, want %q", us, got, want)
		}
	}
	for r, want := range map[float64]string{1: "1.00x", 1.349: "1.35x", 0.737: "0.74x", 12.34: "12.3x", 123.4: "123x"} {
		if got := RatioString(r); got != want {
			t.Errorf("RatioString(%v) = %q, want %q", r, got, want)
		}
	}
}

// sample is a comparison of 30 groups and 5 stores, with a store that
// lacks some workloads and one that fails one.
func sample() []Result {
	var rs []Result
	stores := []string{"annal", "wal", "pebble", "bbolt", "sqlite"}
	factor := []float64{1, 1.3, 0.6, 2.5, 9}
	for g := range 30 {
		workload, unit, higher := "append-batch", "events/s", true
		if g >= 25 {
			workload, unit, higher = "open-clean", "ms", false
		}
		params := fmt.Sprintf("batch=%d mode=sync", g)
		for i, st := range stores {
			for round := 1; round <= 3; round++ {
				r := Result{Workload: workload, Params: params, Store: st, Round: round, Unit: unit, Higher: higher,
					P50: 100 * factor[i], P99: 1000 * factor[i], P999: 5000 * factor[i], MaxRSS: int64(i+1) << 24}
				if higher {
					r.Value = 1e5 / factor[i] * (1 + float64(g)/10) * (1 + float64(round)/100)
				} else {
					r.Value = 10 * factor[i] * (1 + float64(round)/100)
				}
				if st == "wal" && g%3 == 0 {
					r.Err, r.Value = NA, 0
				}
				if st == "bbolt" && g == 7 {
					r.Err, r.Value = "timeout | after 30 s", 0
				}
				rs = append(rs, r)
			}
		}
	}
	return rs
}

func TestTableAndMarkdown(t *testing.T) {
	ss := Summarize(sample())
	var tb, md strings.Builder
	if err := Table(&tb, ss); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&md, ss); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(tb.String(), "\n"), "\n")
	if len(lines) != 1+len(ss) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), 1+len(ss), tb.String())
	}
	for _, want := range []string{"workload", "peak RSS (MiB)", "annal vs this", "p99.9", "events/s", "ms", "n/a", "error", "9.00x"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for i, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("table line %d has trailing spaces: %q", i, l)
		}
	}
	// The ratio column ends at the same place in every row (right-aligned).
	col := strings.Index(lines[0], "annal vs this") + len("annal vs this")
	for _, l := range lines[1:] {
		if r := []rune(l); len(r) < col || !strings.HasSuffix(string(r[:col]), "x") && !strings.HasSuffix(string(r[:col]), NA) {
			t.Errorf("ratio not aligned at column %d: %q", col, l)
		}
	}

	mdLines := strings.Split(strings.TrimSuffix(md.String(), "\n"), "\n")
	if len(mdLines) != 2+len(ss) {
		t.Fatalf("markdown has %d lines, want %d", len(mdLines), 2+len(ss))
	}
	cells := strings.Count(mdLines[0], "|")
	for i, l := range mdLines {
		// Escaped pipes are not cell separators.
		if n := strings.Count(l, "|") - strings.Count(l, `\|`); n != cells {
			t.Errorf("markdown line %d has %d separators, want %d: %q", i, n, cells, l)
		}
	}
	if !strings.Contains(md.String(), `timeout \| after 30 s`) {
		t.Errorf("markdown lacks the escaped error:\n%s", md.String())
	}
}

// checkXML decodes the file at path as XML up to its end.
func checkXML(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Fatal("empty chart")
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var elements int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not XML: %v", err)
		}
		if _, ok := tok.(xml.StartElement); ok {
			elements++
		}
	}
	if elements < 10 {
		t.Errorf("chart has only %d elements", elements)
	}
	return data
}

func TestChart(t *testing.T) {
	ss := Summarize(sample())
	path := filepath.Join(t.TempDir(), "ratios.svg")
	if err := Chart(path, ss); err != nil {
		t.Fatal(err)
	}
	svg := string(checkXML(t, path))
	for _, want := range []string{"<svg", "wal", "pebble", "bbolt", "sqlite", "append-batch · batch=0 mode=sync", "open-clean · batch=29 mode=sync",
		"&gt; 1: annal faster", "9.00x", "1/2x", "sans-serif"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if len(svg) > 1<<20 {
		t.Errorf("chart is %d bytes", len(svg))
	}

	png := filepath.Join(t.TempDir(), "ratios.png")
	if err := ChartPNG(png, ss); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("PNG: %v", err)
	}
}

func TestChartNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.svg")
	// annal alone, and peers without annal: no ratio to a peer.
	rs := rounds("get", "", "annal", "events/s", true, 1)
	rs = append(rs, rounds("scan", "", "pebble", "MB/s", true, 1)...)
	if err := Chart(path, Summarize(rs)); !errors.Is(err, ErrNothingToChart) {
		t.Errorf("Chart: %v, want ErrNothingToChart", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("Chart wrote a file: %v", err)
	}
}
