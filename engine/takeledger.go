package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TakeLedger makes this open DB the writer of the bucket's ledger name
// (its name or ID), online: the ledger a takeover moves between nodes
// that share a bucket.
//
//   - A ledger the directory lacks is restored from the bucket (every
//     object verified, the bucket's checkpoint checked with the
//     directory's key, as Restore does) into a temporary folder of the
//     ledgers directory, renamed into place, recovered (its index, tree
//     file and metadata built) and registered.
//   - A ledger the directory has behind the bucket (refused at Open with
//     ErrBehind or ErrNotOwner, or fenced since: another node took it)
//     gets the bucket's records beyond its head, as Takeover pulls them:
//     its records must be a prefix of the bucket's, else ErrDiverged and
//     nothing is written.
//
// After that pull the node that writes the ledger is fenced from the
// bucket (the next epoch and a fence chunk: its appends fail with
// ErrFenced), the events it stored meanwhile are pulled, and the ledger
// is taken and, with Options.Node, its owner object names this node: a
// ledger moves off a node that keeps appending. A TakeLedger that fails
// after the fence leaves the ledger fenced, written by no node until a
// TakeLedger succeeds. A ledger this DB
// writes already is left as it is (its owner object written if it is
// not this node's). It needs a Replica; with Options.Node, a lease that
// holds (ErrNotOwner otherwise). A name whose claim in the bucket
// (names/) holds a ledger whose manifests give another name is refused
// (corruption.Err, naming the claim).
func (db *DB) TakeLedger(ctx context.Context, name string) (LedgerInfo, error) {
	if err := db.readOnlyErr("TakeLedger"); err != nil {
		return LedgerInfo{}, err
	}
	if db.repl == nil {
		return LedgerInfo{}, invalid("take ledger %s: the DB has no replica (Options.Replica)", name)
	}
	if err := db.node.leaseErr(); err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: take ledger %s: %w", name, err)
	}
	if err := db.checkDir(true); err != nil {
		return LedgerInfo{}, err
	}
	st := db.repl.store
	id, err := resolveLedger(ctx, st, name)
	if err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: take ledger %s from %s: %w", name, db.repl.endpoint, err)
	}
	if name != id.String() {
		// A claim under names/ that names another ledger (edited, or
		// put back from another bucket) must not move that one.
		m, _, err := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: id}).Manifest(ctx)
		if err != nil {
			return LedgerInfo{}, fmt.Errorf("engine: take ledger %s (%s) from %s: %w", name, id, db.repl.endpoint, err)
		}
		if m.Name != "" && m.Name != name {
			return LedgerInfo{}, fmt.Errorf("engine: take ledger %s from %s: %w: %s claims ledger %s for the name, whose manifests name it %q", name, db.repl.endpoint, corruption.Err, replica.NameKey(name), id, m.Name)
		}
	}
	db.creating.Lock()
	defer db.creating.Unlock()
	if err := db.enterRead(); err != nil {
		return LedgerInfo{}, err
	}
	defer db.exitRead()
	info, err := db.takeLedger(ctx, id)
	if err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: take ledger %s (%s) from %s: %w", name, id, db.repl.endpoint, err)
	}
	return info, nil
}

