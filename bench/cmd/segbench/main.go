// Command segbench runs the segment-log workloads of package bench (issue
// 3) on annal and github.com/tidwall/wal and prints their absolute figures
// and the ratios annal / tidwall-wal in one table:
//
//	cd bench && go run ./cmd/segbench [-n 0] [-rounds 5] [-dir DIR]
//
// It first measures the machine's limit, a plain *os.File append + fsync
// loop (and, among the G-goroutine rows, an ideal group commit on a plain
// *os.File, bench.IdealGroup, with 64 writers and with 1); with -n 0 (the default) the single-record workloads are sized from
// it to take about 1 s each (500 to 5,000 records).
//
// The machine this was written for is shared and noisy: its fsync latency
// drifts by 2x within seconds. So the logs that are compared run side by
// side: each round opens fresh logs, then runs them in turns, a small chunk
// of the workload each (100 records, 10 batches), until each has done its
// share; a ratio is taken within a round, and the table shows medians over
// the rounds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/annal-db/annal/bench"
	"github.com/annal-db/annal/segment"
	"github.com/tidwall/wal"
)

type walLog = wal.Log

func main() {
	n := flag.Int("n", 0, "records of each single-record workload (the 64-goroutine annal and ideal ones append 20x as many); 0: sized from the measured fsync latency, about 1 s each, 500 to 5,000")
	batches := flag.Int("batches", 300, "batches of 1,000 records in the batch workloads")
	verifyN := flag.Int("verify", 200_000, "records of the ledger that Verify checks")
	rounds := flag.Int("rounds", 5, "rounds; the table shows the median round of each workload")
	dir := flag.String("dir", "", "directory to work in (a temporary directory inside it is used and removed); default: the system's temporary directory")
	keep := flag.Bool("keep", false, "keep the files written")
	flag.Parse()
	if err := run(*n, *batches, *verifyN, *rounds, *dir, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "segbench:", err)
		os.Exit(1)
	}
}

// side is one log running one workload, chunk by chunk.
type side struct {
	log   string
	chunk int // units (records or batches) per turn
	total int // units per round
	// open prepares the side in dir and returns the function that runs
	// k units, and the one that closes.
	open func(dir string) (run func(k int) (bench.Result, error), close func() error, err error)
}

// group is sides compared with each other, run in turns.
type group struct {
	workload string
	sides    []side
}

// row is one line of the table: the rounds of one workload on one log.
type row struct {
	workload, log string
	results       []bench.Result
}

