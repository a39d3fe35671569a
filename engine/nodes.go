package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
)

// Node names a DB as one of several nodes that share one bucket
// (Options.Node; docs/replication.md, "Nodes and ownership").
type Node struct {
	// Name is the node's name in the bucket: 1 to 128 bytes of UTF-8
	// without a control character. One process holds a name at a time.
	Name string
	// Address is where the node takes requests (its RPC URL, say),
	// opaque to annal: a Router gives it to the application.
	Address string
}

// ErrNotOwner: the ledger is written by another node, or this node's
// lease lapsed (it could not renew it within NodeLease, so other nodes
// may take its ledgers): route the request to the ledger's owner
// (DB.Owner, Router) and retry.
var ErrNotOwner = errors.New("engine: this node does not own the ledger")

// ErrNodeNameInUse: Open found the node's lease renewed by another live
// process (Node.Name is held by one process at a time); the error names
// that process (host, pid, start time).
var ErrNodeNameInUse = errors.New("engine: another live process holds the node's name")

// The range of Options.NodeLease.
const (
	defaultNodeLease = 10 * time.Second
	minNodeLease     = 500 * time.Millisecond
	maxNodeLease     = 10 * time.Minute
	maxNodeName      = 128
)

// checkNode says what is wrong with the node options.
func (o *Options) checkNode() error {
	if o.Node.Name == "" {
		switch {
		case o.Node.Address != "":
			return invalid("options: Node.Address %q is set without a Node.Name", o.Node.Address)
		case o.NodeLease != 0:
			return invalid("options: NodeLease %v is set without a Node.Name", o.NodeLease)
		case o.TakeOverDeadNodes:
			return invalid("options: TakeOverDeadNodes is set without a Node.Name")
		}
		return nil
	}
	if o.Replica == "" && o.replicaStore == nil {
		return invalid("options: Node %q is set without a Replica: nodes share a bucket", o.Node.Name)
	}
	if p := names.Problem(o.Node.Name); p != "" {
		return invalid("options: Node.Name %s", p)
	}
	if len(o.Node.Name) > maxNodeName {
		return invalid("options: Node.Name is %d bytes, the limit is %d", len(o.Node.Name), maxNodeName)
	}
	if len(o.Node.Address) > 1024 {
		return invalid("options: Node.Address is %d bytes, the limit is 1024", len(o.Node.Address))
	}
	return checkDurations(durationOption{"NodeLease", o.NodeLease, minNodeLease, maxNodeLease, defaultNodeLease.String()})
}

// node is a DB's part in a bucket shared by nodes: its lease, renewed
// by a goroutine every lease/3, and, with TakeOverDeadNodes, the watch
// of the other nodes' leases.
type node struct {
	db    *DB
	st    store.Store
	name  string
	addr  string
	lease time.Duration
	id    replica.Identity
	// earlier is the writer identity of the lease this process replaced
	// at its start (its node's earlier process), set before the ledgers
	// open.
	earlier replica.Identity

	mu sync.Mutex
	// etag is the lease object's as this process last wrote it; renewal
	// its counter.
	etag    string
	renewal uint64
	// validUntil is when the lease lapses by this process's monotonic
	// clock: the send time of the last renewal that succeeded, plus the
	// lease. Observers count from when they first saw that renewal,
	// which is later, so this node stops first.
	validUntil time.Time
	// lost is set once the lease object was replaced by another process
	// of the same name (a 412 on renewal): sticky.
	lost error
	// owners are the ledgers whose owner object is still to be written
	// (a store error at the take): retried at each renewal.
	owners map[eventid.LedgerID]replica.Owner

	stop chan struct{}
	done sync.WaitGroup
	// watchErr is the last error of the dead nodes' watch (NodeStatus).
	watchErr error
	// scannedOwn is set once the watch looked for the ledgers the bucket
	// says are this node's (its first round); the watch's goroutine only.
	scannedOwn bool
}

// startNode writes the node's lease (create-only, or replacing the one
// an earlier process of the node left) and starts its renewal and, with
// TakeOverDeadNodes, the watch of the other nodes.
func (db *DB) startNode(ctx context.Context) error {
	o := &db.opts
	if o.Node.Name == "" || db.repl == nil {
		return nil
	}
	n := &node{db: db, st: db.repl.store, name: o.Node.Name, addr: o.Node.Address, lease: o.NodeLease,
		id: db.repl.identity, stop: make(chan struct{}), owners: map[eventid.LedgerID]replica.Owner{}}
	if err := n.acquire(ctx); err != nil {
		return fmt.Errorf("engine: node %q: %w", n.name, err)
	}
	db.node = n
	n.done.Add(1)
	go n.renewLoop()
	return nil
}

