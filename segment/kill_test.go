package segment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The kill test runs the test binary itself as a child process that
// appends to a ledger on the real file system, and kills it with SIGKILL
// at a random moment, again and again on the same ledger. After every kill
// the ledger must open (a torn tail is cut), verify, and hold every event
// whose Append returned before the kill. Every killsPerLedger kills it
// starts a new ledger: each check verifies the whole ledger, which grows
// by thousands of records a kill, so one ledger for 200 kills would make
// the run quadratic (about 9 minutes instead of 1.5).
//
// Environment:
//
//	ANNAL_SEGMENT_KILL_CHILD=<dir>  makes TestKillChild the child (set by
//	                                TestKillMidAppend, not by hand)
//	ANNAL_SEGMENT_KILL_SEED=<n>     the child's seed (set by the parent)
//	ANNAL_KILL_ITERATIONS=<n>       kills of TestKillMidAppend: default 20,
//	                                5 with -short; e.g. 200 for a long run:
//	                                ANNAL_KILL_ITERATIONS=200 go test -run TestKillMidAppend ./segment/
//
// The parent's seed (kill times, child seeds) is testSeed's: -seed=<n>
// replays a run's schedule; the interleaving with the child is not
// reproducible, the schedule is.
const (
	killChildEnv     = "ANNAL_SEGMENT_KILL_CHILD"
	killChildSeedEnv = "ANNAL_SEGMENT_KILL_SEED"
	killItersEnv     = "ANNAL_KILL_ITERATIONS"

	killSegmentSize = 64 << 10 // small, so that segments rotate often
	killWriters     = 4        // appending goroutines of the child
	killMaxBatch    = 20       // entries per batch: 1 to this
	killsPerLedger  = 20       // kills on one ledger before a new one
)

func killOptions() Options {
	return Options{FS: vfs.Default, Ledger: testLedger(), SegmentSize: killSegmentSize, Durability: Sync}
}

// TestKillChild is the child process of TestKillMidAppend; it returns at
// once unless ANNAL_SEGMENT_KILL_CHILD is set. It never returns otherwise:
// it appends until it is killed.
func TestKillChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv(killChildSeedEnv), 10, 64)
	killChild(dir, seed)
}

// killChild opens (or creates) the ledger in dir and appends batches of
// random entries in Sync mode from killWriters goroutines. After each
// successful Append it writes the batch's IDs, in hex, one per line, to
// stdout with one write (under PIPE_BUF, so atomic on a pipe). On any error
// it writes it to stderr and exits with status 3; otherwise it never
// exits.
func killChild(dir string, seed uint64) {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "kill child: "+format+"\n", args...)
		os.Exit(3)
	}
	o := killOptions()
	l, _, err := Open(dir, o, Head{})
	if errors.Is(err, ErrNoLog) {
		l, err = Create(dir, o)
	}
	if err != nil {
		fail("opening %s: %v", dir, err)
	}

	var outMu sync.Mutex
	ack := func(ids []eventid.ID) {
		line := make([]byte, 0, len(ids)*(2*eventid.Size+1))
		for _, id := range ids {
			line = hex.AppendEncode(line, id[:])
			line = append(line, '\n')
		}
		outMu.Lock()
		defer outMu.Unlock()
		if _, err := os.Stdout.Write(line); err != nil {
			fail("writing to stdout: %v", err)
		}
	}

	// A ledger whose first segment was created but whose genesis was never
	// appended (killed in between) opens empty.
	if l.Head().Seq == 0 {
		b := &Batch{Entries: []Entry{genesisEntry}}
		if err := l.Append(b); err != nil {
			fail("appending the genesis: %v", err)
		}
		ack(b.IDs)
	}

	for w := range killWriters {
		go func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				b := &Batch{Entries: make([]Entry, 1+r.IntN(killMaxBatch))}
				for i := range b.Entries {
					b.Entries[i] = killEntry(r)
				}
				if err := l.Append(b); err != nil {
					fail("append of %d entries: %v", len(b.Entries), err)
				}
				ack(b.IDs)
			}
		}()
	}
	select {} // until killed
}

// killEntry returns a random entry: mostly the usual ~250 bytes, now and
// then one of a few KiB, so that some writes span several pages.
func killEntry(r *rand.Rand) Entry {
	e := entry(r.IntN(1 << 20))
	if r.IntN(10) == 0 {
		e.Data = fmt.Appendf(nil, `{"blob":"%s","n":%d}`, strings.Repeat("x", 1+r.IntN(6000)), r.IntN(1000))
	}
	return e
}

