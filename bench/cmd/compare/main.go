// Command compare measures annal and its peers (tidwall/wal, Pebble alone,
// bbolt alone, SQLite in WAL mode) on the same machine, in the same run,
// on the same events, and prints a table of absolute figures and of
// ratios, with the machine's own limits measured in the same run:
//
//	cd bench && go run ./cmd/compare [-rounds 3] [-n 1000000] [-csv F] [-md F] [-svg F]
//
// Every measurement runs in a child process of its own (this program, with
// the job in the environment variable ANNAL_COMPARE_CHILD), so that its peak memory is its own and nothing outlives
// it; the stores take turns within a round, so that the machine's noise
// falls on all of them alike. See docs/benchmarks.md for what each
// workload does and for a reading of the results.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/annal-db/annal/bench/machine"
	"github.com/annal-db/annal/bench/peer"
	"github.com/annal-db/annal/bench/report"
)

// config is what a run measures.
type config struct {
	stores     []string
	groups     map[string]bool // append, concurrent, tailed, read, open
	rounds     int
	dur        time.Duration
	n          int      // events of the read dataset
	openSizes  []int    // ledger sizes for open after close and after crash
	bigStores  []string // stores measured at open sizes above 10^6
	batches    []int
	modes      []string
	appenders  []int
	dir        string
	machineMiB int
	crashAfter time.Duration // how long a crash child appends before it is killed
	// jobTimeout bounds each child process (0: no bound): a store that
	// hangs fails its job, named, instead of holding up the whole run.
	jobTimeout time.Duration
	log        io.Writer
}

func main() {
	stores := flag.String("stores", "", "comma-separated stores to measure (default: all: "+strings.Join(storeNames(), ",")+")")
	groups := flag.String("workloads", "append,concurrent,tailed,read,open", "comma-separated groups of workloads (tailed: annal appending with a reader process following)")
	rounds := flag.Int("rounds", 3, "rounds of every measurement (medians and spread over them)")
	dur := flag.Duration("dur", 2*time.Second, "how long each timed measurement runs")
	n := flag.Int("n", 1_000_000, "events of the dataset the read workloads run on")
	openSizes := flag.String("open-sizes", "10000,100000,1000000", "ledger sizes, in events, for open after a clean close and after a crash")
	bigStores := flag.String("big-stores", "annal,pebble", "stores measured at open sizes above 1,000,000 (filling the others takes too long)")
	dir := flag.String("dir", "", "where to write (a new directory inside it, removed at the end; default: the system's temporary directory)")
	keep := flag.Bool("keep", false, "keep the data written")
	csvPath := flag.String("csv", "", "write every measurement to this CSV file")
	mdPath := flag.String("md", "", "write the summary as a markdown table to this file")
	svgPath := flag.String("svg", "", "write the chart of ratios to this SVG file")
	jobTimeout := flag.Duration("job-timeout", time.Hour, "kill a child process (one measurement, fill or crash) that runs longer, and record the job as failed")
	fromCSV := flag.String("from-csv", "", "measure nothing: read the results of an earlier run from this CSV file and write the table and the chart (-svg) again")
	flag.Parse()
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(spec)
		return
	}
	if *fromCSV != "" {
		if err := rerender(*fromCSV, *svgPath); err != nil {
			fail(err)
		}
		return
	}
	cfg := config{
		rounds: *rounds, dur: *dur, n: *n, log: os.Stderr, machineMiB: 256, crashAfter: time.Second, jobTimeout: *jobTimeout,
		batches: []int{1, 10, 100, 1000}, modes: []string{"sync", "interval", "none"}, appenders: []int{1, 8, 64},
		bigStores: splitList(*bigStores), groups: map[string]bool{},
	}
	cfg.stores = splitList(*stores)
	if len(cfg.stores) == 0 {
		cfg.stores = storeNames()
	}
	for _, g := range splitList(*groups) {
		cfg.groups[g] = true
	}
	for _, s := range splitList(*openSizes) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 1 {
			fail(fmt.Errorf("-open-sizes: %q is not a number of events", s))
		}
		cfg.openSizes = append(cfg.openSizes, int(v))
	}
	base, err := os.MkdirTemp(*dir, "annal-compare-")
	if err != nil {
		fail(err)
	}
	cfg.dir = base
	if !*keep {
		defer os.RemoveAll(base)
	}
	rr, err := run(cfg)
	if err != nil {
		fail(err)
	}
	res, lim := rr.results, rr.lim
	ss := report.Summarize(res)
	fmt.Println()
	fmt.Println(lim.String())
	fmt.Println()
	if err := report.Table(os.Stdout, ss); err != nil {
		fail(err)
	}
	fmt.Println()
	writeBounds(os.Stdout, bounds(ss, lim, rr.cores))
	if *csvPath != "" {
		if err := writeFile(*csvPath, func(w io.Writer) error { return report.WriteCSV(w, res) }); err != nil {
			fail(err)
		}
	}
	if *mdPath != "" {
		if err := writeFile(*mdPath, func(w io.Writer) error {
			fmt.Fprintf(w, "%s\n\n", lim.Markdown())
			fmt.Fprintf(w, "| store | version | what it stores |\n| --- | --- | --- |\n")
			for _, s := range cfg.stores {
				i, _ := peer.Lookup(s)
				fmt.Fprintf(w, "| %s | %s | %s |\n", i.Name, i.Version, strings.ReplaceAll(i.What, "|", "\\|"))
			}
			fmt.Fprintln(w)
			if err := report.Markdown(w, ss); err != nil {
				return err
			}
			fmt.Fprintln(w)
			writeBounds(w, bounds(ss, lim, rr.cores))
			return nil
		}); err != nil {
			fail(err)
		}
	}
	if *svgPath != "" {
		if err := report.Chart(*svgPath, ss); err != nil {
			fail(err)
		}
	}
}

