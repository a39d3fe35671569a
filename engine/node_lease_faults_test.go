package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
)

// leaseFaultStore wraps a store with faults on the nodes' lease objects.
type leaseFaultStore struct {
	store.Store
	// loseAnswers is the number of lease writes still to apply whose
	// answer is lost (the caller sees the store unavailable, as after a
	// timeout).
	loseAnswers atomic.Int32
}

func (s *leaseFaultStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	etag, err := s.Store.Put(ctx, key, data, cond)
	if err == nil && len(key) > len(replica.NodesPrefix) && key[:len(replica.NodesPrefix)] == replica.NodesPrefix && s.loseAnswers.Add(-1) >= 0 {
		return "", errStoreDown
	}
	return etag, err
}

// waitAppendable appends to ledger on db until it succeeds, failing the
// test on an error other than ErrNotOwner or after 5 s.
func waitAppendable(t *testing.T, db *DB, ledger, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := nodeAppend(context.Background(), db, ledger, "after")
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotOwner) || time.Now().After(deadline) {
			s, _ := db.NodeStatus()
			t.Fatalf("%s: append: %v (node status %+v)", why, err, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodeLeaseRenewalAnswerLost: a renewal that the store applied but
// whose answer was lost (a timeout) leaves the lease object one the
// node did not see written; the next renewal's If-Match on the ETag it
// knows fails. The node reads the object back, finds its own writing,
// and renews from it: it keeps its lease instead of refusing every
// append from then on.
func TestNodeLeaseRenewalAnswerLost(t *testing.T) {
	st := &leaseFaultStore{Store: store.NewMemory()}
	key := filepath.Join(t.TempDir(), "nodes.key")
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	mustAppendN(t, a, "orders", 2)
	st.loseAnswers.Store(1)
	// The next renewal lands unseen; wait for the ones after it.
	time.Sleep(3 * a.opts.NodeLease)
	if n := st.loseAnswers.Load(); n > 0 {
		t.Fatalf("no renewal in three leases (%d answers still to lose)", n)
	}
	waitAppendable(t, a, "orders", "after a renewal whose answer was lost")
}

// TestNodeLeaseDeletedWrittenAgain: a node whose lease object was
// deleted (an operator's cleanup, a lifecycle rule) while it runs
// writes it again at its next renewal, create-only, and goes on
// acknowledging appends; while the object is absent no observer can
// count the node dead (it sees no lease to watch).
func TestNodeLeaseDeletedWrittenAgain(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	mustAppendN(t, a, "orders", 2)
	if err := st.Delete(ctx, replica.NodeKey("a")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * a.opts.NodeLease)
	waitAppendable(t, a, "orders", "after its lease object was deleted")
	obj, err := st.Get(ctx, replica.NodeKey("a"))
	if err != nil {
		t.Fatalf("the lease was not written again: %v", err)
	}
	if l, err := replica.DecodeLease(replica.NodeKey("a"), obj.Data); err != nil || l.Writer != a.repl.identity {
		t.Fatalf("lease written again: %+v, %v", l, err)
	}
}

// TestNodeLeaseTakenBySameNameStaysLost: another process of the node's
// name replaced the lease (one that saw it unmoved for a third of a
// lease: this process stalled); this one's next renewal fails its
// If-Match, it reads the lease back, finds another writer, and refuses
// appends for good, the error (and NodeStatus) naming that process.
func TestNodeLeaseTakenBySameNameStaysLost(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	other := replica.Identity{Host: "other-host", PID: 4242, Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Nonce: "other"}
	l := replica.Lease{V: replica.NodeVersion, Node: "a", LeaseMS: 600, Writer: other, Written: time.Now().UTC()}
	if _, err := st.Put(ctx, replica.NodeKey("a"), l.Encode(), store.Condition{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(a.opts.NodeLease)
	_, err := nodeAppend(ctx, a, "orders", "x")
	if !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), other.String()) {
		t.Fatalf("append on the process whose name another took: %v, want ErrNotOwner naming %s", err, other)
	}
	s, err := a.NodeStatus()
	if err != nil {
		t.Fatal(err)
	}
	if s.Valid || !strings.Contains(fmt.Sprint(s.Err), other.String()) {
		t.Fatalf("node status: %+v, want the lease lost to %s", s, other)
	}
}

// TestNodeNameInUseRefused: a second process opened with the name of a
// live node is refused (ErrNodeNameInUse, naming the live process), and
// the live one keeps its lease; once the live one is closed (its lease
// no longer moves), the name opens.
func TestNodeNameInUseRefused(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	_, err := Open(t.TempDir(), nodeOptions(st, key, "a"))
	if !errors.Is(err, ErrNodeNameInUse) || !strings.Contains(err.Error(), a.node.id.String()) {
		t.Fatalf("Open of a second process named a: %v, want ErrNodeNameInUse naming %s", err, a.node.id)
	}
	time.Sleep(a.opts.NodeLease)
	waitAppendable(t, a, "orders", "the live process after the refused Open")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := openNode(t, t.TempDir(), st, key, "a")
	defer a2.Close()
	if s, _ := a2.NodeStatus(); !s.Valid {
		t.Fatalf("the process opened after the first closed: %+v", s)
	}
}

// TestOwnerObjectEditedRoutesToWriter: an owner object edited to name
// another live node (a hand edit, a tool, an attacker with write access
// to the bucket) does not route requests away from the node whose
// process wrote the newest manifest: DB.Owner and the Router name the
// writer, as its lease identifies it.
func TestOwnerObjectEditedRoutesToWriter(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	editOwner(t, st, a.Ledgers()[0].ID, "b")
	got, err := b.Owner(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "a" || got.Address != "http://a.test" || got.Behind {
		t.Fatalf("owner with its owner object edited to name b: %+v, want node a", got)
	}
	r, err := newRouter(ctx, st, testEndpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Owner(ctx, "orders"); err != nil || got.Node != "a" {
		t.Fatalf("router: %+v, %v", got, err)
	}
}

// gateStore holds the reads of chunks (keys with /wal/) while gate is
// set, counting them in waiting.
type gateStore struct {
	store.Store
	mu      sync.Mutex
	gate    chan struct{}
	waiting atomic.Int32
}

func (s *gateStore) Get(ctx context.Context, key string) (store.Object, error) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil && strings.Contains(key, "/wal/") {
		s.waiting.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return store.Object{}, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key)
}

// takeHeld starts db.TakeLedger of "orders" with the chunk reads held,
// and returns once one is held; the TakeLedger's error comes on the
// channel after open.
func (s *gateStore) takeHeld(db *DB) <-chan error {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
	took := make(chan error, 1)
	go func() {
		_, err := db.TakeLedger(context.Background(), "orders")
		took <- err
	}()
	for s.waiting.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return took
}

// open lets the held reads go, and the later ones through.
func (s *gateStore) open() {
	s.mu.Lock()
	close(s.gate)
	s.gate = nil
	s.mu.Unlock()
}

// replicaWriterGoroutines counts the goroutines of replica Writers.
func replicaWriterGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "replica.(*writerState).cutLoop")
}

// TestCloseDuringTakeLedger: a DB closed while a TakeLedger pulls the
// ledger: the TakeLedger ends (Close waits for it), and the ledger it
// took is closed with the DB, its replica Writer too (no goroutine left
// shipping for a closed DB).
func TestCloseDuringTakeLedger(t *testing.T) {
	st := &gateStore{Store: store.NewMemory()}
	key := filepath.Join(t.TempDir(), "nodes.key")
	a := nodeWithOrders(t, t.TempDir(), st, key)
	mustAppendN(t, a, "orders", 5)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	if n := replicaWriterGoroutines(); n != 0 {
		t.Fatalf("%d replica Writers run before the take", n)
	}
	took := st.takeHeld(b)
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	for {
		b.mu.RLock()
		c := b.closed
		b.mu.RUnlock()
		if c {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	st.open()
	t.Logf("TakeLedger during Close: %v", <-took)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for replicaWriterGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d replica Writers still run 2 s after Close", replicaWriterGoroutines())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOpenRemovesInterruptedTakeLedger: the folder a TakeLedger pulls a
// ledger into (ledgers/.ID.take), as a crash in the middle of the pull
// leaves it, is never a ledger: the next Open removes it, and a
// TakeLedger of the ledger then works.
func TestOpenRemovesInterruptedTakeLedger(t *testing.T) {
	st := &gateStore{Store: store.NewMemory()}
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	mustAppendN(t, a, "orders", 5)
	id := a.Ledgers()[0].ID
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := t.TempDir()
	c := openNode(t, crashed, st, key, "c")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	took := st.takeHeld(b)
	// What a crash of c at this point leaves in its directory.
	take := filepath.Join(ledgersDir, "."+id.String()+".take")
	if err := os.CopyFS(filepath.Join(crashed, take), os.DirFS(filepath.Join(b.dir, take))); err != nil {
		t.Fatal(err)
	}
	st.open()
	if err := <-took; err != nil {
		t.Fatal(err)
	}
	c = openNode(t, crashed, st, key, "c")
	defer c.Close()
	if _, err := os.Stat(filepath.Join(crashed, take)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the interrupted pull's folder after Open: %v", err)
	}
	if _, err := c.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
}

// listHookStore calls during, if set, in the middle of every List and
// Folders.
type listHookStore struct {
	store.Store
	during func()
}

func (s *listHookStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if s.during != nil {
		s.during()
	}
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *listHookStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	if s.during != nil {
		s.during()
	}
	return s.Store.Folders(ctx, prefix, after, limit)
}

// TestLeaseWatchCountsFromAfterTheList: a renewal sent and stored while
// the observer's List is on its way is first seen at the end of that
// List, not at its start: the observer counts the lease from no earlier
// than the renewal's send time, from which the node counts it, so it
// never finds the node dead while the node still holds its lease.
func TestLeaseWatchCountsFromAfterTheList(t *testing.T) {
	st := &listHookStore{Store: store.NewMemory()}
	ctx := context.Background()
	clock := time.Unix(1000, 0)
	var sent time.Time
	st.during = func() {
		// The node sends its renewal 300 ms into the List, which returns
		// it 300 ms later.
		clock = clock.Add(300 * time.Millisecond)
		sent = clock
		l := replica.Lease{V: replica.NodeVersion, Node: "n1", Address: "a", LeaseMS: 1000, Renewal: 1}
		if _, err := st.Store.Put(ctx, replica.NodeKey("n1"), l.Encode(), store.Condition{}); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(300 * time.Millisecond)
	}
	w := newLeaseWatch(st, func() time.Time { return clock })
	if _, err := w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	st.during = nil
	// The node's lease holds until sent + 1 s.
	clock = sent.Add(999 * time.Millisecond)
	ns, err := w.poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || !ns[0].Alive {
		t.Fatalf("%v after the renewal was sent, within its 1 s lease: %+v, want alive", clock.Sub(sent), ns)
	}
}

// TestTakeLedgerMovedBy16Callers: a ledger moves a → b → a → b → a,
// each move asked by 16 goroutines at once (one takes it, the others
// find it theirs); between moves the owner appends and the node it left
// refuses appends (a stale route): every append acknowledged is in the
// ledger at the end, each once. A name the bucket lacks is
// ErrLedgerNotFound.
func TestTakeLedgerMovedBy16Callers(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	if _, err := b.TakeLedger(ctx, "no-such-ledger"); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("TakeLedger of a name the bucket lacks: %v, want ErrLedgerNotFound", err)
	}
	acked := map[eventid.ID]string{}
	appendOn := func(owner, stale *DB, round int) {
		for j := range 5 {
			k := fmt.Sprintf("r%d-%d", round, j)
			id, err := nodeAppend(ctx, owner, "orders", k)
			if err != nil {
				t.Fatalf("append %s on its owner %s: %v", k, owner.opts.Node.Name, err)
			}
			acked[id] = k
		}
		if _, err := nodeAppend(ctx, stale, "orders", "stale"); !errors.Is(err, ErrFenced) && !errors.Is(err, ErrLedgerNotFound) {
			t.Fatalf("append on %s, which the ledger left: %v, want ErrFenced", stale.opts.Node.Name, err)
		}
	}
	appendOn(a, b, 0)
	for round, to := range []*DB{b, a, b, a} {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := to.TakeLedger(ctx, "orders"); err != nil {
					t.Errorf("TakeLedger on %s: %v", to.opts.Node.Name, err)
				}
			}()
		}
		wg.Wait()
		from := a
		if to == a {
			from = b
		}
		appendOn(to, from, round+1)
	}
	for id, k := range acked {
		ev, err := a.Get(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged event %s (%s): %v", id, k, err)
		}
		if ev.Key != k {
			t.Fatalf("event %s holds key %q, acknowledged as %q", id, ev.Key, k)
		}
	}
}

// TestDeadNodeTakenOverPastStrayObject: an object under ledgers/ that
// is no ledger's (a note an operator left, a tool's marker) does not
// stop the other nodes from taking a dead node's ledgers.
func TestDeadNodeTakenOverPastStrayObject(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	acked := mustAppendN(t, a, "orders", 3)
	o := nodeOptions(st, key, "b")
	o.TakeOverDeadNodes = true
	b, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := st.Put(ctx, "ledgers/README.txt", []byte("ledgers of the shop"), store.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitTaken(t, b, acked, "b, 10 s after a stopped")
}

// waitTaken waits until db's watch has taken "orders" (an append on db
// succeeds), at most 10 s (leases of 600 ms), and checks that it holds
// every event in acked.
func waitTaken(t *testing.T, db *DB, acked []eventid.ID, what string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := nodeAppend(ctx, db, "orders", "after")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			s, _ := db.NodeStatus()
			t.Fatalf("orders not taken by %s (lease 600 ms): %v; watch error %v", what, err, s.WatchErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range acked {
		if _, err := db.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged event %s: %v", id, err)
		}
	}
}

// TestNodeOnNewDirectoryTakesItsLedgers: a node restarted on another
// directory under the same name (its disk replaced) takes, with
// TakeOverDeadNodes, the ledgers the bucket says are its own: no other
// node takes a live node's ledgers, so else they would stay unwritten.
// Every acknowledged event is there.
func TestNodeOnNewDirectoryTakesItsLedgers(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	a := nodeWithOrders(t, t.TempDir(), st, key)
	acked := mustAppendN(t, a, "orders", 3)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	o := nodeOptions(st, key, "a")
	o.TakeOverDeadNodes = true
	a2, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	waitTaken(t, a2, acked, "the node's new process, 10 s after it opened")
}

// TestTakeLedgerNameClaimOfAnotherLedger: a claim under names/ edited to
// name another ledger does not make TakeLedger of that name move the
// other ledger: it is refused, naming the claim, and the other ledger
// stays where it is.
func TestTakeLedgerNameClaimOfAnotherLedger(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	pay, err := a.CreateLedger(ctx, LedgerSpec{Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	k := replica.NameKey("orders")
	obj, err := st.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := replica.DecodeNameClaim(k, obj.Data)
	if err != nil {
		t.Fatal(err)
	}
	c.Ledger = pay.ID.String()
	if _, err := st.Put(ctx, k, c.Encode(), store.ReplaceIf(obj.ETag)); err != nil {
		t.Fatal(err)
	}
	_, err = b.TakeLedger(ctx, "orders")
	if !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), k) {
		t.Fatalf("TakeLedger of orders, its claim naming payments: %v, want a corruption error naming %s", err, k)
	}
	if _, err := nodeAppend(ctx, a, "payments", "p"); err != nil {
		t.Fatalf("payments on a after the refused take: %v", err)
	}
}

// appendDuringStore calls during (once at a time) at every List of a
// ledger's chunks through it.
type appendDuringStore struct {
	store.Store
	busy   atomic.Bool
	during func()
}

func (s *appendDuringStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if strings.HasSuffix(prefix, "/wal/") && s.busy.CompareAndSwap(false, true) {
		s.during()
		s.busy.Store(false)
	}
	return s.Store.List(ctx, prefix, after, limit)
}

// TestTakeLedgerFromAppendingWriter: a TakeLedger whose ledger's writer
// stores an event at every List of the chunks (the reads of the fence,
// the pull and the take) succeeds: it fences the writer from the bucket
// before it pulls, so the bucket cannot move on under the pull. The old
// writer's appends then fail with ErrFenced, and every event it
// acknowledged is in the new owner's ledger.
func TestTakeLedgerFromAppendingWriter(t *testing.T) {
	mem := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), mem, key)
	defer a.Close()
	acked := mustAppendN(t, a, "orders", 3)
	st := &appendDuringStore{Store: mem}
	n := 0
	var fenced error
	st.during = func() {
		if fenced != nil {
			return
		}
		n++
		id, err := nodeAppend(ctx, a, "orders", fmt.Sprint("during-", n))
		if err != nil {
			fenced = err
			return
		}
		acked = append(acked, id)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	if _, err := b.TakeLedger(ctx, "orders"); err != nil {
		t.Fatalf("TakeLedger from a writer appending at each List of its chunks: %v", err)
	}
	st.during = func() {}
	if n == 0 {
		t.Fatal("no append happened during the take")
	}
	if _, err := nodeAppend(ctx, a, "orders", "after"); !errors.Is(err, ErrFenced) {
		t.Fatalf("a's append after b took the ledger: %v, want ErrFenced", err)
	}
	if fenced != nil && !errors.Is(fenced, ErrFenced) {
		t.Fatalf("a's append during the take: %v, want success or ErrFenced", fenced)
	}
	for _, id := range acked {
		if _, err := b.Get(ctx, id); err != nil {
			t.Fatalf("event %s, acknowledged by a, on b: %v", id, err)
		}
	}
	if _, err := nodeAppend(ctx, b, "orders", "on-b"); err != nil {
		t.Fatalf("b's append after its take: %v", err)
	}
}

// TestTakeLedgerFromContinuousAppenders: two appenders on the old node,
// 1 ms apart, append until they are fenced; TakeLedger on another node
// succeeds meanwhile, both appenders end with ErrFenced, and every event
// they were acknowledged is in the new owner's ledger.
func TestTakeLedgerFromContinuousAppenders(t *testing.T) {
	mem := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), mem, key)
	defer a.Close()
	b := openNode(t, t.TempDir(), mem, key, "b")
	defer b.Close()
	var (
		mu    sync.Mutex
		acked []eventid.ID
		ends  = make(chan error, 2)
		stop  = make(chan struct{})
	)
	for w := range 2 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					ends <- nil
					return
				default:
				}
				id, err := nodeAppend(ctx, a, "orders", fmt.Sprintf("w%d-%d", w, i))
				if err != nil {
					ends <- err
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	// Appending for a while before the take.
	for {
		mu.Lock()
		k := len(acked)
		mu.Unlock()
		if k >= 20 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := b.TakeLedger(ctx, "orders")
	if err != nil {
		close(stop)
		t.Fatalf("TakeLedger from a node with two appenders 1 ms apart: %v", err)
	}
	for range 2 {
		select {
		case err := <-ends:
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("an appender on a ended with %v, want ErrFenced", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an appender on a still appends 30 s after b took the ledger")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range acked {
		if _, err := b.Get(ctx, id); err != nil {
			t.Fatalf("event %s, acknowledged by a, on b: %v", id, err)
		}
	}
	t.Logf("%d events acknowledged by a before it was fenced", len(acked))
}

// editOwner rewrites ledger id's owner object to name node.
func editOwner(t *testing.T, st store.Store, id eventid.LedgerID, node string) {
	t.Helper()
	ctx := context.Background()
	o, etag, err := replica.ReadOwner(ctx, st, id)
	if err != nil {
		t.Fatal(err)
	}
	o.Node = node
	if _, err := st.Put(ctx, replica.OwnerKey(id), o.Encode(), store.ReplaceIf(etag)); err != nil {
		t.Fatal(err)
	}
}

// TestDeadNodeTakenOverPastEditedOwner: a dead node's ledger whose
// owner object was edited to name a live node is taken over all the
// same, by one of the two live nodes: the watch goes by the newest
// manifest's writer, whose lease is the dead node's. With that lease
// deleted too (no lease carries the writer), the watch does not trust
// an owner object naming a live node whose lease carries another
// writer: the ledger is nobody's, and taken after a lease on the
// watch's clock.
func TestDeadNodeTakenOverPastEditedOwner(t *testing.T) {
	for _, deleteLease := range []bool{false, true} {
		t.Run(fmt.Sprint("dead node's lease deleted: ", deleteLease), func(t *testing.T) {
			st := store.NewMemory()
			key := filepath.Join(t.TempDir(), "nodes.key")
			ctx := context.Background()
			a := nodeWithOrders(t, t.TempDir(), st, key)
			acked := mustAppendN(t, a, "orders", 3)
			var live []*DB
			for _, name := range []string{"b", "c"} {
				o := nodeOptions(st, key, name)
				o.TakeOverDeadNodes = true
				db, err := Open(t.TempDir(), o)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				live = append(live, db)
			}
			// After b and c looked at the bucket once (a node's first
			// round takes the ledgers whose owner object names it).
			time.Sleep(300 * time.Millisecond)
			editOwner(t, st, a.Ledgers()[0].ID, "c")
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if deleteLease {
				if err := st.Delete(ctx, replica.NodeKey("a")); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				for _, db := range live {
					if _, err := nodeAppend(ctx, db, "orders", "after"); err == nil {
						for _, id := range acked {
							if _, err := db.Get(ctx, id); err != nil {
								t.Fatalf("acknowledged event %s: %v", id, err)
							}
						}
						return
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("orders not taken by b or c 10 s after a stopped (lease 600 ms), its owner object naming c")
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestDeadNodeWithoutLeaseTakenOver: a dead node whose lease object was
// deleted (so no listing shows it) has its ledgers taken over once the
// watch has seen it without a lease for longer than a lease: whether the
// watch saw the lease go, or met the node only as the owner of a ledger.
func TestDeadNodeWithoutLeaseTakenOver(t *testing.T) {
	for _, watchFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("watch started before the deletion: ", watchFirst), func(t *testing.T) {
			st := store.NewMemory()
			key := filepath.Join(t.TempDir(), "nodes.key")
			ctx := context.Background()
			a := nodeWithOrders(t, t.TempDir(), st, key)
			acked := mustAppendN(t, a, "orders", 3)
			o := nodeOptions(st, key, "b")
			o.TakeOverDeadNodes = true
			var b *DB
			open := func() {
				var err error
				if b, err = Open(t.TempDir(), o); err != nil {
					t.Fatal(err)
				}
			}
			if watchFirst {
				open()
				time.Sleep(300 * time.Millisecond) // a round that sees a's lease
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := st.Delete(ctx, replica.NodeKey("a")); err != nil {
				t.Fatal(err)
			}
			if !watchFirst {
				open()
			}
			defer b.Close()
			waitTaken(t, b, acked, "b, 10 s after a stopped and its lease was deleted")
		})
	}
}

// TestOpenTakesBackItsLedgerPastEditedOwner: a node reopened on its
// directory takes back its own ledger (the newest manifest's, written by
// its earlier process) although the owner object was edited to name
// another live node; a ledger that node did take stays with it.
func TestOpenTakesBackItsLedgerPastEditedOwner(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	dirA := t.TempDir()
	a := nodeWithOrders(t, dirA, st, key)
	acked := mustAppendN(t, a, "orders", 3)
	if _, err := a.CreateLedger(ctx, LedgerSpec{Name: "payments"}); err != nil {
		t.Fatal(err)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	if _, err := b.TakeLedger(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	editOwner(t, st, a.Ledgers()[0].ID, "b")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openNode(t, dirA, st, key, "a")
	defer a.Close()
	if err := a.Unavailable()["orders"]; err != nil {
		t.Fatalf("orders, whose newest manifest a's earlier process wrote, its owner object naming b: %v", err)
	}
	for _, id := range acked {
		if _, err := a.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged event %s: %v", id, err)
		}
	}
	if _, err := nodeAppend(ctx, a, "orders", "after"); err != nil {
		t.Fatal(err)
	}
	if err := a.Unavailable()["payments"]; !errors.Is(err, ErrNotOwner) {
		t.Fatalf("payments, which b took: %v, want ErrNotOwner", err)
	}
}

// TestCreateLedgerPastDeletedNameClaim: a node creating a ledger whose
// name's claim was deleted from the bucket, while a ledger of that name
// exists, gets ErrLedgerExists as if the claim were there; the claim is
// written again for the existing ledger, and lookups by the name work.
func TestCreateLedgerPastDeletedNameClaim(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	orders := a.Ledgers()[0].ID
	if err := st.Delete(ctx, replica.NameKey("orders")); err != nil {
		t.Fatal(err)
	}
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	_, err := b.CreateLedger(ctx, LedgerSpec{Name: "orders", Description: "another"})
	if !errors.Is(err, ErrLedgerExists) || !strings.Contains(err.Error(), orders.String()) {
		t.Fatalf("CreateLedger of orders, its claim deleted: %v, want ErrLedgerExists naming %s", err, orders)
	}
	if len(b.Ledgers()) != 0 {
		t.Fatalf("b holds %v after the refused CreateLedger", b.Ledgers())
	}
	o, err := b.Owner(ctx, "orders")
	if err != nil || o.Ledger != orders || o.Node != "a" {
		t.Fatalf("Owner of orders after the refused CreateLedger: %+v, %v; want ledger %s on a", o, err, orders)
	}
	if _, err := nodeAppend(ctx, a, "orders", "after"); err != nil {
		t.Fatal(err)
	}
}

// leaseReadsStore counts the reads of the nodes' lease objects before
// the first write of one since reset: those of a node's Open before it
// writes its lease.
type leaseReadsStore struct {
	store.Store
	reads   atomic.Int32
	written atomic.Bool
}

func (s *leaseReadsStore) reset() {
	s.reads.Store(0)
	s.written.Store(false)
}

func (s *leaseReadsStore) Get(ctx context.Context, key string) (store.Object, error) {
	if strings.HasPrefix(key, replica.NodesPrefix) && !s.written.Load() {
		s.reads.Add(1)
	}
	return s.Store.Get(ctx, key)
}

func (s *leaseReadsStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	etag, err := s.Store.Put(ctx, key, data, cond)
	if err == nil && strings.HasPrefix(key, replica.NodesPrefix) {
		s.written.Store(true)
	}
	return etag, err
}

// TestNodeLeaseReleasedAtClose: a clean Close marks the node's lease
// released once its ledgers' writers are closed, and the node's next
// process takes it at once: it reads the lease once, without the second
// read after a third of the lease that tells a live process from a dead
// one (which a lease left by a crash still gets, as a lease not
// released). A lease that another process took is not released by the
// Close of the process that lost it.
func TestNodeLeaseReleasedAtClose(t *testing.T) {
	st := &leaseReadsStore{Store: store.NewMemory()}
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	k := replica.NodeKey("a")
	lease := func() replica.Lease {
		t.Helper()
		l, _ := readLease(t, st, "a")
		return l
	}
	dir := t.TempDir()
	a := nodeWithOrders(t, dir, st, key)
	mustAppendN(t, a, "orders", 3)
	if l := lease(); l.Released {
		t.Fatalf("a live node's lease says released: %+v", l)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if l := lease(); !l.Released || l.Writer != a.node.id {
		t.Fatalf("lease after a clean Close: %+v, want released by %s", l, a.node.id)
	}

	st.reset()
	a2 := openNode(t, dir, st, key, "a")
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("the Open after a clean Close read the lease %d times before taking it, want once (no wait for a live process)", n)
	}
	if l := lease(); l.Released || l.Writer != a2.node.id {
		t.Fatalf("lease after the new process's Open: %+v, want its own, not released", l)
	}
	waitAppendable(t, a2, "orders", "the process opened after a clean Close")

	// A process that lost its lease to another of the same name does not
	// release the other's at its Close.
	l := lease()
	l.Writer.Nonce += "-other"
	obj, _ := st.Get(ctx, k)
	if _, err := st.Put(ctx, k, l.Encode(), store.ReplaceIf(obj.ETag)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s, _ := a2.NodeStatus(); s.Err == nil; s, _ = a2.NodeStatus() {
		if time.Now().After(deadline) {
			t.Fatalf("node status %+v 5 s after another process took the lease", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a2.Close()
	if got := lease(); got.Released || got.Writer != l.Writer {
		t.Fatalf("lease after the Close of the process that lost it: %+v, want the other's, not released", got)
	}
	st.reset()
	a3, err := Open(t.TempDir(), nodeOptions(st, key, "a"))
	if err != nil {
		// The other's lease is not renewed by anyone here: after the
		// wait, the name opens.
		t.Fatal(err)
	}
	defer a3.Close()
	if n := st.reads.Load(); n != 2 {
		t.Fatalf("the Open over a lease not released read it %d times before taking it, want twice (the wait for a live process)", n)
	}
}
