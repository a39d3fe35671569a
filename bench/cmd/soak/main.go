// Command soak runs a mixed load on an annal data directory at a steady
// rate for a long time, reopening the directory now and then, and reports
// memory and latency over time, so that growth (a leak, a slowing index)
// shows:
//
//	cd bench && go run ./cmd/soak [-duration 30m] [-rate 2000] [-reopen 5m] [-cache MiB] [-dir DIR] [-csv FILE]
//
// The load: 4 appenders in Sync mode (batches of 1 to 20 events, a fifth
// of them conditional on a stream, a tenth idempotent) sharing -rate
// events a second; 2 readers doing Gets of random acknowledged IDs and
// time-range scans of the last second; 1 subscriber following the ledger.
// Every -reopen the DB is closed and opened again (recovery on open), and
// the subscriber resumes from the last event it saw. Each -every it prints
// one line: time, events, Go heap in use, the Go runtime's memory from the
// OS, the index's memory (Pebble's block cache and memtables, in C memory
// when built with cgo), RSS and its anonymous part (RSS less the
// file pages mapped, which Gets read from the segments' maps), append latency p50/p99/p99.9, Get latency
// p99, and the subscriber's lag. It keeps a uniform sample of
// 100,000 acknowledged IDs (so that its own memory stays flat); at the end
// it reads each of them once more, checks the ledger's count, runs Verify,
// and prints the growth of memory and latency from the second quarter to
// the last (the first is the warm-up, while the index's cache fills).
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/bench"
	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
)

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "how long to run")
	rate := flag.Int("rate", 2000, "events appended a second, in all")
	reopen := flag.Duration("reopen", 5*time.Minute, "close and reopen the DB this often")
	every := flag.Duration("every", time.Minute, "report this often")
	dir := flag.String("dir", "", "data directory (default: a new temporary one, removed at the end)")
	csvPath := flag.String("csv", "", "also write the reports to this CSV file")
	cacheMiB := flag.Int64("cache", 0, "the index's memory budget in MiB (engine.Options.CacheSize; 0: the default)")
	flag.Parse()
	opts := &engine.Options{CacheSize: *cacheMiB << 20}
	if err := run(*duration, *rate, *reopen, *every, *dir, *csvPath, opts); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// recorder keeps latencies of one interval.
type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recorder) add(d time.Duration) { r.mu.Lock(); r.d = append(r.d, d); r.mu.Unlock() }

