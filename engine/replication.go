package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/invariants"
)

// Replication is how a replicated ledger's appends wait for its bucket
// (Options.Replication; docs/replication.md, "Modes").
type Replication int

const (
	// Replicated: an append returns once its events are durable locally
	// (Sync) and stored in the bucket, with every event before them; no
	// read shows an event before it is stored.
	Replicated = Replication(replica.Replicated)
	// Shipped: an append returns once its events are durable locally, as
	// without a replica; they are stored within Options.ShipInterval
	// (DB.ReplicaStatus gives the lag, DB.WaitReplicated waits).
	Shipped = Replication(replica.Shipped)
)

// String returns "replicated" or "shipped".
func (r Replication) String() string {
	switch r {
	case Replicated:
		return "replicated"
	case Shipped:
		return "shipped"
	}
	return fmt.Sprintf("Replication(%d)", int(r))
}

// The errors of a replicated ledger, matched with errors.Is.
var (
	// ErrFenced: another writer took the ledger (annal takeover, or a
	// DB opened elsewhere on a copy of the directory). It is sticky: the
	// ledger takes no more appends and every pending one fails with it.
	// What was acknowledged before was stored (Replicated mode).
	ErrFenced = replica.ErrFenced
	// ErrBehind: the bucket holds events of the ledger that the directory
	// does not. The ledger is refused (ErrLedgerUnavailable); the cure is
	// `annal restore URL DIR` into a new directory, or `annal takeover
	// URL DIR`.
	ErrBehind = replica.ErrBehind
	// ErrDiverged: the bucket and the directory hold different events at
	// the same sequence number. The ledger is refused.
	ErrDiverged = replica.ErrDiverged
	// ErrNoCheckpoint: the bucket holds a ledger's events but no signed
	// checkpoint (a Shipped ledger whose disk was lost before its first
	// checkpoint was stored, or a checkpoint deleted from the bucket).
	// Restore refuses such a ledger unless RestoreOptions.Unsigned says
	// otherwise; the error matches ErrCorruption too.
	ErrNoCheckpoint = replica.ErrNoCheckpoint
	// ErrNotStored: a Replicated append's events are durable locally,
	// but the replica did not store them: the store made no progress for
	// StoreTimeout (the error names the endpoint and the store's last
	// error), or ctx ended. They stay in the segments, and may yet be
	// stored and become visible: retry with the same IdempotencyKey.
	ErrNotStored = errors.New("engine: not stored in the replica")
)

// The ranges of the replication options (docs/engine.md, "Options and
// their defaults").
const (
	defaultShipInterval = time.Second
	defaultStoreTimeout = 10 * time.Second
	defaultGCGrace      = 10 * time.Minute
	// A flush every 1 s at most is already the cost of Shipped mode.
	maxMinFlushInterval = time.Second
	// Below 10 ms an idle ledger's ticker burns CPU; above an hour the
	// window a lost disk loses is no longer an interval.
	minShipInterval, maxShipInterval = 10 * time.Millisecond, time.Hour
	// Below 100 ms one slow request fails appends; above 10 min an
	// append blocks unboundedly in all but name.
	minStoreTimeout, maxStoreTimeout = 100 * time.Millisecond, 10 * time.Minute
	minGCGrace, maxGCGrace           = time.Second, 24 * time.Hour
)

// replicaDefaults fills the replication options' defaults (withDefaults).
func (o *Options) replicaDefaults() {
	if o.Replica == "" && o.replicaStore == nil {
		return
	}
	if o.Replication == 0 {
		o.Replication = Replicated
	}
	if o.ShipInterval == 0 {
		o.ShipInterval = defaultShipInterval
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = defaultStoreTimeout
	}
	if o.GCGrace == 0 {
		o.GCGrace = defaultGCGrace
	}
	if o.Node.Name != "" && o.NodeLease == 0 {
		o.NodeLease = defaultNodeLease
	}
}

