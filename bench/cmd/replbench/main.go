// Command replbench measures replication's speed (issue 27's acceptance
// point) against versitygw v1.8.0 running in this process on the
// loopback:
//
//	cd bench && go run ./cmd/replbench [-rounds 3] [-run 3s] [-restore 1000000] [-dir DIR] [-cpuprofile F [-profile CONFIGS]] [-only CONFIGS]
//	cd bench && go run ./cmd/replbench -follower [-rounds 3] [-run 20s] [-follow-intervals 1s,250ms] [-follow-rate 10000]
//
// First a calibration runs, through a proxy that counts the requests by
// kind: repl1, repl64 and ship64 (below), a steady 100 events/s in
// Replicated and in Shipped mode, and an idle ledger: the requests per
// second at the defaults (the cost), and the chunks' mean size with one
// appender and with 64.
//
// Then it runs, in rounds, each of these on a fresh data directory (and
// a fresh prefix of the bucket), one after the other, so that the
// configurations alternate (A B C D E A B C D E ...) and a ratio is taken
// within a round, between runs seconds apart:
//
//   - local64: the engine without a replica, Sync durability, 64
//     appenders, each appending one event and waiting for it, again and
//     again, for -run;
//   - repl64, ship64: the same with Options.Replica, Replicated and
//     Shipped (the defaults otherwise);
//   - local1, repl1: one appender, for the latency of one append;
//   - the probes: a PUT (with the S3 SDK, create-only) of each mean chunk
//     size, and a write and fsync of its records on a plain file, many
//     times each, for their p50; and the PUTs per second of 4 PUT loops
//     (the Writer's uploads in flight) of repl64's chunk size.
//
// It prints every round's figures, and per target the ratio of each round
// with the median and the spread (lowest to highest), then the ratios that
// say why: the closed loop's bound 64 / (PUT p50 + fsync p50) against
// local Sync, Replicated 64 against that bound, and its chunks per second
// against the bare PUT loops'. Last, it builds a ledger of -restore events
// in Shipped mode and restores it five times (engine.Restore: every
// object read and verified, the files written and synced, the index
// built).
//
// With -follower it measures instead a follower's lag behind a Shipped
// writer appending -follow-rate events/s, the follower in another
// process, at each of -follow-intervals (follower.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/engine"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of the alternated configurations")
	run := flag.Duration("run", 3*time.Second, "how long each configuration runs in a round")
	restoreN := flag.Int("restore", 1_000_000, "events of the restored ledger (0: no restore)")
	dir := flag.String("dir", "", "directory to work in (a temporary directory inside it is used and removed); default: the system's temporary directory")
	storeDir := flag.String("store-dir", "", "directory for versitygw's files (a temporary directory inside it is used and removed), for a store whose disk is not the data directories' as a remote store's is not; default: beside the data directories")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (with -profile: of each run of those configurations, to F.CONFIG.ROUND)")
	profile := flag.String("profile", "", "with -cpuprofile: profile only the rounds' runs of these configurations (comma-separated, e.g. repl64,ship64), each from its appenders' start to their end, one file per run")
	only := flag.String("only", "", "run only these configurations of the rounds (comma-separated, e.g. local64,repl64,ship64), without the calibration, the probes and the targets: their rows, for CPU per event compared between builds")
	keepAlive := flag.Bool("keepalive", true, "versitygw keeps HTTP connections open between requests, as S3 does (false: a new TCP connection per request, versitygw's own default)")
	follower := flag.Bool("follower", false, "measure a follower's lag instead (a follower in another process; see follower.go): -rounds rounds of -follow-intervals, each -run long")
	intervals := flag.String("follow-intervals", "1s,250ms", "the followers' poll intervals, alternated in each round (-follower)")
	rate := flag.Int("follow-rate", 10000, "events/s the writer appends (-follower)")
	ship := flag.Duration("follow-ship", 50*time.Millisecond, "the writer's ShipInterval (-follower)")
	flag.Parse()
	if spec := os.Getenv(followChildEnv); spec != "" {
		if err := runFollowChild(spec, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "replbench follower:", err)
			os.Exit(1)
		}
		return
	}
	if *follower {
		var ivs []time.Duration
		for _, s := range strings.Split(*intervals, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintln(os.Stderr, "replbench: -follow-intervals:", err)
				os.Exit(2)
			}
			ivs = append(ivs, d)
		}
		if err := runLag(*rounds, *run, *dir, *storeDir, *keepAlive, ivs, *rate, *ship); err != nil {
			fmt.Fprintln(os.Stderr, "replbench:", err)
			os.Exit(1)
		}
		return
	}
	if *profile != "" {
		if *cpuprofile == "" {
			fmt.Fprintln(os.Stderr, "replbench: -profile needs -cpuprofile")
			os.Exit(2)
		}
		profilePrefix, profiled = *cpuprofile, strings.Split(*profile, ",")
	} else if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "replbench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "replbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *only != "" {
		onlyConfigs = strings.Split(*only, ",")
	}
	if err := runAll(*rounds, *run, *restoreN, *dir, *storeDir, *keepAlive); err != nil {
		fmt.Fprintln(os.Stderr, "replbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

const ledgerName = "orders"

// out is where the figures go.
var out io.Writer = os.Stdout

// event is the i-th event appended: an order of about 110 bytes of
// data, a frame of 197 bytes.
func event(i int) engine.EventInput {
	return engine.EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", i%1000), Event: "order-placed",
		Data: fmt.Appendf(nil, `{"customer":"c-%06d","items":[{"sku":"sku-%04d","qty":%d}],"total":"%d.%02d","currency":"EUR","n":%d}`,
			i%100000, i%5000, i%7+1, i%997, i%100, i)}
}

// config is one configuration of the engine under load.
type config struct {
	name      string
	appenders int
	mode      engine.Replication // 0: no replica
	// pace, if not zero, is the time from one append's start to the
	// next one's, per appender: a steady load rather than a closed loop
	// (an appender that falls behind appends at once).
	pace time.Duration
}

// result is one run of a configuration.
type result struct {
	events   int
	elapsed  time.Duration
	lat      []time.Duration // every append's latency, sorted
	chunks   uint64          // chunks stored meanwhile (ReplicaStatus)
	uploadsS float64
	// upload is the mean time the Writer's chunk uploads took meanwhile
	// (ReplicaStatus.UploadTime over Uploads): the PUT latency under the
	// run's load, which the idle probes do not see.
	upload time.Duration
	// cpu is the process's CPU time (user and system) during the run:
	// the engine's, the S3 client's and versitygw's. Per event it is
	// steadier than events/s on a machine shared with other work.
	cpu time.Duration
}

func (r result) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// roundConfigs are the configurations of a round, in order.
var roundConfigs = []config{
	{name: "local64", appenders: 64},
	{name: "repl64", appenders: 64, mode: engine.Replicated},
	{name: "ship64", appenders: 64, mode: engine.Shipped},
	{name: "local1", appenders: 1},
	{name: "repl1", appenders: 1, mode: engine.Replicated},
}

// bench is the state of one invocation.
type bench struct {
	tmp      string
	endpoint string // where the engine's replica points
	// warm, if set, is called after each run's warm-up appends.
	warm func()
	// round is the round being run (0: the calibration), for -profile.
	round int
}

// profilePrefix and profiled: -cpuprofile with -profile; onlyConfigs:
// -only.
var (
	profilePrefix string
	profiled      []string
	onlyConfigs   []string
)

// startProfile starts a CPU profile of run c of the current round if
// -profile names it; the function returned stops it.
func (b *bench) startProfile(c config) (func(), error) {
	if b.round == 0 || !slices.Contains(profiled, c.name) {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", profilePrefix, c.name, b.round))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// prefixes numbers the bucket's prefixes: each run has its own.
var prefixes atomic.Int64

func (b *bench) dir() (string, error) {
	return os.MkdirTemp(b.tmp, "db-")
}

func (b *bench) replica() string {
	return replicaURL(b.endpoint, fmt.Sprintf("p%d", prefixes.Add(1)))
}

// measure runs c for d on a fresh directory and prefix.
func (b *bench) measure(c config, d time.Duration) (result, error) {
	ctx := context.Background()
	dir, err := b.dir()
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	opts := &engine.Options{Durability: engine.Sync}
	if c.mode != 0 {
		opts.Replica = b.replica()
		opts.Replication = c.mode
	}
	db, err := engine.Open(dir, opts)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: ledgerName}); err != nil {
		return result{}, err
	}
	// Warm up: the first appends open files and connections.
	for i := range 20 {
		if _, err := db.Append(ctx, ledgerName, []engine.EventInput{event(i)}, nil); err != nil {
			return result{}, err
		}
	}
	if b.warm != nil {
		b.warm()
	}
	var st0 engine.ReplicaStatus
	if c.mode != 0 {
		if st0, err = db.ReplicaStatus(ledgerName); err != nil {
			return result{}, err
		}
	}
	var (
		mu    sync.Mutex
		lats  []time.Duration
		first error
		wg    sync.WaitGroup
	)
	stopProfile, err := b.startProfile(c)
	if err != nil {
		return result{}, err
	}
	cpu0 := cpuTime()
	start := time.Now()
	for a := range c.appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i, k := a, 1; time.Since(start) < d; i, k = i+c.appenders, k+1 {
				if c.pace > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(k) * c.pace)))
				}
				t := time.Now()
				if _, err := db.Append(ctx, ledgerName, []engine.EventInput{event(i)}, nil); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
					break
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	if c.appenders == 0 {
		time.Sleep(d) // idle
	}
	wg.Wait()
	r := result{events: len(lats), elapsed: time.Since(start), lat: lats, cpu: cpuTime() - cpu0}
	stopProfile()
	if first != nil {
		return r, fmt.Errorf("%s: %w", c.name, first)
	}
	slices.Sort(r.lat)
	if c.mode != 0 {
		st, err := db.ReplicaStatus(ledgerName)
		if err != nil {
			return result{}, err
		}
		r.chunks = st.Chunks - st0.Chunks
		r.uploadsS = float64(r.chunks) / r.elapsed.Seconds()
		if n := st.Uploads - st0.Uploads; n > 0 {
			r.upload = (st.UploadTime - st0.UploadTime) / time.Duration(n)
		}
	}
	return r, db.Close()
}

