package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/invariants"
)

// ledger is one open ledger.
type ledger struct {
	db   *DB
	log  *segment.Log
	meta ledgerMeta // name, ID, genesis, description: fixed once open

	// tree is the ledger's Merkle tree file (docs/format.md, section 9),
	// open from Open (or CreateLedger, Import) to Close. Invariant, unless
	// a tree write failed (treeErr), under idxMu: tree.Size() + the
	// events of treeJob + len(treePend) == indexed, and leaf i is the
	// leaf hash of event i+1. published adds each group's events, with
	// idxMu held, before idxHead moves, so every event readers see (up to
	// visible().Seq) has its place in the tree. They wait in treePend,
	// their leaves not hashed yet, until treeFlushLeaves wait (then a
	// goroutine of their own, treeJob, hashes and writes them) or a
	// reader needs them: read the tree with readTree, which waits for
	// treeJob and writes the rest first. It has one writer (under idxMu,
	// or treeJob while it runs; Open before the ledger is reachable) and
	// any number of readers (roots, proofs, checkpoints).
	tree     *tree.File
	treePend []pendLeaf
	treeJob  *treeJob
	// treeSpare, treeLeaves and treeBuf are buffers of the tree's writes,
	// reused (under idxMu, with no treeJob running).
	treeSpare  []pendLeaf
	treeLeaves []tree.Hash
	treeBuf    []byte
	// treeErr: a failed tree write (under idxMu): the tree is not
	// extended any more, and proofs and checkpoints of the ledger fail,
	// until a reopen recovers it from the segments.
	treeErr error
	// ckMu serializes the ledger's signed checkpoints; latest is the last
	// one issued (or found at Open). Lock order: ckMu → idxMu (readTree),
	// let go of before the signer's lock is taken; never taken under the
	// segment log's ioMu.
	ckMu   sync.Mutex
	latest atomic.Pointer[Checkpoint]
	// refused: the signer refused a checkpoint of the ledger (not a
	// consistent extension of what its key signed): its evidence is
	// broken, and its appends, checkpoints and the DB's Close fail with
	// this error from then on (issueCheckpoint).
	refused atomic.Pointer[error]

	// Index writes are applied in sequence order, one batch after the
	// other, so that the index's progress marker always covers a prefix.
	// Invariant: indexed <= log.Head().Seq; every record up to indexed is
	// in the index.
	//
	// idxMu guards the fields below up to pendMu, and the tree fields
	// above. Lock order: the segment log's ioMu → idxMu → pendMu. The
	// log's hooks (hooks: groupWritten, published, aborted) take idxMu
	// with ioMu held, so nothing may call the log's Append, Sync or Close
	// with idxMu held; published takes pendMu under idxMu (indexedUpTo).
	idxMu   sync.Mutex
	cond    sync.Cond
	indexed uint64
	// idxHead is the record at indexed (its ID and location): the head
	// of what readers see (visible).
	idxHead segment.Head
	idxErr  error // a failed index write: reads fail until a reopen rebuilds
	// idxWritten is the last record written to the index by the segment
	// log's hook (indexWritten), during its group's fsync: the index may
	// hold records up to it that readers do not see yet (indexed <=
	// idxWritten until index publishes them). idxAhead: a group the hook
	// indexed was then aborted (its fsync failed): the index holds records
	// that are not in the segments, so Close leaves its progress marker
	// ahead of them and the next Open rebuilds it.
	idxWritten uint64
	idxAhead   bool
	// tail is the ledger's tail in the index (writeIndex), under idxMu.
	tail *index.Tail
	// hookLeaves are the leaf hashes of the group that groupWritten saw
	// last (with a replica only, whose Writer ships them), the first at
	// sequence number hookFirst, for shipRecords and published; hookBuf
	// is groupWritten's scratch buffer. Only the segment log's committing
	// goroutine touches them, one group at a time (its hooks run in turn).
	hookLeaves []tree.Hash
	hookFirst  uint64
	hookBuf    []byte
	// notify is closed, and replaced, each time indexed advances (or
	// stored, in Replicated mode): the wake-up of subscribers.
	notify chan struct{}

	// repl is the ledger's replica Writer (replication.go), nil without
	// Options.Replica; set before the ledger is reachable. stored (under
	// idxMu), in Replicated mode, is the last published event known to be
	// stored in the bucket: what readers see (visible), so that no read
	// shows an event a takeover could lose.
	repl   *ledgerRepl
	stored segment.Head

	// files: the identity of the ledger's NAME, tree and checkpoint
	// files, for the writer's watch (watch.go).
	files ledgerFiles

	// pending holds the events prepared by the segment log but not yet
	// indexed, in sequence order, for conditions checked in the commit.
	// pendMu is the last of the ledger's locks: taken alone (the
	// prepared and aborted hooks, a batch's Check, under ioMu) or under
	// idxMu, and no lock is taken under it.
	pendMu  sync.Mutex
	pending []inflight
}

