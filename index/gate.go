package index

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionGate is the index's Pebble compaction scheduler. It grants what
// Pebble's default scheduler grants (as many compactions at once as the DB
// allows without permission), except that it grants none until release.
//
// Why: pebble.Open, once it has loaded the LSM, may start a compaction (the
// engine's Close flushes the memtable, and a crash leaves whatever L0 files
// the last flushes made), and before it returns it waits for every running
// compaction to finish, to scan for obsolete files. At 10^7 events that
// compaction made Open take 0.3 to 0.8 s after a clean close, against 5 ms
// without it. Held back, it runs in the background once Open has returned.
//
// Every call into the DB (GetAllowedWithoutPermission aside, which Pebble
// allows under its own mutex) is made from the gate's goroutine, so that
// Unregister, which stops it, leaves no call under way.
type compactionGate struct {
	mu       sync.Mutex
	db       pebble.DBForCompaction
	released bool
	stopped  bool
	running  int // compactions granted and not yet Done

	poke     chan struct{}
	stop     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

// gateInterval is how often the gate looks for a compaction to grant when
// nothing pokes it: Pebble's default scheduler's interval.
const gateInterval = 100 * time.Millisecond

func newCompactionGate() *compactionGate {
	return &compactionGate{poke: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{})}
}

var _ pebble.CompactionScheduler = (*compactionGate)(nil)

// Register implements pebble.CompactionScheduler.
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.mu.Lock()
	g.db = db
	g.mu.Unlock()
	go g.loop()
}

// Unregister implements pebble.CompactionScheduler: no grant after it
// returns.
func (g *compactionGate) Unregister() {
	g.halt()
	<-g.exited
}

// halt stops granting; safe to call more than once.
func (g *compactionGate) halt() {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		g.stopped = true
		g.mu.Unlock()
		close(g.stop)
	})
}

// abandon is for an Open that failed: Pebble may have registered with the
// gate and will not unregister.
func (g *compactionGate) abandon() {
	g.halt()
	g.mu.Lock()
	registered := g.db != nil
	g.mu.Unlock()
	if registered {
		<-g.exited
	}
}

// release lets compactions run.
func (g *compactionGate) release() {
	g.mu.Lock()
	g.released = true
	g.mu.Unlock()
	g.wake()
}

func (g *compactionGate) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// TrySchedule implements pebble.CompactionScheduler. Pebble calls it with
// its mutex held; GetAllowedWithoutPermission may be called so.
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !g.released || g.db == nil {
		return false, nil
	}
	if g.running >= g.db.GetAllowedWithoutPermission() {
		return false, nil
	}
	g.running++
	return true, g
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (g *compactionGate) UpdateGetAllowedWithoutPermission() { g.wake() }

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle: the gate does not account CPU.
func (g *compactionGate) Started()                                          {}
func (g *compactionGate) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (g *compactionGate) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a granted compaction ended.
func (g *compactionGate) Done() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.wake()
}

func (g *compactionGate) loop() {
	defer close(g.exited)
	t := time.NewTicker(gateInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.poke:
		case <-t.C:
		}
		g.grant()
	}
}

// grant offers the DB compactions while it has one waiting and may run
// more.
func (g *compactionGate) grant() {
	for {
		g.mu.Lock()
		if g.stopped || !g.released || g.running >= g.db.GetAllowedWithoutPermission() {
			g.mu.Unlock()
			return
		}
		g.running++ // before Schedule, which may start it and call Done
		g.mu.Unlock()
		waiting, _ := g.db.GetWaitingCompaction()
		if !waiting || !g.db.Schedule(g) {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
			return
		}
	}
}