// checkReplication says what is wrong with the replication options, as
// an error matching ErrInvalid naming the option (check).
func (o *Options) checkReplication() error {
	if err := o.checkNode(); err != nil {
		return err
	}
	if o.Replica == "" && o.replicaStore == nil {
		if o.Replication != 0 {
			return fmt.Errorf("%w: options: Replication %v is set without a Replica", ErrInvalid, o.Replication)
		}
		return nil
	}
	if o.Replica != "" && o.replicaStore == nil {
		if _, err := store.ParseLocation(o.Replica); err != nil {
			return fmt.Errorf("%w: options: Replica: %w", ErrInvalid, err)
		}
	}
	if o.Replication != Replicated && o.Replication != Shipped {
		return fmt.Errorf("%w: options: Replication %v is neither Replicated nor Shipped", ErrInvalid, o.Replication)
	}
	if o.Replication == Replicated && o.Durability != Sync {
		return fmt.Errorf("%w: options: Durability %v with Replication Replicated: a replicated append is durable locally before it is stored (Sync), so that the bucket never holds events a local crash could lose", ErrInvalid, o.Durability)
	}
	if err := checkDurations(
		durationOption{"MinFlushInterval", o.MinFlushInterval, 0, maxMinFlushInterval, "0 (no lower bound)"},
		durationOption{"ShipInterval", o.ShipInterval, minShipInterval, maxShipInterval, defaultShipInterval.String()},
		durationOption{"StoreTimeout", o.StoreTimeout, minStoreTimeout, maxStoreTimeout, defaultStoreTimeout.String()},
		durationOption{"GCGrace", o.GCGrace, minGCGrace, maxGCGrace, defaultGCGrace.String()},
	); err != nil {
		return err
	}
	if o.GCGrace <= 2*o.StoreTimeout {
		return fmt.Errorf("%w: options: GCGrace %v must be more than twice StoreTimeout %v (a writer re-reads the newest manifest before it acknowledges when its last look is older than half of GCGrace)", ErrInvalid, o.GCGrace, o.StoreTimeout)
	}
	return nil
}

// replicas is a DB's replication: the store, shared by its ledgers.
type replicas struct {
	store    store.Store
	endpoint string // names the store in errors
	identity replica.Identity
}

// openReplicaStore opens the store Options.Replica names (or the one a
// test gave) and probes it once: a store that cannot be reached, or
// lacks a guarantee that fencing needs, fails Open in both modes. At
// Open every ledger compares itself with the bucket (ErrBehind) before
// it writes: without the bucket it cannot know that no one wrote since.
func (db *DB) openReplicaStore(ctx context.Context) error {
	o := &db.opts
	if o.Replica == "" && o.replicaStore == nil {
		return nil
	}
	r := &replicas{store: o.replicaStore, endpoint: o.replicaEndpoint}
	if r.store == nil {
		loc, err := store.ParseLocation(o.Replica)
		if err != nil {
			return fmt.Errorf("%w: options: Replica: %w", ErrInvalid, err)
		}
		s3, err := store.OpenS3(ctx, loc, store.S3Options{})
		if err != nil {
			return fmt.Errorf("engine: replica %s: %w", loc, err)
		}
		r.store, r.endpoint = s3, endpointOf(loc)
	}
	if r.endpoint == "" {
		r.endpoint = "the replica store"
	}
	if err := store.Probe(ctx, r.store, "probe/"); err != nil {
		return fmt.Errorf("engine: replica %s: %w", r.endpoint, err)
	}
	host, _ := os.Hostname()
	var nonce [8]byte
	rand.Read(nonce[:])
	r.identity = replica.Identity{Host: host, PID: os.Getpid(), Started: time.Now().UTC(), Nonce: hex.EncodeToString(nonce[:])}
	db.repl = r
	return nil
}

// endpointOf names a replica location in errors: the bucket, the prefix
// and the endpoint.
func endpointOf(loc store.Location) string {
	s := "s3://" + loc.Bucket + "/" + loc.Prefix
	if loc.Endpoint != "" {
		s += " at " + loc.Endpoint
	}
	return s
}

// ledgerRepl is a replicated ledger's Writer and what the engine keeps
// of it.
type ledgerRepl struct {
	w    *replica.Writer
	mode Replication
	// fenced: the Writer said ErrFenced once: no more appends.
	fenced atomic.Bool
	// unstored (under the ledger's idxMu, Replicated mode only): the
	// heads of the groups published and not yet known to be stored, in
	// order; the readers' bound (ledger.stored) moves along them as
	// Waits return.
	unstored []segment.Head
}

