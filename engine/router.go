package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// Router maps ledgers of a bucket shared by nodes to the nodes that write
// them, for an application that spreads its ledgers over nodes
// (docs/replication.md, "Nodes and ownership"). It reads the bucket only.
//
// It caches what it read: a ledger's owner until Forget or Refresh, the
// nodes and their liveness until Refresh. So a request routed by it may
// reach a node that no longer owns the ledger: that node refuses it
// (ErrFenced, or ErrNotOwner when its lease lapsed, or the node is gone),
// and the application calls Forget (or Refresh) and routes again. The
// node a ledger is moving to is named as soon as it has fenced the old
// writer, a few store round trips before its take completes: until then
// it answers ErrLedgerNotFound for that ledger, which the application
// retries the same way, after a short wait. A node's liveness is the Router's own observation (a lease object seen
// unchanged for longer than its lease, by the Router's clock, since its
// first Refresh): a new Router sees every node with a lease object as
// alive until it has watched it for a lease. Safe for concurrent use.
type Router struct {
	st       store.Store
	endpoint string

	mu     sync.Mutex
	watch  *leaseWatch
	nodes  []NodeState
	owners map[eventid.LedgerID]Owner
	ids    map[string]eventid.LedgerID // ledger names resolved
}

// NewRouter returns a Router of the bucket replicaURL names
// (s3://BUCKET/PREFIX?..., as Options.Replica), with the nodes read.
func NewRouter(ctx context.Context, replicaURL string) (*Router, error) {
	s, endpoint, err := openBucket(ctx, replicaURL)
	if err != nil {
		return nil, fmt.Errorf("engine: router: %w", err)
	}
	return newRouter(ctx, s, endpoint, nil)
}

// newRouter is NewRouter on an open store, with a clock (nil: time.Now).
func newRouter(ctx context.Context, st store.Store, endpoint string, now func() time.Time) (*Router, error) {
	r := &Router{st: st, endpoint: endpoint, watch: newLeaseWatch(st, now),
		owners: map[eventid.LedgerID]Owner{}, ids: map[string]eventid.LedgerID{}}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh reads the nodes' leases again (their liveness moves on) and
// forgets every owner read.
func (r *Router) Refresh(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns, err := r.watch.poll(ctx)
	if err != nil {
		return fmt.Errorf("engine: router: %s: %w", r.endpoint, err)
	}
	r.nodes = ns
	clear(r.owners)
	return nil
}

// Forget drops the cached owner of ledger (a name or an ID), so that the
// next Owner reads it again.
func (r *Router) Forget(ledger string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.ids[ledger]; ok {
		delete(r.owners, id)
	}
	if id, err := eventid.ParseLedgerID(ledger); err == nil {
		delete(r.owners, id)
	}
}

// Nodes returns the nodes as the last Refresh saw them.
func (r *Router) Nodes() []NodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]NodeState(nil), r.nodes...)
}

// Owner returns the owner of the ledger ledgerName (its name or ID),
// from the cache or the bucket.
func (r *Router) Owner(ctx context.Context, ledgerName string) (Owner, error) {
	r.mu.Lock()
	id, ok := r.ids[ledgerName]
	r.mu.Unlock()
	if !ok {
		var err error
		if id, err = resolveLedger(ctx, r.st, ledgerName); err != nil {
			return Owner{}, fmt.Errorf("engine: router: owner of %s in %s: %w", ledgerName, r.endpoint, err)
		}
		r.mu.Lock()
		r.ids[ledgerName] = id // a name never moves to another ledger (names/)
		r.mu.Unlock()
	}
	return r.ownerOf(ctx, id)
}

// OwnerOf returns the owner of the ledger that holds the event id (an
// Event ID carries its ledger's ID).
func (r *Router) OwnerOf(ctx context.Context, id eventid.ID) (Owner, error) {
	return r.ownerOf(ctx, id.Ledger())
}

func (r *Router) ownerOf(ctx context.Context, id eventid.LedgerID) (Owner, error) {
	r.mu.Lock()
	o, ok := r.owners[id]
	r.mu.Unlock()
	if ok {
		return o, nil
	}
	o, err := readOwner(ctx, r.st, id)
	if err != nil {
		return Owner{}, fmt.Errorf("engine: router: owner of %s in %s: %w", id, r.endpoint, err)
	}
	r.mu.Lock()
	r.owners[id] = o
	r.mu.Unlock()
	return o, nil
}

// Place returns the node a new ledger of this name should be created on:
// rendezvous hashing of the name over the live nodes (as the last
// Refresh saw them), so that every Router with the same view places it
// on the same node. ErrInvalid if no node is alive.
func (r *Router) Place(name string) (NodeState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	best := rendezvous(liveNames(r.nodes), name)
	for _, n := range r.nodes {
		if n.Name == best && n.Alive {
			return n, nil
		}
	}
	return NodeState{}, invalid("router: place %q: no live node in %s (%d nodes with a lease)", name, r.endpoint, len(r.nodes))
}
