package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TakeoverResult says what Takeover pulled into a ledger of the
// directory: its local head before, and the head the bucket gave it.
type TakeoverResult struct {
	Ledger eventid.LedgerID
	Name   string
	// Local is the directory's last event before the takeover, Pulled the
	// last after it (equal when the bucket was not ahead).
	Local, Pulled uint64
	// Signed, when events were pulled, is the number of events the
	// bucket's signed checkpoint vouches for: those pulled after it were
	// checked only for what anyone with write access to the bucket can
	// recompute (frames, chains, the chunks' Merkle roots). With
	// TakeoverOptions.Unsigned RestoreUnsigned and a bucket without a
	// checkpoint, it is the directory's own checkpoint's size.
	Signed uint64
	// Skipped, if not "", says why nothing was pulled into the ledger:
	// its bucket is ahead but holds no signed checkpoint, and
	// TakeoverOptions.Unsigned is SkipUnsigned. It stays behind its
	// bucket: the DB returned does not take it (DB.Unavailable, ErrBehind).
	Skipped string
}

// TakeoverOptions say what Takeover does beyond Options.
type TakeoverOptions struct {
	// Unsigned is what Takeover does with a ledger whose bucket holds
	// events beyond the directory's but no signed checkpoint
	// (ErrNoCheckpoint: its checkpoint object deleted, by mistake or to
	// pass off other events), as RestoreOptions.Unsigned does for a
	// restore: RefuseUnsigned (the default) fails the takeover, naming
	// the ledger, before anything is pulled into it or taken;
	// SkipUnsigned pulls nothing into it and takes the other ledgers
	// (TakeoverResult.Skipped); RestoreUnsigned pulls its events too,
	// verified as any other (frames, chains, the chunks' hash chain and
	// Merkle roots, byte for byte the directory's where it has them),
	// and the directory's key signs them at its next checkpoint, as an
	// extension of the directory's own: the operator vouches for the
	// bucket.
	Unsigned Unsigned
	// Ledgers, if not empty, are the ledgers Unsigned applies to, each
	// by its name or its ID in hex (annal takeover --ledger, repeated):
	// any other ledger whose bucket is ahead without a signed checkpoint
	// is refused as RefuseUnsigned refuses it, failing the takeover. The
	// selection says only that: every ledger of the directory is still
	// pulled and taken as without it (Takeover takes them all). A name
	// that is no ledger of the directory, or Ledgers with RefuseUnsigned
	// (which selects nothing), is refused with ErrInvalid before anything
	// is read from the bucket.
	Ledgers []string
}

// unsignedFor is what the takeover does with the ledger id, named name,
// if its bucket is ahead without a signed checkpoint: Unsigned, if
// Ledgers is empty or selects it; RefuseUnsigned otherwise.
func (to TakeoverOptions) unsignedFor(id eventid.LedgerID, name string) Unsigned {
	if len(to.Ledgers) == 0 {
		return to.Unsigned
	}
	for _, sel := range to.Ledgers {
		if selects(sel, id, name) {
			return to.Unsigned
		}
	}
	return RefuseUnsigned
}

// selects says whether sel, a ledger's name or its ID in hex (either
// case: no name reads as an ID), is the ledger id named name.
func selects(sel string, id eventid.LedgerID, name string) bool {
	if got, err := eventid.ParseLedgerID(sel); err == nil {
		return got == id
	}
	return sel == name
}