// LedgerSpec describes a ledger to create.
type LedgerSpec struct {
	Name        string // unique in the directory; 1 to 1024 bytes of UTF-8, no control, format or bidirectional characters, not 8 hex digits: see "Names" in docs/engine.md
	Description string // valid UTF-8
	Actor       string // who creates it (valid UTF-8); "annal" if empty
}

// LedgerInfo describes a ledger and its current state.
type LedgerInfo struct {
	Name        string
	ID          eventid.LedgerID
	Genesis     eventid.ID // the ID of its first event
	Description string
	Actor       string
	Created     time.Time
	Count       uint64     // events, the genesis event included
	Head        eventid.ID // the ID of its last event
	First, Last time.Time  // times of its first and last events
	Bytes       int64      // size of its segment files
}

// genesisEvent returns the genesis event of a ledger: entity "ledger",
// key the name, event "ledger-created", meta with the actor and creation
// time, data with name and description, as in the Event ID design.
func genesisEvent(spec LedgerSpec, created time.Time) (segment.Entry, error) {
	meta, err := json.Marshal(map[string]string{"actor": spec.Actor, "created": created.UTC().Format("2006-01-02T15:04:05.000000Z")})
	if err != nil {
		return segment.Entry{}, err
	}
	data, err := json.Marshal(map[string]string{"name": spec.Name, "description": spec.Description})
	if err != nil {
		return segment.Entry{}, err
	}
	e := segment.Entry{Entity: "ledger", Key: spec.Name, Event: "ledger-created"}
	// encoding/json escapes <, > and &: canonicalize to JSON.stringify's form.
	if e.Meta, err = canon.AppendObject(nil, meta); err != nil {
		return e, err
	}
	if e.Data, err = canon.Append(nil, data); err != nil {
		return e, err
	}
	return e, nil
}

// checkName returns ErrInvalid if s breaks the rule for a name annal
// makes (names.Problem): an idempotency key, and the names of an appended
// event (entry checks those).
func checkName(what, s string) error {
	if p := names.Problem(s); p != "" {
		return invalid("%s %s", what, p)
	}
	return nil
}

// checkStoredName returns ErrInvalid if s breaks the rule for an entity
// or key a ledger may hold (names.StoredProblem), which a read of a
// stream takes: an imported ledger's names need not follow Append's.
func checkStoredName(what, s string) error {
	if p := names.StoredProblem(s); p != "" {
		return invalid("%s %s", what, p)
	}
	return nil
}

