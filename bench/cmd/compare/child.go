package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/annal-db/annal/bench/peer"
)

// A job is one measurement, run in a child process of its own so that its
// peak memory is its own and no store's caches or goroutines outlive it.
type job struct {
	Kind      string        // append, concurrent, tailed, follow, fill, crash, open, scan, get, replay, verify
	Store     string        // peer name
	Dir       string        // the store's directory
	Mode      string        // durability: sync, interval, none
	Batch     int           // events per Append (append, fill)
	Appenders int           // goroutines (concurrent)
	N         int           // events to append (fill)
	Frac      float64       // fraction of the ledger a scan covers
	Dur       time.Duration // how long a timed job runs
	IDs       string        // file of the IDs (16 bytes each): written by fill, read by reads
	Seed      uint64
}

// outcome is what a child reports, as one JSON line on stdout.
type outcome struct {
	Events  int64   // events appended or read
	Bytes   int64   // their content bytes
	Seconds float64 // time taken
	// Latencies of one operation (an Append, a Get), in microseconds.
	P50, P99, P999 float64
	MaxRSS         int64   // peak resident set size of the child, bytes
	CPU            float64 // CPU seconds (user and system, every thread) over the workload, the store's open and close excluded
	NA             bool    // the store does not offer this
	Err            string
}

func runChild(spec string) {
	var j job
	out := outcome{}
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		out.Err = fmt.Sprintf("bad job: %v", err)
	} else if err := j.run(&out); err != nil {
		if errors.Is(err, peer.ErrUnsupported) {
			out.NA = true
		} else {
			out.Err = err.Error()
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out.MaxRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func (j *job) open() (peer.Store, error) {
	info, err := peer.Lookup(j.Store)
	if err != nil {
		return nil, err
	}
	mode := peer.None
	if j.Mode != "" {
		if mode, err = peer.ParseMode(j.Mode); err != nil {
			return nil, err
		}
	}
	return info.Open(j.Dir, mode)
}

func (j *job) run(out *outcome) (err error) {
	if j.Kind == "follow" {
		return j.follow(out)
	}
	if j.Kind == "open" {
		// Open is what is measured: after a clean close or a crash.
		start := time.Now()
		s, err := j.open()
		if err != nil {
			return err
		}
		out.Seconds = time.Since(start).Seconds()
		return s.Close()
	}
	s, err := j.open()
	if err != nil {
		return err
	}
	// ANNAL_COMPARE_CPUPROFILE=prefix writes a CPU profile of each job's
	// workload (open and close excluded) to prefix-KIND-STORE-PARAMS.pprof:
	// the profile of exactly what the harness measures.
	if prefix := os.Getenv("ANNAL_COMPARE_CPUPROFILE"); prefix != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s-%s-%s-b%d-a%d.pprof", prefix, j.Kind, j.Store, j.Mode, j.Batch, j.Appenders))
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	cpu0 := cpuSeconds()
	defer func() {
		out.CPU = cpuSeconds() - cpu0
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	switch j.Kind {
	case "append":
		return j.appendBatches(s, out)
	case "concurrent":
		return j.concurrent(s, out)
	case "tailed":
		return j.tailed(s, out)
	case "fill":
		return j.fill(s, out)
	case "crash":
		return j.crash(s)
	case "scan", "get", "replay", "verify":
		return j.read(s, out)
	}
	return fmt.Errorf("unknown job kind %q", j.Kind)
}

// cpuSeconds returns the CPU time this process has used so far, user and
// system, all threads.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// percentiles fills out's latencies from ds (sorted here).
func percentiles(out *outcome, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(float64(len(ds))*p))]) / 1e3
	}
	out.P50, out.P99, out.P999 = at(0.50), at(0.99), at(0.999)
}

func batchAt(i, n int) []peer.Event {
	start := i % poolSize
	if start+n <= poolSize {
		return pool[start : start+n]
	}
	b := make([]peer.Event, n)
	for k := range b {
		b[k] = pool[(start+k)%poolSize]
	}
	return b
}

func contentBytes(b []peer.Event) (n int64) {
	for i := range b {
		n += int64(b[i].Size())
	}
	return n
}