// Takeover makes the data directory dir the writer of its replicated
// ledgers (opts.Replica), also of those whose bucket is ahead of it (an
// older copy of the directory, a node that was not the writer): it pulls
// the records the bucket holds beyond each ledger's head into the
// ledger's segments, every object verified and the bucket's checkpoint
// checked with the directory's key, then opens the directory as Open
// does, which takes every ledger (the next epoch: the writer that held
// it is fenced, and its appends fail with ErrFenced).
//
// The directory's records must be a prefix of the bucket's: a ledger
// whose records differ is refused with ErrDiverged and nothing is written
// into it. The directory must not be open (ErrLocked): it is held while
// the records are pulled. A ledger whose bucket moved ahead again
// between the pull and the take (its writer at work) is pulled again, a
// few times; after that it is refused as Open refuses it (ErrBehind, in
// Unavailable). A follower's directory (OpenFollower), closed, is
// promoted so: its follower.json is removed once the pull is done.
// annal takeover URL DIR. It is TakeoverWith with the default
// TakeoverOptions.
func Takeover(ctx context.Context, dir string, opts *Options) (*DB, []TakeoverResult, error) {
	return TakeoverWith(ctx, dir, opts, TakeoverOptions{})
}

// TakeoverWith is Takeover, with what to do with a ledger whose bucket
// holds no signed checkpoint (TakeoverOptions.Unsigned).
func TakeoverWith(ctx context.Context, dir string, opts *Options, to TakeoverOptions) (*DB, []TakeoverResult, error) {
	o := opts.withDefaults()
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	if o.Replica == "" && o.replicaStore == nil {
		return nil, nil, invalid("takeover of %s: no replica (Options.Replica)", dir)
	}
	if len(to.Ledgers) > 0 && to.Unsigned == RefuseUnsigned {
		return nil, nil, invalid("takeover of %s: TakeoverOptions.Ledgers (--ledger) %q select the ledgers Unsigned applies to, and Unsigned is RefuseUnsigned, the default of every ledger: give SkipUnsigned or RestoreUnsigned (--unsigned skip or pull)", dir, to.Ledgers)
	}
	var res []TakeoverResult
	for try := 0; ; try++ {
		got, err := pullBehind(ctx, dir, o, to)
		if err != nil {
			return nil, res, fmt.Errorf("engine: takeover of %s: %w", dir, err)
		}
		res = mergeTakeover(res, got)
		// A follower's directory (OpenFollower) becomes a writer's.
		if err := removeFollowerFile(dir); err != nil {
			return nil, res, fmt.Errorf("engine: takeover of %s: %w", dir, err)
		}
		db, err := Open(dir, opts)
		if err != nil {
			return nil, res, fmt.Errorf("engine: takeover of %s: %w", dir, err)
		}
		// A writer still at work stored more between the pull and the
		// take: its ledger is refused (ErrBehind), the bucket not yet
		// fenced. Pull again and take again.
		behind := false
		for name, err := range db.Unavailable() {
			behind = behind || errors.Is(err, ErrBehind) && !skippedLedger(res, name)
		}
		if !behind || try+1 == takeoverTries {
			return db, res, nil
		}
		if err := db.Close(); err != nil {
			return nil, res, fmt.Errorf("engine: takeover of %s: %w", dir, err)
		}
	}
}

// takeoverTries bounds the pulls of a Takeover that finds the bucket
// ahead again at the take (a writer at work that keeps storing).
const takeoverTries = 5

// skippedLedger says whether the ledger name was skipped
// (TakeoverResult.Skipped): behind its bucket on purpose.
func skippedLedger(res []TakeoverResult, name string) bool {
	for _, r := range res {
		if r.Name == name && r.Skipped != "" {
			return true
		}
	}
	return false
}

// mergeTakeover adds the results of a later pull to those of the pulls
// before: a ledger's Local stays the first's.
func mergeTakeover(res, got []TakeoverResult) []TakeoverResult {
	if res == nil {
		return got
	}
	for _, g := range got {
		for i := range res {
			if res[i].Ledger == g.Ledger {
				res[i].Pulled = max(res[i].Pulled, g.Pulled)
			}
		}
	}
	return res
}