// CreateLedger creates a ledger and appends its genesis event, which
// determines the ledger's ID. If that ID is already taken in the
// directory, the creation time moves on by a microsecond and the ID is
// computed again.
//
// A name that breaks the rule for ledger names (see "Names" in
// docs/engine.md: among others, no control, format or bidirectional
// characters, and not 8 hex digits, the form of a ledger ID) fails with
// ErrInvalid; one in use, with ErrLedgerExists. The name is written to
// the ledger's NAME file before its genesis event, so that it survives
// the loss of the metadata file.
func (db *DB) CreateLedger(ctx context.Context, spec LedgerSpec) (LedgerInfo, error) {
	if err := checkLedgerName(spec.Name); err != nil {
		return LedgerInfo{}, err
	}
	// The genesis event holds them as JSON strings, which would replace
	// invalid UTF-8 with U+FFFD: refuse it rather than store other text.
	for _, f := range [...]struct{ what, v string }{{"description", spec.Description}, {"actor", spec.Actor}} {
		if !utf8.ValidString(f.v) {
			return LedgerInfo{}, invalid("ledger %q: %s %q is not valid UTF-8", spec.Name, f.what, f.v)
		}
	}
	if spec.Actor == "" {
		spec.Actor = "annal"
	}
	if err := ctx.Err(); err != nil {
		return LedgerInfo{}, err
	}
	if err := db.checkDir(true); err != nil {
		return LedgerInfo{}, err
	}
	db.creating.Lock()
	defer db.creating.Unlock()
	db.mu.RLock()
	closed := db.closed
	_, exists := db.byName[spec.Name]
	_, broken := db.broken[spec.Name]
	db.mu.RUnlock()
	switch {
	case closed:
		return LedgerInfo{}, ErrClosed
	case exists || broken:
		return LedgerInfo{}, fmt.Errorf("%w: %q", ErrLedgerExists, spec.Name)
	}

	created := db.opts.Now().UTC().Truncate(time.Microsecond)
	var genesis segment.Entry
	var id eventid.LedgerID
	for {
		var err error
		if genesis, err = genesisEvent(spec, created); err != nil {
			return LedgerInfo{}, err
		}
		if n := len(genesis.Meta) + len(genesis.Data); n > db.opts.MaxEventSize {
			return LedgerInfo{}, invalid("ledger %q: the genesis event's meta and data (actor, name and description) are %d bytes in canonical form, the limit is %d", spec.Name, n, db.opts.MaxEventSize)
		}
		c := eventid.Content{Entity: genesis.Entity, Key: genesis.Key, Event: genesis.Event, Meta: genesis.Meta, Data: genesis.Data}
		id = c.LedgerID()
		if !db.ledgerIDTaken(id) {
			break
		}
		created = created.Add(time.Microsecond)
	}
	if n := db.node; n != nil {
		// The name in the bucket first: two nodes never make two
		// ledgers of one name.
		if err := n.leaseErr(); err != nil {
			return LedgerInfo{}, fmt.Errorf("engine: create ledger %q: %w", spec.Name, err)
		}
		cctx, cancel := context.WithTimeout(ctx, db.opts.StoreTimeout)
		err := n.claimName(cctx, spec.Name, id)
		cancel()
		if err != nil {
			return LedgerInfo{}, fmt.Errorf("engine: create ledger %q: %w", spec.Name, err)
		}
	}

	// The read lock keeps Close from closing the index and the metadata,
	// and from releasing the directory, while the ledger is made (as in
	// Import): nothing of this DB writes in the directory once Close has
	// returned. (ledgerIDTaken, above, takes it too: not under it.)
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		if n := db.node; n != nil {
			n.unclaimName(spec.Name, id)
		}
		return LedgerInfo{}, ErrClosed
	}
	dir := db.ledgerDir(id)
	l := newLedger(db, ledgerMeta{Name: spec.Name, ID: id, Description: spec.Description, Actor: spec.Actor, Created: created})
	// With the hooks from the first append: the genesis event is indexed
	// and published by them, as every append is.
	log, err := segment.Create(dir, l.writerOptions())
	if err != nil {
		db.mu.RUnlock()
		if !errors.Is(err, segment.ErrExists) {
			// What Create made before it failed (the directory, on a
			// full disk); it holds no event. ErrExists: not ours.
			db.fs.RemoveAll(dir)
		}
		if n := db.node; n != nil {
			n.unclaimName(spec.Name, id)
		}
		return LedgerInfo{}, fmt.Errorf("engine: create ledger %q: %w", spec.Name, err)
	}
	l.log = log
	// The name is in the ledger's directory before the ledger exists (its
	// genesis event durable): a lost metadata file cannot lose it.
	err = writeNameFile(db.fs, dir, spec.Name)
	if err == nil {
		// The tree file, before the genesis event: a crash between the
		// two leaves no event, and Open removes the directory.
		l.tree, err = tree.Create(db.fs, db.fs.PathJoin(dir, treeFileName), uint32(id))
	}
	if err == nil && db.repl != nil {
		// Its Writer before its first event, which it ships.
		err = l.attachNew(ctx)
	}
	b := &segment.Batch{Entries: []segment.Entry{genesis}, Durability: Sync}
	if err == nil {
		err = log.Append(b)
	}
	if err == nil {
		err = l.replicaWait(ctx, 1, 1)
	}
	if err == nil {
		l.meta.Genesis = b.IDs[0]
		// Indexed and published by the hooks (published): an index
		// failure is kept in idxErr.
		err = l.indexFailure()
	}
	if err == nil {
		// The first signed checkpoint (size 1), the tree synced.
		_, err = l.issueCheckpoint(0)
	}
	if err == nil && l.repl != nil && l.repl.mode == Replicated {
		// Stored before the ledger takes appends: a restore needs a
		// ledger's signed checkpoint, and a Replicated append is
		// acknowledged as restorable.
		err = l.repl.w.WaitCheckpoint(ctx, 1)
	}
	if err == nil {
		err = meta.Put(db.meta, l.currentMeta())
	}
	if err != nil {
		l.closeReplica(false)
		log.Close()
		l.closeTree()
		db.fs.RemoveAll(dir)
		db.idx.DeleteLedger(id)
		db.mu.RUnlock()
		if n := db.node; n != nil {
			n.unclaimName(spec.Name, id)
		}
		return LedgerInfo{}, fmt.Errorf("engine: create ledger %q: %w", spec.Name, err)
	}
	db.mu.RUnlock()
	info, err := db.register(l, spec.Name, id)
	if err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: create ledger %q: %w", spec.Name, err)
	}
	return info, nil
}