func TestKillMidAppend(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the kill test runs on Linux only (kills a child process with SIGKILL); GOOS is %s", runtime.GOOS)
	}
	if os.Getenv(killChildEnv) != "" {
		t.Skip("in the child process")
	}
	iterations := 20
	if testing.Short() {
		iterations = 5
	}
	if s := os.Getenv(killItersEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", killItersEnv, s)
		}
		iterations = n
	}
	seed := testSeed(t)
	t.Logf("%d iterations", iterations)
	r := rand.New(rand.NewPCG(seed, 0x6b696c6c))

	base := t.TempDir()
	var (
		dir             string
		acked           map[eventid.ID]int // of the current ledger: ID -> iteration that acknowledged it
		ledgers         int
		totalAcked      int
		tornBytes       int64
		tornTimes       int
		removedSegments int
		records         []int64 // of each ledger, at its last check
		segments        []int
		emptyKills      int
		earlyKills      int
	)
	for iter := range iterations {
		if iter%killsPerLedger == 0 {
			dir = filepath.Join(base, fmt.Sprintf("ledger-%d", ledgers))
			acked = map[eventid.ID]int{}
			records, segments = append(records, 0), append(segments, 0)
			ledgers++
		}
		childSeed := r.Uint64()
		early := r.IntN(4) == 0 // time the kill from the start, not from the first ack
		delay := time.Duration(20+r.IntN(281)) * time.Millisecond

		ids, stderr := killOnce(t, iter, dir, childSeed, early, delay)
		if early {
			earlyKills++
		}
		if len(ids) == 0 {
			emptyKills++
		}
		for _, id := range ids {
			if prev, dup := acked[id]; dup {
				t.Fatalf("iteration %d: ID %s acknowledged twice (also in iteration %d)", iter, id, prev)
			}
			acked[id] = iter
		}
		totalAcked += len(ids)

		l, rec, err := openTestLog(t, vfs.Default, dir, killOptions())
		if errors.Is(err, ErrNoLog) && len(acked) == 0 {
			// Killed before the first segment's header was complete.
			t.Logf("iteration %d: no ledger yet (%v)", iter, err)
			continue
		}
		if err != nil {
			t.Fatalf("iteration %d (seed %d, child seed %d): reopen after the kill: %v\nrecovery: %+v\nchild stderr:\n%s",
				iter, seed, childSeed, err, rec, stderr)
		}
		n, err := checkKilledLedger(l, rec, acked)
		if cerr := l.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
		if err != nil {
			t.Fatalf("iteration %d (seed %d, child seed %d): %v\nrecovery: %+v\nchild stderr:\n%s",
				iter, seed, childSeed, err, rec, stderr)
		}
		if rec.TruncatedBytes > 0 {
			tornTimes++
			tornBytes += rec.TruncatedBytes
			t.Logf("iteration %d: cut a torn write of %d bytes at segment %d offset %d", iter, rec.TruncatedBytes, rec.TornAt.Segment, rec.TornAt.Offset)
		}
		if rec.RemovedSegment != 0 {
			removedSegments++
			t.Logf("iteration %d: removed unfinished segment %d", iter, rec.RemovedSegment)
		}
		records[ledgers-1], segments[ledgers-1] = n, rec.Segments
	}
	var allRecords int64
	var allSegments int
	for i := range records {
		allRecords += records[i]
		allSegments += segments[i]
	}
	t.Logf("%d iterations on %d ledgers (%d killed from the start, %d before any ack): %d IDs acknowledged, all found; "+
		"%d records, %d segments; torn writes cut %d times, %d bytes; unfinished segments removed %d times",
		iterations, ledgers, earlyKills, emptyKills, totalAcked, allRecords, allSegments, tornTimes, tornBytes, removedSegments)
	if totalAcked == 0 {
		t.Fatal("no child acknowledged anything: the test tested nothing")
	}
}

