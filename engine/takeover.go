package engine

import (
	"context"
	"errors"
	"fmt"

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
	// recompute (frames, chains, the chunks' Merkle roots).
	Signed uint64
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
// annal takeover URL DIR.
func Takeover(ctx context.Context, dir string, opts *Options) (*DB, []TakeoverResult, error) {
	o := opts.withDefaults()
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	if o.Replica == "" && o.replicaStore == nil {
		return nil, nil, invalid("takeover of %s: no replica (Options.Replica)", dir)
	}
	var res []TakeoverResult
	for try := 0; ; try++ {
		got, err := pullBehind(ctx, dir, o)
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
		for _, err := range db.Unavailable() {
			behind = behind || errors.Is(err, ErrBehind)
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
func pullBehind(ctx context.Context, dir string, o Options) ([]TakeoverResult, error) {
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
			got, err := pullFromBucket(ctx, fs, db.ledgerDir(l.id), l.id, l.head, db.repl.store, v)
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