// register makes a ledger that is complete on disk (synced, indexed, its
// metadata written) reachable under name and id. If Close ran since the
// caller let go of the read lock, Close did not know the ledger: its log
// is closed here, and the next Open has the ledger.
func (db *DB) register(l *ledger, name string, id eventid.LedgerID) (LedgerInfo, error) {
	db.mu.Lock()
	if db.closed {
		// Close ran meanwhile (it waited for this call's read): the
		// ledger is closed here, its replica Writer too.
		db.mu.Unlock()
		info := l.info()
		err := l.closeReplica(false)
		return info, errors.Join(err, l.log.Close(), l.closeTree())
	}
	l.watchFiles()
	db.byName[name] = l
	db.byID[id] = l
	db.mu.Unlock()
	return l.info(), nil
}

// newLedger returns the ledger of db that meta describes, its log not
// open yet: the caller opens it (with writerOptions, for a writable
// ledger, whose hooks need the ledger) and sets log before the ledger is
// used. Every ledger is made here (CreateLedger, Open's recovery, Import,
// a read-only open), so that what must be set is set once: the
// condition of idxMu, which Append's waits (awaitFirst) use.
func newLedger(db *DB, meta ledgerMeta) *ledger {
	l := &ledger{db: db, meta: meta}
	l.cond.L = &l.idxMu
	return l
}

// writerOptions returns the options of the segment log of a writable
// ledger: the DB's, with the ledger's part of every commit (Hooks), which
// every append relies on to be checked, indexed and published. The log
// calls them from its first append on: the genesis event's (CreateLedger)
// and the DB's appends once the ledger is reachable; Open's recovery and
// Import append nothing to the log they open.
func (l *ledger) writerOptions() segment.Options {
	so := l.db.segmentOptions(l.meta.ID)
	so.Hooks = l.hooks()
	return so
}

// hooks returns the ledger's part of every commit of its segment log (see
// segment.Hooks for the order and the locks): prepared and aborted keep
// the in-flight events that conditions see (conditions.go), groupWritten
// indexes a group during its fsync, and published adds its leaves to the
// tree and makes it visible.
func (l *ledger) hooks() segment.Hooks {
	return segment.Hooks{Prepared: l.prepared, Aborted: l.aborted, Written: l.groupWritten, Records: l.shipRecords, Committed: l.published}
}

func (db *DB) ledgerIDTaken(id eventid.LedgerID) bool {
	db.mu.RLock()
	_, open := db.byID[id]
	_, _, broken := db.brokenByID(id)
	db.mu.RUnlock()
	if open || broken {
		return true
	}
	_, err := db.fs.Stat(db.ledgerDir(id))
	return err == nil
}

