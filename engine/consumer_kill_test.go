package engine

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The consumer kill test runs the test binary as a child process that
// appends to a ledger and runs two named consumers of it ("rare": Sync
// acknowledgements, a selector that matches one event in ten; "all":
// Interval acknowledgements, every event), which take events, pause a
// little, and acknowledge most of them; the parent kills the child with
// SIGKILL at a random moment, often between an event given and its Ack,
// again and again on the same directory. After every kill the stored
// position of each consumer must be an event it was given and then
// acknowledged (never past one it was not given, or was given and did
// not acknowledge: the kill often lands between the two), "rare"'s at least its last acknowledged one (Sync);
// each life must start at the first selected event after the stored
// position (nothing skipped); and across the lives and a last run in the
// parent, each consumer receives every selected event of the ledger.
//
//	ANNAL_CONSUMER_KILL_CHILD=<dir>  makes TestConsumerKillChild the child
//	ANNAL_CONSUMER_KILLS=<n>         kills (default 6; 3 with -short)
const (
	consumerKillChildEnv = "ANNAL_CONSUMER_KILL_CHILD"
	consumerKillsEnv     = "ANNAL_CONSUMER_KILLS"
)

var killConsumers = []struct {
	name string
	o    ConsumerOptions
}{
	{"rare", ConsumerOptions{Events: []string{"rare"}}},
	{"all", ConsumerOptions{Durability: Interval, Interval: 20 * time.Millisecond}},
}

// TestConsumerKillChild is the child of TestConsumerKillLoop; it returns at
// once unless ANNAL_CONSUMER_KILL_CHILD is set (then it runs until killed).
func TestConsumerKillChild(t *testing.T) {
	dir := os.Getenv(consumerKillChildEnv)
	if dir == "" {
		return
	}
	if err := consumerKillChild(dir); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// consumerKillChild prints "got NAME SEQ" when a consumer is given an
// event, "ack NAME SEQ" before it calls Ack, and "acked NAME SEQ" once
// Ack returned.
func consumerKillChild(dir string) error {
	ctx := context.Background()
	db, err := Open(dir, &Options{SyncInterval: 5 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := db.Ledger("l"); err != nil {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			return err
		}
	}
	errs := make(chan error, 3)
	go func() {
		for i := 0; ; i++ {
			e := order(i)
			if rand.IntN(10) == 0 {
				e = ev("payment", "p", "rare")
			}
			if _, err := db.Append(ctx, "l", []EventInput{e}, &AppendOptions{Durability: Interval}); err != nil {
				errs <- err
				return
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	for _, k := range killConsumers {
		c, err := db.Consumer("l", k.name, k.o)
		if err != nil {
			return err
		}
		go func() {
			for e, err := range c.Events(ctx) {
				if err != nil {
					errs <- err
					return
				}
				fmt.Fprintf(os.Stdout, "got %s %d\n", k.name, e.Seq)
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				if rand.IntN(4) == 0 {
					continue // acknowledged by a later Ack
				}
				fmt.Fprintf(os.Stdout, "ack %s %d\n", k.name, e.Seq)
				if err := c.Ack(ctx, e.ID); err != nil {
					errs <- err
					return
				}
				fmt.Fprintf(os.Stdout, "acked %s %d\n", k.name, e.Seq)
			}
		}()
	}
	return <-errs
}

func TestConsumerKillLoop(t *testing.T) {
	if os.Getenv(consumerKillChildEnv) != "" {
		return
	}
	kills := 6
	if testing.Short() {
		kills = 3
	}
	if s := os.Getenv(consumerKillsEnv); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	rng := rand.New(rand.NewPCG(testSeed(t), 1)) // the kills' moments
	ctx := context.Background()
	dir := t.TempDir()
	type life struct {
		start uint64   // the stored position when it started
		got   []uint64 // the events given, in order
	}
	lives := map[string][]life{}
	stored := map[string]uint64{}
	given := map[string]map[uint64]bool{"rare": {}, "all": {}}
	ackStarted := map[string]map[uint64]bool{"rare": {}, "all": {}}
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), consumerKillChildEnv+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Killed a random moment after both consumers were given an
		// event in this life.
		var lines []string
		started, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			seen := map[string]bool{}
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "got" && !seen[f[1]] {
					if seen[f[1]] = true; len(seen) == len(killConsumers) {
						close(started)
					}
				}
			}
		}()
		select {
		case <-started:
		case <-done:
		}
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		cmd.Wait()
		if strings.Contains(stderr.String(), "child:") {
			t.Fatalf("kill %d: the child failed: %s", k, stderr.String())
		}
		acked := map[string]uint64{}
		cur := map[string]*life{}
		for name := range given {
			cur[name] = &life{start: stored[name]}
		}
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) != 3 || cur[f[1]] == nil {
				continue // a line cut by the kill
			}
			seq, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "got":
				cur[f[1]].got = append(cur[f[1]].got, seq)
				given[f[1]][seq] = true
			case "ack":
				ackStarted[f[1]][seq] = true
			case "acked":
				acked[f[1]] = seq
			}
		}
		db, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		infos, err := db.Consumers("l")
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			s := in.Position.Seq
			if !given[in.Name][s] {
				t.Fatalf("kill %d: consumer %s stored #%d, an event it was not given", k, in.Name, s)
			}
			if s != stored[in.Name] && !ackStarted[in.Name][s] {
				t.Fatalf("kill %d: consumer %s stored #%d, an event given but not acknowledged", k, in.Name, s)
			}
			if in.Name == "rare" && s < acked["rare"] {
				t.Fatalf("kill %d: consumer rare (Sync) stored #%d, before its acknowledged #%d", k, s, acked["rare"])
			}
			if s < stored[in.Name] {
				t.Fatalf("kill %d: consumer %s went back from #%d to #%d", k, in.Name, stored[in.Name], s)
			}
			stored[in.Name] = s
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for name, l := range cur {
			lives[name] = append(lives[name], *l)
		}
	}
	// A last life in the parent, to the end of the ledger.
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range killConsumers {
		var want []uint64
		for e, err := range db.Scan(ctx, "l", ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if len(k.o.Events) == 0 || slices.Contains(k.o.Events, e.Event) {
				want = append(want, e.Seq)
			}
		}
		c, err := db.Consumer("l", k.name, k.o)
		if err != nil {
			t.Fatal(err)
		}
		last := life{start: c.Position().Stored.Seq}
		i, _ := slices.BinarySearch(want, last.start+1)
		evs, err := take(ctx, t, c, len(want)-i, nil)
		if err != nil {
			t.Fatal(err)
		}
		last.got = seqs(evs)
		c.Close()
		// Each life starts at the first selected event after its stored
		// position, and gives them in order without a gap.
		received := map[uint64]bool{}
		for n, l := range append(lives[k.name], last) {
			i, _ := slices.BinarySearch(want, l.start+1)
			for j, s := range l.got {
				if i+j >= len(want) || want[i+j] != s {
					t.Fatalf("consumer %s, life %d (after #%d): event %d is #%d, want #%d (the selected events: %v)", k.name, n, l.start, j, s, want[min(i+j, len(want)-1)], want[i:min(i+j+3, len(want))])
				}
				received[s] = true
			}
		}
		for _, s := range want {
			if !received[s] {
				t.Fatalf("consumer %s never received #%d", k.name, s)
			}
		}
		t.Logf("consumer %s: %d events over %d lives; %d selected events in the ledger", k.name, len(received), len(lives[k.name])+1, len(want))
	}
}
