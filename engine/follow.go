package engine

import (
	"context"
	"fmt"
	"iter"
	"sync"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// Subscribe follows a ledger: it yields every event after the event
// after (every event, the genesis first, if after is zero), then each
// newly committed event as it commits, once and in order, until ctx ends;
// then it yields ctx's error and stops.
func (db *DB) Subscribe(ctx context.Context, ledgerName string, after eventid.ID) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.readableLedger(ledgerName)
		if err != nil {
			yield(Event{}, err)
			return
		}
		seg, off := uint64(1), int64(segment.FirstOffset)
		if !after.IsZero() {
			if after.Ledger() != l.meta.ID {
				yield(Event{}, invalid("subscribe after %s: an ID of another ledger", after))
				return
			}
			_, loc, found, err := db.idx.Lookup(after)
			if err == nil && !found {
				err = fmt.Errorf("%w: subscribe after %s", ErrNotFound, after)
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
			seg, off = loc.Segment, loc.End()
		}
		it := l.log.NewIterator(seg, off)
		for {
			changed := l.changed() // before reading, so no commit is missed
			for it.Next() {
				if !yield(l.event(it.Record(), true), nil) {
					return
				}
			}
			if err := it.Err(); err != nil {
				yield(Event{}, err)
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				yield(Event{}, ctx.Err())
				return
			}
		}
	}
}

// VerifyReport says what Verify checked.
type VerifyReport struct {
	Events uint64     // events verified
	Head   eventid.ID // the ledger's last event
}

// Verify checks a whole ledger: every record of its segments (frame CRC,
// event checksum, chain link, timestamps, sequence numbers; on all cores),
// and that the index agrees with them: every entry of every family (ID,
// sequence number, stream, entity, event name, idempotency key) and
// nothing more. progress, if not nil, is called now and then with the records and
// bytes verified so far. A failure of the segments is an error matching
// segment.ErrCorruption that says where. A failure of the index, once the
// segments verified, matches ErrIndexDamaged (and the cause: Pebble's
// corruption error, or segment.ErrCorruption for a disagreement) and
// comes with the report of the segments: the events are intact, and
// Options.RebuildIndex rebuilds the index from them.
//
// The checks run on other goroutines while Close waits for them; Close
// stops them (within a few thousand records) and Verify returns
// ErrClosed. progress is called on the goroutine that called Verify, with
// no read in progress: it may call Close.
func (db *DB) Verify(ctx context.Context, ledgerName string, progress func(records, bytes int64)) (VerifyReport, error) {
	l, err := db.ledger(ledgerName)
	if err != nil {
		return VerifyReport{}, err
	}
	if err := ctx.Err(); err != nil {
		return VerifyReport{}, err
	}
	// vctx ends with ctx, or when Close begins.
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-db.readers.closingCh():
			cancel()
		case <-vctx.Done():
		}
	}()
	if err := db.enterRead(); err != nil {
		return VerifyReport{}, err
	}
	type result struct {
		report VerifyReport
		err    error
	}
	done := make(chan result, 1)
	relay := &progressRelay{ready: make(chan struct{}, 1)}
	report := relay.report
	if progress == nil {
		report = nil
	}
	go func() {
		defer db.exitRead()
		r, err := l.verify(vctx, report)
		done <- result{r, err}
	}()
	for {
		select {
		case <-relay.ready:
			relay.deliver(progress)
			continue
		case res := <-done:
			relay.deliver(progress)
			if res.err != nil && vctx.Err() != nil {
				if err := ctx.Err(); err != nil {
					return VerifyReport{}, err
				}
				return VerifyReport{}, ErrClosed
			}
			return res.report, res.err
		}
	}
}

// progressRelay hands the progress of a verification from the goroutines
// that check to the one that called Verify: the last counts reported,
// delivered once.
type progressRelay struct {
	mu             sync.Mutex
	records, bytes int64
	pending        bool
	ready          chan struct{} // one value when pending
}