// rerender writes the table of an earlier run's CSV, and its chart if
// svgPath is set. (The machine's limits are not in the CSV.)
func rerender(csvPath, svgPath string) error {
	f, err := os.Open(csvPath)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := report.ReadCSV(f)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	ss := report.Summarize(res)
	if err := report.Table(os.Stdout, ss); err != nil {
		return err
	}
	if svgPath != "" {
		return report.Chart(svgPath, ss)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func storeNames() []string {
	var out []string
	for _, i := range peer.All() {
		out = append(out, i.Name)
	}
	return out
}

// runner runs jobs in child processes and collects results.
type runner struct {
	cfg     config
	exe     string
	results []report.Result
	seq     int
	// cores holds, for each of annal's workloads (workload and params),
	// the CPU its child used over the time measured, in cores, one value a
	// round: what bounds the figures no other machine limit bounds.
	cores map[string][]float64
}

// runResult is what a run measured.
type runResult struct {
	results []report.Result
	lim     machine.Limits
	cores   map[string][]float64 // see runner.cores
}

func run(cfg config) (runResult, error) {
	for _, s := range cfg.stores {
		if _, err := peer.Lookup(s); err != nil {
			return runResult{}, err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return runResult{}, err
	}
	r := &runner{cfg: cfg, exe: exe}
	fmt.Fprintf(cfg.log, "measuring the machine's limits in %s\n", cfg.dir)
	lim, err := machine.Measure(cfg.dir, cfg.machineMiB)
	if err != nil {
		return runResult{lim: lim}, fmt.Errorf("machine limits: %w", err)
	}
	if cfg.groups["read"] {
		if err := r.buildReadSets(); err != nil {
			return runResult{lim: lim}, err
		}
	}
	for round := 1; round <= cfg.rounds; round++ {
		if cfg.groups["append"] {
			for _, b := range cfg.batches {
				for _, m := range cfg.modes {
					for _, s := range cfg.stores {
						r.fresh(round, "append-batch", fmt.Sprintf("batch=%d mode=%s", b, m), s, "events/s",
							job{Kind: "append", Store: s, Mode: m, Batch: b, Dur: cfg.dur})
					}
				}
			}
		}
		if cfg.groups["concurrent"] {
			for _, a := range cfg.appenders {
				for _, s := range cfg.stores {
					r.fresh(round, "concurrent-sync", fmt.Sprintf("appenders=%d", a), s, "events/s",
						job{Kind: "concurrent", Store: s, Mode: "sync", Appenders: a, Dur: cfg.dur})
				}
			}
		}
		if cfg.groups["tailed"] {
			r.tailedRound(round)
		}
		if cfg.groups["read"] {
			r.readRound(round)
		}
	}
	if cfg.groups["open"] {
		if err := r.openSizes(); err != nil {
			return runResult{r.results, lim, r.cores}, err
		}
	}
	return runResult{r.results, lim, r.cores}, nil
}

// fresh runs j on a new directory, removed after, and records its rate.
func (r *runner) fresh(round int, workload, params, store, unit string, j job) {
	r.seq++
	j.Dir = filepath.Join(r.cfg.dir, fmt.Sprintf("run-%d-%s", r.seq, store))
	defer os.RemoveAll(j.Dir)
	out, err := r.child(j)
	r.record(round, workload, params, store, unit, out, err)
}

// record turns an outcome into a result: a rate (events/s, higher is
// better) or, for "ms", the time taken (lower is better).
func (r *runner) record(round int, workload, params, store, unit string, out outcome, err error) {
	res := report.Result{Workload: workload, Params: params, Store: store, Round: round, Unit: unit,
		P50: out.P50, P99: out.P99, P999: out.P999, MaxRSS: out.MaxRSS}
	switch {
	case err != nil:
		res.Err = err.Error()
	case out.NA:
		res.Err = "n/a"
	case out.Err != "":
		res.Err = out.Err
	case unit == "ms":
		res.Value = out.Seconds * 1e3
	case out.Seconds > 0:
		res.Value, res.Higher = float64(out.Events)/out.Seconds, true
	}
	if unit != "ms" {
		res.Higher = true
	}
	r.results = append(r.results, res)
	if store == "annal" && res.Err == "" && out.Seconds > 0 {
		if r.cores == nil {
			r.cores = map[string][]float64{}
		}
		k := workload + " " + params
		r.cores[k] = append(r.cores[k], out.CPU/out.Seconds)
	}
	shown := fmt.Sprintf("%.4g %s", res.Value, unit)
	if res.Err != "" {
		shown = res.Err
	}
	fmt.Fprintf(r.cfg.log, "round %d  %-16s %-22s %-7s %s\n", round, workload, params, store, shown)
}

// childEnv holds a child's job.
const childEnv = "ANNAL_COMPARE_CHILD"

// command returns the command that runs the job spec in a child process:
// this executable, with the job in its environment. It first has the
// kernel write back every dirty page (sync(2)): what an earlier
// measurement left unsynced (a fill without sync writes gigabytes) would
// otherwise be written back during this one, and an fsync here would wait
// for it.
// The child is killed once Config.jobTimeout has passed (see timedOut);
// call cancel when it has ended.
func (r *runner) command(spec []byte) (cmd *exec.Cmd, ctx context.Context, cancel context.CancelFunc) {
	syscall.Sync()
	ctx, cancel = context.WithCancel(context.Background())
	if r.cfg.jobTimeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), r.cfg.jobTimeout)
	}
	cmd = exec.CommandContext(ctx, r.exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	// Its own children (a tailed job's reader) may hold its output open
	// after a kill: Wait returns all the same.
	cmd.WaitDelay = 10 * time.Second
	return cmd, ctx, cancel
}

// timedOut returns err, saying so if the child was killed at the job's
// time limit (ctx from command).
func (r *runner) timedOut(ctx context.Context, spec []byte, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("killed after %v (-job-timeout), job %s: %w", r.cfg.jobTimeout, spec, err)
	}
	return err
}