// takeLedger is TakeLedger of ledger id, with creating held and a read
// entered.
func (db *DB) takeLedger(ctx context.Context, id eventid.LedgerID) (LedgerInfo, error) {
	db.mu.RLock()
	l, open := db.byID[id]
	db.mu.RUnlock()
	var stored uint64
	replicated := false
	if open {
		r := l.repl
		if r != nil && !r.fenced.Load() && !r.w.Fenced() {
			m, _, err := replica.NewReader(replica.ReaderConfig{Store: db.repl.store, Ledger: id}).Manifest(ctx)
			if err != nil {
				return LedgerInfo{}, err
			}
			if m.Epoch == r.w.Status().Epoch {
				// Ours already.
				if n := db.node; n != nil {
					n.recordOwner(ctx, l, m.Epoch)
				}
				return l.info(), nil
			}
		}
		// Fenced: another node took it. Closed here, pulled below.
		db.unregister(l)
		if r != nil && r.mode == Replicated {
			stored = r.w.Status().Stored
			replicated = true
		}
	}
	for try := 0; ; try++ {
		info, err := db.pullAndTake(ctx, id)
		if errors.Is(err, ErrDiverged) && replicated {
			// Its events after the last one it stored were never
			// acknowledged (Replicated mode), and another writer
			// stored others in their place: the folder is set aside,
			// and the ledger restored from the bucket.
			if err := db.setAside(id, stored); err != nil {
				return LedgerInfo{}, err
			}
			replicated = false
			info, err = db.pullAndTake(ctx, id)
		}
		if !errors.Is(err, ErrBehind) {
			return info, err
		}
		if try+1 == takeoverTries {
			// The cure that the error of a directory behind the bucket
			// gives (restore, takeover) is not this one's.
			return info, fmt.Errorf("%w: the bucket moved on during each of %d fences, pulls and takes (other nodes took the ledger meanwhile): take it again", ErrBehind, takeoverTries)
		}
	}
}

// FencedCopy is a ledger's folder that TakeLedger set aside
// (DB.FencedCopies): a Replicated copy this DB held fenced, whose events
// after the last one it stored in the bucket were written locally by
// appends that failed (never acknowledged) while another node wrote
// others in their place. Open passes it over; nothing removes it.
type FencedCopy struct {
	// Ledger is the ledger it is a copy of.
	Ledger eventid.LedgerID
	// Path is the folder, ledgers/.ID.fenced-TIME under the DB's
	// directory.
	Path string
	// SetAside is when TakeLedger set it aside (TIME in its name).
	SetAside time.Time
}

// fencedInfix is between the ledger ID and the time in the name of a
// folder TakeLedger set aside (".ID.fenced-TIME").
const fencedInfix = ".fenced-"

// FencedCopies lists the ledger folders TakeLedger set aside in this
// DB's directory (FencedCopy), oldest first. Each holds only events that
// were never acknowledged beyond what the bucket has; it is kept as
// evidence, for the operator to read and remove (docs/replication.md,
// "Nodes and ownership").
func (db *DB) FencedCopies() ([]FencedCopy, error) {
	dir := filepath.Join(db.dir, ledgersDir)
	names, err := db.fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("engine: list the fenced copies in %s: %w", dir, err)
	}
	var out []FencedCopy
	for _, name := range names {
		c, ok := parseFencedCopy(name)
		if !ok {
			continue
		}
		c.Path = filepath.Join(dir, name)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b FencedCopy) int { return a.SetAside.Compare(b.SetAside) })
	return out, nil
}

// parseFencedCopy reads a ledgers directory entry's name as a folder
// setAside made (".ID.fenced-TIME", TIME in Unix nanoseconds).
func parseFencedCopy(name string) (FencedCopy, bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return FencedCopy{}, false
	}
	idText, ns, ok := strings.Cut(rest, fencedInfix)
	if !ok {
		return FencedCopy{}, false
	}
	id, err := eventid.ParseLedgerID(idText)
	if err != nil || id.String() != idText {
		return FencedCopy{}, false
	}
	t, err := strconv.ParseInt(ns, 10, 64)
	if err != nil || t <= 0 {
		return FencedCopy{}, false
	}
	return FencedCopy{Ledger: id, SetAside: time.Unix(0, t).UTC()}, true
}

// setAside renames ledger id's folder to ledgers/.ID.fenced-TIME, which
// Open passes over (kept for whoever wants to look at it: FencedCopies),
// and removes its entries from the index: a fenced copy whose events
// after stored were never acknowledged.
func (db *DB) setAside(id eventid.LedgerID, stored uint64) error {
	dir := db.ledgerDir(id)
	aside := filepath.Join(db.dir, ledgersDir, fmt.Sprintf(".%s%s%d", id, fencedInfix, time.Now().UnixNano()))
	if err := db.fs.Rename(dir, aside); err != nil {
		return fmt.Errorf("set aside the fenced copy of ledger %s (its events after #%d were not acknowledged): %w", id, stored, err)
	}
	if err := segment.SyncDir(db.fs, filepath.Join(db.dir, ledgersDir)); err != nil {
		return err
	}
	return db.idx.DeleteLedger(id)
}