// writerConfig returns the Config of l's Writer.
func (l *ledger) writerConfig() replica.Config {
	o := &l.db.opts
	c := replica.Config{
		Store: l.db.repl.store, Ledger: l.meta.ID, Name: l.meta.Name,
		Mode: replica.Mode(o.Replication), Identity: l.db.repl.identity,
		MinFlushInterval: o.MinFlushInterval, ShipInterval: o.ShipInterval,
		StoreTimeout: o.StoreTimeout, GCGrace: o.GCGrace,
		Source: ledgerSource{l}, Endpoint: l.db.repl.endpoint, Now: o.Now,
	}
	if o.PublishTiles {
		c.Tiles = ledgerSource{l}
	}
	if v, id := l.db.verifier, l.meta.ID; v != nil {
		// The bucket's checkpoint, judged before the Writer keeps it
		// rather than store the ledger's own (replica.Config).
		c.OpenCheckpoint = func(msg []byte) (uint64, tree.Hash, error) {
			ck, err := openCheckpoint(msg, v, id)
			if err != nil {
				return 0, tree.Hash{}, fmt.Errorf("not signed by this directory's key %s+%08x: %w", v.Name(), v.KeyHash(), err)
			}
			// With tlog witnesses, only a checkpoint with its quorum of
			// cosignatures: the log's signature alone (stripped of its
			// cosignatures, or as every witness was sent it) is not
			// what this writer publishes.
			if err := l.db.checkCosigned(msg); err != nil {
				return 0, tree.Hash{}, err
			}
			return ck.Size, ck.Root, nil
		}
	}
	return c
}

// attachReplica opens l's Writer, compares the bucket's tail with the
// ledger's head, and takes the ledger: the Writer then stores what the
// bucket lacks and every group committed from now on (Hooks.Records).
// The bucket ahead of the directory is ErrBehind, another event at the
// bucket's head ErrDiverged. In Replicated mode it waits until the
// bucket holds every local event (readers see them then, as they see an
// append once it is stored): as long as the store makes progress, or ctx
// ends. Called before the ledger is reachable.
func (l *ledger) attachReplica(ctx context.Context) error {
	db := l.db
	wctx := ctx
	ctx, cancel := context.WithTimeout(ctx, db.opts.StoreTimeout)
	defer cancel()
	w, tail, err := replica.Open(ctx, l.writerConfig())
	if err != nil {
		return fmt.Errorf("replica %s: %w", db.repl.endpoint, err)
	}
	head := l.log.Head()
	cure := fmt.Sprintf("restore it from the bucket into a new directory (annal restore URL DIR), or make this directory the ledger's writer with annal takeover URL %s", db.dir)
	switch {
	case tail.Seq > head.Seq:
		w.Close(ctx)
		return fmt.Errorf("%w: ledger %s: the bucket %s holds events to #%d, the directory to #%d: %s", ErrBehind, l.meta.Name, db.repl.endpoint, tail.Seq, head.Seq, cure)
	case tail.Seq > 0:
		local, err := l.idAt(tail.Seq)
		if err != nil {
			w.Close(ctx)
			return err
		}
		if local != tail.ID {
			w.Close(ctx)
			return fmt.Errorf("%w: ledger %s: event #%d is %s in the bucket %s and %s in the directory", ErrDiverged, l.meta.Name, tail.Seq, tail.ID, db.repl.endpoint, local)
		}
	}
	r := &ledgerRepl{w: w, mode: db.opts.Replication}
	l.repl = r
	if err := w.Take(ctx); err != nil {
		l.repl = nil
		w.Close(ctx)
		return fmt.Errorf("replica %s: take ledger %s: %w", db.repl.endpoint, l.meta.Name, err)
	}
	if n := db.node; n != nil {
		n.recordOwner(ctx, l, w.Status().Epoch)
	}
	if r.mode == Replicated && head.Seq > tail.Seq {
		// What a crash between the local fsync and the upload left, or
		// a ledger new to the bucket: stored before anyone sees it.
		if err := w.Wait(wctx, head.Seq); err != nil {
			l.repl = nil
			w.Close(ctx)
			return fmt.Errorf("replica %s: ledger %s: storing events #%d to #%d, which the bucket lacks: %w", db.repl.endpoint, l.meta.Name, tail.Seq+1, head.Seq, err)
		}
	}
	l.idxMu.Lock()
	l.stored = l.idxHead
	l.idxMu.Unlock()
	if c := l.latest.Load(); c != nil {
		// The ledger's latest checkpoint, which the bucket may lack (its
		// checkpoint object deleted, or never stored): the Writer stores
		// it if the bucket's is smaller. Without it no restore is
		// possible, and a Close with no new event signs nothing new.
		w.Checkpoint(c.Note, c.Size)
	}
	return nil
}