// take returns the interval's sorted latencies and starts the next.
func (r *recorder) take() []time.Duration {
	r.mu.Lock()
	d := r.d
	r.d = nil
	r.mu.Unlock()
	slices.Sort(d)
	return d
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// sample is one report line.
type sample struct {
	at                 time.Duration
	events             int64
	heap, rss, anon    int64 // anon: RSS less file-backed pages (bench.RSSAnon)
	goMem, index       int64 // the Go runtime's memory from the OS; the index's (Pebble's) memory
	p50, p99, p999     time.Duration
	getP99             time.Duration
	lag                int64
	appends, reopenCnt int64
}

func run(duration time.Duration, rate int, reopenEvery, every time.Duration, dir, csvPath string, opts *engine.Options) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "annal-soak")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "data")
	}
	var w *csv.Writer
	if csvPath != "" {
		f, err := os.Create(csvPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w = csv.NewWriter(f)
		defer w.Flush()
		w.Write([]string{"seconds", "events", "heap_bytes", "go_bytes", "index_bytes", "rss_bytes", "append_p50_us", "append_p99_us", "append_p999_us", "get_p99_us", "subscriber_lag", "reopens", "rss_anon_bytes"})
	}
	ctx := context.Background()
	db, err := engine.Open(dir, opts)
	if err != nil {
		return err
	}
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "soak"}); err != nil && !errors.Is(err, engine.ErrLedgerExists) {
		return err
	}

	// The DB is swapped at each reopen; workers take it under dbMu (read)
	// for each operation, the reopen takes it (write).
	var dbMu sync.RWMutex
	var (
		appendLat, getLat recorder
		events, appends   atomic.Int64
		seen              atomic.Int64 // events the subscriber received
		reopens           atomic.Int64
		ackMu             sync.Mutex
		acked             []eventid.ID // a uniform sample of the acknowledged events (reservoir)
		ackedN            int64        // acknowledged events in all
		failed            = make(chan error, 16)
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup

	// Appenders: a token bucket of rate events a second, shared.
	const appenders = 4
	const reservoir = 100_000
	tokens := make(chan int, 64)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		owed := 0.0
		for {
			select {
			case <-stop:
				close(tokens)
				return
			case <-tick.C:
				owed += float64(rate) / 100
				for owed >= 1 {
					n := min(int(owed), 1+rand.IntN(20))
					select {
					case tokens <- n:
						owed -= float64(n)
					default:
						owed = 0 // the appenders are behind: do not pile up
					}
				}
			}
		}
	}()
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(a), 1))
			heads := map[string]eventid.ID{}
			i := 0
			for n := range tokens {
				i++
				evs := make([]engine.EventInput, n)
				for j := range evs {
					evs[j] = engine.EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", rng.IntN(5000)), Event: "order-placed",
						Meta: []byte(fmt.Sprintf(`{"actor":"user-%d","source":"soak"}`, rng.IntN(100))),
						Data: []byte(fmt.Sprintf(`{"items":[{"qty":%d,"sku":"sku-%d"}],"total":%d.%02d,"currency":"EUR","note":"steady load from the soak command"}`, 1+rng.IntN(5), rng.IntN(1000), rng.IntN(500), rng.IntN(100)))}
				}
				var o engine.AppendOptions
				switch {
				case i%5 == 0:
					stream := fmt.Sprintf("appender-%d", a)
					for j := range evs {
						evs[j].Entity, evs[j].Key = "account", stream
					}
					o.ExpectedStreams = []engine.ExpectedStream{{Entity: "account", Key: stream, Head: heads[stream]}}
				case i%10 == 1:
					o.IdempotencyKey = fmt.Sprintf("soak-%d-%d", a, i)
				}
				dbMu.RLock()
				t0 := time.Now()
				res, err := db.Append(ctx, "soak", evs, &o)
				appendLat.add(time.Since(t0))
				dbMu.RUnlock()
				if err != nil {
					failed <- fmt.Errorf("append: %w", err)
					return
				}
				if o.ExpectedStreams != nil {
					heads[o.ExpectedStreams[0].Key], _ = res.Last()
				}
				events.Add(int64(len(res.IDs)))
				appends.Add(1)
				ackMu.Lock()
				for _, id := range res.IDs {
					// A reservoir sample, so that the tool's own memory
					// stays flat and what grows is the engine's.
					ackedN++
					if len(acked) < reservoir {
						acked = append(acked, id)
					} else if k := rng.Int64N(ackedN); k < reservoir {
						acked[k] = id
					}
				}
				ackMu.Unlock()
			}
		}()
	}
	// Readers: Gets of acknowledged IDs and scans of the last second.
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ackMu.Lock()
				var id eventid.ID
				if len(acked) > 0 {
					id = acked[rng.IntN(len(acked))]
				}
				ackMu.Unlock()
				if id.IsZero() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				dbMu.RLock()
				t0 := time.Now()
				_, err := db.Get(ctx, id)
				getLat.add(time.Since(t0))
				if err == nil && rng.IntN(50) == 0 {
					for _, err = range db.Scan(ctx, "soak", engine.ScanOptions{From: time.Now().Add(-time.Second)}) {
						if err != nil {
							break
						}
					}
				}
				dbMu.RUnlock()
				if err != nil {
					failed <- fmt.Errorf("read %s: %w", id, err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	// The subscriber: follows the ledger, resuming after each reopen.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last eventid.ID
		for {
			select {
			case <-stop:
				return
			default:
			}
			dbMu.RLock()
			d := db
			dbMu.RUnlock()
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			for ev, err := range d.Subscribe(sctx, "soak", engine.SubscribeOptions{After: last}) {
				if err != nil {
					break // the timeout, or the DB closed for a reopen
				}
				last = ev.ID
				seen.Add(1)
			}
			cancel()
		}
	}()

	start := time.Now()
	report := time.NewTicker(every)
	defer report.Stop()
	nextReopen := start.Add(reopenEvery)
	var samples []sample
	fmt.Printf("%8s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %8s\n", "time", "events", "heap", "go", "index", "rss", "anon", "p50", "p99", "p99.9", "get p99", "lag")
	var runErr error
loop:
	for time.Since(start) < duration {
		select {
		case err := <-failed:
			runErr = err
			break loop
		case now := <-report.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			lat, gets := appendLat.take(), getLat.take()
			dbMu.RLock()
			im := db.IndexMemory()
			dbMu.RUnlock()
			s := sample{at: now.Sub(start), events: events.Load(), heap: int64(ms.HeapInuse), rss: bench.RSS(), anon: bench.RSSAnon(),
				goMem: int64(ms.Sys - ms.HeapReleased), index: im.BlockCache + im.MemTables,
				p50: pct(lat, .5), p99: pct(lat, .99), p999: pct(lat, .999), getP99: pct(gets, .99),
				lag: events.Load() - seen.Load() + 1, appends: appends.Load(), reopenCnt: reopens.Load()}
			samples = append(samples, s)
			fmt.Printf("%8s %10d %9.1fM %9.1fM %9.1fM %9.1fM %9.1fM %10s %10s %10s %10s %8d\n", s.at.Round(time.Second), s.events, float64(s.heap)/1e6,
				float64(s.goMem)/1e6, float64(s.index)/1e6, float64(s.rss)/1e6, float64(s.anon)/1e6,
				s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.p999.Round(time.Microsecond), s.getP99.Round(time.Microsecond), s.lag)
			if w != nil {
				w.Write([]string{fmt.Sprint(int(s.at.Seconds())), fmt.Sprint(s.events), fmt.Sprint(s.heap), fmt.Sprint(s.goMem), fmt.Sprint(s.index), fmt.Sprint(s.rss),
					fmt.Sprint(s.p50.Microseconds()), fmt.Sprint(s.p99.Microseconds()), fmt.Sprint(s.p999.Microseconds()), fmt.Sprint(s.getP99.Microseconds()),
					fmt.Sprint(s.lag), fmt.Sprint(s.reopenCnt), fmt.Sprint(s.anon)})
				w.Flush()
			}
			if now.After(nextReopen) {
				dbMu.Lock()
				err := db.Close()
				if err == nil {
					db, err = engine.Open(dir, opts)
				}
				dbMu.Unlock()
				if err != nil {
					runErr = fmt.Errorf("reopen: %w", err)
					break loop
				}
				reopens.Add(1)
				nextReopen = now.Add(reopenEvery)
			}
		}
	}
	close(stop)
	wg.Wait()
	if runErr != nil {
		db.Close()
		return runErr
	}
	// A sample of 100,000 acknowledged events, once more; the count; Verify.
	info, err := db.Ledger("soak")
	if err != nil {
		db.Close()
		return err
	}
	if want := uint64(ackedN) + 1; info.Count < want {
		db.Close()
		return fmt.Errorf("the ledger has %d events, %d were acknowledged (and the genesis)", info.Count, ackedN)
	}
	for _, id := range acked {
		if _, err := db.Get(ctx, id); err != nil {
			db.Close()
			return fmt.Errorf("acknowledged %s: %w", id, err)
		}
	}
	rep, err := db.Verify(ctx, "soak", nil)
	if err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	fmt.Printf("done: %d events in %d appends, %d reopens; a sample of %d acknowledged events all found; Verify passed (%d events)\n",
		events.Load(), appends.Load(), reopens.Load(), len(acked), rep.Events)
	// The first quarter is the warm-up: the index's block cache fills
	// (up to its budget) as the ledger grows. Growth is measured from the
	// second quarter to the last, and shown from the first too.
	if q := len(samples) / 4; q >= 1 {
		first, second, last := samples[:q], samples[q:2*q], samples[len(samples)-q:]
		avg := func(ss []sample, f func(sample) float64) float64 {
			t := 0.0
			for _, s := range ss {
				t += f(s)
			}
			return t / float64(len(ss))
		}
		for _, m := range []struct {
			name string
			f    func(sample) float64
		}{
			{"rss", func(s sample) float64 { return float64(s.rss) }},
			{"rss anon", func(s sample) float64 { return float64(s.anon) }},
			{"heap", func(s sample) float64 { return float64(s.heap) }},
			{"go", func(s sample) float64 { return float64(s.goMem) }},
			{"index", func(s sample) float64 { return float64(s.index) }},
			{"append p99", func(s sample) float64 { return float64(s.p99) }},
			{"get p99", func(s sample) float64 { return float64(s.getP99) }},
		} {
			a, b, c := avg(first, m.f), avg(second, m.f), avg(last, m.f)
			fmt.Printf("%-10s quarters: first %12.0f, second %12.0f, last %12.0f: last/second x%.2f (last/first x%.2f)\n", m.name, a, b, c, c/b, c/a)
		}
	}
	return nil
}
