// Command replbench measures replication's speed (issue 27's acceptance
// point) against versitygw running in this process on the loopback:
//
//	cd bench && go run ./cmd/replbench [-rounds 3] [-run 3s] [-restore 1000000] [-dir DIR]
//
// It runs, in rounds, each of these on a fresh data directory (and a
// fresh prefix of the bucket), one after the other, so that the
// configurations alternate (A B C D E A B C D E ...) and a ratio is taken
// within a round, between runs seconds apart:
//
//   - local64: the engine without a replica, Sync durability, 64
//     appenders, each appending one event and waiting for it, again and
//     again, for -run;
//   - repl64, ship64: the same with Options.Replica, Replicated and
//     Shipped (the defaults otherwise);
//   - local1, repl1: one appender, for the latency of one append;
//   - the probes: one PUT of a typical chunk (the mean size of repl1's
//     chunks, measured first) with the S3 SDK, and one write and fsync of
//     a typical group (that chunk's records) on a plain file, each many
//     times, for their p50.
//
// Before the rounds, a calibration runs repl1, repl64 and ship64 through a
// counting proxy: the requests per second at the defaults (the cost), and
// the chunks' mean size. After them it builds a ledger of -restore events
// in Shipped mode and restores it three times (engine.Restore: every
// object read and verified, the files written and synced, the index
// built).
//
// It prints every round's figures, and per target the ratio of each round
// with the median and the spread (min to max).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annal-db/annal/engine"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of the alternated configurations")
	run := flag.Duration("run", 3*time.Second, "how long each configuration runs in a round")
	restoreN := flag.Int("restore", 1_000_000, "events of the restored ledger (0: no restore)")
	dir := flag.String("dir", "", "directory to work in (a temporary directory inside it is used and removed); default: the system's temporary directory")
	flag.Parse()
	if err := runAll(*rounds, *run, *restoreN, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "replbench:", err)
		os.Exit(1)
	}
}

const ledgerName = "orders"

// event is the i-th event appended: an order of about 110 bytes of
// data, a frame of about 260 bytes (bench.Entry's size).
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
}

// result is one run of a configuration.
type result struct {
	events   int
	elapsed  time.Duration
	lat      []time.Duration // every append's latency, sorted
	chunks   uint64          // chunks stored meanwhile (ReplicaStatus)
	uploadsS float64
}

func (r result) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// bench is the state of one invocation.
type bench struct {
	tmp      string
	endpoint string // where the engine's replica points
	prefixes int
}