// startWatch starts the watch of the other nodes (TakeOverDeadNodes),
// once the ledgers are open.
func (db *DB) startWatch() {
	if n := db.node; n != nil && db.opts.TakeOverDeadNodes {
		n.done.Add(1)
		go n.watchLoop()
	}
}

// releaseLease marks the lease released (Lease.Released), If-Match, at
// a clean Close once the ledgers' writers are closed: the node's next
// process takes it at once. The other nodes see a lease no longer
// renewed, which lapses: they take the node's ledgers once it has. A
// lease lost, or a write that fails, is left as it is (the next process
// waits, as after a crash).
func (db *DB) releaseLease() {
	n := db.node
	if n == nil {
		return
	}
	n.mu.Lock()
	etag, r, lost := n.etag, n.renewal, n.lost
	n.mu.Unlock()
	if lost != nil || etag == "" {
		return
	}
	l := n.leaseObject(r + 1)
	l.Released = true
	ctx, cancel := context.WithTimeout(context.Background(), n.lease/3)
	defer cancel()
	n.st.Put(ctx, replica.NodeKey(n.name), l.Encode(), store.ReplaceIf(etag))
}

// stopNode stops the renewal and the watch; the lease object stays, and
// lapses: the other nodes take this node's ledgers once it has.
func (db *DB) stopNode() {
	n := db.node
	if n == nil {
		return
	}
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	n.done.Wait()
}

// leaseObject is the lease as this process writes it, renewal r.
func (n *node) leaseObject(r uint64) replica.Lease {
	return replica.Lease{V: replica.NodeVersion, Node: n.name, Address: n.addr, LeaseMS: n.lease.Milliseconds(),
		Renewal: r, Writer: n.id, Written: n.db.opts.Now().UTC()}
}

// acquire writes the lease object at start. An existing one is replaced
// only once it has not moved for a third of its lease (checkLeaseIdle).
func (n *node) acquire(ctx context.Context) error {
	key := replica.NodeKey(n.name)
	for try := 0; try < 5; try++ {
		cond := store.CreateOnly()
		obj, err := n.st.Get(ctx, key)
		switch {
		case err == nil:
			if l, derr := replica.DecodeLease(key, obj.Data); derr != nil || !l.Released {
				var gone bool
				if obj, gone, err = n.checkLeaseIdle(ctx, key, obj); err != nil {
					return err
				}
				if gone {
					continue
				}
			}
			cond = store.ReplaceIf(obj.ETag) // an earlier process of this node's
			if l, err := replica.DecodeLease(key, obj.Data); err == nil {
				n.earlier = l.Writer
			}
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("read %s: %w", key, err)
		}
		l := n.leaseObject(0)
		sent := time.Now()
		etag, err := n.st.Put(ctx, key, l.Encode(), cond)
		if err == nil {
			n.mu.Lock()
			n.etag, n.renewal, n.validUntil = etag, 0, sent.Add(n.lease)
			n.mu.Unlock()
			return nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("write %s: %w", key, err)
		}
	}
	return fmt.Errorf("write %s: another process of the node keeps replacing it", key)
}

// checkLeaseIdle reads the lease object obj again after a third of its
// lease and a tenth more: one that a live process renews every third of
// its lease has changed by then, and the name is refused
// (ErrNodeNameInUse, naming that process); one unchanged is a dead
// process's, returned as read now. gone: the object was deleted
// meanwhile.
func (n *node) checkLeaseIdle(ctx context.Context, key string, obj store.Object) (store.Object, bool, error) {
	lease := n.lease
	if l, err := replica.DecodeLease(key, obj.Data); err == nil && l.Duration() > 0 {
		lease = min(l.Duration(), maxNodeLease)
	}
	wait := lease/3 + lease/10
	select {
	case <-ctx.Done():
		return obj, false, ctx.Err()
	case <-time.After(wait):
	}
	again, err := n.st.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return obj, true, nil
	case err != nil:
		return obj, false, fmt.Errorf("read %s: %w", key, err)
	case again.ETag == obj.ETag:
		return again, false, nil
	}
	l, err := replica.DecodeLease(key, again.Data)
	if err != nil {
		return obj, false, fmt.Errorf("%w: its lease %s changed within %v and does not read as a lease: %v", ErrNodeNameInUse, key, wait, err)
	}
	return obj, false, fmt.Errorf("%w: its lease %s was renewed within %v (renewal %d) by %s: another live process holds the name", ErrNodeNameInUse, key, wait, l.Renewal, l.Writer)
}