// printRow prints run r of configuration c in round.
func printRow(round int, c config, r result) {
	evc, up := "-", "-"
	if r.chunks > 0 {
		evc = fmt.Sprintf("%.1f", float64(r.events)/float64(r.chunks))
	}
	if r.upload > 0 {
		up = ms(r.upload)
	}
	cpu := "-"
	if r.events > 0 {
		cpu = fmt.Sprintf("%.1fus", float64(r.cpu)/float64(time.Microsecond)/float64(r.events))
	}
	fmt.Fprintf(out, "  %-5d %-8s %10.0f %9s %9s %9.1f %9s %9s %9s\n", round, c.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.uploadsS, evc, up, cpu)
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// lagOptions are -follower's.
type lagOptions struct {
	intervals []time.Duration
	rate      int
	ship      time.Duration
}

// runLag is runAll for -follower: the follower's lag, and nothing else.
func runLag(rounds int, run time.Duration, parent, storeParent string, keepAlive bool, intervals []time.Duration, rate int, ship time.Duration) error {
	return runSetUp(rounds, run, 0, parent, storeParent, keepAlive, &lagOptions{intervals: intervals, rate: rate, ship: ship})
}

func runAll(rounds int, run time.Duration, restoreN int, parent, storeParent string, keepAlive bool) error {
	return runSetUp(rounds, run, restoreN, parent, storeParent, keepAlive, nil)
}

// runSetUp starts versitygw and runs the rounds and the restore, or,
// with lag, the follower's lag.
func runSetUp(rounds int, run time.Duration, restoreN int, parent, storeParent string, keepAlive bool, lag *lagOptions) error {
	tmp, err := os.MkdirTemp(parent, "replbench-")
	if err != nil {
		return err
	}
	if tmp, err = filepath.Abs(tmp); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	useCredentials(tmp)
	gwDir := filepath.Join(tmp, "gw")
	if storeParent != "" {
		if gwDir, err = os.MkdirTemp(storeParent, "replbench-store-"); err != nil {
			return err
		}
		if gwDir, err = filepath.Abs(gwDir); err != nil {
			return err
		}
		defer os.RemoveAll(gwDir)
	} else if err := os.Mkdir(gwDir, 0o755); err != nil {
		return err
	}
	gw, err := startGateway(gwDir, keepAlive)
	if err != nil {
		return err
	}
	defer gw.stop()
	dbs := filepath.Join(tmp, "dbs")
	if err := os.Mkdir(dbs, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(out, "versitygw v1.8.0 on %s (in process); %d rounds of %v per configuration\n\n", gw.endpoint, rounds, run)
	if lag != nil {
		return followerLag(gw, dbs, rounds, lag.intervals, run, lag.rate, lag.ship)
	}

	if rounds > 0 {
		if err := alternate(gw, dbs, rounds, run); err != nil {
			return err
		}
	}
	if restoreN > 0 {
		if err := restoreBench(&bench{tmp: dbs, endpoint: gw.endpoint}, restoreN); err != nil {
			return err
		}
	}
	return nil
}

// alternate runs the calibration (the cost) through a counting proxy,
// then the rounds of alternated configurations, and prints the targets.
func alternate(gw *gateway, dbs string, rounds int, run time.Duration) error {
	if onlyConfigs != nil {
		return runOnly(gw, dbs, rounds, run)
	}
	ctr, err := startCounter(gw.endpoint)
	if err != nil {
		return err
	}
	defer ctr.srv.Close()
	cb := &bench{tmp: dbs, endpoint: ctr.endpoint, warm: ctr.reset}
	fmt.Fprintln(out, "cost at the defaults (requests per second through a counting proxy; appenders in a closed loop, or at a steady 100 events/s, or idle):")
	fmt.Fprintf(out, "  %-7s %10s %9s %8s %8s %8s %8s %11s %12s\n", "config", "events/s", "chunks/s", "PUT/s", "GET/s", "LIST/s", "DEL/s", "B/chunk", "PUTs/month")
	var chunk1, chunk64 int
	for _, c := range []config{
		{name: "repl1", appenders: 1, mode: engine.Replicated},
		{name: "repl64", appenders: 64, mode: engine.Replicated},
		{name: "ship64", appenders: 64, mode: engine.Shipped},
		{name: "repl100", appenders: 1, mode: engine.Replicated, pace: 10 * time.Millisecond},
		{name: "ship100", appenders: 1, mode: engine.Shipped, pace: 10 * time.Millisecond},
		{name: "idle", mode: engine.Replicated},
	} {
		r, err := cb.measure(c, run)
		if err != nil {
			return err
		}
		s := r.elapsed.Seconds()
		per := 0
		if n := ctr.walPuts.Load(); n > 0 {
			per = int(ctr.walBytes.Load() / n)
		}
		switch c.name {
		case "repl1":
			chunk1 = per
		case "repl64":
			chunk64 = per
		}
		fmt.Fprintf(out, "  %-7s %10.0f %9.1f %8.1f %8.1f %8.1f %8.1f %11d %12.3g\n", c.name, r.rate(), r.uploadsS,
			float64(ctr.puts.Load())/s, float64(ctr.gets.Load())/s, float64(ctr.lists.Load())/s, float64(ctr.dels.Load())/s, per,
			float64(ctr.puts.Load())/s*30*24*3600)
	}
	if chunk1 == 0 || chunk64 == 0 {
		return fmt.Errorf("calibration: no chunk stored")
	}
	fmt.Fprintln(out)

	// The alternated rounds, straight to the gateway.
	b := &bench{tmp: dbs, endpoint: gw.endpoint}
	configs := roundConfigs
	var replRatio, shipRatio, latRatio, bound, loaded, efficiency, capacity []float64
	fmt.Fprintf(out, "rounds (probes: PUT of %d B, the mean repl1 chunk, and of %d B, the mean repl64 chunk; write+fsync of their records):\n", chunk1, chunk64)
	fmt.Fprintf(out, "  %-5s %-8s %10s %9s %9s %9s %9s %9s %9s\n", "round", "config", "events/s", "p50", "p99", "chunks/s", "ev/chunk", "upload", "CPU/ev")
	for round := 1; round <= rounds; round++ {
		b.round = round
		res := map[string]result{}
		for _, c := range configs {
			r, err := b.measure(c, run)
			if err != nil {
				return err
			}
			res[c.name] = r
			printRow(round, c, r)
		}
		put1, err := probePut(gw, chunk1, fmt.Sprintf("probe/%d/1/", round), 200)
		if err != nil {
			return err
		}
		sync1, err := probeFsync(dbs, chunk1-chunkHeader, 200)
		if err != nil {
			return err
		}
		put64, err := probePut(gw, chunk64, fmt.Sprintf("probe/%d/64/", round), 100)
		if err != nil {
			return err
		}
		sync64, err := probeFsync(dbs, chunk64-chunkHeader, 100)
		if err != nil {
			return err
		}
		rate, err := probePutRate(gw, chunk64, fmt.Sprintf("probe/%d/rate/", round), 4, time.Second)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-5d %-8s %10s %9s  (%d B)\n", round, "PUT", "", ms(put1), chunk1)
		fmt.Fprintf(out, "  %-5d %-8s %10s %9s  (%d B)\n", round, "fsync", "", ms(sync1), chunk1-chunkHeader)
		fmt.Fprintf(out, "  %-5d %-8s %10s %9s  (%d B)\n", round, "PUT", "", ms(put64), chunk64)
		fmt.Fprintf(out, "  %-5d %-8s %10s %9s  (%d B)\n", round, "fsync", "", ms(sync64), chunk64-chunkHeader)
		fmt.Fprintf(out, "  %-5d %-8s %10s %9s  (PUTs/s of %d B, 4 in flight)\n", round, "PUT x4", "", fmt.Sprintf("%.0f/s", rate), chunk64)
		local := res["local64"].rate()
		// The closed loop's bound: 64 appenders, each waiting at least
		// one fsync and one PUT of a chunk, with unbounded uploads in
		// flight and a store whose PUTs do not slow each other down.
		closed := 64 / (put64 + sync64).Seconds()
		replRatio = append(replRatio, res["repl64"].rate()/local)
		shipRatio = append(shipRatio, res["ship64"].rate()/local)
		latRatio = append(latRatio, float64(res["repl1"].pct(0.5))/float64(put1+sync1))
		bound = append(bound, closed/local)
		// The same bound with the latencies of the run itself: a local
		// Sync append's p50 with 64 appenders, and the mean upload that
		// the Replicated run's Writer saw under its load.
		loaded = append(loaded, 64/(res["local64"].pct(0.5)+res["repl64"].upload).Seconds()/local)
		efficiency = append(efficiency, res["repl64"].rate()/closed)
		capacity = append(capacity, res["repl64"].uploadsS/rate)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "targets (ratio per round; median, spread min..max):")
	target("Replicated 64 / local Sync 64 (>= 0.5)", replRatio, 0.5, true)
	target("Shipped 64 / local Sync 64 (>= 0.9)", shipRatio, 0.9, true)
	target("Replicated 1 p50 / (PUT p50 + fsync p50) (<= 1.5)", latRatio, 1.5, false)
	fmt.Fprintln(out, "why (ratio per round; median, spread):")
	figure("64 / (PUT p50 + fsync p50) / local Sync 64", bound)
	figure("Replicated 64 / (64 / (PUT p50 + fsync p50))", efficiency)
	figure("64 / (local64 p50 + repl64 upload) / local Sync 64", loaded)
	figure("Replicated 64 chunks/s / PUTs/s at 4 in flight", capacity)
	fmt.Fprintln(out)
	return nil
}

// runOnly runs the rounds of the configurations -only names, and prints
// their rows.
func runOnly(gw *gateway, dbs string, rounds int, run time.Duration) error {
	b := &bench{tmp: dbs, endpoint: gw.endpoint}
	fmt.Fprintf(out, "  %-5s %-8s %10s %9s %9s %9s %9s %9s %9s\n", "round", "config", "events/s", "p50", "p99", "chunks/s", "ev/chunk", "upload", "CPU/ev")
	for round := 1; round <= rounds; round++ {
		b.round = round
		for _, name := range onlyConfigs {
			i := slices.IndexFunc(roundConfigs, func(c config) bool { return c.name == name })
			if i < 0 {
				return fmt.Errorf("-only: no configuration %q", name)
			}
			r, err := b.measure(roundConfigs[i], run)
			if err != nil {
				return err
			}
			printRow(round, roundConfigs[i], r)
		}
	}
	return nil
}

// chunkHeader is the size of a chunk's header (replica.Chunk).
const chunkHeader = 160

func target(name string, rs []float64, bound float64, atLeast bool) {
	s := slices.Clone(rs)
	slices.Sort(s)
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.2f", r))
	}
	med := median(s)
	ok := med >= bound
	if !atLeast {
		ok = med <= bound
	}
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	fmt.Fprintf(out, "  %-52s %s; median %.2f, spread %.2f..%.2f: %s\n", name, strings.Join(parts, " "), med, s[0], s[len(s)-1], verdict)
}

func figure(name string, rs []float64) {
	s := slices.Clone(rs)
	slices.Sort(s)
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.2f", r))
	}
	fmt.Fprintf(out, "  %-52s %s; median %.2f, spread %.2f..%.2f\n", name, strings.Join(parts, " "), median(s), s[0], s[len(s)-1])
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