// child runs j in a child process and returns its outcome.
func (r *runner) child(j job) (outcome, error) {
	spec, _ := json.Marshal(j)
	cmd, ctx, cancel := r.command(spec)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := r.timedOut(ctx, spec, cmd.Run())
	return parseOutcome(stdout.Bytes(), stderr.Bytes(), err)
}

func parseOutcome(stdout, stderr []byte, runErr error) (outcome, error) {
	var out outcome
	lines := bytes.Split(bytes.TrimSpace(stdout), []byte("\n"))
	last := lines[len(lines)-1]
	if err := json.Unmarshal(last, &out); err != nil {
		if runErr == nil {
			runErr = err
		}
		return out, fmt.Errorf("child: %v: %s", runErr, bytes.TrimSpace(append(stdout, stderr...)))
	}
	return out, nil
}

// readSet is a store's dataset for the read workloads.
type readSet struct{ dir, ids string }

func (r *runner) readDir(store string) readSet {
	d := filepath.Join(r.cfg.dir, "read-"+store)
	return readSet{dir: d, ids: d + ".ids"}
}

// buildReadSets fills every store with cfg.n events, in batches of 1,000
// without sync, and closes it cleanly.
func (r *runner) buildReadSets() error {
	for _, s := range r.cfg.stores {
		rs := r.readDir(s)
		out, err := r.child(job{Kind: "fill", Store: s, Dir: rs.dir, Mode: "none", Batch: 1000, N: r.cfg.n, IDs: rs.ids})
		if err == nil && out.Err != "" {
			err = fmt.Errorf("%s", out.Err)
		}
		if err != nil {
			return fmt.Errorf("building the read dataset of %s: %w", s, err)
		}
		r.record(0, "fill", fmt.Sprintf("events=%d batch=1000 mode=none", r.cfg.n), s, "events/s", out, nil)
	}
	return nil
}