// renewLoop renews the lease every lease/3 until stop.
func (n *node) renewLoop() {
	n.every(func() {
		n.renew()
		n.writeOwners()
	})
}

// every calls fn every lease/3 until stop (a goroutine of n.done).
func (n *node) every(fn func()) {
	defer n.done.Done()
	t := time.NewTicker(n.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		fn()
	}
}

// renew replaces the lease object If-Match the last one this process
// wrote. When the object is not that one, it is read back: one this
// process wrote (an earlier renewal whose answer was lost) is renewed
// from; a missing one (deleted) is written again create-only; one
// another process of the node's name wrote means the lease is lost for
// good. Only a renewal whose own answer came back moves validUntil.
func (n *node) renew() {
	n.mu.Lock()
	etag, r, lost := n.etag, n.renewal+1, n.lost
	n.mu.Unlock()
	if lost != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.lease/3)
	defer cancel()
	key := replica.NodeKey(n.name)
	for try := 0; try < 3; try++ {
		cond := store.ReplaceIf(etag)
		if etag == "" {
			cond = store.CreateOnly()
		}
		l := n.leaseObject(r)
		sent := time.Now()
		newTag, err := n.st.Put(ctx, key, l.Encode(), cond)
		if err == nil {
			n.mu.Lock()
			n.etag, n.renewal, n.validUntil = newTag, r, sent.Add(n.lease)
			n.mu.Unlock()
			return
		}
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			// Tried again at the next tick; the lease lapses at
			// validUntil if none succeeds.
			return
		}
		obj, err := n.st.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Deleted: no observer watches a lease it does not list, so
			// writing it anew counts from its new writing.
			etag, r = "", 0
			continue
		case err != nil:
			return
		}
		got, err := replica.DecodeLease(key, obj.Data)
		if err != nil {
			n.mu.Lock()
			n.lost = fmt.Errorf("%w: node %q: its lease %s was replaced by an object that does not read as a lease (%v)", ErrNotOwner, n.name, key, err)
			n.mu.Unlock()
			return
		}
		if got.Writer.Nonce != n.id.Nonce {
			n.mu.Lock()
			n.lost = fmt.Errorf("%w: node %q: its lease %s was replaced by another process of that name, %s (this one is %s)", ErrNotOwner, n.name, key, got.Writer, n.id)
			n.mu.Unlock()
			return
		}
		// This process's own writing, whose answer was lost: observers
		// count from when it landed, unknown, so validUntil stays; the
		// next attempt renews from it.
		etag, r = obj.ETag, got.Renewal+1
	}
}

// leaseErr says why this node must not acknowledge appends now: its
// lease lapsed (ErrNotOwner), or nil.
func (n *node) leaseErr() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lost != nil {
		return n.lost
	}
	if !time.Now().Before(n.validUntil) {
		return fmt.Errorf("%w: node %q could not renew its lease %s within %v: other nodes may take its ledgers", ErrNotOwner, n.name, replica.NodeKey(n.name), n.lease)
	}
	return nil
}

// recordOwner writes l's owner object after its Writer took it at epoch;
// a store error leaves it to the renewals to write.
func (n *node) recordOwner(ctx context.Context, l *ledger, epoch uint64) error {
	o := replica.Owner{V: replica.NodeVersion, Ledger: l.meta.ID.String(), Name: l.meta.Name, Node: n.name,
		Epoch: epoch, Writer: n.id, Written: n.db.opts.Now().UTC()}
	err := replica.WriteOwner(ctx, n.st, o)
	if err == nil || errors.Is(err, replica.ErrOwnerMoved) {
		return err
	}
	n.mu.Lock()
	n.owners[l.meta.ID] = o
	n.mu.Unlock()
	return nil
}

// writeOwners writes the owner objects a take could not.
func (n *node) writeOwners() {
	n.mu.Lock()
	pending := maps.Clone(n.owners)
	n.mu.Unlock()
	for id, o := range pending {
		ctx, cancel := context.WithTimeout(context.Background(), n.lease/3)
		err := replica.WriteOwner(ctx, n.st, o)
		cancel()
		if err == nil || errors.Is(err, replica.ErrOwnerMoved) {
			n.mu.Lock()
			if n.owners[id] == o {
				delete(n.owners, id)
			}
			n.mu.Unlock()
		}
	}
}

