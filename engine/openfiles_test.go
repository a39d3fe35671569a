package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// manySegmentsSize: the smallest segment size, so that every event
// starts a segment of its own.
const manySegmentsSize = 135

// manySegmentsLedger makes, in a new data directory, ledger "l" of n
// events in about as many segments, closes it and returns the directory
// and the events' IDs (the genesis event's first).
func manySegmentsLedger(t *testing.T, n int) (string, []eventid.ID) {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: manySegmentsSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []eventid.ID{info.Genesis}
	for i := range n - 1 {
		res, err := db.Append(ctx, "l", []EventInput{order(i)}, &AppendOptions{Durability: None})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs...)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, ledgersDir, info.ID.String(), "*.seg"))
	if len(segs) < n/2 {
		t.Fatalf("%d segments for %d events", len(segs), n)
	}
	return dir, ids
}

// openFDs returns how many files this process has open, and false where
// /proc/self/fd does not list them (not Linux).
func openFDs(t *testing.T) (int, bool) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	return len(fds), true
}

// segmentFDs returns how many of this process's open files are segments
// under dir (other tests of the package may still hold theirs).
func segmentFDs(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasSuffix(target, ".seg") && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestReadsHoldBoundedSegments: a ledger of many segments, opened, read
// end to end (Scan, Get of every event in random order, Verify), holds at
// most segment.DefaultMaxOpenSegments sealed segments open, besides the
// active one (its write and read handles), and every read is right.
// Before, every segment read stayed open (one descriptor and one memory
// map each) until Close.
func TestReadsHoldBoundedSegments(t *testing.T) {
	if _, ok := openFDs(t); !ok {
		t.Skip("no /proc/self/fd")
	}
	n := segment.DefaultMaxOpenSegments + 40
	dir, ids := manySegmentsLedger(t, n)
	rng := rand.New(rand.NewPCG(testSeed(t), 1)) // the order of the Gets
	db, err := Open(dir, &Options{SegmentSize: manySegmentsSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	bound := segment.DefaultMaxOpenSegments + 2
	check := func(what string) {
		t.Helper()
		if got := segmentFDs(t, dir); got > bound {
			t.Fatalf("after %s: %d segment files open, want at most %d", what, got, bound)
		}
	}
	check("Open")
	i := 0
	for ev, err := range db.Scan(ctx, "l", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID != ids[i] {
			t.Fatalf("scan: event %d is %s, want %s", i, ev.ID, ids[i])
		}
		i++
	}
	if i != n {
		t.Fatalf("scan: %d events, want %d", i, n)
	}
	check("Scan")
	for _, k := range rng.Perm(n) {
		ev, err := db.Get(ctx, ids[k])
		if err != nil || ev.ID != ids[k] || ev.Seq != uint64(k+1) {
			t.Fatalf("get %s: %+v %v", ids[k], ev, err)
		}
	}
	check("Get of every event")
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatal(err)
	}
	check("Verify")
	ro, err := OpenReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, k := range rng.Perm(n) {
		if ev, err := ro.Get(ctx, ids[k]); err != nil || ev.ID != ids[k] {
			t.Fatalf("read-only get %s: %+v %v", ids[k], ev, err)
		}
	}
	if got := segmentFDs(t, dir); got > 2*bound {
		t.Fatalf("with a read-only DB too: %d segment files open, want at most %d", got, 2*bound)
	}
}

// fdLimitChildEnv names the data directory for TestOpenUnderLowFileLimit's
// child (TestOpenUnderLowFileLimitChild).
const fdLimitChildEnv = "ANNAL_FD_LIMIT_CHILD"

// TestOpenUnderLowFileLimit: a process whose limit of open files
// (RLIMIT_NOFILE) is below the number of a ledger's segments opens the
// directory, verifies the ledger, reads it end to end and opens it
// read-only. Before, Open's recovery held every segment open at once, and
// reads kept each open: the ledger was "unavailable" and verify failed.
func TestOpenUnderLowFileLimit(t *testing.T) {
	if _, ok := openFDs(t); !ok {
		t.Skip("no /proc/self/fd")
	}
	n := 2*segment.DefaultMaxOpenSegments + 40
	dir, _ := manySegmentsLedger(t, n)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenUnderLowFileLimitChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fdLimitChildEnv+"="+dir, "ANNAL_FD_LIMIT_EVENTS="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestOpenUnderLowFileLimitChild is TestOpenUnderLowFileLimit's child: it
// returns at once unless ANNAL_FD_LIMIT_CHILD is set.
func TestOpenUnderLowFileLimitChild(t *testing.T) {
	dir := os.Getenv(fdLimitChildEnv)
	if dir == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("ANNAL_FD_LIMIT_EVENTS"))
	now, _ := openFDs(t)
	// Room for the index, the metadata and the lock, and fewer
	// segments than the Log keeps open, far fewer than the ledger's.
	limit := uint64(now + 40)
	if limit >= uint64(n) {
		t.Fatalf("limit %d is not below the %d segments", limit, n)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	rl.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := Open(dir, &Options{SegmentSize: manySegmentsSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if bad := db.Unavailable(); len(bad) != 0 {
		t.Fatalf("with at most %d open files: unavailable %v", limit, bad)
	}
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatalf("with at most %d open files: %v", limit, err)
	}
	count := 0
	for _, err := range db.Scan(ctx, "l", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		count++
	}
	if count != n {
		t.Fatalf("scan: %d events, want %d", count, n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, nil)
	if err != nil {
		t.Fatalf("read-only with at most %d open files: %v", limit, err)
	}
	ro.Close()
	fmt.Println("child: ok")
}