// metaFromGenesis rebuilds a ledger's metadata from its genesis event, for
// a ledger the metadata file does not know (a crash between creating the
// segments and writing the metadata, or a lost metadata file). The name it
// gives is the genesis event's, as it is: Open prefers the ledger's NAME
// file, and checks whichever name it takes (registerLedgers).
func metaFromGenesis(log *segment.Log) (ledgerMeta, error) {
	it := log.NewIterator(1, segment.FirstOffset)
	defer it.Close()
	if !it.Next() {
		if it.Err() != nil {
			return ledgerMeta{}, it.Err()
		}
		return ledgerMeta{}, fmt.Errorf("ledger %s has no genesis event", log.Ledger())
	}
	r := it.Record()
	m := ledgerMeta{ID: log.Ledger(), Genesis: r.ID, Name: string(r.Key), Created: r.ID.Time()}
	var data struct{ Name, Description string }
	var meta struct {
		Actor   string
		Created string
	}
	if json.Unmarshal(r.Data, &data) == nil && data.Name != "" {
		m.Name, m.Description = data.Name, data.Description
	}
	if json.Unmarshal(r.Meta, &meta) == nil {
		m.Actor = meta.Actor
		if t, err := time.Parse(time.RFC3339Nano, meta.Created); err == nil {
			m.Created = t
		}
	}
	return m, nil
}

// currentMeta returns the ledger's metadata with the current head and
// durable witness.
func (l *ledger) currentMeta() ledgerMeta {
	m := l.meta
	m.Witness = l.log.Durable() // first: the head is then at or after it
	h := l.log.Head()
	m.Head, m.Count, m.LastMicros = h.ID, h.Seq, h.ID.Micros()
	return m
}

func (l *ledger) info() LedgerInfo {
	// What readers see: Head is then readable by Get, and the count that
	// of a Scan.
	h := l.followHead()
	info := LedgerInfo{
		Name: l.meta.Name, ID: l.meta.ID, Genesis: l.meta.Genesis, Description: l.meta.Description,
		Actor: l.meta.Actor, Created: l.meta.Created, Count: h.Seq, Head: h.ID,
		First: l.meta.Genesis.Time(), Last: h.ID.Time(),
	}
	fs := l.db.fs
	active, end := l.log.Active()
	if names, err := fs.List(l.log.Dir()); err == nil {
		for _, name := range names {
			if !strings.HasSuffix(name, ".seg") {
				continue // the NAME file
			}
			if fi, err := fs.Stat(fs.PathJoin(l.log.Dir(), name)); err == nil && !fi.IsDir() {
				size := fi.Size()
				if name == active {
					// The zeros a writer keeps ahead of the records
					// are not the ledger's bytes.
					size = min(size, end)
				}
				info.Bytes += size
			}
		}
	}
	return info
}

// indexFailure returns the failure of the ledger's index (idxErr), if it
// failed.
func (l *ledger) indexFailure() error {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	return l.idxErr
}

// publishNextLocked publishes a group of committed batches, in sequence
// order, whose leaves are given, or nil to be hashed with the tree's next
// write: their events to the tree (extendTree),
// then publishLocked. The group must follow what is published (indexed):
// if not, readers could not see a prefix, and the index fails (idxErr)
// until a reopen rebuilds it. Called with idxMu held.
func (l *ledger) publishNextLocked(group []*segment.Batch, leaves []tree.Hash) error {
	if first := group[0].FirstSeq; first != l.indexed+1 {
		if l.idxErr == nil {
			l.idxErr = fmt.Errorf("engine: index of ledger %s: the batch at #%d was published after #%d (reopen the DB to rebuild it)", l.meta.Name, first, l.indexed)
		}
		return l.idxErr
	}
	l.extendTree(group, leaves) // in sequence order, before idxHead moves
	return l.publishLocked(group)
}

// publishLocked makes a group of committed batches, the next in sequence
// order, visible to readers: writes to the index those that the segment
// log's hook did not write (indexWritten), moves idxHead to the group's
// last record, and wakes whoever waits for it (subscribers, awaitIndexed,
// awaitFirst). The group's leaves are in the tree already (extendTree).
// Called with idxMu held.
func (l *ledger) publishLocked(group []*segment.Batch) error {
	lg := group[len(group)-1]
	last := lg.FirstSeq + uint64(len(lg.IDs)) - 1
	defer l.cond.Broadcast()
	defer l.wake()
	lh := segment.Head{ID: lg.IDs[len(lg.IDs)-1], Seq: last, Loc: lg.Locations[len(lg.Locations)-1]}
	if l.idxErr != nil {
		l.indexed, l.idxHead = last, lh
		l.noteUnstored(lh)
		l.indexedUpTo(last)
		return l.idxErr
	}
	// What the segment log's hook wrote during the fsync is in the index
	// already: only the rest (what the hook left because a batch before
	// it was not written yet) is written here.
	todo := group
	for len(todo) > 0 && todo[0].FirstSeq <= max(l.idxWritten, l.indexed) {
		todo = todo[1:]
	}
	var err error
	if len(todo) > 0 {
		err = l.writeIndex(todo, lh)
		l.idxWritten = last
	}
	l.indexed, l.idxHead = last, lh
	l.noteUnstored(lh)
	l.indexedUpTo(last)
	if err != nil {
		l.idxErr = fmt.Errorf("engine: index of ledger %s: %w (reopen the DB to rebuild it)", l.meta.Name, err)
		return l.idxErr
	}
	return nil
}