// ownedElsewhere says, in node mode, whether another node writes ledger
// l: Open then leaves the ledger to it (ErrNotOwner) instead of taking it
// back; TakeLedger takes it. The writer is the newest manifest's: this
// node if that is this process or the one whose lease it replaced at its
// start (the node's earlier process), else the node whose lease (among leases, read once for every ledger Open opens)
// carries the manifest's writer identity; when no lease does (that
// process is gone), the owner object's node, if that object is the one
// the manifest's writer wrote at its take (same identity, same epoch). An
// owner object that is not (edited, or one step behind) names nobody.
func (n *node) ownedElsewhere(ctx context.Context, l *ledger, leases []replica.Lease) error {
	id := l.meta.ID
	m, _, err := replica.NewReader(replica.ReaderConfig{Store: n.st, Ledger: id}).Manifest(ctx)
	switch {
	case errors.Is(err, replica.ErrNoReplica):
		return nil
	case err != nil:
		return fmt.Errorf("replica %s: ledger %s: %w", n.db.repl.endpoint, l.meta.Name, err)
	}
	if m.Writer.Nonce != "" && (m.Writer.Nonce == n.id.Nonce || m.Writer.Nonce == n.earlier.Nonce) {
		return nil // this node's earlier process took the newest epoch
	}
	owner, how := writerNode(m, leases), "its lease carries the writer of the newest manifest"
	if owner == "" {
		o, _, err := replica.ReadOwner(ctx, n.st, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("replica %s: ledger %s: %w", n.db.repl.endpoint, l.meta.Name, err)
		case o.Writer.Nonce == m.Writer.Nonce && o.Epoch == m.Epoch:
			owner, how = o.Node, "its owner object, written by the writer of the newest manifest"
		}
	}
	if owner != "" && owner != n.name {
		return fmt.Errorf("%w: ledger %s (%s): node %q writes it in the bucket %s (epoch %d: %s): take it with DB.TakeLedger", ErrNotOwner, l.meta.Name, id, owner, n.db.repl.endpoint, m.Epoch, how)
	}
	return nil
}

// writerNode returns the node whose lease, among leases, carries the
// writer identity of manifest m: the node of the process that took m's
// epoch ("" if none: that process is gone, or was no node).
func writerNode(m replica.Manifest, leases []replica.Lease) string {
	for _, l := range leases {
		if l.Writer.Nonce != "" && l.Writer.Nonce == m.Writer.Nonce {
			return l.Node
		}
	}
	return ""
}

// Owner is who writes a ledger of a bucket shared by nodes, as the
// bucket says now (DB.Owner, Router).
type Owner struct {
	Ledger eventid.LedgerID
	// Name is the ledger's name, as its newest manifest gives it.
	Name string
	// Node is the node that writes the ledger, and Address its address
	// (from its lease; "" if it has none). Node is "" for a ledger taken
	// by a process that is no node (Options.Node empty) and never by one.
	Node, Address string
	// Epoch is the newest manifest's. Node is the node whose lease names
	// the manifest's writer (the process that took that epoch); when no
	// lease does (that process is gone), the owner object's node, and
	// Behind is set if the owner object is behind the manifest (written
	// after the take: the ledger is moving away from that node).
	Epoch  uint64
	Behind bool
}

// readOwner reads who owns ledger id: the newest manifest, the lease
// whose writer identity is the manifest's (the process that wrote it
// holds that lease: the node it names wins), and, when no lease has it
// (its process is gone), the owner object. The manifest's epoch wins: an
// owner object behind it, or none, sets Behind.
func readOwner(ctx context.Context, st store.Store, id eventid.LedgerID) (Owner, error) {
	m, _, err := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: id}).Manifest(ctx)
	if err != nil {
		if errors.Is(err, replica.ErrNoReplica) {
			return Owner{}, fmt.Errorf("%w: ledger %s: the bucket holds nothing of it", ErrLedgerNotFound, id)
		}
		return Owner{}, err
	}
	out := Owner{Ledger: id, Name: m.Name, Epoch: m.Epoch}
	o, _, err := replica.ReadOwner(ctx, st, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, corruption.Err) {
		return Owner{}, err
	}
	leases, lerr := readLeases(ctx, st)
	out.Node = writerNode(m, leases)
	switch {
	case out.Node != "":
	case err == nil && o.Epoch >= m.Epoch:
		out.Node = o.Node
	case lerr != nil:
		return Owner{}, lerr
	case err == nil:
		out.Node, out.Behind = o.Node, true
	}
	for _, l := range leases {
		if l.Node == out.Node {
			out.Address = l.Address
		}
	}
	return out, nil
}

// readLeases reads every lease under nodes/, in the order of their
// keys; a damaged one is skipped.
func readLeases(ctx context.Context, st store.Store) ([]replica.Lease, error) {
	var out []replica.Lease
	err := listObjects(ctx, st, replica.NodesPrefix, func(o store.ObjectInfo) error {
		obj, err := st.Get(ctx, o.Key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", o.Key, err)
		}
		if l, err := replica.DecodeLease(o.Key, obj.Data); err == nil {
			out = append(out, l)
		}
		return nil
	})
	return out, err
}