func (r *row) median() bench.Result {
	s := slices.Clone(r.results)
	slices.SortFunc(s, func(a, b bench.Result) int {
		switch x, y := rate(a), rate(b); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// rate is records/s, or MB/s for a result without records.
func rate(r bench.Result) float64 {
	if r.Records == 0 {
		return r.MBPerSec()
	}
	return r.RecordsPerSec()
}

func add(a, b bench.Result) bench.Result {
	return bench.Result{Records: a.Records + b.Records, Bytes: a.Bytes + b.Bytes, Syncs: a.Syncs + b.Syncs, Elapsed: a.Elapsed + b.Elapsed}
}

type ratio struct{ median, min, max float64 }

// pairedRatio returns the median, min and max over the rounds of the rate
// of a in a round divided by the rate of b in the same round (MB/s if
// either has no records).
func pairedRatio(a, b *row) ratio {
	var rs []float64
	for i := range min(len(a.results), len(b.results)) {
		x, y := a.results[i], b.results[i]
		if x.Records == 0 || y.Records == 0 {
			rs = append(rs, x.MBPerSec()/y.MBPerSec())
		} else {
			rs = append(rs, x.RecordsPerSec()/y.RecordsPerSec())
		}
	}
	slices.Sort(rs)
	return ratio{median: rs[len(rs)/2], min: rs[0], max: rs[len(rs)-1]}
}

func annalSide(name string, chunk, total int, work func(l *segment.Log, k int) (bench.Result, error)) side {
	return side{log: name, chunk: chunk, total: total, open: func(dir string) (func(int) (bench.Result, error), func() error, error) {
		l, err := bench.CreateAnnal(dir, segment.Sync, 0)
		if err != nil {
			return nil, nil, err
		}
		return func(k int) (bench.Result, error) { return work(l, k) }, l.Close, nil
	}}
}

// idealSide is the ideal group commit (bench.IdealGroup) with g writers.
func idealSide(name string, chunk, total, g int) side {
	return side{log: name, chunk: chunk, total: total, open: func(dir string) (func(int) (bench.Result, error), func() error, error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		a, err := bench.NewIdealGroup(dir)
		if err != nil {
			return nil, nil, err
		}
		return func(k int) (bench.Result, error) { return a.Run(k, g) }, a.Close, nil
	}}
}

func walSide(name string, chunk, total int, work func(w *walLog, k int) (bench.Result, error)) side {
	return side{log: name, chunk: chunk, total: total, open: func(dir string) (func(int) (bench.Result, error), func() error, error) {
		w, err := bench.OpenWAL(dir)
		if err != nil {
			return nil, nil, err
		}
		return func(k int) (bench.Result, error) { return work(w, k) }, w.Close, nil
	}}
}

// runGroup runs one round of g in fresh directories under work: the sides
// in turns, a chunk each (the order of the turns alternating), until each
// has run its total. It returns each side's sum.
func runGroup(g group, work string, seq *int) ([]bench.Result, error) {
	type state struct {
		run   func(int) (bench.Result, error)
		close func() error
		dir   string
		done  int
		sum   bench.Result
	}
	st := make([]*state, len(g.sides))
	defer func() {
		for _, s := range st {
			if s != nil && s.close != nil {
				s.close()
				os.RemoveAll(s.dir)
			}
		}
	}()
	for i, sd := range g.sides {
		*seq++
		dir := filepath.Join(work, fmt.Sprint(*seq))
		run, cl, err := sd.open(dir)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", g.workload, sd.log, err)
		}
		st[i] = &state{run: run, close: cl, dir: dir}
	}
	bench.Settle()
	for turn := 0; ; turn++ {
		order := make([]int, len(st))
		for i := range order {
			order[i] = i
		}
		if turn%2 == 1 {
			slices.Reverse(order)
		}
		busy := false
		for _, i := range order {
			s, sd := st[i], g.sides[i]
			if s.done >= sd.total {
				continue
			}
			busy = true
			k := min(sd.chunk, sd.total-s.done)
			r, err := s.run(k)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", g.workload, sd.log, err)
			}
			s.done += k
			s.sum = add(s.sum, r)
		}
		if !busy {
			break
		}
	}
	out := make([]bench.Result, len(st))
	for i, s := range st {
		err := s.close()
		s.close = nil
		os.RemoveAll(s.dir)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: close: %w", g.workload, g.sides[i].log, err)
		}
		out[i] = s.sum
	}
	return out, nil
}