// idAt returns the ID of event seq of the ledger, from its index.
func (l *ledger) idAt(seq uint64) (eventid.ID, error) {
	id, ok, err := l.db.idx.BySeq(l.meta.ID, seq)
	if err == nil && !ok {
		err = fmt.Errorf("event #%d is not in the index", seq)
	}
	if err != nil {
		return eventid.ID{}, fmt.Errorf("ledger %s: %w", l.meta.Name, err)
	}
	return id, nil
}

// openReplicas attaches a Writer to every ledger Open recovered; a ledger
// that the bucket refuses (ErrBehind, ErrDiverged, a store error) is
// refused as one that failed recovery is (ErrLedgerUnavailable, see
// Unavailable), and the others open.
func (db *DB) openReplicas() error {
	if db.repl == nil {
		return nil
	}
	var leases []replica.Lease
	var leasesErr error
	if n := db.node; n != nil && len(db.byID) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), db.opts.StoreTimeout)
		leases, leasesErr = readLeases(ctx, n.st)
		cancel()
		if leasesErr != nil {
			leasesErr = fmt.Errorf("replica %s: the nodes' leases: %w", db.repl.endpoint, leasesErr)
		}
	}
	for id, l := range db.byID {
		err := leasesErr
		if n := db.node; n != nil && err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), db.opts.StoreTimeout)
			err = n.ownedElsewhere(ctx, l, leases)
			cancel()
		}
		if err == nil {
			err = l.attachReplica(context.Background())
		}
		if err == nil {
			continue
		}
		name := l.meta.Name
		delete(db.byID, id)
		delete(db.byName, name)
		delete(db.witnessed, l)
		err = errors.Join(err, l.log.Close(), l.closeTree())
		db.setBroken(name, id, fmt.Errorf("%w: ledger %s: %w", ErrLedgerUnavailable, id, err))
	}
	return nil
}

// registerReplicated is register for a ledger that Import or AcceptLedger
// made complete on disk: with a replica, it is attached first
// (attachReplica); a ledger the bucket refuses is refused as Open refuses
// it (ErrLedgerUnavailable), its files kept for the next Open.
func (db *DB) registerReplicated(ctx context.Context, l *ledger, name string, id eventid.LedgerID) (LedgerInfo, error) {
	if db.repl != nil {
		if err := l.attachReplica(ctx); err != nil {
			err = errors.Join(err, l.log.Close(), l.closeTree())
			err = fmt.Errorf("%w: ledger %s: %w", ErrLedgerUnavailable, id, err)
			db.mu.Lock()
			db.setBroken(name, id, err)
			db.mu.Unlock()
			return LedgerInfo{}, err
		}
	}
	return db.register(l, name, id)
}