// listObjects calls fn for every object under prefix.
func listObjects(ctx context.Context, st store.Store, prefix string, fn func(store.ObjectInfo) error) error {
	after := ""
	for {
		p, err := st.List(ctx, prefix, after, 0)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, o := range p.Objects {
			if err := fn(o); err != nil {
				return err
			}
			after = o.Key
		}
		if !p.Truncated || len(p.Objects) == 0 {
			return nil
		}
	}
}

// resolveLedger returns the ID of the bucket's ledger name: its ID
// itself, else its claim under names/, else the one ledger whose newest
// manifest gives that name (a ledger made by a DB with no Node writes no
// claim).
func resolveLedger(ctx context.Context, st store.Store, name string) (eventid.LedgerID, error) {
	if id, err := eventid.ParseLedgerID(name); err == nil && id.String() == name {
		return id, nil
	}
	key := replica.NameKey(name)
	obj, err := st.Get(ctx, key)
	if err == nil {
		c, err := replica.DecodeNameClaim(key, obj.Data)
		if err != nil {
			return 0, err
		}
		return c.LedgerID()
	}
	if !errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	ids, _, err := restoreLedgers(ctx, st, name)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// claimName claims name for ledger id in the bucket (names/), create-only.
// The name claimed already for another ledger is ErrLedgerExists, naming
// the node that owns that ledger; claimed for id (a retried request), nil.
// A new claim is checked against the newest manifests (checkNameUnused):
// a deleted claim does not let a second ledger of the name be made.
func (n *node) claimName(ctx context.Context, name string, id eventid.LedgerID) error {
	key := replica.NameKey(name)
	c := replica.NameClaim{V: replica.NodeVersion, Name: name, Ledger: id.String(), Node: n.name, Written: n.db.opts.Now().UTC()}
	etag, err := n.st.Put(ctx, key, c.Encode(), store.CreateOnly())
	if err == nil {
		return n.checkNameUnused(ctx, name, id, etag)
	}
	if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("replica %s: claim the name %q (%s): %w", n.db.repl.endpoint, name, key, err)
	}
	obj, gerr := n.st.Get(ctx, key)
	if gerr != nil {
		return fmt.Errorf("replica %s: claim the name %q: read %s: %w", n.db.repl.endpoint, name, key, gerr)
	}
	got, derr := replica.DecodeNameClaim(key, obj.Data)
	if derr != nil {
		return derr
	}
	if got.Ledger == id.String() {
		return nil
	}
	owner := got.Node
	if gid, err := got.LedgerID(); err == nil {
		if o, err := readOwner(ctx, n.st, gid); err == nil && o.Node != "" {
			owner = o.Node
		}
	}
	return fmt.Errorf("%w: %q: the bucket %s has a ledger of that name (%s), owned by node %q", ErrLedgerExists, name, n.db.repl.endpoint, got.Ledger, owner)
}

// checkNameUnused checks, after a new claim of name for ledger id (etag),
// that no ledger of the bucket has that name in its newest manifest: its
// claim deleted, a ledger of that name exists all the same. Then the
// claim is given back to that ledger (replacing this one's) and the
// answer is ErrLedgerExists, as if the claim had been there.
func (n *node) checkNameUnused(ctx context.Context, name string, id eventid.LedgerID, etag string) error {
	ids, err := bucketLedgers(ctx, n.st)
	if err == nil {
		for _, other := range ids {
			if other == id {
				continue
			}
			m, _, merr := replica.NewReader(replica.ReaderConfig{Store: n.st, Ledger: other}).Manifest(ctx)
			if errors.Is(merr, replica.ErrNoReplica) || merr == nil && m.Name != name {
				continue
			}
			if merr != nil {
				err = merr
				break
			}
			owner := ""
			if o, err := readOwner(ctx, n.st, other); err == nil {
				owner = o.Node
			}
			key := replica.NameKey(name)
			c := replica.NameClaim{V: replica.NodeVersion, Name: name, Ledger: other.String(), Node: owner, Written: n.db.opts.Now().UTC()}
			if _, err := n.st.Put(ctx, key, c.Encode(), store.ReplaceIf(etag)); err != nil {
				n.unclaimName(name, id)
			}
			return fmt.Errorf("%w: %q: the bucket %s has a ledger of that name (%s, its newest manifest gives the name; its claim %s was missing, and is written again), owned by node %q", ErrLedgerExists, name, n.db.repl.endpoint, other, key, owner)
		}
	}
	if err != nil {
		n.unclaimName(name, id)
		return fmt.Errorf("replica %s: check that no ledger has the name %q: %w", n.db.repl.endpoint, name, err)
	}
	return nil
}