// groupWritten is the segment log's Written hook: while a group's
// fsync runs, it indexes the group (indexWritten) and, with a replica,
// computes the leaf hashes of its events, which the replica's Writer
// ships (shipRecords) and published adds to the tree once the group is
// committed. Without one, the leaves are hashed with the tree's next
// write (extendTree), once for treeFlushLeaves events and off the append
// path.
//
// With a replica, a group of parallelHookMin events or more is indexed on
// another goroutine while this one hashes the leaves: the two need only
// the group's IDs, locations and entries, which neither changes, and on a
// machine with a second core a batched append then costs the longer of
// the two rather than their sum. Both are done when groupWritten returns.
func (l *ledger) groupWritten(group []*segment.Batch) {
	if l.repl == nil {
		l.indexWritten(group)
		return
	}
	var indexed chan struct{}
	if groupLen(group) >= parallelHookMin {
		indexed = make(chan struct{})
		go func() {
			defer close(indexed)
			l.indexWritten(group)
		}()
	}
	l.hookLeaves = l.hookLeaves[:0]
	l.hookFirst = group[0].FirstSeq
	for _, b := range group {
		for i := range b.IDs {
			var h tree.Hash
			h, l.hookBuf = entryLeafHash(l.hookBuf, b.IDs[i], &b.Entries[i])
			l.hookLeaves = append(l.hookLeaves, h)
		}
	}
	if cap(l.hookBuf) > 1<<16 {
		l.hookBuf = nil // a large event's: not kept
	}
	if indexed == nil {
		l.indexWritten(group)
		return
	}
	<-indexed
}

// parallelHookMin is the smallest group whose indexing groupWritten runs
// on a goroutine of its own: below it, starting and waiting for the
// goroutine costs about what the overlap saves.
const parallelHookMin = 32

// published is the segment log's Committed hook: the committing
// goroutine calls it once a group is durable as asked, before it wakes
// any of the group's appenders, and before the next group is committed.
// It publishes the whole group (extendTree, publishLocked), so that each
// appender, woken once by the segment log with its own result, returns at
// once: no appender waits for another's batch to be published, and no
// broadcast wakes them all on each group. An index failure is kept in
// idxErr, as in publishLocked: the events are stored all the same.
func (l *ledger) published(group []*segment.Batch) {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	// With a replica, the leaves groupWritten hashed for it; without,
	// none yet: the tree's next write hashes them (extendTree).
	var leaves []tree.Hash
	if l.repl != nil {
		leaves = l.hookLeaves
		if l.hookFirst != group[0].FirstSeq || len(leaves) != groupLen(group) {
			// Not expected: the log calls groupWritten for every group
			// before this, with the same batches (segment.Hooks), from its
			// first append on (writerOptions). Under the invariants build
			// tag it is a bug that fails here. Without it, the leaves are
			// computed again from the group itself, which gives the right
			// ones at the cost of hashing twice: recording an error instead
			// would fail the ledger's proofs (treeErr) or reads (idxErr)
			// until a reopen, for a tree that is right.
			if invariants.Enabled {
				panic(fmt.Sprintf("engine: invariant broken: ledger %s: the written hook hashed %d leaves from #%d, the committed group has %d from #%d", l.meta.Name, len(leaves), l.hookFirst, groupLen(group), group[0].FirstSeq))
			}
			leaves = leaves[:0]
			for _, b := range group {
				leaves = append(leaves, batchLeaves(b)...)
			}
		}
	}
	if invariants.Enabled && group[0].FirstSeq != l.indexed+1 {
		// publishNextLocked would keep it as the index's failure.
		panic(fmt.Sprintf("engine: invariant broken: ledger %s: group from #%d committed after #%d was published", l.meta.Name, group[0].FirstSeq, l.indexed))
	}
	l.publishNextLocked(group, leaves)
	if invariants.Enabled {
		l.checkInvariantsLocked()
	}
	switch {
	case l.repl == nil:
	case cap(leaves) > 4*treeFlushLeaves:
		l.hookLeaves = nil // a large group's: not kept
	default:
		l.hookLeaves = leaves[:0]
	}
}