// unregister makes an open ledger unreachable and closes it (its Writer
// without a checkpoint: it was fenced).
func (db *DB) unregister(l *ledger) {
	db.mu.Lock()
	delete(db.byID, l.meta.ID)
	if db.byName[l.meta.Name] == l {
		delete(db.byName, l.meta.Name)
	}
	delete(db.witnessed, l)
	db.mu.Unlock()
	l.closeReplica(false)
	l.log.Close()
	l.closeTree()
}

// pullAndTake pulls ledger id from the bucket into the directory (into
// a new folder, or onto the folder it has), fences its writer from the
// bucket, pulls what that writer stored meanwhile, and takes it: a
// writer that keeps appending cannot move the bucket on past the fence.
// What can fail for this directory's reasons (a folder that diverged,
// the checkpoint not signed by its key) fails at the first pull, before
// anything is written to the bucket. ErrBehind: another node took the
// ledger between the fence and the take; pull again.
func (db *DB) pullAndTake(ctx context.Context, id eventid.LedgerID) (LedgerInfo, error) {
	st := db.repl.store
	if db.verifier == nil {
		return LedgerInfo{}, fmt.Errorf("no key to check the bucket's checkpoints with: %w", db.keyErr)
	}
	m, _, err := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: id}).Manifest(ctx)
	if err != nil {
		return LedgerInfo{}, err
	}
	dir := db.ledgerDir(id)
	known, haveMeta, err := db.knownMeta(id)
	if err != nil {
		return LedgerInfo{}, err
	}
	into, local, fresh := dir, segment.Head{ID: eventid.Genesis(id)}, false
	if _, serr := db.fs.Stat(dir); serr == nil {
		// Behind: its head as recovery finds it, then the bucket's
		// records after it.
		if local, err = db.folderHead(id, known, haveMeta); err != nil {
			return LedgerInfo{}, err
		}
	} else {
		into, fresh = filepath.Join(db.dir, ledgersDir, "."+id.String()+takeDirSuffix), true
		if err := db.fs.RemoveAll(into); err != nil {
			return LedgerInfo{}, err
		}
	}
	fail := func(err error) (LedgerInfo, error) {
		if fresh {
			db.fs.RemoveAll(into)
		}
		return LedgerInfo{}, err
	}
	res, err := pullFromBucket(ctx, db.fs, into, id, local, st, db.verifier, false)
	if err != nil {
		return fail(err)
	}
	tail, fenced, err := db.fenceFromBucket(ctx, id, m.Name)
	if err != nil {
		return fail(err)
	}
	if fenced && tail.Seq != res.Yielded.Seq {
		if _, err := pullFromBucket(ctx, db.fs, into, id, res.Yielded, st, db.verifier, false); err != nil {
			return fail(fmt.Errorf("pull the events stored before the fence: %w", err))
		}
	}
	if fresh {
		if m.Name != "" {
			if err := writeNameFile(db.fs, into, m.Name); err != nil {
				return fail(err)
			}
		}
		if err := db.fs.Rename(into, dir); err != nil {
			return fail(err)
		}
		if err := segment.SyncDir(db.fs, filepath.Join(db.dir, ledgersDir)); err != nil {
			return LedgerInfo{}, err
		}
		if err := db.idx.DeleteLedger(id); err != nil {
			return LedgerInfo{}, err
		}
		known, haveMeta = ledgerMeta{}, false
	}
	return db.recoverAndTake(ctx, id, m.Name, known, haveMeta)
}

// fenceFromBucket fences ledger id's writer (replica.Fence), and returns
// the bucket's tail at the fence. fenced is false for a bucket whose
// chunks do not give the tree at its tail: the take fences it, as Open
// takes a ledger.
func (db *DB) fenceFromBucket(ctx context.Context, id eventid.LedgerID, name string) (tail replica.Tail, fenced bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, db.opts.StoreTimeout)
	defer cancel()
	tail, err = replica.Fence(ctx, replica.Config{
		Store: db.repl.store, Ledger: id, Name: name, Identity: db.repl.identity,
		StoreTimeout: db.opts.StoreTimeout, Endpoint: db.repl.endpoint, Now: db.opts.Now,
	})
	switch {
	case errors.Is(err, replica.ErrFenceNeedsRecords):
		return replica.Tail{}, false, nil
	case err != nil:
		return replica.Tail{}, false, fmt.Errorf("fence the ledger's writer: %w", err)
	}
	return tail, true, nil
}

