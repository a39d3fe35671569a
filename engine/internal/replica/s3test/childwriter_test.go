package s3test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
)

// The child writer: the test binary run again with childEnv set opens a
// data directory with a replica and appends from several goroutines
// until it is killed, reporting each append's outcome on file descriptor
// 3 as soon as Append returns. It starts no gateway (embedgw allows one
// per process, and posix.New changes the working directory): TestMain
// runs runChildWriter instead (childMains).
const (
	childEnv          = "ANNAL_S3TEST_CHILD_WRITER"
	childDir          = "ANNAL_S3TEST_CHILD_DIR"
	childReplica      = "ANNAL_S3TEST_CHILD_REPLICA"
	childKey          = "ANNAL_S3TEST_CHILD_KEY"
	childMode         = "ANNAL_S3TEST_CHILD_MODE"
	childRound        = "ANNAL_S3TEST_CHILD_ROUND"
	childStoreTimeout = "ANNAL_S3TEST_CHILD_STORE_TIMEOUT"
	childShipInterval = "ANNAL_S3TEST_CHILD_SHIP_INTERVAL"
	childPause        = "ANNAL_S3TEST_CHILD_PAUSE"

	// lossLedger is the ledger the child writes.
	lossLedger = "payments"
	// childAppenders is how many goroutines append in the child.
	childAppenders = 8
	// childSegmentSize keeps segments small, so that rounds seal some and
	// the bucket holds seg/ objects as well as chunks.
	childSegmentSize = 32 << 10
)

func init() { childMains[childEnv] = func(string) int { return runChildWriter() } }

// childOptions are the options the child opens its directory with.
func childOptions(replicaURL, keyFile string, mode engine.Replication, storeTimeout, shipInterval time.Duration) *engine.Options {
	return &engine.Options{
		Replica:        replicaURL,
		Replication:    mode,
		SigningKeyFile: keyFile,
		SegmentSize:    childSegmentSize,
		StoreTimeout:   storeTimeout,
		ShipInterval:   shipInterval,
		// Checkpoints every 100 ms (the least allowed), so that a round
		// of under a second stores some in the bucket.
		CheckpointInterval: 100 * time.Millisecond,
	}
}

// eventData is the data of the appender w's n-th event of a round: what
// tells an event apart when the ledger is read back.
func eventData(round, w, n int) string {
	return fmt.Sprintf(`{"n":%d,"pad":"%s","round":%d,"w":%d}`, n, strings.Repeat("p", 120), round, w)
}

// eventName is the name of an event in the reports and the checks.
func eventName(round, w, n int) string { return fmt.Sprintf("r%d/w%d/n%d", round, w, n) }