// unclaimName removes the claim of a CreateLedger that failed before its
// ledger existed.
func (n *node) unclaimName(name string, id eventid.LedgerID) {
	ctx, cancel := context.WithTimeout(context.Background(), n.db.opts.StoreTimeout)
	defer cancel()
	key := replica.NameKey(name)
	if obj, err := n.st.Get(ctx, key); err == nil {
		if c, err := replica.DecodeNameClaim(key, obj.Data); err == nil && c.Ledger == id.String() {
			n.st.Delete(ctx, key)
		}
	}
}

// Owner returns who owns ledgerName in the bucket (its name or ID): the
// node its owner object names, checked against the newest manifest (see
// Owner). It needs a Replica; ErrLedgerNotFound if the bucket holds no
// such ledger.
func (db *DB) Owner(ctx context.Context, ledgerName string) (Owner, error) {
	if db.repl == nil {
		return Owner{}, invalid("owner of %s: the DB has no replica (Options.Replica)", ledgerName)
	}
	id, err := resolveLedger(ctx, db.repl.store, ledgerName)
	if err != nil {
		return Owner{}, fmt.Errorf("engine: owner of %s: %w", ledgerName, err)
	}
	o, err := readOwner(ctx, db.repl.store, id)
	if err != nil {
		return Owner{}, fmt.Errorf("engine: owner of %s in %s: %w", ledgerName, db.repl.endpoint, err)
	}
	return o, nil
}

// rendezvous returns the node among nodes that key goes to: the highest
// hash of the node's name and key (rendezvous hashing: a node that leaves
// moves only its own keys). "" if nodes is empty.
func rendezvous(nodes []string, key string) string {
	best, bestScore := "", uint64(0)
	for _, n := range nodes {
		h := sha256.Sum256([]byte(n + "\x00" + key))
		s := binary.BigEndian.Uint64(h[:8])
		if best == "" || s > bestScore || s == bestScore && n < best {
			best, bestScore = n, s
		}
	}
	return best
}

// NodeState is a node as an observer sees it (Router.Nodes).
type NodeState struct {
	Name, Address string
	Lease         time.Duration
	Renewal       uint64
	// Alive: the observer saw the lease object change within Lease (by
	// its own clock), or first saw it less than Lease ago.
	Alive bool
	// Unchanged is how long the observer has seen the same object.
	Unchanged time.Duration
}

// leaseWatch tells live nodes from dead ones by their lease objects: a
// node is dead once the observer has seen the same object (ETag) for
// longer than its lease on the observer's clock, never by comparing the
// times written in it.
type leaseWatch struct {
	st   store.Store
	now  func() time.Time // monotonic
	seen map[string]seenLease
}

type seenLease struct {
	etag  string
	since time.Time
	lease replica.Lease
}

func newLeaseWatch(st store.Store, now func() time.Time) *leaseWatch {
	if now == nil {
		now = time.Now
	}
	return &leaseWatch{st: st, now: now, seen: map[string]seenLease{}}
}

// poll lists nodes/ and returns every node's state, by name. A lease
// first seen is counted from the end of the List that returned it: it
// was sent before then, so the observer never counts it from before the
// node does.
func (w *leaseWatch) poll(ctx context.Context) ([]NodeState, error) {
	var listed []store.ObjectInfo
	if err := listObjects(ctx, w.st, replica.NodesPrefix, func(o store.ObjectInfo) error {
		listed = append(listed, o)
		return nil
	}); err != nil {
		return nil, err
	}
	now := w.now()
	keep := map[string]bool{}
	var out []NodeState
	for _, o := range listed {
		s, ok := w.seen[o.Key]
		if !ok || s.etag != o.ETag {
			obj, err := w.st.Get(ctx, o.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", o.Key, err)
			}
			l, err := replica.DecodeLease(o.Key, obj.Data)
			if err != nil {
				continue // not a lease: no node
			}
			// The List's ETag, which the next poll compares (a store
			// may quote a Get's otherwise).
			s = seenLease{etag: o.ETag, since: now, lease: l}
			w.seen[o.Key] = s
		}
		keep[o.Key] = true
		d := now.Sub(s.since)
		out = append(out, NodeState{Name: s.lease.Node, Address: s.lease.Address, Lease: s.lease.Duration(),
			Renewal: s.lease.Renewal, Alive: d <= s.lease.Duration(), Unchanged: d})
	}
	for k := range w.seen {
		if !keep[k] {
			delete(w.seen, k)
		}
	}
	return out, nil
}