func run(n, batches, verifyN, rounds int, dir string, keep bool) error {
	if rounds < 1 || batches < 1 || verifyN < 1 || n < 0 {
		return fmt.Errorf("-rounds, -batches and -verify must be positive, -n not negative")
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp(dir, "segbench-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	began := time.Now()
	fmt.Printf("segbench: %s, GOMAXPROCS %d, %s/%s, in %s\n", runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, work)

	// The machine's limit: one writer appending ~250 bytes and fsyncing.
	probe, err := bench.FsyncBaseline(work, 500, 256)
	if err != nil {
		return fmt.Errorf("fsync probe: %w", err)
	}
	perSync := probe.Elapsed / time.Duration(probe.Syncs)
	const chunk = 100 // records per turn in the single-record workloads
	if n == 0 {
		n = min(max(int(time.Second/max(perSync, time.Microsecond)), 500), 5000)
	}
	n = max(chunk, n/chunk*chunk)
	fmt.Printf("fsync probe: %v per 256-byte append + fsync (plain *os.File); single-record workloads: %d records, 64 goroutines (annal, ideal): %d; %d rounds\n\n",
		perSync.Round(time.Microsecond), n, 20*n, rounds)

	p := bench.GetPool()
	const machine = "*os.File append+fsync"
	const idealMany, idealOne = "ideal group commit G=64", "ideal group commit G=1"
	groups := []group{
		{"batch of 1000, 1 fsync", []side{
			annalSide("annal", 10, batches, func(l *segment.Log, k int) (bench.Result, error) { return bench.AnnalBatches(l, p, k) }),
			walSide("tidwall-wal", 10, batches, func(w *walLog, k int) (bench.Result, error) { return bench.WALBatches(w, p, k) }),
		}},
		{"single record, fsync each", []side{
			annalSide("annal", chunk, n, func(l *segment.Log, k int) (bench.Result, error) { return bench.AnnalSingles(l, p, k) }),
			walSide("tidwall-wal", chunk, n, func(w *walLog, k int) (bench.Result, error) { return bench.WALSingles(w, p, k) }),
			{log: machine, chunk: chunk, total: n, open: func(dir string) (func(int) (bench.Result, error), func() error, error) {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return nil, nil, err
				}
				a, err := bench.NewFileAppender(dir, 253)
				if err != nil {
					return nil, nil, err
				}
				return a.Append, a.Close, nil
			}},
		}},
		{"Sync appends, G goroutines", []side{
			annalSide("annal G=64", 20*chunk, 20*n, func(l *segment.Log, k int) (bench.Result, error) { return bench.AnnalConcurrent(l, p, k, 64) }),
			annalSide("annal G=1", chunk, n, func(l *segment.Log, k int) (bench.Result, error) { return bench.AnnalConcurrent(l, p, k, 1) }),
			walSide("tidwall-wal+mutex G=64", chunk, n, func(w *walLog, k int) (bench.Result, error) { return bench.WALConcurrentMutex(w, p, k, 64) }),
			idealSide(idealMany, 20*chunk, 20*n, 64),
			idealSide(idealOne, chunk, n, 1),
		}},
	}

	rows := map[string]*row{}
	var order []string
	record := func(workload, log string, r bench.Result) {
		k := workload + "\x00" + log
		if rows[k] == nil {
			rows[k] = &row{workload: workload, log: log}
			order = append(order, k)
		}
		rows[k].results = append(rows[k].results, r)
	}
	seq := 0
	for round := range rounds {
		fmt.Fprintf(os.Stderr, "round %d/%d ...\n", round+1, rounds)
		for _, g := range groups {
			rs, err := runGroup(g, work, &seq)
			if err != nil {
				return err
			}
			for i, r := range rs {
				record(g.workload, g.sides[i].log, r)
			}
		}
	}

	// Verify: ledgers built once (not timed), verified each round, each
	// time followed by a read + CRC32C of the same files.
	ctx := context.Background()
	for _, v := range []struct {
		what    string
		segSize int64
	}{{"64 MiB segments", 0}, {"8 MiB segments", 8 << 20}} {
		seq++
		d := filepath.Join(work, fmt.Sprint(seq))
		fmt.Fprintf(os.Stderr, "building a ledger of %d records (%s) ...\n", verifyN, v.what)
		l, err := bench.BuildLedger(d, verifyN, v.segSize)
		if err != nil {
			return err
		}
		size, _ := bench.LedgerBytes(d)
		segSize := v.segSize
		if segSize == 0 {
			segSize = bench.SegmentSize
		}
		name := fmt.Sprintf("Verify %d records, %d segment(s)", verifyN+1, (size+segSize-1)/segSize)
		bench.Settle()
		for range rounds {
			r, err := bench.AnnalVerify(ctx, l)
			if err == nil && r.Records != int64(verifyN)+1 {
				err = fmt.Errorf("verify: %d records, want %d", r.Records, verifyN+1)
			}
			if err != nil {
				l.Close()
				return err
			}
			record(name, "annal", r)
			c, err := bench.ReadCRC(d)
			if err != nil {
				l.Close()
				return err
			}
			record(name, "read+CRC32C only", c)
		}
		if err := l.Close(); err != nil {
			return err
		}
		if !keep {
			os.RemoveAll(d)
		}
	}

	// The table.
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tlog\trecords\ttime\trecords/s\tMB/s\trecords/fsync\tµs/fsync\tannal/this\t")
	var prev string
	for _, k := range order {
		r := rows[k]
		m := r.median()
		w := r.workload
		if w == prev {
			w = ""
		}
		prev = r.workload
		recs, rps, rpf, usf := "-", "-", "-", "-"
		if m.Records > 0 {
			recs, rps = fmt.Sprint(m.Records), fmt.Sprintf("%.0f", m.RecordsPerSec())
		}
		if m.Syncs > 0 {
			rpf = fmt.Sprintf("%.1f", m.RecordsPerSync())
			usf = fmt.Sprintf("%.0f", float64(m.Elapsed.Microseconds())/float64(m.Syncs))
		}
		ratio := ""
		if a := rows[r.workload+"\x00annal"]; a != nil && a != r {
			ratio = fmt.Sprintf("%.2fx", pairedRatio(a, r).median)
		} else if a := rows[r.workload+"\x00annal G=64"]; a != nil && a != r {
			ratio = fmt.Sprintf("%.2fx", pairedRatio(a, r).median)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%.1f\t%s\t%s\t%s\t\n", w, r.log, recs, m.Elapsed.Round(time.Millisecond), rps, m.MBPerSec(), rpf, usf, ratio)
	}
	tw.Flush()

	get := func(w, log string) *row { return rows[w+"\x00"+log] }
	fmt.Println()
	fmt.Println("Ratios of records/s, median over the rounds of the ratio within a round (min - max):")
	many := get("Sync appends, G goroutines", "annal G=64")
	for _, c := range []struct {
		what     string
		a, b     *row
		perFsync bool
	}{
		{"batch of 1000:  annal / tidwall-wal          ", get("batch of 1000, 1 fsync", "annal"), get("batch of 1000, 1 fsync", "tidwall-wal"), false},
		{"single record:  annal / tidwall-wal          ", get("single record, fsync each", "annal"), get("single record, fsync each", "tidwall-wal"), false},
		{"single record:  annal / *os.File append+fsync", get("single record, fsync each", "annal"), get("single record, fsync each", machine), false},
		{"64 goroutines:  annal / tidwall-wal+mutex    ", many, get("Sync appends, G goroutines", "tidwall-wal+mutex G=64"), false},
		{"group commit:   annal G=64 / annal G=1       ", many, get("Sync appends, G goroutines", "annal G=1"), true},
		{"group commit:   ideal G=64 / ideal G=1       ", get("Sync appends, G goroutines", idealMany), get("Sync appends, G goroutines", idealOne), true},
		{"64 goroutines:  annal / ideal group commit   ", many, get("Sync appends, G goroutines", idealMany), false},
	} {
		pr := pairedRatio(c.a, c.b)
		fmt.Printf("  %s = %6.2fx  (%.2fx - %.2fx)", c.what, pr.median, pr.min, pr.max)
		if c.perFsync {
			fmt.Printf("  records/fsync %.1f (64 closed-loop writers: at most 64/2 = 32); target >= 20x", c.a.median().RecordsPerSync())
		}
		fmt.Println()
	}
	fmt.Printf("\nEach row is the round with the median rate. annal/this: median over the rounds of annal's rate over this row's\n"+
		"(records/s; MB/s against read+CRC32C). µs/fsync: time per fsync, i.e. per group commit. Total time %v.\n", time.Since(began).Round(time.Second))
	return nil
}