func (b *bench) dir() (string, error) {
	b.prefixes++
	return os.MkdirTemp(b.tmp, "db-")
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
		opts.Replica = replicaURL(b.endpoint, fmt.Sprintf("p%d", b.prefixes))
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
	var chunks0 uint64
	if c.mode != 0 {
		st, err := db.ReplicaStatus(ledgerName)
		if err != nil {
			return result{}, err
		}
		chunks0 = st.Chunks
	}
	var (
		mu    sync.Mutex
		lats  []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for a := range c.appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := a; time.Since(start) < d; i += c.appenders {
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
	wg.Wait()
	r := result{events: len(lats), elapsed: time.Since(start), lat: lats}
	if first != nil {
		return r, fmt.Errorf("%s: %w", c.name, first)
	}
	slices.Sort(r.lat)
	if c.mode != 0 {
		st, err := db.ReplicaStatus(ledgerName)
		if err != nil {
			return result{}, err
		}
		r.chunks = st.Chunks - chunks0
		r.uploadsS = float64(r.chunks) / r.elapsed.Seconds()
	}
	return r, db.Close()
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func runAll(rounds int, run time.Duration, restoreN int, parent string) error {
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
	if err := os.Mkdir(gwDir, 0o755); err != nil {
		return err
	}
	gw, err := startGateway(gwDir)
	if err != nil {
		return err
	}
	defer gw.stop()
	dbs := filepath.Join(tmp, "dbs")
	if err := os.Mkdir(dbs, 0o755); err != nil {
		return err
	}
	fmt.Printf("versitygw v1.8.0 on %s (in process); %d rounds of %v per configuration\n\n", gw.endpoint, rounds, run)

	// Calibration and cost, through the counting proxy.
	ctr, err := startCounter(gw.endpoint)
	if err != nil {
		return err
	}
	defer ctr.srv.Close()
	cb := &bench{tmp: dbs, endpoint: ctr.endpoint}
	fmt.Println("cost at the defaults (requests per second through a counting proxy, appenders in a closed loop):")
	fmt.Printf("  %-7s %10s %9s %8s %8s %8s %8s %11s %12s\n", "config", "events/s", "chunks/s", "PUT/s", "GET/s", "LIST/s", "DEL/s", "B/chunk", "PUTs/month")
	var chunk1 int
	for _, c := range []config{{"repl1", 1, engine.Replicated}, {"repl64", 64, engine.Replicated}, {"ship64", 64, engine.Shipped}} {
		ctr.reset()
		r, err := cb.measure(c, run)
		if err != nil {
			return err
		}
		s := r.elapsed.Seconds()
		per := 0
		if n := ctr.walPuts.Load(); n > 0 {
			per = int(ctr.walBytes.Load() / n)
		}
		if c.name == "repl1" {
			chunk1 = per
		}
		fmt.Printf("  %-7s %10.0f %9.1f %8.1f %8.1f %8.1f %8.1f %11d %12.3g\n", c.name, r.rate(), r.uploadsS,
			float64(ctr.puts.Load())/s, float64(ctr.gets.Load())/s, float64(ctr.lists.Load())/s, float64(ctr.dels.Load())/s, per,
			float64(ctr.puts.Load())/s*30*24*3600)
	}
	if chunk1 == 0 {
		return fmt.Errorf("calibration: no chunk stored")
	}
	fmt.Println()

	// The alternated rounds, straight to the gateway.
	b := &bench{tmp: dbs, endpoint: gw.endpoint}
	configs := []config{
		{"local64", 64, 0},
		{"repl64", 64, engine.Replicated},
		{"ship64", 64, engine.Shipped},
		{"local1", 1, 0},
		{"repl1", 1, engine.Replicated},
	}
	group := chunk1 - chunkHeader
	var (
		replRatio, shipRatio, latRatio []float64
		all                            = map[string][]result{}
		puts, syncs                    []time.Duration
	)
	fmt.Printf("rounds (probes: PUT of %d B, the mean repl1 chunk; write+fsync of %d B, its records):\n", chunk1, group)
	fmt.Printf("  %-5s %-8s %10s %9s %9s %9s %9s\n", "round", "config", "events/s", "p50", "p99", "chunks/s", "ev/chunk")
	for round := 1; round <= rounds; round++ {
		res := map[string]result{}
		for _, c := range configs {
			r, err := b.measure(c, run)
			if err != nil {
				return err
			}
			res[c.name] = r
			all[c.name] = append(all[c.name], r)
			evc := "-"
			if r.chunks > 0 {
				evc = fmt.Sprintf("%.1f", float64(r.events)/float64(r.chunks))
			}
			fmt.Printf("  %-5d %-8s %10.0f %9s %9s %9.1f %9s\n", round, c.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.uploadsS, evc)
		}
		put, err := probePut(gw, chunk1, fmt.Sprintf("probe/%d/", round), 200)
		if err != nil {
			return err
		}
		sync, err := probeFsync(dbs, group, 200)
		if err != nil {
			return err
		}
		puts, syncs = append(puts, put), append(syncs, sync)
		fmt.Printf("  %-5d %-8s %10s %9s\n", round, "PUT", "", ms(put))
		fmt.Printf("  %-5d %-8s %10s %9s\n", round, "fsync", "", ms(sync))
		replRatio = append(replRatio, res["repl64"].rate()/res["local64"].rate())
		shipRatio = append(shipRatio, res["ship64"].rate()/res["local64"].rate())
		latRatio = append(latRatio, float64(res["repl1"].pct(0.5))/float64(put+sync))
	}
	fmt.Println()
	fmt.Println("targets (ratio per round; median, spread min..max):")
	target("Replicated 64 / local Sync 64 (>= 0.5)", replRatio, 0.5, true)
	target("Shipped 64 / local Sync 64 (>= 0.9)", shipRatio, 0.9, true)
	target("Replicated 1 p50 / (PUT p50 + fsync p50) (<= 1.5)", latRatio, 1.5, false)
	fmt.Println()

	if restoreN > 0 {
		if err := restoreBench(b, restoreN); err != nil {
			return err
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
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	ok := med >= bound
	if !atLeast {
		ok = med <= bound
	}
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	fmt.Printf("  %-52s %s; median %.2f, spread %.2f..%.2f: %s\n", name, strings.Join(parts, " "), med, s[0], s[len(s)-1], verdict)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
