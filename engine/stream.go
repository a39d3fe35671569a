package engine

import (
	"context"
	"fmt"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
)

// StreamHead is the latest event of an (entity, key) stream: what an
// ExpectedStream condition compares with. The zero StreamHead means the
// stream has no event.
//
// It has no count of the stream's events: the index keeps none, and
// counting would cost a walk of the stream. The ID is the stream's
// version for conditions; Seq orders it in the ledger (Replay's AfterSeq).
type StreamHead struct {
	ID  eventid.ID // the stream's latest event; zero if it has none
	Seq uint64     // its sequence number in the ledger; 0 if none
}

// IsZero reports whether the stream has no event.
func (h StreamHead) IsZero() bool { return h.Seq == 0 }

// StreamHead returns the latest event of the stream (entity, key) of a
// ledger, as readers see the ledger now (see "What a reader sees, and
// when" in docs/engine.md). A stream with no event is the zero StreamHead
// and a nil error, so that a read-then-append loop needs no special case:
//
//	h, err := db.StreamHead(ctx, "shop", "account", "acc-1")
//	// ... decide from the stream's events ...
//	_, err = db.Append(ctx, "shop", events, &engine.AppendOptions{
//		ExpectedStreams: []engine.ExpectedStream{{Entity: "account", Key: "acc-1", Head: h.ID}},
//	})
//	// On a *ConditionError, read again: the head has moved to the error's
//	// Found, which StreamHead and Replay already show.
//
// The condition checks the same head at its commit: it fails only if an
// event of the stream was committed after the one returned. A bad entity
// or key fails with ErrInvalid; an unknown ledger with ErrLedgerNotFound.
func (db *DB) StreamHead(ctx context.Context, ledgerName, entity, key string) (StreamHead, error) {
	if err := ctx.Err(); err != nil {
		return StreamHead{}, err
	}
	if err := checkStoredName("stream head: entity", entity); err != nil {
		return StreamHead{}, err
	}
	if err := checkStoredName("stream head: key", key); err != nil {
		return StreamHead{}, err
	}
	l, err := db.readableLedger(ledgerName)
	if err != nil {
		return StreamHead{}, err
	}
	if err := db.enterRead(); err != nil {
		return StreamHead{}, err
	}
	defer db.exitRead()
	// The index holds a prefix of the ledger at least as long as the one
	// readers see (it is written before indexed advances), and may hold
	// more: the records of a group written to it during the group's fsync
	// (indexWritten), not durable yet. The head is the stream's last
	// event in what readers see (visible), a prefix that every later read
	// sees too.
	vis := l.visible().Seq
	p, found, err := db.idx.StreamHead(l.meta.ID, []byte(entity), []byte(key))
	if err == nil && found && p.Seq > vis {
		found = false
		for q, e := range db.idx.StreamRange(ctx, l.meta.ID, []byte(entity), []byte(key), index.SeqRange{Before: vis + 1, Reverse: true}) {
			p, found, err = q, e == nil, e
			break
		}
	}
	if err != nil {
		return StreamHead{}, fmt.Errorf("engine: stream head of %q/%q in ledger %s: %w", entity, key, l.meta.Name, err)
	}
	if !found {
		return StreamHead{}, nil
	}
	return StreamHead{ID: p.ID, Seq: p.Seq}, nil
}