// report records the counts; it never waits.
func (p *progressRelay) report(records, bytes int64) {
	p.mu.Lock()
	p.records, p.bytes, p.pending = records, bytes, true
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// deliver calls progress with the counts reported since the last call, if
// any.
func (p *progressRelay) deliver(progress func(records, bytes int64)) {
	p.mu.Lock()
	records, bytes, pending := p.records, p.bytes, p.pending
	p.pending = false
	p.mu.Unlock()
	if pending && progress != nil {
		progress(records, bytes)
	}
}

// verify is Verify's checks, run with enterRead held.
func (l *ledger) verify(ctx context.Context, progress func(records, bytes int64)) (VerifyReport, error) {
	db := l.db
	head, err := l.log.Verify(ctx, progress)
	if err != nil {
		return VerifyReport{}, fmt.Errorf("engine: verify %s: %w", l.meta.Name, err)
	}
	// The index: a digest of what it holds for events up to the head,
	// computed while the segments are read for the digest of what it
	// should hold (records committed after the segment check are left
	// out of both). When the ID family disagrees, a walk of it beside the
	// segments says where.
	type result struct {
		d   *index.Digest
		err error
	}
	indexed := make(chan result, 1)
	go func() {
		d, err := db.idx.Digest(ctx, l.meta.ID, head.Seq)
		indexed <- result{d, err}
	}()
	want := index.NewDigest(l.meta.ID)
	it := l.log.NewIterator(1, segment.FirstOffset)
	for it.Next() && it.Record().Seq <= head.Seq {
		r := it.Record()
		if r.Seq%4096 == 0 && ctx.Err() != nil {
			<-indexed
			return VerifyReport{}, ctx.Err()
		}
		want.Add(&index.Record{ID: r.ID, Seq: r.Seq, Loc: it.Location(), Entity: r.Entity, Key: r.Key, Event: r.Event,
			IdempotencyKey: r.IdempotencyKey, BatchLen: r.BatchLen})
	}
	got := <-indexed
	if err := it.Err(); err != nil {
		return VerifyReport{}, err
	}
	// From here on the segments are intact: what fails is the index.
	report := VerifyReport{Events: head.Seq, Head: head.ID}
	if got.err != nil {
		if ctx.Err() != nil {
			return VerifyReport{}, got.err
		}
		return report, indexDamaged(l.meta.Name, head.Seq, got.err)
	}
	if diff := got.d.Diff(want); diff != "" {
		if err := l.locateIndexMismatch(ctx, head); err != nil {
			if ctx.Err() != nil {
				return VerifyReport{}, err
			}
			return report, indexDamaged(l.meta.Name, head.Seq, err)
		}
		return report, indexDamaged(l.meta.Name, head.Seq, fmt.Errorf("%w: the index disagrees with the segments (index against segments): %s", segment.ErrCorruption, diff))
	}
	return report, nil
}

// locateIndexMismatch walks the index's ID entries beside the segments up
// to head and returns an error naming the first disagreement, or nil if
// they agree (then another family differs).
func (l *ledger) locateIndexMismatch(ctx context.Context, head segment.Head) error {
	next, stop := iter.Pull2(l.db.idx.TimeRange(ctx, l.meta.ID, eventid.ID{}, maxID, false))
	defer stop()
	it := l.log.NewIterator(1, segment.FirstOffset)
	for it.Next() && it.Record().Seq <= head.Seq {
		r := it.Record()
		if r.Seq%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		pos, err, ok := next()
		if err != nil {
			return err
		}
		want := index.Position{ID: r.ID, Seq: r.Seq, Loc: it.Location()}
		if !ok || pos != want {
			return fmt.Errorf("%w: ledger %s: the index has %+v where the segments have %+v", segment.ErrCorruption, l.meta.Name, pos, want)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if pos, err, ok := next(); err != nil {
		return err
	} else if ok && pos.Seq <= head.Seq {
		return fmt.Errorf("%w: ledger %s: the index has %s #%d, which the segments do not", segment.ErrCorruption, l.meta.Name, pos.ID, pos.Seq)
	}
	return nil
}

var maxID = eventid.ID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