// takeDirSuffix ends the name of the folder a TakeLedger pulls a ledger
// into (".ID.take"), renamed to the ledger's once complete: one left by
// a crash is never a ledger, and Open removes it.
const takeDirSuffix = ".take"

// removeTakeLeftovers removes the folders of TakeLedger pulls that a
// crash interrupted, among names (the ledgers directory's entries).
func removeTakeLeftovers(fs vfs.FS, ledgersPath string, names []string) error {
	isTake := func(name string) bool { return strings.HasPrefix(name, ".") && strings.HasSuffix(name, takeDirSuffix) }
	return removeLeftovers(fs, ledgersPath, names, isTake, "an interrupted TakeLedger")
}

// knownMeta returns the metadata's record of ledger id, if it has one.
func (db *DB) knownMeta(id eventid.LedgerID) (ledgerMeta, bool, error) {
	ms, err := meta.Load(db.meta)
	if err != nil {
		return ledgerMeta{}, false, fmt.Errorf("read metadata: %w", err)
	}
	for _, m := range ms {
		if m.ID == id {
			return m, true, nil
		}
	}
	return ledgerMeta{}, false, nil
}

// folderHead recovers ledger id's folder to learn its head, and closes
// it again.
func (db *DB) folderHead(id eventid.LedgerID, known ledgerMeta, haveMeta bool) (segment.Head, error) {
	// What the index holds of it in memory (an Open that refused it, a
	// fenced ledger closed) is written first: a recovery indexes into
	// an empty tail.
	if err := db.idx.FlushTails(); err != nil {
		return segment.Head{}, err
	}
	marker, _, err := db.idx.Progress(id)
	if err != nil {
		return segment.Head{}, err
	}
	l, err := db.recoverLedger(id, known, haveMeta, marker, nil)
	if err != nil {
		return segment.Head{}, fmt.Errorf("the directory's copy of the ledger does not recover: %w", err)
	}
	head := l.log.Head()
	err = errors.Join(l.log.Close(), l.closeTree())
	return head, err
}

// recoverAndTake recovers ledger id's folder (complete on disk), names
// it, writes its metadata, takes it in the bucket and registers it.
func (db *DB) recoverAndTake(ctx context.Context, id eventid.LedgerID, name string, known ledgerMeta, haveMeta bool) (LedgerInfo, error) {
	if err := db.idx.FlushTails(); err != nil {
		return LedgerInfo{}, err
	}
	marker, _, err := db.idx.Progress(id)
	if err != nil {
		return LedgerInfo{}, err
	}
	l, err := db.recoverLedger(id, known, haveMeta, marker, nil)
	if err != nil {
		return LedgerInfo{}, fmt.Errorf("recover the pulled ledger: %w", err)
	}
	fail := func(err error) (LedgerInfo, error) {
		l.log.Close()
		l.closeTree()
		return LedgerInfo{}, err
	}
	if name == "" {
		name = l.meta.Name
	}
	db.mu.RLock()
	other, taken := db.byName[name]
	db.mu.RUnlock()
	if taken && other != l {
		return fail(fmt.Errorf("%w: %q: another ledger of this directory (%s) has the name", ErrLedgerExists, name, other.meta.ID))
	}
	l.meta.Name = name
	if err := meta.Put(db.meta, l.currentMeta()); err != nil {
		return fail(fmt.Errorf("write metadata: %w", err))
	}
	if err := l.attachReplica(ctx); err != nil {
		return fail(err)
	}
	db.mu.Lock()
	if key, _, ok := db.brokenByID(id); ok {
		delete(db.broken, key)
		delete(db.brokenIDs, id)
	}
	db.mu.Unlock()
	return db.register(l, name, id)
}
