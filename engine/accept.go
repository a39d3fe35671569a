package engine

import (
	"context"
	"fmt"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// unsignedLedger is a ledger Open refused for its checkpoint evidence only
// (ErrUnsigned), with what its recovery needs again.
type unsignedLedger struct {
	key      string // its key in db.broken: its name, or its ID
	meta     ledgerMeta
	haveMeta bool
}

// AcceptLedger accepts a ledger that Open refused for its checkpoint
// evidence only (ErrUnsigned: its checkpoint file missing, older than what
// the signer signed for it, or signed by another key): it recovers the
// ledger again, has the signer sign a checkpoint of every event it holds
// now, whatever the signer signed for it before, and makes it available.
// It returns that checkpoint.
//
// This is the operator's explicit act (annal checkpoint --accept NAME):
// the engine never signs such a ledger by itself. A ledger refused for
// any other reason (acknowledged events lost, a damaged record, events
// that differ from the checkpoint file signed by the key) is not accepted:
// its error is returned, wrapping ErrInvalid and the refusal. An available
// ledger is ErrInvalid too; an unknown name, ErrLedgerNotFound.
func (db *DB) AcceptLedger(ctx context.Context, name string) (Checkpoint, error) {
	if err := db.readOnlyErr("AcceptLedger"); err != nil {
		return Checkpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	if err := db.checkDir(true); err != nil {
		return Checkpoint{}, err
	}
	db.creating.Lock()
	defer db.creating.Unlock()
	db.mu.RLock()
	var id eventid.LedgerID
	var u unsignedLedger
	found := false
	for i, v := range db.unsigned {
		if v.key == name || i.String() == name {
			id, u, found = i, v, true
			break
		}
	}
	refusal, broken := db.broken[name]
	_, open := db.byName[name]
	if !open {
		if lid, err := eventid.ParseLedgerID(name); err == nil {
			_, open = db.byID[lid]
		}
	}
	db.mu.RUnlock()
	switch {
	case found:
	case open:
		return Checkpoint{}, invalid("accept ledger %s: it is available: nothing to accept", name)
	case broken:
		return Checkpoint{}, fmt.Errorf("%w: accept ledger %s: it was refused for another reason than its checkpoint, which accepting cannot cure: %w", ErrInvalid, name, refusal)
	default:
		return Checkpoint{}, fmt.Errorf("%w: %q", ErrLedgerNotFound, name)
	}
	// enterRead keeps Close from closing the index and the metadata
	// while the ledger is recovered.
	if err := db.enterRead(); err != nil {
		return Checkpoint{}, err
	}
	l, err := db.acceptLocked(id, u)
	db.exitRead()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s: %w", name, err)
	}
	db.mu.Lock()
	delete(db.broken, u.key)
	delete(db.brokenIDs, id)
	delete(db.unsigned, id)
	db.mu.Unlock()
	c := *l.latest.Load()
	if _, err := db.registerReplicated(ctx, l, l.meta.Name, id); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s: %w", name, err)
	}
	return c, nil
}

// acceptLocked recovers the refused ledger id again, signing it as it is
// (recoverTree), and writes its metadata. Called with creating held.
func (db *DB) acceptLocked(id eventid.LedgerID, u unsignedLedger) (*ledger, error) {
	head, ok, err := db.idx.Progress(id)
	if err != nil || !ok {
		head = segment.Head{} // verified and indexed from the first record
	}
	db.accepting = id
	l, err := db.recoverLedger(id, u.meta, u.haveMeta, head, nil)
	db.accepting = 0
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*ledger, error) {
		l.log.Close()
		l.closeTree()
		return nil, err
	}
	// Its name: the NAME file's, else the one it was refused by.
	name := u.key
	if inFile, has, err := readNameFile(db.fs, l.log.Dir()); err == nil && has {
		name = inFile
	} else if !u.haveMeta || u.meta.Name == "" {
		name = l.meta.Name
	}
	db.mu.RLock()
	_, taken := db.byName[name]
	db.mu.RUnlock()
	if taken {
		return fail(fmt.Errorf("its name %q is that of another ledger now", name))
	}
	l.meta.Name = name
	if err := meta.Put(db.meta, l.currentMeta()); err != nil {
		return fail(fmt.Errorf("write metadata: %w", err))
	}
	return l, nil
}