// appendBatches appends batches of j.Batch events for j.Dur, one after
// the other.
func (j *job) appendBatches(s peer.Store, out *outcome) error {
	var lat []time.Duration
	start := time.Now()
	i := 0
	for time.Since(start) < j.Dur {
		b := batchAt(i, j.Batch)
		t := time.Now()
		if _, err := s.Append(b); err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
		i += j.Batch
		out.Bytes += contentBytes(b)
	}
	out.Seconds = time.Since(start).Seconds()
	out.Events = int64(i)
	percentiles(out, lat)
	return nil
}

// concurrent runs j.Appenders goroutines, each appending one event at a
// time, for j.Dur.
func (j *job) concurrent(s peer.Store, out *outcome) error {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(j.Dur)
	for g := range j.Appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var bytes int64
			for i := g; time.Now().Before(deadline); i += j.Appenders {
				b := batchAt(i, 1)
				t := time.Now()
				if _, err := s.Append(b); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
				bytes += contentBytes(b)
			}
			mu.Lock()
			lat = append(lat, mine...)
			out.Bytes += bytes
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.Seconds = time.Since(start).Seconds()
	if len(errs) > 0 {
		return errs[0]
	}
	out.Events = int64(len(lat))
	percentiles(out, lat)
	return nil
}

// fill appends j.N events in batches of j.Batch and, if j.IDs is set,
// writes their IDs there.
func (j *job) fill(s peer.Store, out *outcome) error {
	var ids []byte
	start := time.Now()
	for i := 0; i < j.N; i += j.Batch {
		b := batchAt(i, min(j.Batch, j.N-i))
		got, err := s.Append(b)
		if err != nil {
			return err
		}
		if j.IDs != "" {
			for _, id := range got {
				ids = append(ids, id[:]...)
			}
		}
		out.Events += int64(len(b))
		out.Bytes += contentBytes(b)
	}
	out.Seconds = time.Since(start).Seconds()
	if j.IDs != "" {
		return os.WriteFile(j.IDs, ids, 0o644)
	}
	return nil
}

// crash appends batches of j.Batch events without end; once it has run
// for j.Dur it prints "ready" so that the parent kills it (SIGKILL) in the
// middle of its appends.
func (j *job) crash(s peer.Store) error {
	start := time.Now()
	ready := false
	for i := 0; ; i += j.Batch {
		if _, err := s.Append(batchAt(i, j.Batch)); err != nil {
			return err
		}
		if !ready && time.Since(start) >= j.Dur {
			fmt.Println("ready")
			ready = true
		}
	}
}

func loadIDs(path string) ([]peer.ID, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%16 != 0 || len(b) == 0 {
		return nil, fmt.Errorf("%s: %d bytes, not a list of IDs", path, len(b))
	}
	ids := make([]peer.ID, len(b)/16)
	for i := range ids {
		copy(ids[i][:], b[i*16:])
	}
	return ids, nil
}

// read runs a read workload for j.Dur (verify: once) on a store j.fill
// made.
func (j *job) read(s peer.Store, out *outcome) error {
	ids, err := loadIDs(j.IDs)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(j.Seed, 1))
	var lat []time.Duration
	start := time.Now()
	for first := true; first || time.Since(start) < j.Dur; first = false {
		t := time.Now()
		var n int
		var bytes int64
		switch j.Kind {
		case "scan":
			span := max(1, int(float64(len(ids))*j.Frac))
			lo := rng.IntN(len(ids) - span + 1)
			from, to := s.TimeOf(ids[lo]), s.TimeOf(ids[lo+span-1])
			n, bytes, err = s.Scan(from, to)
			if err == nil && n < span {
				err = fmt.Errorf("scan of %v..%v: %d events, want at least %d", from, to, n, span)
			}
		case "get":
			var size int
			size, err = s.Get(ids[rng.IntN(len(ids))])
			n, bytes = 1, int64(size)
		case "replay":
			st := streams()
			k := st[rng.IntN(len(st))]
			n, bytes, err = s.Replay(k[0], k[1])
			if err == nil && n == 0 {
				err = fmt.Errorf("replay of %s/%s: no events", k[0], k[1])
			}
		case "verify":
			n, err = s.Verify()
			if err == nil && n < len(ids) {
				err = fmt.Errorf("verify covered %d events, want at least %d", n, len(ids))
			}
			out.Events, out.Seconds = int64(n), time.Since(start).Seconds()
			return err
		}
		if err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
		out.Events += int64(n)
		out.Bytes += bytes
	}
	out.Seconds = time.Since(start).Seconds()
	percentiles(out, lat)
	return nil
}
