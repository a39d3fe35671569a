package engine

import (
	"context"
	"fmt"
	"iter"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// SubscribeOptions select the events a subscription yields and where it
// starts. The selector is Replay's: Entity with Keys selects those
// streams, Entity alone all of its keys, Events by event name; with both
// Entity and Events, an event must match both; an empty selector selects
// every event, the genesis event included. The cursor is Scan's and
// Replay's: After, an event ID, and AfterSeq, a sequence number, both
// exclusive; zero starts at the ledger's first event.
type SubscribeOptions struct {
	Entity string
	Keys   []string
	Events []string
	// After starts after that event of the ledger (ErrNotFound if the
	// ledger has no such event).
	After eventid.ID
	// AfterSeq starts after that sequence number (ErrNotFound if it is
	// beyond the ledger's head). With After too, both must name the same
	// event, or ErrInvalid.
	AfterSeq uint64
}

// Subscribe follows a ledger: it yields every selected event after the
// cursor, then each newly committed one as it commits, once and in order,
// until ctx ends or the DB closes; then it yields ctx's error, or
// ErrClosed, and stops.
//
// It reads the ledger's segments in order and tests each event against
// the selector, so a selector that matches rarely still reads every
// event: cancelling ctx stops it within checkEvery (64) events read,
// matched or not, and Close stops it at the next event read, or at once
// while it waits for a commit. It never holds Close off while the caller's
// loop body runs, so Close may be called from there.
func (db *DB) Subscribe(ctx context.Context, ledgerName string, o SubscribeOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.followableLedger(ledgerName)
		if err == nil && o.Entity == "" && len(o.Keys) > 0 {
			err = invalid("subscribe to %s: keys without an entity", ledgerName)
		}
		if err != nil {
			yield(Event{}, err)
			return
		}
		sel := Selector{Entity: o.Entity, Keys: o.Keys, Events: o.Events}
		seg, off, afterSeq, err := db.subscribeStart(ctx, l, o)
		if err != nil {
			yield(Event{}, err)
			return
		}
		it := l.log.NewIterator(seg, off)
		defer func() { it.Close() }()
		read := 0
		for {
			changed := l.changed() // before reading, so no commit is missed
			// Up to what readers see: an event committed but not yet
			// indexed comes at the next wake-up, when Get finds it too.
			bound := l.followHead().Seq
			if err := l.followErr(); err != nil {
				yield(Event{}, err)
				return
			}
			for {
				if read%checkEvery == 0 {
					if err := db.stopped(ctx); err != nil {
						yield(Event{}, err)
						return
					}
				}
				// The reader lock for one record, never across the yield.
				if err := db.enterRead(); err != nil {
					yield(Event{}, err)
					return
				}
				ok := it.Next()
				var ev Event
				matched := false
				if ok && it.Record().Seq > bound {
					// Not visible yet: start again at this record.
					loc := it.Location()
					it.Close()
					it = l.log.NewIterator(loc.Segment, loc.Offset)
					ok = false
				}
				if ok {
					read++
					r := it.Record()
					if r.Seq > afterSeq && sel.matches(bytesString(r.Entity), bytesString(r.Key), bytesString(r.Event)) {
						ev, matched = l.event(r, true), true
					}
				}
				err := it.Err()
				db.exitRead()
				if !ok {
					if err != nil {
						yield(Event{}, fmt.Errorf("engine: subscribe to ledger %s: %w", l.meta.Name, err))
						return
					}
					break
				}
				if matched && !yield(ev, nil) {
					return
				}
			}
			select {
			case <-changed:
			case <-ctx.Done():
				yield(Event{}, ctx.Err())
				return
			case <-db.readers.closingCh():
				yield(Event{}, ErrClosed)
				return
			}
		}
	}
}

// subscribeStart resolves a subscription's cursor: where in the segments
// to start (the end of the event it starts after) and the sequence number
// it starts after.
func (db *DB) subscribeStart(ctx context.Context, l *ledger, o SubscribeOptions) (seg uint64, off int64, afterSeq uint64, err error) {
	seg, off = 1, segment.FirstOffset
	if o.After.IsZero() && o.AfterSeq == 0 {
		return seg, off, 0, nil
	}
	if seg, off, seq, ok := db.roAfterHead(l, o); ok {
		return seg, off, seq, nil
	}
	if err := db.readOnlyIndex(l); err != nil {
		return 0, 0, 0, err
	}
	where := fmt.Sprintf("subscribe to %s after #%d", l.meta.Name, o.AfterSeq)
	var seq uint64
	if !o.After.IsZero() {
		where = fmt.Sprintf("subscribe to %s after %s", l.meta.Name, o.After)
		if o.After.Ledger() != l.meta.ID {
			return 0, 0, 0, invalid("%s: an ID of another ledger (%s, not %s)", where, o.After.Ledger(), l.meta.ID)
		}
		var found bool
		if err := db.enterRead(); err != nil {
			return 0, 0, 0, err
		}
		seq, found, err = l.seqOf(o.After)
		db.exitRead()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("engine: %s: %w", where, err)
		}
		if !found {
			return 0, 0, 0, fmt.Errorf("%w: %s: the ledger has no such event", ErrNotFound, where)
		}
		if o.AfterSeq != 0 && o.AfterSeq != seq {
			return 0, 0, 0, invalid("%s and after #%d: that event is #%d", where, o.AfterSeq, seq)
		}
	} else {
		seq = o.AfterSeq
		if head := l.log.Head().Seq; seq > head {
			return 0, 0, 0, fmt.Errorf("%w: %s: the ledger's head is #%d", ErrNotFound, where, head)
		}
	}
	// A committed event may not be in the index yet: wait until it is
	// (the index follows the commits closely).
	if err := db.waitIndexed(ctx, l, seq); err != nil {
		return 0, 0, 0, err
	}
	if err := db.enterRead(); err != nil {
		return 0, 0, 0, err
	}
	defer db.exitRead()
	id, found, err := db.idx.BySeq(l.meta.ID, seq)
	if err == nil && found {
		var s uint64
		var loc segment.Location
		s, loc, found, err = db.idx.Lookup(id)
		if err == nil && found && s == seq {
			return loc.Segment, loc.End(), seq, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: the index has no location for #%d", ErrIndexDamaged, seq)
	}
	return 0, 0, 0, fmt.Errorf("engine: %s: %w", where, err)
}

// waitIndexed returns once the index holds every event of l up to seq
// (or the index failed: the lookups that follow say so), or ctx's error,
// or ErrClosed.
func (db *DB) waitIndexed(ctx context.Context, l *ledger, seq uint64) error {
	if db.ro != nil {
		return nil // nothing indexes what a read-only DB verifies
	}
	for {
		changed := l.changed()
		l.idxMu.Lock()
		done := l.indexed >= seq || l.idxErr != nil
		l.idxMu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-db.readers.closingCh():
			return ErrClosed
		}
	}
}
