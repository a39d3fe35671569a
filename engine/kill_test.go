package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// The engine kill test runs the test binary as a child process that opens
// a data directory and appends from several goroutines (single and batched
// Sync appends, conditional appends on a stream, idempotent appends, and
// None and Interval appends in between) to two ledgers, creating a third
// mid-way, and kills it with SIGKILL at a random moment, again and again on
// the same directory. After every kill the directory must open with every
// ledger available, hold every Sync append the child acknowledged (in this
// and all earlier lives), and verify.
//
// Environment:
//
//	ANNAL_ENGINE_KILL_CHILD=<dir>  makes TestEngineKillChild the child (set by
//	                               the parent, not by hand)
//	ANNAL_ENGINE_KILL_SEED=<n>     the child's seed
//	ANNAL_ENGINE_KILLS=<n>         kills of TestEngineKillLoop: default 10,
//	                               3 with -short or -race, 200 for the campaign:
//	                               ANNAL_ENGINE_KILLS=200 go test -run TestEngineKillLoop ./engine
const (
	engineKillChildEnv = "ANNAL_ENGINE_KILL_CHILD"
	engineKillSeedEnv  = "ANNAL_ENGINE_KILL_SEED"
	engineKillsEnv     = "ANNAL_ENGINE_KILLS"
	engineKillsPerDir  = 25 // kills on one directory before a new one
)

// TestEngineKillChild is the child process of TestEngineKillLoop; it
// returns at once unless ANNAL_ENGINE_KILL_CHILD is set (then it appends
// until it is killed, and never returns).
func TestEngineKillChild(t *testing.T) {
	dir := os.Getenv(engineKillChildEnv)
	if dir == "" {
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv(engineKillSeedEnv), 10, 64)
	if err := engineKillChild(dir, seed); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// engineKillChild appends until killed. After each acknowledged Sync
// append it writes "LEDGER ID" lines, one per event, with one write (under
// PIPE_BUF for small batches; the parent ignores a cut line).
func engineKillChild(dir string, seed uint64) error {
	ctx := context.Background()
	db, err := Open(dir, &Options{SegmentSize: 256 << 10, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		if _, err := db.Ledger(name); err != nil {
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
				return err
			}
			fmt.Printf("ledger %s\n", name)
		}
	}
	var outMu sync.Mutex
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	report := func(ledger string, ids []eventid.ID) {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, "%s %s\n", ledger, id)
		}
		outMu.Lock()
		out.WriteString(b.String())
		out.Flush()
		outMu.Unlock()
	}
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			ledgers := []string{"a", "b"}
			for i := 0; ; i++ {
				if w == 0 && i == 200 {
					if _, err := db.Ledger("c"); err != nil {
						if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "c"}); err != nil {
							errs <- err
							return
						}
						outMu.Lock()
						out.WriteString("ledger c\n")
						out.Flush()
						outMu.Unlock()
					}
				}
				if _, err := db.Ledger("c"); err == nil && len(ledgers) == 2 {
					ledgers = append(ledgers, "c")
				}
				ledger := ledgers[rng.IntN(len(ledgers))]
				n := 1 + rng.IntN(8)
				evs := make([]EventInput, n)
				for j := range evs {
					evs[j] = EventInput{Entity: "order", Key: fmt.Sprintf("k%d", rng.IntN(50)), Event: "placed",
						Meta: []byte(`{"by":"kill-test"}`), Data: []byte(fmt.Sprintf(`{"seed":"%d","w":%d,"i":%d,"j":%d}`, seed, w, i, j))}
				}
				var o AppendOptions
				switch rng.IntN(6) {
				case 0:
					o.Durability = None
				case 1:
					o.Durability = Interval
				case 2:
					// On a stream only this writer of this child writes.
					stream := fmt.Sprintf("s%d-%d", seed, w)
					var head eventid.ID
					for ev, err := range db.Replay(ctx, ledger, ReplayOptions{Entity: "account", Keys: []string{stream}}) {
						if err != nil {
							errs <- err
							return
						}
						head = ev.ID
					}
					for j := range evs {
						evs[j].Entity, evs[j].Key = "account", stream
					}
					o.ExpectedStreams = []ExpectedStream{{Entity: "account", Key: stream, Head: head}}
				case 3:
					o.IdempotencyKey = fmt.Sprintf("%d-%d-%d", seed, w, i)
				}
				ids, err := idsOf(db.Append(ctx, ledger, evs, &o))
				if err != nil {
					errs <- err
					return
				}
				if o.Durability == Sync || o.Durability == 0 {
					report(ledger, ids)
				}
			}
		}()
	}
	return <-errs
}

// startEngineKillChild starts TestEngineKillChild as a child process
// appending to dir with seed, and kills it with SIGKILL after delay. It
// returns the child, its standard output and error, and the kill's timer.
func startEngineKillChild(t *testing.T, dir string, seed uint64, delay time.Duration) (*exec.Cmd, io.Reader, *strings.Builder, *time.Timer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEngineKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), engineKillChildEnv+"="+dir, fmt.Sprintf("%s=%d", engineKillSeedEnv, seed))
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	return cmd, out, stderr, timer
}

// killCount returns how many kills a kill loop does: the environment
// variable env if set (a positive number), else short with -short or
// -race, else def.
func killCount(t *testing.T, env string, def, short int) int {
	t.Helper()
	if s := os.Getenv(env); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", env, s)
		}
		return n
	}
	if testing.Short() || raceEnabled {
		return short
	}
	return def
}

// TestEngineKillLoop kills the child again and again and checks the
// directory after each kill.
func TestEngineKillLoop(t *testing.T) {
	kills := killCount(t, engineKillsEnv, 10, 3)
	seed := testSeed(t)
	t.Logf("%d kills", kills)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	var dir string
	acked := map[eventid.ID]string{}
	total := 0
	start := time.Now()
	for k := range kills {
		if k%engineKillsPerDir == 0 {
			// A fresh directory now and then: each check reads every
			// acknowledged event of the directory.
			dir = t.TempDir()
			clear(acked)
		}
		cmd, out, stderr, timer := startEngineKillChild(t, dir, rng.Uint64(), time.Duration(100+rng.IntN(900))*time.Millisecond)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ledger, idText, ok := strings.Cut(sc.Text(), " ")
			if !ok || ledger == "ledger" {
				continue
			}
			id, err := eventid.Parse(idText)
			if err != nil {
				continue // a line cut by the kill
			}
			acked[id] = ledger
			total++
		}
		err := cmd.Wait()
		timer.Stop()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: the child ended by itself: %v\n%s", k, err, stderr.String())
		}

		db, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("kill %d: open: %v", k, err)
		}
		if u := db.Unavailable(); len(u) > 0 {
			t.Fatalf("kill %d: unavailable: %v", k, u)
		}
		for id, ledger := range acked {
			ev, err := db.Get(ctx, id)
			if err != nil || ev.Ledger != ledger {
				t.Fatalf("kill %d: acknowledged %s in %s: %v (found in %q)", k, id, ledger, err, ev.Ledger)
			}
		}
		for _, info := range db.Ledgers() {
			if _, err := db.Verify(ctx, info.Name, nil); err != nil {
				t.Fatalf("kill %d: verify %s: %v", k, info.Name, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatalf("kill %d: close: %v", k, err)
		}
	}
	t.Logf("%d kills in %s, %d acknowledged Sync events, all found after each kill; 0 lost", kills, time.Since(start).Round(time.Millisecond), total)
}
