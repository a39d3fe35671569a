package segment

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var crashRuns = flag.Int("crash-runs", 24, "workloads of TestCrashPoints (each gives 60 crash points in each of 2 modes)")

// crashPoint is a simulated crash: the file system as a crash at that
// moment could have left it, and what had been acknowledged before.
type crashPoint struct {
	fs       *vfs.MemFS
	synced   []eventid.ID // acknowledged in Sync mode before the crash
	acked    int          // appends acknowledged (any mode) before it
	unsynced bool         // the clone kept a random part of unsynced data
}

// TestCrashPoints runs concurrent appenders (mostly Sync, some None and
// Interval, small segments so that rotation is frequent) on a memory file
// system, and meanwhile simulates crashes at random moments: a clone of
// the file system holding only what was synced, or also a random part of
// what was not (as a disk that reorders writes leaves it). After the
// workload, each crash is reopened and must: open without error (torn
// tails cut), hold every record acknowledged in Sync mode before the
// crash, hold only records the writers wrote, in order, verify, and take
// new appends.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	runs := *crashRuns
	if testing.Short() {
		runs = 4
	}
	seed := testSeed(t)
	points, torn, records := 0, 0, 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		crashes, written := crashWorkload(t, rng)
		records += len(written)
		for i, c := range crashes {
			tornBytes := checkCrash(t, c, written)
			if tornBytes > 0 {
				torn++
			}
			points++
			_ = i
		}
	}
	t.Logf("%d crash points explored, %d of them with a torn write cut; %d records written in all", points, torn, records)
	if points < 1000 && runs >= 24 {
		t.Fatalf("only %d crash points", points)
	}
}

// crashWorkload appends from 4 goroutines while the caller clones the file
// system at random moments. It returns the crash points and the IDs of
// every record written, in ledger order.
func crashWorkload(t *testing.T, rng *rand.Rand) ([]crashPoint, []eventid.ID) {
	fs := vfs.NewCrashableMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 32 << 10, SyncInterval: time.Millisecond})
	var mu sync.Mutex
	var synced []eventid.ID
	acked := 0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		go func() {
			defer wg.Done()
			for range 150 {
				select {
				case <-stop:
					return
				default:
				}
				time.Sleep(time.Duration(wrng.IntN(200)) * time.Microsecond)
				b := &Batch{}
				for range wrng.IntN(12) + 1 {
					e := entry(wrng.IntN(100000))
					if wrng.IntN(5) == 0 {
						// Records that span 4 KiB blocks, so that a crash
						// that keeps some unsynced blocks tears them.
						e.Data = []byte(fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 2000+wrng.IntN(4000))))
					}
					b.Entries = append(b.Entries, e)
				}
				switch wrng.IntN(10) {
				case 0:
					b.Durability = None
				case 1:
					b.Durability = Interval
				}
				if err := l.Append(b); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked++
				if b.Durability == DefaultDurability {
					synced = append(synced, b.IDs...)
				}
				mu.Unlock()
			}
		}()
	}
	var crashes []crashPoint
	for i := range 60 {
		time.Sleep(time.Duration(rng.IntN(400)) * time.Microsecond)
		mu.Lock()
		c := crashPoint{synced: append([]eventid.ID(nil), synced...), acked: acked, unsynced: i%2 == 1}
		mu.Unlock()
		cfg := vfs.CrashCloneCfg{}
		if c.unsynced {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100) + 1, RNG: rand.New(rand.NewPCG(rng.Uint64(), 0))}
		}
		c.fs = fs.CrashClone(cfg)
		crashes = append(crashes, c)
	}
	close(stop)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var written []eventid.ID
	it := l2Iter(t, fs)
	for it.Next() {
		written = append(written, it.Record().ID)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return crashes, written
}

// l2Iter opens the ledger on fs (after the workload) and iterates it.
func l2Iter(t *testing.T, fs vfs.FS) *Iterator {
	l, _, err := openTestLog(t, fs, "led", Options{SegmentSize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.NewIterator(1, FirstOffset)
}

// checkCrash reopens one crash point and checks it; it returns the bytes
// of torn write that recovery cut.
func checkCrash(t *testing.T, c crashPoint, written []eventid.ID) int64 {
	t.Helper()
	l, rec, err := openTestLog(t, c.fs, "led", Options{SegmentSize: 32 << 10})
	if err != nil {
		t.Fatalf("crash point (unsynced data kept: %v, %d appends acknowledged): Open: %v", c.unsynced, c.acked, err)
	}
	defer l.Close()
	var got []eventid.ID
	it := l.NewIterator(1, FirstOffset)
	for it.Next() {
		got = append(got, it.Record().ID)
	}
	if it.Err() != nil {
		t.Fatalf("iterating after recovery: %v", it.Err())
	}
	// Only records the writers wrote, in their order (the genesis first).
	if len(got) > len(written) {
		t.Fatalf("%d records recovered, only %d were written", len(got), len(written))
	}
	for i := range got {
		if got[i] != written[i] {
			t.Fatalf("record %d recovered as %s, written as %s", i, got[i], written[i])
		}
	}
	present := make(map[eventid.ID]bool, len(got))
	for _, id := range got {
		present[id] = true
	}
	for _, id := range c.synced {
		if !present[id] {
			t.Fatalf("acknowledged Sync append %s lost (unsynced data kept: %v; recovery %+v)", id, c.unsynced, rec)
		}
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatalf("Verify after recovery: %v", err)
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(1)}}); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatalf("Verify after an append on the recovered ledger: %v", err)
	}
	return rec.TruncatedBytes
}
