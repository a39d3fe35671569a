package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
)

// The follower's lag, -follower: a writer in this process appends at a
// steady rate in Shipped mode to versitygw (in this process too); a
// follower in a child process (this program again, with followChildEnv
// set) follows the bucket into a directory of its own and subscribes to
// its DB. Each event's lag is the time from the writer's Append
// returning to the event reaching the child's subscriber (both read the
// same wall clock). The intervals alternate within each round, on a fresh
// directory and prefix each run.

// followChildEnv, when set, makes this program the follower of a lag run:
// its value is a followChild in JSON.
const followChildEnv = "REPLBENCH_FOLLOWER"

// followChild is what the follower process is given.
type followChild struct {
	Dir      string        `json:"dir"`
	Ledger   string        `json:"ledger"` // the ID: the name is in the bucket once a manifest is
	Replica  string        `json:"replica"`
	Key      string        `json:"key"`
	Interval time.Duration `json:"interval"`
}

// endEvent is the event the writer appends last: the follower stops once
// its subscriber gets it.
const endEvent = "end-of-run"

// lagRun is one run of the lag measurement.
type lagRun struct {
	interval time.Duration
	rate     float64         // events/s the writer reached
	lags     []time.Duration // every event's lag, sorted
}

func (r lagRun) pct(p float64) time.Duration {
	if len(r.lags) == 0 {
		return 0
	}
	return r.lags[min(len(r.lags)-1, int(p*float64(len(r.lags))))]
}

// followerLag runs the lag measurement: rounds of the intervals, each run
// appending rate events/s for run, the writer shipping every ship.
func followerLag(gw *gateway, dbs string, rounds int, intervals []time.Duration, run time.Duration, rate int, ship time.Duration) error {
	fmt.Fprintf(out, "follower lag: a Shipped writer (ShipInterval %v) appending %d events/s (batches of %d every 10 ms) for %v, a follower (annal's engine.OpenFollower) in another process subscribed to its DB; lag = the writer's Append returned -> the event reached the follower's subscriber\n", ship, rate, max(1, rate/100), run)
	fmt.Fprintf(out, "  %-5s %-8s %10s %10s %10s %10s %10s %8s\n", "round", "interval", "events/s", "events", "lag p50", "lag p99", "lag max", "p99/int")
	b := &bench{tmp: dbs, endpoint: gw.endpoint}
	byInterval := map[time.Duration][]lagRun{}
	for round := 1; round <= rounds; round++ {
		for _, iv := range intervals {
			r, err := b.measureLag(iv, run, rate, ship)
			if err != nil {
				return fmt.Errorf("follower lag at %v: %w", iv, err)
			}
			byInterval[iv] = append(byInterval[iv], r)
			fmt.Fprintf(out, "  %-5d %-8v %10.0f %10d %10v %10v %10v %8.2f\n", round, iv, r.rate, len(r.lags),
				r.pct(0.5).Round(time.Millisecond), r.pct(0.99).Round(time.Millisecond), r.pct(1).Round(time.Millisecond), float64(r.pct(0.99))/float64(iv))
		}
	}
	fmt.Fprintln(out)
	for _, iv := range intervals {
		runs := byInterval[iv]
		var p50s, p99s []time.Duration
		for _, r := range runs {
			p50s, p99s = append(p50s, r.pct(0.5)), append(p99s, r.pct(0.99))
		}
		slices.Sort(p50s)
		slices.Sort(p99s)
		fmt.Fprintf(out, "follower lag at %v: p50 %v to %v, p99 %v to %v (%.2f to %.2f intervals; at most 2: %v)\n", iv,
			p50s[0].Round(time.Millisecond), p50s[len(p50s)-1].Round(time.Millisecond),
			p99s[0].Round(time.Millisecond), p99s[len(p99s)-1].Round(time.Millisecond),
			float64(p99s[0])/float64(iv), float64(p99s[len(p99s)-1])/float64(iv), p99s[len(p99s)-1] <= 2*iv)
	}
	return nil
}

