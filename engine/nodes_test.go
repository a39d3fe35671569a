package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// nodeOptions are the options of node name on st: Replicated, a short
// lease, and the signing key that every node of the test shares (a
// node checks the bucket's checkpoints with its own key when it takes a
// ledger).
func nodeOptions(st store.Store, key, name string) *Options {
	o := replOptions(st, Replicated)
	o.SigningKeyFile = key
	o.Node = Node{Name: name, Address: "http://" + name + ".test"}
	o.NodeLease = 600 * time.Millisecond
	return o
}

// nodeWithOrders opens node "a" on dir and creates the ledger "orders".
func nodeWithOrders(t *testing.T, dir string, st store.Store, key string) *DB {
	t.Helper()
	a := openNode(t, dir, st, key, "a")
	if _, err := a.CreateLedger(context.Background(), LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	return a
}

func openNode(t *testing.T, dir string, st store.Store, key, name string) *DB {
	t.Helper()
	db, err := Open(dir, nodeOptions(st, key, name))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// nodeAppend appends one event to ledger and returns its ID.
func nodeAppend(ctx context.Context, db *DB, ledger, key string) (eventid.ID, error) {
	res, err := db.Append(ctx, ledger, []EventInput{{Entity: "acct", Key: key, Event: "deposited", Data: []byte(`{"n":1}`)}}, nil)
	if err != nil {
		return eventid.ID{}, err
	}
	return res.IDs[0], nil
}

func mustAppendN(t *testing.T, db *DB, ledger string, n int) []eventid.ID {
	t.Helper()
	var ids []eventid.ID
	for i := range n {
		id, err := nodeAppend(context.Background(), db, ledger, fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// bucketKeys lists every key of the bucket under prefix.
func bucketKeys(t *testing.T, st store.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := listObjects(context.Background(), st, prefix, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// readLease reads and decodes node name's lease object, with its ETag.
func readLease(t *testing.T, st store.Store, name string) (replica.Lease, string) {
	t.Helper()
	k := replica.NodeKey(name)
	obj, err := st.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	l, err := replica.DecodeLease(k, obj.Data)
	if err != nil {
		t.Fatal(err)
	}
	return l, obj.ETag
}

// TestNodeLeaseRenewed: a node writes its lease under nodes/ at Open and
// renews it (the counter goes up, the ETag changes) while it runs; the
// lease names the node's address, its duration and the process that
// writes the manifests of the ledgers it takes.
func TestNodeLeaseRenewed(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	db := openNode(t, t.TempDir(), st, key, "node/a b")
	defer db.Close()
	k := replica.NodeKey("node/a b")
	if k != "nodes/node%2Fa%20b" {
		t.Fatalf("key %q", k)
	}
	read := func() (replica.Lease, string) { return readLease(t, st, "node/a b") }
	l0, e0 := read()
	if l0.Address != "http://node/a b.test" || l0.Duration() != 600*time.Millisecond || l0.Writer != db.repl.identity {
		t.Fatalf("lease %+v", l0)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, e := read()
		if l.Renewal >= 3 {
			if e == e0 {
				t.Fatal("renewed with the same ETag")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("renewal %d after 5 s (lease 600 ms, renewed every 200 ms)", l.Renewal)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := db.NodeStatus()
	if err != nil || !s.Valid {
		t.Fatalf("status %+v, %v", s, err)
	}
}

// TestNoNodeWritesNoNodeObjects: a DB with a Replica and no Node writes
// no lease, owner or name object.
func TestNoNodeWritesNoNodeObjects(t *testing.T) {
	st := store.NewMemory()
	db := openRepl(t, t.TempDir(), st, Replicated)
	info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	mustAppendN(t, db, "orders", 3)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range bucketKeys(t, st, "") {
		if strings.HasPrefix(k, replica.NodesPrefix) || strings.HasPrefix(k, replica.NamesPrefix) || k == replica.OwnerKey(info.ID) {
			t.Errorf("object %s written without Options.Node", k)
		}
	}
	if len(bucketKeys(t, st, replica.LedgerPrefix(info.ID))) == 0 {
		t.Fatal("nothing replicated")
	}
}

// TestLeaseWatchDeadOnlyAfterLeaseOnObserverClock: an observer declares
// a node dead once it has seen the same lease object for longer than the
// lease on its own clock, whatever the times written in the object say;
// a renewal (another ETag) starts the count again.
func TestLeaseWatchDeadOnlyAfterLeaseOnObserverClock(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	put := func(r uint64, written time.Time) {
		l := replica.Lease{V: replica.NodeVersion, Node: "n1", Address: "a", LeaseMS: 1000, Renewal: r, Written: written}
		if _, err := st.Put(ctx, replica.NodeKey("n1"), l.Encode(), store.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	// Written a year ago by the node's clock: it says nothing to the
	// observer.
	put(1, time.Now().AddDate(-1, 0, 0))
	clock := time.Unix(1000, 0)
	w := newLeaseWatch(st, func() time.Time { return clock })
	alive := func(want bool, what string) {
		t.Helper()
		ns, err := w.poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) != 1 || ns[0].Alive != want {
			t.Fatalf("%s: %+v, want alive %v", what, ns, want)
		}
	}
	alive(true, "first seen")
	clock = clock.Add(999 * time.Millisecond)
	alive(true, "seen unchanged for 999 ms of a 1 s lease")
	put(2, time.Now().AddDate(-1, 0, 0))
	clock = clock.Add(900 * time.Millisecond)
	alive(true, "renewed 900 ms ago (1.9 s after first seen)")
	clock = clock.Add(200 * time.Millisecond)
	alive(true, "renewed 1.1 s ago, first seen with it now")
	clock = clock.Add(1001 * time.Millisecond)
	alive(false, "seen unchanged for 1.001 s")
	put(3, time.Now())
	alive(true, "renewed again")
}

// TestCreateLedgerNameClaimRace: two nodes creating a ledger of one name
// at once: one creates it, the other gets ErrLedgerExists naming the
// node that owns it; names/ holds the winner's ledger.
func TestCreateLedgerNameClaimRace(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	a := openNode(t, t.TempDir(), st, key, "a")
	defer a.Close()
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	ctx := context.Background()
	name := "orders/eu €"
	var wg sync.WaitGroup
	infos := make([]LedgerInfo, 2)
	errs := make([]error, 2)
	for i, db := range []*DB{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[i], errs[i] = db.CreateLedger(ctx, LedgerSpec{Name: name})
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if won >= 0 {
				t.Fatal("both nodes created the ledger")
			}
			won = i
		case !errors.Is(err, ErrLedgerExists):
			t.Fatalf("node %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatalf("neither created it: %v", errs)
	}
	winner := []string{"a", "b"}[won]
	if err := errs[1-won]; !strings.Contains(err.Error(), fmt.Sprintf("node %q", winner)) {
		t.Fatalf("the loser's error does not name the owner %q: %v", winner, err)
	}
	obj, err := st.Get(ctx, replica.NameKey(name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := replica.DecodeNameClaim(replica.NameKey(name), obj.Data)
	if err != nil || c.Ledger != infos[won].ID.String() || c.Node != winner {
		t.Fatalf("claim %+v, %v; want ledger %s of %s", c, err, infos[won].ID, winner)
	}
	for _, db := range []*DB{a, b} {
		o, err := db.Owner(ctx, name)
		if err != nil || o.Node != winner || o.Ledger != infos[won].ID || o.Address != "http://"+winner+".test" {
			t.Fatalf("Owner: %+v, %v", o, err)
		}
	}
}

// TestTakeLedgerRacing: two nodes that lack a ledger take it at once
// from its writer: both restore it, the takes are ordered by the
// bucket's epochs, and exactly one writer is left: its appends work,
// the other two nodes' fail with ErrFenced, and the owner object and
// the newest manifest name it at its epoch.
func TestTakeLedgerRacing(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	acked := mustAppendN(t, a, "orders", 20)
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	c := openNode(t, t.TempDir(), st, key, "c")
	defer c.Close()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, db := range []*DB{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = db.TakeLedger(ctx, "orders")
		}()
	}
	wg.Wait()
	writers := map[string]*DB{}
	for name, db := range map[string]*DB{"a": a, "b": b, "c": c} {
		_, err := nodeAppend(ctx, db, "orders", "after")
		switch {
		case err == nil:
			writers[name] = db
		case errors.Is(err, ErrFenced), errors.Is(err, ErrLedgerNotFound), errors.Is(err, ErrLedgerUnavailable):
		default:
			t.Errorf("node %s: %v", name, err)
		}
	}
	if len(writers) != 1 {
		t.Fatalf("%d writers after the race (take errors %v)", len(writers), errs)
	}
	for name, w := range writers {
		o, err := a.Owner(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		s, err := w.ReplicaStatus("orders")
		if err != nil {
			t.Fatal(err)
		}
		if o.Node != name || o.Epoch != s.Epoch || o.Behind {
			t.Fatalf("Owner %+v; the writer is %s at epoch %d", o, name, s.Epoch)
		}
		for _, id := range acked {
			if _, err := w.Get(ctx, id); err != nil {
				t.Fatalf("acknowledged event %s on the new writer %s: %v", id, name, err)
			}
		}
	}
}

// TestTakeLedgerBehindAndBack: a ledger moves from node a to b and back
// again, while both stay open: a's copy (fenced) is behind the bucket
// and gets b's events; then b's appends fail with ErrFenced and the
// owner object names a again. A node reopened while another owns its
// ledger leaves it to that node (ErrNotOwner), until it takes it.
func TestTakeLedgerBehindAndBack(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	dirA := t.TempDir()
	a := nodeWithOrders(t, dirA, st, key)
	ids := mustAppendN(t, a, "orders", 5)
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	if _, err := b.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeAppend(ctx, a, "orders", "x"); !errors.Is(err, ErrFenced) {
		t.Fatalf("append on the node the ledger moved from: %v, want ErrFenced", err)
	}
	if s, err := a.ReplicaStatus("orders"); err != nil || !s.Fenced {
		t.Fatalf("ReplicaStatus of the moved ledger: %+v, %v", s, err)
	}
	ids = append(ids, mustAppendN(t, b, "orders", 5)...)
	// a takes it back: its copy is behind.
	if _, err := a.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, mustAppendN(t, a, "orders", 3)...)
	if _, err := nodeAppend(ctx, b, "orders", "x"); !errors.Is(err, ErrFenced) {
		t.Fatalf("append on b after a took the ledger back: %v, want ErrFenced", err)
	}
	for _, id := range ids {
		if _, err := a.Get(ctx, id); err != nil {
			t.Fatalf("event %s on a: %v", id, err)
		}
	}
	if o, err := b.Owner(ctx, "orders"); err != nil || o.Node != "a" {
		t.Fatalf("Owner %+v, %v", o, err)
	}
	// b takes it again while a is closed; a reopened leaves it to b.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, mustAppendN(t, b, "orders", 2)...)
	a = openNode(t, dirA, st, key, "a")
	defer a.Close()
	if err := a.Unavailable()["orders"]; !errors.Is(err, ErrNotOwner) {
		t.Fatalf("reopened a: orders unavailable with %v, want ErrNotOwner", err)
	}
	if _, err := nodeAppend(ctx, b, "orders", "y"); err != nil {
		t.Fatalf("b's append after a reopened: %v", err)
	}
	if _, err := a.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := a.Get(ctx, id); err != nil {
			t.Fatalf("event %s on a: %v", id, err)
		}
	}
}

// TestTakeLedgerDiverged: a directory whose copy of the ledger holds
// other events than the bucket's is refused with ErrDiverged, and
// nothing is written, neither to the bucket nor to the directory.
func TestTakeLedgerDiverged(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	dirA := t.TempDir()
	a := openNode(t, dirA, st, key, "a")
	info, err := a.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	mustAppendN(t, a, "orders", 3)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// A copy of a's directory, with events the bucket never got.
	dirC := copyDir(t, dirA)
	// The same key, with a memory of its own (the events below are
	// signed by it and never reach the shared key's).
	keyC := copyKeyFile(t, key)
	plain := &Options{SigningKeyFile: keyC, SegmentSize: 16 << 10}
	cdb, err := Open(dirC, plain)
	if err != nil {
		t.Fatal(err)
	}
	mustAppendN(t, cdb, "orders", 2)
	if err := cdb.Close(); err != nil {
		t.Fatal(err)
	}
	// a writes other events at the same places.
	a = openNode(t, dirA, st, key, "a")
	mustAppendN(t, a, "orders", 4)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	before := bucketSnapshot(t, st)
	segs := filepath.Join(dirC, ledgersDir, info.ID.String())
	filesBefore := dirSnapshot(t, segs)
	c := openNode(t, dirC, st, keyC, "c")
	defer c.Close()
	if err := c.Unavailable()["orders"]; !errors.Is(err, ErrNotOwner) {
		t.Fatalf("c's copy: %v, want ErrNotOwner", err)
	}
	_, err = c.TakeLedger(ctx, "orders")
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("TakeLedger of a diverged copy: %v, want ErrDiverged", err)
	}
	after := bucketSnapshot(t, st)
	delete(before, replica.NodeKey("c"))
	delete(after, replica.NodeKey("c"))
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatal("the bucket changed")
	}
	for name, b := range dirSnapshot(t, segs) {
		if strings.HasSuffix(name, ".seg") && !bytes.Equal(filesBefore[name], b) {
			t.Fatalf("segment %s changed", name)
		}
	}
}

// bucketSnapshot returns every object of st, by key, as its ETag.
func bucketSnapshot(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := listObjects(context.Background(), st, "", func(o store.ObjectInfo) error {
		out[o.Key] = o.ETag
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func dirSnapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range es {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
			out[e.Name()] = b
		}
	}
	return out
}

// TestNodeLeaseLapsedRefusesAppends: a node that cannot renew its lease
// (its store down) for longer than the lease refuses appends with
// ErrNotOwner, and takes them again once it has renewed.
func TestNodeLeaseLapsedRefusesAppends(t *testing.T) {
	st := newReplStore()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	mustAppendN(t, a, "orders", 2)
	st.down.Store(true)
	time.Sleep(800 * time.Millisecond) // past the 600 ms lease
	if _, err := nodeAppend(ctx, a, "orders", "x"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("append with the lease lapsed: %v, want ErrNotOwner", err)
	}
	if s, _ := a.NodeStatus(); s.Valid {
		t.Fatal("NodeStatus says the lapsed lease is valid")
	}
	st.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := nodeAppend(ctx, a, "orders", "y")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotOwner) || time.Now().After(deadline) {
			t.Fatalf("append after the store came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeadNodesLedgersTakenOver: three nodes watching one another
// (TakeOverDeadNodes); one stops (its lease lapses): each of its
// ledgers is taken by exactly one of the two others, the one rendezvous
// hashing gives, with every event it acknowledged; a Router finds them
// there after a Forget.
func TestDeadNodesLedgersTakenOver(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	dbs := map[string]*DB{}
	for _, n := range []string{"a", "b", "c"} {
		o := nodeOptions(st, key, n)
		o.TakeOverDeadNodes = true
		db, err := Open(t.TempDir(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[n] = db
	}
	r, err := newRouter(ctx, st, testEndpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string][]eventid.ID{}
	placed := map[string]string{}
	for i := range 9 {
		name := fmt.Sprint("ledger-", i)
		n, err := r.Place(name)
		if err != nil {
			t.Fatal(err)
		}
		placed[name] = n.Name
		if _, err := dbs[n.Name].CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
		acked[name] = mustAppendN(t, dbs[n.Name], name, 3)
	}
	var orphans []string
	for name, n := range placed {
		if n == "c" {
			orphans = append(orphans, name)
		}
	}
	if len(orphans) == 0 || len(orphans) == 9 {
		t.Fatalf("placement %v: the test needs some ledgers on c and some elsewhere", placed)
	}
	if err := dbs["c"].Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, name := range orphans {
		for {
			r.Forget(name)
			o, err := r.Owner(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if o.Node != "c" && !o.Behind {
				want := rendezvous([]string{"a", "b"}, o.Ledger.String())
				if o.Node != want {
					t.Fatalf("%s went to %s, rendezvous over a, b gives %s", name, o.Node, want)
				}
				// The bucket names the new owner from its fence on, a
				// few store round trips before its take registers the
				// ledger: until then the ledger is not found there.
				_, err := nodeAppend(ctx, dbs[o.Node], name, "after")
				if err == nil {
					for _, id := range acked[name] {
						if _, err := dbs[o.Node].Get(ctx, id); err != nil {
							t.Fatalf("%s: acknowledged event %s on %s: %v", name, id, o.Node, err)
						}
					}
					break
				}
				if !errors.Is(err, ErrLedgerNotFound) || time.Now().After(deadline) {
					t.Fatalf("%s: append on its new owner %s: %v", name, o.Node, err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still owned by %+v 15 s after c stopped (lease 600 ms)", name, o)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestRouterOwnerOfEventID: the Router maps an Event ID to the node of
// its ledger, and places names on live nodes only.
func TestRouterOwnerOfEventID(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	a := nodeWithOrders(t, t.TempDir(), st, key)
	defer a.Close()
	id := mustAppendN(t, a, "orders", 1)[0]
	clock := time.Unix(0, 0)
	r, err := newRouter(ctx, st, testEndpoint, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.OwnerOf(ctx, id)
	if err != nil || o.Node != "a" || o.Name != "orders" || o.Address != "http://a.test" {
		t.Fatalf("OwnerOf %s: %+v, %v", id, o, err)
	}
	if n, err := r.Place("x"); err != nil || n.Name != "a" {
		t.Fatalf("Place: %+v, %v", n, err)
	}
	// A lease the Router sees unchanged for longer than it: no node to
	// place on. (a renews every 200 ms, but the Router's clock is the
	// test's: it did not move while a's lease changed, so first freeze
	// a's view by stopping a.)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Place("x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Place with every node dead: %+v, %v", n, err)
	}
}

// TestNodeOptionsChecked: the node options out of their range, or
// without what they need, are ErrInvalid naming the option.
func TestNodeOptionsChecked(t *testing.T) {
	st := store.NewMemory()
	for _, c := range []struct {
		name string
		set  func(o *Options)
		want string
	}{
		{"lease too short", func(o *Options) { o.NodeLease = 100 * time.Millisecond }, "NodeLease"},
		{"lease too long", func(o *Options) { o.NodeLease = time.Hour }, "NodeLease"},
		{"no replica", func(o *Options) { o.replicaStore, o.Replication = nil, 0 }, "without a Replica"},
		{"control character", func(o *Options) { o.Node.Name = "a\nb" }, "Node.Name"},
		{"name too long", func(o *Options) { o.Node.Name = strings.Repeat("n", 129) }, "Node.Name"},
		{"lease without a node", func(o *Options) { o.Node = Node{} }, "NodeLease"},
		{"watch without a node", func(o *Options) { o.Node, o.NodeLease, o.TakeOverDeadNodes = Node{}, 0, true }, "TakeOverDeadNodes"},
	} {
		o := nodeOptions(st, filepath.Join(t.TempDir(), "k.key"), "a")
		c.set(o)
		_, err := Open(t.TempDir(), o)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", c.name, err, c.want)
		}
	}
	if keys := bucketKeys(t, st, ""); len(keys) != 0 {
		t.Fatalf("refused options wrote %v", keys)
	}
}

// TestFencedCopiesReported: a Replicated ledger that node a held fenced
// (b took it) and appended to after the fence (stored locally, never
// acknowledged) is set aside when a takes it back; DB.FencedCopies and
// NodeStatus report the folder, and it is kept, across a reopen too.
func TestFencedCopiesReported(t *testing.T) {
	st := store.NewMemory()
	key := filepath.Join(t.TempDir(), "nodes.key")
	ctx := context.Background()
	dirA := t.TempDir()
	a := nodeWithOrders(t, dirA, st, key)
	mustAppendN(t, a, "orders", 3)
	id := a.Ledgers()[0].ID
	b := openNode(t, t.TempDir(), st, key, "b")
	defer b.Close()
	if _, err := b.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeAppend(ctx, a, "orders", "after the fence"); err == nil {
		t.Fatal("append on the fenced node acknowledged")
	}
	mustAppendN(t, b, "orders", 2)
	if got, err := a.FencedCopies(); err != nil || len(got) != 0 {
		t.Fatalf("fenced copies before a takes the ledger back: %v, %v", got, err)
	}
	if _, err := a.TakeLedger(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	check := func(db *DB, when string) {
		t.Helper()
		got, err := db.FencedCopies()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Ledger != id || filepath.Dir(got[0].Path) != filepath.Join(dirA, ledgersDir) || got[0].SetAside.IsZero() {
			t.Fatalf("fenced copies %s: %+v, want one of ledger %s under %s", when, got, id, filepath.Join(dirA, ledgersDir))
		}
		if _, err := os.Stat(got[0].Path); err != nil {
			t.Fatalf("fenced copy %s: %v", when, err)
		}
		s, err := db.NodeStatus()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.FencedCopies) != 1 || s.FencedCopies[0] != got[0] {
			t.Fatalf("node status %s: fenced copies %+v, want %+v", when, s.FencedCopies, got)
		}
	}
	check(a, "after the take back")
	readFencedCopy(t, a, id, key)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openNode(t, dirA, st, key, "a")
	defer a.Close()
	check(a, "after a reopen")
}

// readFencedCopy reads db's one fenced copy of ledger id as
// docs/replication.md tells the operator to: the folder copied to
// ledgers/ID of an empty directory, opened with a copy of the signing
// key file. It holds the event appended after the fence, which the
// bucket's ledger (db's) does not.
func readFencedCopy(t *testing.T, db *DB, id eventid.LedgerID, key string) {
	t.Helper()
	ctx := context.Background()
	got, err := db.FencedCopies()
	if err != nil {
		t.Fatal(err)
	}
	look := t.TempDir()
	if err := os.MkdirAll(filepath.Join(look, ledgersDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(look, ledgersDir, id.String()), os.DirFS(got[0].Path)); err != nil {
		t.Fatal(err)
	}
	l, err := Open(look, &Options{SigningKeyFile: copyKeyFile(t, key)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var last Event
	for ev, err := range l.Scan(ctx, "orders", ScanOptions{}) {
		if err != nil {
			t.Fatalf("scan of the fenced copy: %v", err)
		}
		last = ev
	}
	if last.Key != "after the fence" {
		t.Fatalf("the fenced copy's last event: %q, want the one appended after the fence", last.Key)
	}
	if ev, err := db.Get(ctx, last.ID); err == nil && ev.Key == last.Key {
		t.Fatalf("event %s, appended after the fence, is in the bucket's ledger", last.ID)
	}
}

// copyKeyFile copies the signing key file key to a new temporary file
// (without its state file: a memory of its own) and returns its path.
func copyKeyFile(t *testing.T, key string) string {
	t.Helper()
	kb, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "nodes.key")
	if err := os.WriteFile(out, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}