func (r *runner) readRound(round int) {
	pct := func(f float64) string { return strconv.FormatFloat(f*100, 'f', -1, 64) + "%" }
	for _, w := range []struct {
		workload, params, kind string
		frac                   float64
	}{
		{"scan", "range=" + pct(0.01), "scan", 0.01},
		{"scan", "range=100%", "scan", 1},
		{"get", "random IDs", "get", 0},
		{"replay", "one stream of 300", "replay", 0},
		{"verify", "whole ledger", "verify", 0},
	} {
		for _, s := range r.cfg.stores {
			rs := r.readDir(s)
			out, err := r.child(job{Kind: w.kind, Store: s, Dir: rs.dir, IDs: rs.ids, Frac: w.frac, Dur: r.cfg.dur, Seed: uint64(round)})
			r.record(round, w.workload, fmt.Sprintf("%s n=%s", w.params, count(r.cfg.n)), s, "events/s", out, err)
		}
	}
}

// openSizes measures Open after a clean close and after a crash, as the
// ledger grows: each store is filled to each size (in batches of 1,000
// without sync, closed cleanly), then each round a child appends batches
// of 100 in Sync mode for a second (crashAfter) and is killed (SIGKILL) in the middle
// of its appends; a new child opens the directory (after the crash), and
// another one opens it again (after that clean close).
func (r *runner) openSizes() error {
	for _, size := range r.cfg.openSizes {
		for _, s := range r.cfg.stores {
			if size > 1_000_000 && !slices.Contains(r.cfg.bigStores, s) {
				continue
			}
			dir := filepath.Join(r.cfg.dir, fmt.Sprintf("open-%s-%d", s, size))
			params := "events=" + count(size)
			out, err := r.child(job{Kind: "fill", Store: s, Dir: dir, Mode: "none", Batch: 1000, N: size})
			r.record(0, "fill", params+" batch=1000 mode=none", s, "events/s", out, err)
			if err != nil || out.Err != "" {
				os.RemoveAll(dir)
				continue
			}
			for round := 1; round <= r.cfg.rounds; round++ {
				if err := r.crash(job{Kind: "crash", Store: s, Dir: dir, Mode: "sync", Batch: 100, Dur: r.cfg.crashAfter}); err != nil {
					r.record(round, "open-crash", params, s, "ms", outcome{}, err)
					break
				}
				out, err := r.child(job{Kind: "open", Store: s, Dir: dir, Mode: "sync"})
				r.record(round, "open-crash", params, s, "ms", out, err)
				out, err = r.child(job{Kind: "open", Store: s, Dir: dir, Mode: "sync"})
				r.record(round, "open-clean", params, s, "ms", out, err)
			}
			os.RemoveAll(dir)
		}
	}
	return nil
}

// crash runs j (kind crash) and kills it with SIGKILL once it says ready.
func (r *runner) crash(j job) error {
	spec, _ := json.Marshal(j)
	cmd, ctx, cancel := r.command(spec)
	defer cancel()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdout)
	ready := false
	var said []string
	for sc.Scan() {
		if sc.Text() == "ready" {
			ready = true
			break
		}
		said = append(said, sc.Text())
	}
	if ready {
		// Kill it at a moment that is not the line it printed.
		time.Sleep(time.Duration(20+time.Now().UnixNano()%80) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	go io.Copy(io.Discard, stdout)
	werr := r.timedOut(ctx, spec, cmd.Wait())
	if !ready {
		return fmt.Errorf("crash child ended before it was ready: %v: %s %s", werr, strings.Join(said, " "), bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// count writes n as 10^k when it is a power of ten, else as is.
func count(n int) string {
	k := 0
	for m := n; m >= 10 && m%10 == 0; m /= 10 {
		k++
	}
	if n == pow10(k) && k >= 4 {
		return "10^" + strconv.Itoa(k)
	}
	return strconv.Itoa(n)
}

func pow10(k int) int {
	p := 1
	for range k {
		p *= 10
	}
	return p
}