// killOnce runs the child on dir, kills it with SIGKILL after delay
// (counted from the start if early, else from the first acknowledged
// batch), and returns every ID it acknowledged and its stderr.
func killOnce(t *testing.T, iter int, dir string, childSeed uint64, early bool, delay time.Duration) ([]eventid.ID, string) {
	t.Helper()
	// An os.Pipe, not cmd.StdoutPipe: Wait closes the latter, which could
	// lose lines written before the kill and not yet read.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		killChildEnv+"="+dir,
		killChildSeedEnv+"="+strconv.FormatUint(childSeed, 10))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()

	type result struct {
		ids []eventid.ID
		bad []string // lines that are not IDs
		err error
	}
	first := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var res result
		br := bufio.NewReader(pr)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				if err != io.EOF {
					res.err = err
				} else if line != "" {
					res.bad = append(res.bad, fmt.Sprintf("unterminated last line %q", line))
				}
				break
			}
			b, err := hex.DecodeString(strings.TrimSuffix(line, "\n"))
			if err != nil || len(b) != eventid.Size {
				res.bad = append(res.bad, line)
				continue
			}
			id := eventid.ID(b)
			if len(res.ids) == 0 {
				close(first)
			}
			res.ids = append(res.ids, id)
		}
		done <- res
	}()

	start := time.Now()
	if !early {
		// Wait for the child to be appending; a child that acknowledges
		// nothing within 10 s (or dies) is a failure reported below.
		select {
		case <-first:
		case <-time.After(10 * time.Second):
		}
	}
	time.Sleep(delay)
	killErr := cmd.Process.Kill() // SIGKILL on Linux
	waitErr := cmd.Wait()
	res := <-done // the pipe reaches EOF once the child is dead
	alive := time.Since(start)

	switch {
	case cmd.ProcessState.Exited():
		t.Fatalf("iteration %d: the child exited by itself (%v, kill: %v) after %v instead of being killed\nchild stderr:\n%s\nits stdout had %d IDs and these other lines: %q",
			iter, waitErr, killErr, alive, stderr.String(), len(res.ids), res.bad)
	case res.err != nil:
		t.Fatalf("iteration %d: reading the child's stdout: %v", iter, res.err)
	case len(res.bad) > 0:
		t.Fatalf("iteration %d: the child wrote lines that are not IDs: %q\nchild stderr:\n%s", iter, res.bad, stderr.String())
	case stderr.Len() > 0:
		t.Fatalf("iteration %d: the child wrote to stderr:\n%s", iter, stderr.String())
	case !early && len(res.ids) == 0:
		t.Fatalf("iteration %d: the child acknowledged nothing in %v", iter, alive)
	}
	return res.ids, stderr.String()
}

// checkKilledLedger verifies the reopened ledger and that every
// acknowledged ID is in it, and returns the number of records.
func checkKilledLedger(l *Log, rec *Recovery, acked map[eventid.ID]int) (int64, error) {
	head, err := l.Verify(context.Background(), nil)
	if err != nil {
		return 0, fmt.Errorf("Verify: %w", err)
	}
	if head.ID != rec.Head.ID || head.Seq != rec.Head.Seq || head != l.Head() {
		return 0, fmt.Errorf("Verify's head %s #%d differs from the recovered head %s #%d or the Log's %s #%d",
			head.ID, head.Seq, rec.Head.ID, rec.Head.Seq, l.Head().ID, l.Head().Seq)
	}
	found := make(map[eventid.ID]struct{}, head.Seq)
	it := l.NewIterator(1, FirstOffset)
	var n int64
	var last Record
	for it.Next() {
		r := it.Record()
		if n > 0 && (r.Seq != last.Seq+1 || r.Prev != last.ID || r.ID.Micros() <= last.ID.Micros()) {
			return 0, fmt.Errorf("record at %+v: %s #%d after %s #%d: sequence or chain broken", it.Location(), r.ID, r.Seq, last.ID, last.Seq)
		}
		if n == 0 && r.Seq != 1 {
			return 0, fmt.Errorf("first record %s has seq %d, want 1", r.ID, r.Seq)
		}
		if _, dup := found[r.ID]; dup {
			return 0, fmt.Errorf("record %s #%d appears twice", r.ID, r.Seq)
		}
		found[r.ID] = struct{}{}
		last.ID, last.Seq = r.ID, r.Seq
		n++
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("iterating after %d records: %w", n, err)
	}
	if uint64(n) != head.Seq || (n > 0 && last.ID != head.ID) {
		return 0, fmt.Errorf("iterated %d records ending at %s, the head is %s #%d", n, last.ID, head.ID, head.Seq)
	}
	var lost []string
	for id, iter := range acked {
		if _, ok := found[id]; !ok {
			lost = append(lost, fmt.Sprintf("%s (acknowledged in iteration %d)", id, iter))
		}
	}
	if len(lost) > 0 {
		if len(lost) > 20 {
			lost = append(lost[:20], fmt.Sprintf("… %d more", len(lost)-20))
		}
		return 0, fmt.Errorf("%d of %d acknowledged IDs lost (ledger has %d records): %s", len(lost), len(acked), n, strings.Join(lost, ", "))
	}
	return n, nil
}
