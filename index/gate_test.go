package index

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fakeDB is a DBForCompaction that always has a compaction waiting and
// accepts every grant, recording it.
type fakeDB struct {
	mu      sync.Mutex
	allowed int
	grants  []pebble.CompactionGrantHandle
}

func (f *fakeDB) GetAllowedWithoutPermission() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allowed
}

func (f *fakeDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	return true, pebble.WaitingCompaction{}
}

func (f *fakeDB) Schedule(h pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grants = append(f.grants, h)
	return true
}

func (f *fakeDB) granted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.grants)
}

// waitFor polls cond for up to 10 s (a loaded CI machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCompactionGate: nothing is granted before release, whether Pebble
// asks (TrySchedule) or the gate's own rounds offer; after it, as many
// compactions as the DB allows run at once, a Done lets the next one run,
// and after Unregister nothing is granted.
func TestCompactionGate(t *testing.T) {
	t.Parallel()
	db := &fakeDB{allowed: 2}
	g := newCompactionGate()
	g.Register(2, db)
	if ok, _ := g.TrySchedule(); ok {
		t.Fatal("TrySchedule granted before release")
	}
	g.UpdateGetAllowedWithoutPermission()
	time.Sleep(3 * gateInterval)
	if n := db.granted(); n != 0 {
		t.Fatalf("%d compactions granted before release", n)
	}

	g.release()
	waitFor(t, "2 grants after release", func() bool { return db.granted() == 2 })
	time.Sleep(2 * gateInterval)
	if n := db.granted(); n != 2 {
		t.Fatalf("%d compactions granted, want the 2 the DB allows", n)
	}
	if ok, _ := g.TrySchedule(); ok {
		t.Fatal("TrySchedule granted a third compaction with 2 allowed")
	}
	db.grants[0].Done()
	waitFor(t, "a grant after Done", func() bool { return db.granted() == 3 })

	g.Unregister()
	db.grants[1].Done()
	db.grants[2].Done()
	time.Sleep(2 * gateInterval)
	if n := db.granted(); n != 3 {
		t.Fatalf("%d compactions granted after Unregister, want 3", n)
	}
	if ok, _ := g.TrySchedule(); ok {
		t.Fatal("TrySchedule granted after Unregister")
	}
}

// TestCompactionsRun: with the gate as Pebble's scheduler, an index written
// far past its L0 threshold compacts (no write stalls forever), and a
// reopen finds it readable.
func TestCompactionsRun(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	x := openAt(t, "idx", Options{FS: fs, CacheSize: 1}) // 4 MiB memtables
	name := fmt.Sprintf("%0200d", 0)
	seq := uint64(0)
	for range 30 {
		b := x.NewBatch()
		for range 2000 {
			seq++
			b.Add(ledgerA, event{seq: seq, entity: name, key: fmt.Sprint(seq % 97), event: name}.record(ledgerA))
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if err := x.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a compaction", func() bool { return x.db.Metrics().Compact.Count > 0 })
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y := openAt(t, "idx", Options{FS: fs})
	for _, s := range []uint64{1, seq / 2, seq} {
		if got, _, found, err := y.Lookup(idOf(ledgerA, s)); !found || err != nil || got != s {
			t.Fatalf("after reopen: Lookup(seq %d) = %d, %v, %v", s, got, found, err)
		}
	}
}