// closeReplica closes l's Writer, if it has one, within StoreTimeout,
// after a checkpoint of the ledger's head if checkpoint is set (the
// log synced first) for the Writer to store: in Shipped mode what it
// could not ship stays in the segments and the next Open ships it.
func (l *ledger) closeReplica(checkpoint bool) error {
	r := l.repl
	if r == nil {
		return nil
	}
	var ckErr error
	if checkpoint && !r.fenced.Load() && l.refusedErr() == nil {
		if ckErr = l.log.Sync(); ckErr == nil {
			if n, err := l.treeState(); err == nil && n > l.latestSize() {
				_, ckErr = l.issueCheckpoint(0)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.db.opts.StoreTimeout)
	defer cancel()
	err := r.w.Close(ctx)
	if err != nil && r.mode == Shipped && !errors.Is(err, ErrFenced) {
		err = nil // the lag stays local, shipped at the next Open
	}
	if err = errors.Join(err, ckErr); err != nil {
		return fmt.Errorf("ledger %s: replica %s: %w", l.meta.Name, l.db.repl.endpoint, err)
	}
	return nil
}

// shipRecords is the segment log's Records hook: it gives each committed
// group to the Writer with the leaves groupWritten hashed for it.
func (l *ledger) shipRecords(s segment.Span) {
	r := l.repl
	if r == nil {
		return
	}
	if n := s.Last.Seq - s.FirstSeq + 1; l.hookFirst != s.FirstSeq || uint64(len(l.hookLeaves)) != n {
		// Not expected: Written hashes every group's leaves before
		// Records (segment.Hooks). Computed again from the records.
		if invariants.Enabled {
			panic(fmt.Sprintf("engine: invariant broken: ledger %s: the written hook hashed %d leaves from #%d, the span has %d from #%d", l.meta.Name, len(l.hookLeaves), l.hookFirst, n, s.FirstSeq))
		}
		leaves := make([]tree.Hash, 0, n)
		var buf []byte
		l.leavesOfSpan(s, &leaves, &buf)
		r.w.Add(s, leaves)
		return
	}
	r.w.Add(s, l.hookLeaves)
}

// leavesOfSpan hashes the leaves of a span's records, read back from the
// log (the span is committed).
func (l *ledger) leavesOfSpan(s segment.Span, leaves *[]tree.Hash, buf *[]byte) {
	l.log.ReadSpan(segment.Location{Segment: s.Segment, Offset: s.Offset}, len(s.Bytes), func(r *segment.Record, _ segment.Location) {
		if r.Seq > s.Last.Seq {
			return
		}
		var h tree.Hash
		h, *buf = recordLeafHash(*buf, r)
		*leaves = append(*leaves, h)
	})
}

// recordLeafHash is the leaf hash of a record read from a segment.
func recordLeafHash(buf []byte, r *segment.Record) (tree.Hash, []byte) {
	return lineLeafHash(buf, r.ID, string(r.Entity), string(r.Key), string(r.Event), r.Meta, r.Data)
}

// noteUnstored records, in Replicated mode, a published group's head,
// which readers see once it is stored. Called with idxMu held.
func (l *ledger) noteUnstored(h segment.Head) {
	if r := l.repl; r != nil && r.mode == Replicated {
		r.unstored = append(r.unstored, h)
	}
}

// markStored moves the readers' bound (Replicated mode) to the last
// group head at or before seq, every event to seq being stored.
func (l *ledger) markStored(seq uint64) {
	r := l.repl
	if r == nil || r.mode != Replicated {
		return
	}
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	i := 0
	for i < len(r.unstored) && r.unstored[i].Seq <= seq {
		i++
	}
	if i == 0 {
		return
	}
	if h := r.unstored[i-1]; h.Seq > l.stored.Seq {
		l.stored = h
		l.wake()
		l.cond.Broadcast()
	}
	r.unstored = append(r.unstored[:0], r.unstored[i:]...)
}

// groupEnd returns the last event of the published group that holds
// seq (Replicated mode), or seq if readers see it already or no group
// not yet stored holds it.
func (l *ledger) groupEnd(seq uint64) uint64 {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if l.stored.Seq >= seq {
		return seq // readable already
	}
	for _, h := range l.repl.unstored {
		if h.Seq >= seq {
			return h.Seq
		}
	}
	return seq
}

// replicaWait waits, in Replicated mode, until the events to seq are
// stored, and moves the readers' bound; ErrFenced is kept (sticky).
func (l *ledger) replicaWait(ctx context.Context, first, seq uint64) error {
	r := l.repl
	if r == nil || r.mode != Replicated {
		return nil
	}
	// The readers' bound moves by whole groups: the group's end, else
	// the appender would not read its own events.
	end := l.groupEnd(seq)
	err := r.w.Wait(ctx, end)
	if err == nil {
		l.markStored(end)
		if lerr := l.db.node.leaseErr(); lerr != nil {
			// Stored, but another node may hold the ledger by now: not
			// acknowledged by this one.
			return fmt.Errorf("%w: append to %s: events #%d to #%d are stored in the replica %s, but this node's lease lapsed before it could acknowledge them: %w; retry with the same IdempotencyKey at the ledger's owner to learn their outcome", ErrNotStored, l.meta.Name, first, seq, l.db.repl.endpoint, lerr)
		}
		return nil
	}
	if errors.Is(err, ErrFenced) {
		r.fenced.Store(true)
		return fmt.Errorf("engine: append to %s: %w (events #%d to #%d are in the local segments only: this directory is no longer the ledger's writer)", l.meta.Name, err, first, seq)
	}
	return fmt.Errorf("%w: append to %s: events #%d to #%d are durable locally, but the replica %s did not store them: %w; they may yet be stored and become visible: retry with the same IdempotencyKey to learn their outcome without appending them twice", ErrNotStored, l.meta.Name, first, seq, l.db.repl.endpoint, err)
}

// awaitStored waits, in Replicated mode, until the events to seq are
// stored (what a failed condition saw, for the caller to read), and
// moves the readers' bound. The bound moves by whole groups: it waits
// for the end of the group that holds seq (published: awaitIndexed came
// first), else a seq inside a group stays unreadable.
func (l *ledger) awaitStored(ctx context.Context, seq uint64) error {
	r := l.repl
	if r == nil || r.mode != Replicated || seq == 0 || l.log.Head().Seq < seq {
		return nil
	}
	seq = l.groupEnd(seq)
	if err := r.w.Wait(ctx, seq); err != nil {
		return err
	}
	l.markStored(seq)
	return nil
}

// replicaRefused returns ErrFenced once the ledger was fenced.
func (l *ledger) replicaRefused() error {
	r := l.repl
	if r == nil {
		return nil
	}
	if r.fenced.Load() || r.mode == Shipped && r.w.Fenced() {
		r.fenced.Store(true)
		return fmt.Errorf("engine: append to %s: %w", l.meta.Name, ErrFenced)
	}
	if err := l.db.node.leaseErr(); err != nil {
		return fmt.Errorf("engine: append to %s: %w", l.meta.Name, err)
	}
	return nil
}

// ReplicaStatus is a replicated ledger's state (DB.ReplicaStatus).
type ReplicaStatus struct {
	Mode Replication
	// Epoch is this writer's epoch of the ledger in the bucket.
	Epoch uint64
	// Stored is the last event stored in the bucket, Head the last one
	// committed locally; Lag is Head - Stored, and LagTime the age of
	// the oldest event not yet stored (0 if none).
	Stored, Head, Lag uint64
	LagTime           time.Duration
	// Chunks is the number of the last chunk stored.
	Chunks uint64
	// Uploads is the number of chunks this DB stored since it opened the
	// ledger, and UploadTime the time their uploads took in all, each
	// from its first PUT to the answer that stored it (retries included):
	// the change of UploadTime over the change of Uploads is the mean
	// upload latency under the load of the time.
	Uploads    uint64
	UploadTime time.Duration
	// LastError is the last upload's error (nil after a success), and
	// LastErrorAt when it came.
	LastError   error
	LastErrorAt time.Time
	// Damage is the last object the writer found damaged in the bucket
	// and replaced, and why: a checkpoint object not signed by the
	// directory's key, without the cosignatures of its tlog witnesses'
	// quorum (Options.TlogWitnesses), of another history than the
	// ledger's, claiming events the bucket does not hold, or older than
	// one this writer stored (an old copy of the bucket restored). It
	// matches ErrCorruption, names the object, and stays after later
	// successes (LastError holds it only until the next upload).
	// DamageAt is when.
	// See docs/replication.md, "The checkpoint object".
	Damage   error
	DamageAt time.Time
	// Fenced: another writer took the ledger; it takes no more appends.
	Fenced bool
}

// ReplicaStatus returns the replication state of a ledger; ErrInvalid if
// the DB has no replica.
func (db *DB) ReplicaStatus(ledgerName string) (ReplicaStatus, error) {
	l, err := db.ledger(ledgerName)
	if err != nil {
		return ReplicaStatus{}, err
	}
	r := l.repl
	if r == nil {
		return ReplicaStatus{}, invalid("ledger %s is not replicated (no Options.Replica)", l.meta.Name)
	}
	s := r.w.Status()
	st := ReplicaStatus{Mode: Replication(s.Mode), Epoch: s.Epoch, Stored: s.Stored, Head: s.Head,
		LagTime: s.LagTime, Chunks: s.Chunks, Uploads: s.Uploads, UploadTime: s.UploadTime, LastError: s.LastError, LastErrorAt: s.LastErrorAt,
		Damage: s.Damage, DamageAt: s.DamageAt, Fenced: s.Fenced}
	if st.Head > st.Stored {
		st.Lag = st.Head - st.Stored
	}
	return st, nil
}

// WaitReplicated waits until the event id, and every event before it in
// its ledger, is stored in the bucket; or returns ErrFenced, the store's
// error once it made no progress for StoreTimeout (naming the endpoint),
// or ctx's error. An ID that is not an event of an open ledger is
// ErrNotFound.
func (db *DB) WaitReplicated(ctx context.Context, id eventid.ID) error {
	if db.repl == nil {
		return invalid("wait replicated: the DB has no replica (Options.Replica)")
	}
	db.mu.RLock()
	l, ok := db.byID[id.Ledger()]
	db.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: wait replicated: no open ledger has the ID %s", ErrNotFound, id.Ledger())
	}
	if err := db.enterRead(); err != nil {
		return err
	}
	seq, _, found, err := db.idx.Lookup(id)
	db.exitRead()
	if err != nil {
		return fmt.Errorf("engine: wait replicated %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("%w: wait replicated: event %s", ErrNotFound, id)
	}
	if err := l.repl.w.Wait(ctx, seq); err != nil {
		return fmt.Errorf("engine: wait replicated %s (#%d of %s) in %s: %w", id, seq, l.meta.Name, db.repl.endpoint, err)
	}
	l.markStored(seq)
	return nil
}

// ledgerSource is a ledger's log as its Writer reads it (replica.Source).
// Its reads do not enter the DB's readers (enterRead), which Close stops
// first: the Writer is closed before the log and the index (closeReplica
// in Close), and it reads sealed segments and the backlog until then.
type ledgerSource struct{ l *ledger }

func (s ledgerSource) Head() segment.Head    { return s.l.log.Head() }
func (s ledgerSource) Durable() segment.Head { return s.l.log.Durable() }
func (s ledgerSource) Sync() error           { return s.l.log.Sync() }

// Read returns committed records from event from on, with their leaves:
// the record's location from the index, the records from the segment.
func (s ledgerSource) Read(from uint64, max int) (segment.Span, []tree.Hash, error) {
	l := s.l
	db := l.db
	id, err := l.idAt(from)
	if err != nil {
		return segment.Span{}, nil, err
	}
	_, loc, found, err := db.idx.Lookup(id)
	if err == nil && !found {
		err = fmt.Errorf("event %s is not in the index", id)
	}
	if err != nil {
		return segment.Span{}, nil, fmt.Errorf("ledger %s: event #%d: %w", l.meta.Name, from, err)
	}
	var leaves []tree.Hash
	var buf []byte
	span, err := l.log.ReadSpan(loc, max, func(r *segment.Record, _ segment.Location) {
		var h tree.Hash
		h, buf = recordLeafHash(buf, r)
		leaves = append(leaves, h)
	})
	if err != nil {
		return segment.Span{}, nil, fmt.Errorf("ledger %s: %w", l.meta.Name, err)
	}
	return span, leaves[:span.Last.Seq-span.FirstSeq+1], nil
}

// Sealed returns sealed segment n's file, whole.
func (s ledgerSource) Sealed(n uint64) ([]byte, uint64, uint64, error) {
	return s.l.log.ReadSealed(n)
}

// Frontier returns a tree builder at size n, from the tree file.
func (s ledgerSource) Frontier(n uint64) (*tree.Builder, error) {
	t, _, err := s.l.readTree()
	if err != nil {
		return nil, err
	}
	return t.Builder(n)
}

// startReplication opens and probes the replica store, and attaches a
// Writer to every ledger Open recovered (openReplicas).
func (db *DB) startReplication() error {
	if db.opts.Replica == "" && db.opts.replicaStore == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), db.opts.StoreTimeout)
	err := db.openReplicaStore(ctx)
	cancel()
	if err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), db.opts.StoreTimeout)
	err = db.startNode(ctx)
	cancel()
	if err != nil {
		return err
	}
	return db.openReplicas()
}