// runChildWriter is the child's main. Its lines on descriptor 3:
//
//	ready LEDGER [takeover]
//	ack NAME ID NANOS        (Append returned the event's ID)
//	notstored NAME NANOS     (Append failed with ErrNotStored)
//	error NAME NANOS MESSAGE (any other failure; the appender stops)
//
// NANOS is how long the Append call took. Each appender pauses for
// childPause after each call.
func runChildWriter() int {
	out := os.NewFile(3, "reports")
	var mu sync.Mutex
	report := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(out, line); err != nil {
			os.Exit(4)
		}
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child writer:", err)
		return 2
	}
	round, err := strconv.Atoi(os.Getenv(childRound))
	if err != nil {
		return fail(err)
	}
	storeTimeout, err := time.ParseDuration(os.Getenv(childStoreTimeout))
	if err != nil {
		return fail(err)
	}
	shipInterval, err := time.ParseDuration(os.Getenv(childShipInterval))
	if err != nil {
		return fail(err)
	}
	pause, err := time.ParseDuration(os.Getenv(childPause))
	if err != nil {
		return fail(err)
	}
	mode := engine.Replicated
	if os.Getenv(childMode) == "shipped" {
		mode = engine.Shipped
	}
	dir := os.Getenv(childDir)
	opts := childOptions(os.Getenv(childReplica), os.Getenv(childKey), mode, storeTimeout, shipInterval)
	ctx := context.Background()
	db, err := engine.Open(dir, opts)
	if err != nil {
		return fail(fmt.Errorf("open %s: %w", dir, err))
	}
	takeover := ""
	if _, err := db.Ledger(lossLedger); errors.Is(err, engine.ErrLedgerNotFound) && round == 1 {
		if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: lossLedger}); err != nil {
			return fail(fmt.Errorf("create the ledger: %w", err))
		}
	} else if errors.Is(err, engine.ErrBehind) {
		// The bucket got a chunk after the restore read it (an upload of
		// the killed writer landed late): this directory takes the
		// ledger with the bucket's records.
		db.Close()
		if db, _, err = engine.Takeover(ctx, dir, opts); err != nil {
			return fail(fmt.Errorf("takeover %s: %w", dir, err))
		}
		takeover = " takeover"
	} else if err != nil {
		return fail(fmt.Errorf("ledger %s: %w", lossLedger, err))
	}
	info, err := db.Ledger(lossLedger)
	if err != nil {
		return fail(err)
	}
	report("ready %s%s", info.ID, takeover)
	var wg sync.WaitGroup
	for w := range childAppenders {
		wg.Go(func() {
			for n := 0; ; n++ {
				name := eventName(round, w, n)
				start := time.Now()
				res, err := db.Append(ctx, lossLedger, []engine.EventInput{{Entity: "account", Key: fmt.Sprintf("acct-%d", w),
					Event: "paid", Data: []byte(eventData(round, w, n))}}, nil)
				took := time.Since(start).Nanoseconds()
				switch {
				case err == nil:
					report("ack %s %s %d", name, res.IDs[0], took)
				case errors.Is(err, engine.ErrNotStored):
					report("notstored %s %d", name, took)
				default:
					report("error %s %d %s", name, took, strings.ReplaceAll(err.Error(), "\n", " "))
					return
				}
				time.Sleep(pause)
			}
		})
	}
	wg.Wait()
	return 3
}

// childReport is one line of the child's reports, with when the parent
// read it.
type childReport struct {
	kind string // ready, ack, notstored, error
	name string
	id   string
	took time.Duration
	text string
	at   time.Time
}

func parseChildReport(line string, at time.Time) (childReport, error) {
	f := strings.Fields(line)
	bad := fmt.Errorf("child writer: bad report %q", line)
	if len(f) == 0 {
		return childReport{}, bad
	}
	r := childReport{kind: f[0], at: at}
	nanos := func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		r.took = time.Duration(n)
		return err
	}
	var err error
	switch {
	case r.kind == "ready" && len(f) >= 2:
		r.id = f[1]
		r.text = strings.Join(f[2:], " ")
	case r.kind == "ack" && len(f) == 4:
		r.name, r.id = f[1], f[2]
		err = nanos(f[3])
	case r.kind == "notstored" && len(f) == 3:
		r.name = f[1]
		err = nanos(f[2])
	case r.kind == "error" && len(f) >= 3:
		r.name = f[1]
		err = nanos(f[2])
		r.text = strings.Join(f[3:], " ")
	default:
		return childReport{}, bad
	}
	if err != nil {
		return childReport{}, bad
	}
	return r, nil
}

// childRun is a child writer started by the test.
type childRun struct {
	cmd     *exec.Cmd
	stderr  strings.Builder
	reports chan childReport
	readErr error
	killed  time.Time
}

// startChildWriter starts the child on dir for round. Its reports come on
// c.reports, which is closed when the child's end of the pipe is.
func startChildWriter(t *testing.T, dir, replicaURL, keyFile, mode string, round int, storeTimeout, shipInterval, pause time.Duration) *childRun {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &childRun{reports: make(chan childReport, 1<<16)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childDir+"="+dir,
		childReplica+"="+replicaURL,
		childKey+"="+keyFile,
		childMode+"="+mode,
		childRound+"="+strconv.Itoa(round),
		childStoreTimeout+"="+storeTimeout.String(),
		childShipInterval+"="+shipInterval.String(),
		childPause+"="+pause.String(),
	)
	c.cmd.ExtraFiles = []*os.File{w}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		defer close(c.reports)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			rep, err := parseChildReport(sc.Text(), time.Now())
			if err != nil {
				c.readErr = err
				return
			}
			c.reports <- rep
		}
		c.readErr = sc.Err()
	}()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// kill SIGKILLs the child and waits for it.
func (c *childRun) kill() {
	c.killed = time.Now()
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}