// pullBehind pulls into each ledger of dir, held (its lock) meanwhile,
// what its bucket holds beyond the ledger's head.
func pullBehind(ctx context.Context, dir string, o Options, to TakeoverOptions) ([]TakeoverResult, error) {
	var fs vfs.FS = vfs.Default
	if o.fs != nil {
		return nil, invalid("takeover: a test file system is not supported")
	}
	lock, dirFile, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if dirFile != nil {
		defer dirFile.Close()
	}
	// The heads as recovery finds them, read without writing anything.
	ro := o
	ro.Replica, ro.replicaStore, ro.Replication = "", nil, 0
	ro.Node, ro.NodeLease, ro.TakeOverDeadNodes = Node{}, 0, false
	rdb, err := OpenReadOnly(dir, &ro)
	if err != nil {
		return nil, err
	}
	type local struct {
		id   eventid.LedgerID
		name string
		head segment.Head
	}
	var ledgers []local
	for id, l := range rdb.byID {
		ledgers = append(ledgers, local{id: id, name: l.meta.Name, head: l.log.Head()})
	}
	v := rdb.verifier
	keyErr := rdb.keyErr
	var refused []error
	for _, err := range rdb.Unavailable() {
		refused = append(refused, err)
	}
	if err := rdb.Close(); err != nil {
		return nil, err
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("ledgers that do not open are not taken over (annal verify says more): %w", errors.Join(refused...))
	}
	if v == nil {
		return nil, fmt.Errorf("no key to check the bucket's checkpoints with: %w", keyErr)
	}
	var unknown []string
	for _, sel := range to.Ledgers {
		found := false
		for _, l := range ledgers {
			found = found || selects(sel, l.id, l.name)
		}
		if !found {
			unknown = append(unknown, sel)
		}
	}
	if len(unknown) > 0 {
		return nil, invalid("TakeoverOptions.Ledgers (--ledger) %q: no ledger of the directory has that name or ID", unknown)
	}
	db := &DB{dir: dir, opts: o, fs: fs}
	sctx, cancel := context.WithTimeout(ctx, o.StoreTimeout)
	err = db.openReplicaStore(sctx)
	cancel()
	if err != nil {
		return nil, err
	}
	var out []TakeoverResult
	for _, l := range ledgers {
		r := TakeoverResult{Ledger: l.id, Name: l.name, Local: l.head.Seq, Pulled: l.head.Seq}
		bl, err := inspectStore(ctx, db.repl.store, db.repl.endpoint, []eventid.LedgerID{l.id})
		if err != nil {
			return out, err
		}
		if bl[0].Stored > l.head.Seq {
			unsigned := to.unsignedFor(l.id, l.name)
			got, err := pullFromBucket(ctx, fs, db.ledgerDir(l.id), l.id, l.head, db.repl.store, v, unsigned == RestoreUnsigned)
			if errors.Is(err, ErrNoCheckpoint) && unsigned == SkipUnsigned {
				r.Skipped = fmt.Sprintf("the bucket holds events #%d to #%d beyond the directory's but no signed checkpoint (%s); skipped as asked (TakeoverOptions.Unsigned SkipUnsigned, annal takeover --unsigned skip): not pulled, not taken", l.head.Seq+1, bl[0].Stored, replica.CheckpointKey(l.id))
				out = append(out, r)
				continue
			}
			if errors.Is(err, ErrNoCheckpoint) && unsigned != to.Unsigned {
				err = fmt.Errorf("%w (it is not among the ledgers TakeoverOptions.Unsigned applies to, TakeoverOptions.Ledgers %q, annal takeover --ledger: name it too to skip or pull it)", err, to.Ledgers)
			} else if errors.Is(err, ErrNoCheckpoint) {
				err = fmt.Errorf("%w (take the other ledgers with TakeoverOptions.Unsigned SkipUnsigned, annal takeover --unsigned skip; pull its events too, signed by this directory's key, with RestoreUnsigned, --unsigned pull, if you vouch for the bucket)", err)
			}
			if err != nil {
				return out, fmt.Errorf("ledger %s (%q): pull events #%d to #%d from %s: %w", l.id, l.name, l.head.Seq+1, bl[0].Stored, db.repl.endpoint, err)
			}
			r.Pulled = max(r.Pulled, got.Yielded.Seq)
			r.Signed = got.Signed
		}
		out = append(out, r)
	}
	return out, nil
}