// measureLag is one run: a fresh writer directory and prefix, a follower
// process on a fresh directory, rate events/s for run.
func (b *bench) measureLag(interval, run time.Duration, rate int, ship time.Duration) (lagRun, error) {
	ctx := context.Background()
	dir, err := b.dir()
	if err != nil {
		return lagRun{}, err
	}
	defer os.RemoveAll(dir)
	wdir, fdir := filepath.Join(dir, "writer"), filepath.Join(dir, "follower")
	url := b.replica()
	db, err := engine.Open(wdir, &engine.Options{Replica: url, Replication: engine.Shipped, ShipInterval: ship})
	if err != nil {
		return lagRun{}, err
	}
	defer db.Close()
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: ledgerName})
	if err != nil {
		return lagRun{}, err
	}
	// A follower serves a ledger once the bucket holds a signed
	// checkpoint of it.
	if _, err := db.Checkpoint(ctx, ledgerName); err != nil {
		return lagRun{}, err
	}
	child, err := startFollowChild(followChild{Dir: fdir, Ledger: info.ID.String(), Replica: url, Key: db.VerifierKey(), Interval: interval})
	if err != nil {
		return lagRun{}, err
	}
	defer child.kill()

	batch := max(1, rate/100)
	acked := map[uint64]time.Time{}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	events := 0
	for i := 0; time.Since(start) < run; {
		<-tick.C
		in := make([]engine.EventInput, batch)
		for j := range in {
			in[j] = event(i)
			i++
		}
		res, err := db.Append(ctx, ledgerName, in, nil)
		if err != nil {
			tick.Stop()
			return lagRun{}, err
		}
		now := time.Now()
		for j := range in {
			acked[res.Seq(j)] = now
		}
		events += len(in)
	}
	tick.Stop()
	elapsed := time.Since(start)
	if _, err := db.Append(ctx, ledgerName, []engine.EventInput{{Entity: "run", Key: "end", Event: endEvent, Data: []byte(`{}`)}}, nil); err != nil {
		return lagRun{}, err
	}
	got, err := child.results(2*interval + time.Minute)
	if err != nil {
		return lagRun{}, err
	}
	r := lagRun{interval: interval, rate: float64(events) / elapsed.Seconds()}
	for seq, at := range got {
		if a, ok := acked[seq]; ok {
			r.lags = append(r.lags, at.Sub(a))
		}
	}
	if len(r.lags) != len(acked) {
		return r, fmt.Errorf("the follower got %d of the %d events appended", len(r.lags), len(acked))
	}
	slices.Sort(r.lags)
	return r, db.Close()
}

// followProcess is a running follower process.
type followProcess struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

// startFollowChild starts this program as the follower fc, and returns
// once it follows (its first poll done, its subscriber started).
func startFollowChild(fc followChild) (*followProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(fc)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), followChildEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &followProcess{cmd: cmd, out: bufio.NewReader(stdout)}
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("the follower process said %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(time.Minute):
		err = errors.New("the follower process was not ready after a minute")
	}
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// results reads what the follower process prints once it got the end
// event: when each event reached its subscriber, by sequence number.
func (p *followProcess) results(wait time.Duration) (map[uint64]time.Time, error) {
	type answer struct {
		got map[uint64]time.Time
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got := map[uint64]time.Time{}
		for {
			line, err := p.out.ReadString('\n')
			if err != nil {
				done <- answer{err: fmt.Errorf("the follower process's output: %w", err)}
				return
			}
			if line == "done\n" {
				done <- answer{got: got}
				return
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				done <- answer{err: fmt.Errorf("the follower process said %q", line)}
				return
			}
			seq, err1 := strconv.ParseUint(f[0], 10, 64)
			ns, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				done <- answer{err: fmt.Errorf("the follower process said %q", line)}
				return
			}
			got[seq] = time.Unix(0, ns)
		}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			return nil, a.err
		}
		return a.got, p.cmd.Wait()
	case <-time.After(wait):
		return nil, fmt.Errorf("the follower process did not get the last event within %v", wait)
	}
}

func (p *followProcess) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// runFollowChild is the follower process: it follows fc.Replica into
// fc.Dir, prints "ready" once its subscriber starts, then, once the end
// event arrived, a line "SEQ UNIXNANO" per event (when it reached the
// subscriber) and "done".
func runFollowChild(spec string, w io.Writer) error {
	var fc followChild
	if err := json.Unmarshal([]byte(spec), &fc); err != nil {
		return err
	}
	fw, err := engine.OpenFollower(fc.Dir, engine.FollowerOptions{Replica: fc.Replica, Ledger: fc.Ledger, PollInterval: fc.Interval, VerifierKey: fc.Key,
		Options: &engine.Options{TempDir: filepath.Dir(fc.Dir)}})
	if err != nil {
		return err
	}
	defer fw.Close()
	var from uint64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		s, err := fw.Status(fc.Ledger)
		if err == nil && s.Stopped != nil {
			return s.Stopped
		}
		if err == nil && s.Local > 0 {
			from = s.Local
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ledger is not served after a minute: %+v %v", s, err)
		}
	}
	type arrival struct {
		seq uint64
		at  int64
	}
	var got []arrival
	fmt.Fprintln(w, "ready")
	for ev, err := range fw.DB().Subscribe(context.Background(), ledgerName, engine.SubscribeOptions{AfterSeq: from}) {
		if err != nil {
			return err
		}
		got = append(got, arrival{ev.Seq, time.Now().UnixNano()})
		if ev.Event == endEvent {
			break
		}
	}
	bw := bufio.NewWriter(w)
	for _, a := range got {
		fmt.Fprintf(bw, "%d %d\n", a.seq, a.at)
	}
	fmt.Fprintln(bw, "done")
	return bw.Flush()
}