// checkInvariantsLocked panics if the ledger's state once a group is
// published breaks what its fields state: what readers see (indexed,
// idxHead) is the log's head, and the tree (its file and the leaves
// waiting in treePend) holds a leaf for each of those events, unless a
// tree write failed. Called by published, with idxMu held, under the
// invariants build tag only (see package segment/invariants).
func (l *ledger) checkInvariantsLocked() {
	l.waitTreeLocked() // the tree's size counts the leaves of its write in progress
	var problem string
	switch head := l.log.Head(); {
	case l.indexed != head.Seq || l.idxHead != head:
		problem = fmt.Sprintf("published #%d (head %+v), the log's head is #%d (%+v)", l.indexed, l.idxHead, head.Seq, head)
	case l.idxWritten > l.indexed && !l.idxAhead:
		problem = fmt.Sprintf("indexed up to #%d during the fsync, published #%d", l.idxWritten, l.indexed)
	case l.treeErr == nil && l.tree != nil && l.tree.Size()+uint64(len(l.treePend)) != l.indexed:
		problem = fmt.Sprintf("the tree holds %d leaves and %d wait, %d events are published", l.tree.Size(), len(l.treePend), l.indexed)
	default:
		return
	}
	panic(fmt.Sprintf("engine: invariant broken after a commit of ledger %s: %s", l.meta.Name, problem))
}

// groupLen returns the number of records of a group of batches.
func groupLen(group []*segment.Batch) int {
	n := 0
	for _, b := range group {
		n += len(b.IDs)
	}
	return n
}

// indexWritten is the segment log's hook (segment.Hooks.Written): it
// writes a group of batches to the index once they are written to the
// segment, while their fsync runs, so that a Sync append costs the longer
// of the two rather than their sum. Nothing is published here: readers see
// the group once its fsync is done and index moves idxHead past it
// (visible), so the index may hold records that readers do not see yet,
// and every read is bounded by visible (or by the log's head, which moves
// after the fsync). A failed index write is kept in idxErr, as in
// publishLocked. The index's tail takes records in sequence order: a group
// that does not follow what is written (a batch before it is not indexed
// yet) is left to publishLocked.
func (l *ledger) indexWritten(group []*segment.Batch) {
	lg := group[len(group)-1]
	last := lg.FirstSeq + uint64(len(lg.IDs)) - 1
	lh := segment.Head{ID: lg.IDs[len(lg.IDs)-1], Seq: last, Loc: lg.Locations[len(lg.Locations)-1]}
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if l.idxErr != nil || group[0].FirstSeq != max(l.idxWritten, l.indexed)+1 {
		return
	}
	err := l.writeIndex(group, lh)
	l.idxWritten = last
	if err != nil && l.idxErr == nil {
		l.idxErr = fmt.Errorf("engine: index of ledger %s: %w (reopen the DB to rebuild it)", l.meta.Name, err)
	}
}

// writeIndex adds the records of a group of committed batches to the
// index's tail of the ledger (no Pebble write: the tail is written in bulk
// when full, see index.Tail), with the progress marker at lh, their last.
// Called with idxMu held: the tail has one writer.
func (l *ledger) writeIndex(group []*segment.Batch, lh segment.Head) error {
	if l.tail == nil {
		l.tail = l.db.idx.Tail(l.meta.ID)
	}
	t := l.tail
	for _, g := range group {
		for i, id := range g.IDs {
			e := &g.Entries[i]
			t.Add(id, g.FirstSeq+uint64(i), g.Locations[i], e.Entity, e.Key, e.Event)
			if i == 0 && g.IdempotencyKey != nil {
				// The digest the append compared (kept in flight), as a
				// rebuild computes it from the records (reindexer).
				t.AddIdempotency(string(g.IdempotencyKey), uint32(len(g.IDs)), l.inflightDigest(g))
			}
		}
	}
	return t.Publish(lh, l.log.Durable())
}