// attachNew gives a ledger being created (CreateLedger) its Writer,
// before its genesis event: the bucket must hold nothing of it.
func (l *ledger) attachNew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.db.opts.StoreTimeout)
	defer cancel()
	w, tail, err := replica.Open(ctx, l.writerConfig())
	if err != nil {
		return fmt.Errorf("replica %s: %w", l.db.repl.endpoint, err)
	}
	if tail.Seq > 0 || tail.Manifest.Epoch != 0 {
		w.Close(ctx)
		return fmt.Errorf("%w: the bucket %s already holds a ledger with the ID %s (events to #%d)", ErrBehind, l.db.repl.endpoint, l.meta.ID, tail.Seq)
	}
	l.repl = &ledgerRepl{w: w, mode: l.db.opts.Replication}
	if err := w.Take(ctx); err != nil {
		l.repl = nil
		w.Close(ctx)
		return fmt.Errorf("replica %s: take ledger %s: %w", l.db.repl.endpoint, l.meta.Name, err)
	}
	if n := l.db.node; n != nil {
		n.recordOwner(ctx, l, w.Status().Epoch)
	}
	return nil
}

// BucketLedger is what a bucket holds of a ledger (InspectReplica).
type BucketLedger struct {
	Ledger eventid.LedgerID
	// Name is the ledger's name, as its newest manifest gives it.
	Name string
	// Epoch is the newest manifest's epoch (0: the bucket holds nothing
	// of the ledger), Writer the process that wrote it, and Written when.
	Epoch   uint64
	Writer  string
	Written time.Time
	// Stored is the last event stored, Head its ID.
	Stored uint64
	Head   eventid.ID
}