// liveNames returns the names of the live nodes among ns.
func liveNames(ns []NodeState) []string {
	var out []string
	for _, s := range ns {
		if s.Alive {
			out = append(out, s.Name)
		}
	}
	return out
}

// watchLoop watches the other nodes' leases every lease/3 and takes the
// ledgers of the dead ones that rendezvous hashing over the live nodes
// gives this node.
func (n *node) watchLoop() {
	sc := &orphanScan{w: newLeaseWatch(n.st, nil), emptied: map[string]string{},
		unleased: map[string]time.Time{}, leases: map[string]time.Duration{}, unowned: map[unownedKey]time.Time{}}
	n.every(func() {
		err := n.takeOrphans(sc)
		n.mu.Lock()
		n.watchErr = err
		n.mu.Unlock()
	})
}

// orphanScan is the state of the dead nodes' watch (its goroutine's own).
type orphanScan struct {
	w *leaseWatch
	// emptied are the dead nodes found owning nothing, by the lease's
	// ETag (noLease for a node without one): not scanned again until
	// their lease changes.
	emptied map[string]string
	// unleased are the nodes that own ledgers and have no lease object
	// (deleted), by when this watch first saw them so, on its clock; a
	// node unleased for longer than its lease is dead.
	unleased map[string]time.Time
	// leases are the lease durations of the nodes listed, by name, kept
	// after their lease object goes.
	leases map[string]time.Duration
	// unowned are the ledgers whose newest manifest's writer no lease
	// carries and whose owner object that writer did not write (edited,
	// or one step behind), by when this watch first saw them so: taken
	// once that is longer ago than the longest lease it knows.
	unowned map[unownedKey]time.Time
}

// unownedKey is a ledger at the epoch of its newest manifest
// (orphanScan.unowned).
type unownedKey struct {
	id    eventid.LedgerID
	epoch uint64
}

// longestLease returns the longest of own and the leases seen: how long
// a ledger's writer that no lease carries must stay so before it counts
// as dead (its lease deleted, it writes it again within a third of it).
func (sc *orphanScan) longestLease(own time.Duration) time.Duration {
	for _, d := range sc.leases {
		own = max(own, d)
	}
	return own
}

// noLease stands for the ETag of a node without a lease object in
// orphanScan.emptied.
const noLease = "(no lease)"