// visible returns the head of what readers see: the last record of the
// indexed prefix of the ledger. Every append that returned is in it
// (Append returns once its events are indexed), and so is every event a
// returned ConditionError names (Append waits for it: awaitIndexed).
// Records committed after it, still being indexed, are not: reads that
// walk the segments (Scan) stop at it, as those that read the index do,
// so that every read sees the same prefix and Get finds what they show.
//
// In Replicated mode it is the last of those stored in the bucket too
// (stored): an event is not shown before its append could return.
func (l *ledger) visible() segment.Head {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if r := l.repl; r != nil && r.mode == Replicated && l.stored.Seq < l.idxHead.Seq {
		return l.stored
	}
	return l.idxHead
}

// unstored says, in Replicated mode, that event seq is beyond what
// readers see (visible): not stored yet. Get by ID shows no more than
// the other reads do (docs/replication.md, "Readers see only what is
// stored").
func (l *ledger) unstored(seq uint64) bool {
	l.idxMu.Lock()
	replicated := l.repl != nil && l.repl.mode == Replicated
	l.idxMu.Unlock()
	return replicated && seq > l.visible().Seq
}

// awaitIndexed waits until the index covers the record at seq, which a
// condition was checked against: read-your-conflicts. The batch that
// held it was committed or aborted by the time Append returned the
// condition's error (a group is written, or aborted, before any of its
// appenders returns); if it was committed, the log's head is at or past
// seq, and the appender indexes it before its own Append returns. So the
// wait ends: when the index reaches seq, when the batch was aborted (the
// log's head is below seq: there is no such event to see), when the index
// failed (reads fail too), or when Close begins; or when ctx ends, whose
// error it then returns.
func (l *ledger) awaitIndexed(ctx context.Context, seq uint64) error {
	for {
		l.idxMu.Lock()
		done := l.indexed >= seq || l.idxErr != nil
		if l.notify == nil {
			l.notify = make(chan struct{})
		}
		next := l.notify
		l.idxMu.Unlock()
		if done || l.log.Head().Seq < seq {
			return nil
		}
		select {
		case <-next:
		case <-l.db.readers.closingCh():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake wakes the subscribers. Called with idxMu held.
func (l *ledger) wake() {
	if l.notify != nil {
		close(l.notify)
		// The next waiter makes the next one (changed, awaitIndexed): a
		// commit nobody waits for makes no channel.
		l.notify = nil
	}
}

// changed returns a channel closed at the next commit.
func (l *ledger) changed() <-chan struct{} {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if l.notify == nil {
		l.notify = make(chan struct{})
	}
	return l.notify
}

// ledger returns the open ledger with that name, or that ID in hex. A
// string that reads as a ledger ID (8 hex digits, either case) is only
// ever an ID: no ledger name reads as one (names.LedgerProblem), so the
// two kinds of lookup cannot meet.
func (db *DB) ledger(name string) (*ledger, error) {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return nil, ErrClosed
	}
	// By name first: no name reads as an ID, so a name found is not one,
	// and the append path does not build ParseLedgerID's error (two
	// allocations and a Sprintf) for every append by name.
	if l, ok := db.byName[name]; ok {
		return l, nil
	}
	if id, err := eventid.ParseLedgerID(name); err == nil {
		if l, ok := db.byID[id]; ok {
			return l, nil
		}
		if _, err, ok := db.brokenByID(id); ok {
			return nil, err
		}
		return nil, fmt.Errorf("%w: no ledger has the ID %s", ErrLedgerNotFound, id)
	}
	if err, ok := db.broken[name]; ok {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %q", ErrLedgerNotFound, name)
}

// Ledger returns the ledger with that name, or that ID in hex (8 hex
// digits, either case: a string of that form is only ever taken as an
// ID, since no name may have it).
func (db *DB) Ledger(name string) (LedgerInfo, error) {
	l, err := db.ledger(name)
	if err != nil {
		return LedgerInfo{}, err
	}
	return l.info(), nil
}

// Ledgers returns every open ledger, by name: none once Close has begun.
func (db *DB) Ledgers() []LedgerInfo {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return nil
	}
	ls := make([]*ledger, 0, len(db.byName))
	for _, l := range db.byName {
		ls = append(ls, l)
	}
	db.mu.RUnlock()
	out := make([]LedgerInfo, len(ls))
	for i, l := range ls {
		out[i] = l.info()
	}
	slices.SortFunc(out, func(a, b LedgerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