// InspectReplica reads what the bucket that replicaURL names holds of
// each ledger (of every ledger in the bucket if ledgers is nil), writing
// nothing (annal replica status): it needs no writer running, and no
// data directory.
func InspectReplica(ctx context.Context, replicaURL string, ledgers []eventid.LedgerID) ([]BucketLedger, error) {
	s, endpoint, err := openBucket(ctx, replicaURL)
	if err != nil {
		return nil, err
	}
	return inspectStore(ctx, s, endpoint, ledgers)
}

// openBucket opens the S3 store replicaURL names, and the name of its
// endpoint in errors.
func openBucket(ctx context.Context, replicaURL string) (store.Store, string, error) {
	loc, err := store.ParseLocation(replicaURL)
	if err != nil {
		return nil, "", fmt.Errorf("%w: replica: %w", ErrInvalid, err)
	}
	s, err := store.OpenS3(ctx, loc, store.S3Options{})
	if err != nil {
		return nil, "", fmt.Errorf("engine: replica %s: %w", loc, err)
	}
	return s, endpointOf(loc), nil
}

// inspectStore is InspectReplica on an open store.
func inspectStore(ctx context.Context, s store.Store, endpoint string, ledgers []eventid.LedgerID) ([]BucketLedger, error) {
	if ledgers == nil {
		var err error
		if ledgers, err = bucketLedgers(ctx, s); err != nil {
			return nil, fmt.Errorf("engine: replica %s: %w", endpoint, err)
		}
	}
	out := make([]BucketLedger, 0, len(ledgers))
	for _, id := range ledgers {
		cfg := replica.Config{Store: s, Ledger: id, Mode: replica.Shipped, Endpoint: endpoint}
		w, tail, err := replica.Open(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("engine: replica %s: ledger %s: %w", endpoint, id, err)
		}
		w.Close(ctx)
		m := tail.Manifest
		b := BucketLedger{Ledger: id, Name: m.Name, Epoch: m.Epoch, Written: m.Written, Stored: tail.Seq, Head: tail.ID}
		if m.Epoch != 0 {
			b.Writer = m.Writer.String()
		}
		out = append(out, b)
	}
	return out, nil
}

// bucketLedgers lists the ledgers a bucket holds objects of, in the
// order of their IDs: the folders under ledgers/ (store.Folders), one
// request per 1000 of them. A folder that is no ledger's (its name not a
// ledger ID's, LLLLLLLL) and the objects directly under ledgers/ are
// passed over.
func bucketLedgers(ctx context.Context, s store.Store) ([]eventid.LedgerID, error) {
	const prefix = "ledgers/"
	var ids []eventid.LedgerID
	after := ""
	for {
		page, err := s.Folders(ctx, prefix, after, 0)
		if err != nil {
			return nil, fmt.Errorf("list the folders of %s: %w", prefix, err)
		}
		for _, f := range page.Folders {
			id, err := eventid.ParseLedgerID(strings.TrimSuffix(strings.TrimPrefix(f, prefix), "/"))
			if err == nil && replica.LedgerPrefix(id) == f {
				ids = append(ids, id)
			}
		}
		if !page.Truncated || len(page.Folders) == 0 {
			return ids, nil
		}
		after = page.Folders[len(page.Folders)-1]
	}
}