// takeOrphans is one round of watchLoop. A ledger's node is the newest
// manifest's writer's, by the leases (an owner object edited to name a
// live node does not hide a dead writer); when no lease carries that
// writer, its owner object's if that writer wrote it at the manifest's
// epoch and it names no live node (but this one, written by its earlier
// process), else nobody's: such a ledger is taken once this watch has
// seen it so for longer than the longest lease it knows. A node that
// owns ledgers and has no lease object is dead once this watch has seen it so for longer than a lease
// (the node's last seen, else this node's): a live node writes a deleted
// lease again at its next renewal.
func (n *node) takeOrphans(sc *orphanScan) error {
	if n.leaseErr() != nil {
		return nil // this node may be the one the others think dead
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	w := sc.w
	ns, err := w.poll(ctx)
	if err != nil {
		return err
	}
	now := w.now()
	listed, alive := map[string]bool{}, map[string]bool{}
	for _, s := range ns {
		listed[s.Name], alive[s.Name] = true, s.Alive
	}
	for name := range sc.leases {
		// A lease seen before and gone (deleted) from now on.
		if _, ok := sc.unleased[name]; !ok && !listed[name] && sc.emptied[name] != noLease {
			sc.unleased[name] = now
		}
	}
	for _, s := range ns {
		sc.leases[s.Name] = s.Lease
		delete(sc.unleased, s.Name)
	}
	live := liveNames(ns)
	if !slices.Contains(live, n.name) {
		live = append(live, n.name)
	}
	dead := map[string]bool{}
	for _, s := range ns {
		if !s.Alive && s.Name != n.name && sc.emptied[s.Name] != w.seen[replica.NodeKey(s.Name)].etag {
			dead[s.Name] = true
		}
	}
	for name, since := range sc.unleased {
		lease, ok := sc.leases[name]
		if !ok {
			lease = n.lease
		}
		if now.Sub(since) > lease && name != n.name && sc.emptied[name] != noLease {
			dead[name] = true
		}
	}
	// The first round also looks for the ledgers the bucket says are
	// this node's and that the DB does not hold: the node's earlier
	// process wrote them, from another directory (a disk replaced, a
	// configuration copied), and no other node takes a live node's.
	adopt := !n.scannedOwn
	if len(dead) == 0 && !adopt && len(sc.unowned) == 0 {
		return nil
	}
	ids, err := bucketLedgers(ctx, n.st)
	if err != nil {
		return err
	}
	n.scannedOwn = true
	var leases []replica.Lease
	for _, s := range w.seen {
		leases = append(leases, s.lease)
	}
	owns := map[string]bool{}
	pending := map[unownedKey]bool{}
	defer func() {
		for k := range sc.unowned {
			if !pending[k] {
				delete(sc.unowned, k)
			}
		}
	}()
	var errs []error
	for _, id := range ids {
		m, _, err := replica.NewReader(replica.ReaderConfig{Store: n.st, Ledger: id}).Manifest(ctx)
		if err != nil {
			continue
		}
		owner := writerNode(m, leases)
		if owner == "" {
			o, _, err := replica.ReadOwner(ctx, n.st, id)
			if err != nil {
				continue
			}
			mine := o.Node == n.name && o.Writer.Nonce == n.earlier.Nonce
			if o.Writer.Nonce != m.Writer.Nonce || o.Epoch != m.Epoch || alive[o.Node] && !mine {
				// Not the owner object the manifest's writer wrote at
				// its take (edited, or still to be written), or naming a
				// live node whose lease carries another writer (edited,
				// or that node's earlier process, which it did not take
				// back): the ledger is its writer's, which no lease
				// carries.
				k := unownedKey{id, m.Epoch}
				pending[k] = true
				since, ok := sc.unowned[k]
				if !ok {
					sc.unowned[k], since = now, now
				}
				if now.Sub(since) <= sc.longestLease(n.lease) || rendezvous(live, id.String()) != n.name {
					continue
				}
				if _, err := n.db.TakeLedger(ctx, id.String()); err != nil && !errors.Is(err, ErrClosed) {
					errs = append(errs, fmt.Errorf("take ledger %s, whose writer of epoch %d no lease carries and whose owner object %s that writer did not write: %w", id, m.Epoch, replica.OwnerKey(id), err))
				}
				continue
			}
			owner = o.Node
			if _, ok := sc.unleased[owner]; !ok && !listed[owner] && owner != n.name {
				sc.unleased[owner] = now
			}
		}
		if adopt && owner == n.name {
			n.db.mu.RLock()
			_, held := n.db.byID[id]
			n.db.mu.RUnlock()
			if held {
				continue
			}
			if _, err := n.db.TakeLedger(ctx, id.String()); err != nil && !errors.Is(err, ErrClosed) {
				errs = append(errs, fmt.Errorf("take ledger %s, which the bucket says is this node's: %w", id, err))
			}
			continue
		}
		if !dead[owner] {
			continue
		}
		owns[owner] = true
		if rendezvous(live, id.String()) != n.name {
			continue
		}
		if _, err := n.db.TakeLedger(ctx, id.String()); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, fmt.Errorf("take ledger %s of dead node %q: %w", id, owner, err))
		}
	}
	for d := range dead {
		if owns[d] {
			continue
		}
		if listed[d] {
			sc.emptied[d] = w.seen[replica.NodeKey(d)].etag
		} else {
			sc.emptied[d] = noLease
			delete(sc.unleased, d)
		}
	}
	return errors.Join(errs...)
}

// NodeStatus is a DB's state as a node (DB.NodeStatus).
type NodeStatus struct {
	Name, Address string
	Lease         time.Duration
	// Renewal is the lease's last renewal counter; Valid says whether the
	// lease holds now (else appends are refused with ErrNotOwner), and
	// Err why not.
	Renewal uint64
	Valid   bool
	Err     error
	// WatchErr is the last error of the watch of the other nodes
	// (TakeOverDeadNodes).
	WatchErr error
	// FencedCopies are the ledger folders TakeLedger set aside in the
	// DB's directory (DB.FencedCopies): for the operator to look at.
	FencedCopies []FencedCopy
}

// NodeStatus returns the DB's state as a node; ErrInvalid without
// Options.Node, or the error of listing its ledgers directory.
func (db *DB) NodeStatus() (NodeStatus, error) {
	n := db.node
	if n == nil {
		return NodeStatus{}, invalid("node status: the DB is no node (Options.Node)")
	}
	copies, ferr := db.FencedCopies()
	if ferr != nil {
		return NodeStatus{}, ferr
	}
	err := n.leaseErr()
	n.mu.Lock()
	defer n.mu.Unlock()
	return NodeStatus{Name: n.name, Address: n.addr, Lease: n.lease, Renewal: n.renewal, Valid: err == nil, Err: err, WatchErr: n.watchErr, FencedCopies: copies}, nil
}
