package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// VerifyReport says what Verify checked.
type VerifyReport struct {
	Events uint64     // events verified
	Head   eventid.ID // the ledger's last event
	// TreeSize is the number of leaves of the Merkle tree file compared
	// with the events (#1 to #TreeSize: the events committed when Verify
	// began; fewer if a write of the tree failed, a full disk: the tree
	// lags until a reopen recovers it from the segments).
	TreeSize uint64
	// CheckpointSize and CheckpointOrigin are those of the latest signed
	// checkpoint, whose signature and root were checked against the
	// events; 0 and "" if the ledger has none yet.
	CheckpointSize   uint64
	CheckpointOrigin string
	// TreeNotChecked and IndexNotChecked, on a DB opened with
	// OpenReadOnly, say why the tree file or the index was not compared
	// with the events ("" if it was): the tree file is missing or
	// damaged, or the index is in a writer's use, missing, or behind the
	// segments (Options.VerifyIndex). Both are derived from the segments,
	// which the next writer's Open rebuilds or catches up; the events
	// were checked against the signed checkpoint when the DB opened.
	TreeNotChecked, IndexNotChecked string
}

// Verify checks a whole ledger: every record of its segments (frame CRC,
// event checksum, chain link, timestamps, sequence numbers; on all cores),
// its Merkle tree against them (each event's leaf hash, computed on the
// same cores, against the tree file's, in ledger order; then the latest
// signed checkpoint: its signature with the DB's key and its root against
// the root of the events at its size), and that the index agrees with them: every entry of every family (ID,
// sequence number, stream, entity, event name, idempotency key) and
// nothing more. progress, if not nil, is called now and then with the records and
// bytes verified so far. A failure of the segments is an error matching
// segment.ErrCorruption that says where. A failure of the index, once the
// segments verified, matches ErrIndexDamaged (and the cause: Pebble's
// corruption error, or segment.ErrCorruption for a disagreement) and
// comes with the report of the segments: the events are intact, and
// Options.RebuildIndex rebuilds the index from them.
//
// The tree's failures, once the segments verified (their CRCs may all
// pass: CRC32C does not see a change made on purpose): ErrRewritten when
// the events are not those the tree or the signed checkpoint committed to
// (it names the first event that differs when the tree file says which,
// or the checkpoint's size and roots); ErrTreeDamaged when only the tree
// file, derived from the segments, differs, the events giving the signed
// root (Options.RebuildIndex rebuilds it). A leaf that differs where no signed
// checkpoint covers it is ErrRewritten: nothing signed can tell a damaged
// tree file from a changed event. Both come with the report.
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
	vctx, cancel := db.untilClosing(ctx)
	defer cancel()
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
			// The last progress may have called Close: then Verify
			// returns ErrClosed, as it does when Close comes while the
			// checks run, whether or not they had ended.
			closed := false
			select {
			case <-db.readers.closingCh():
				closed = true
			default:
			}
			if closed || (res.err != nil && vctx.Err() != nil) {
				if err := ctx.Err(); err != nil {
					return VerifyReport{}, err
				}
				return VerifyReport{}, ErrClosed
			}
			// So may it have cancelled ctx: Verify then returns ctx's
			// error, as it does when ctx ends while the checks run.
			if err := ctx.Err(); err != nil {
				return VerifyReport{}, err
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
	// What to check: the events committed (and indexed) now, #1 to
	// #src.n, the tree file's first src.n leaves, and the latest
	// checkpoint. Records committed later are left out.
	src, srcErr := db.treeSourceFor(ctx, l)
	if src.events == 0 {
		if err := ctx.Err(); err != nil {
			return VerifyReport{}, err
		}
		if srcErr != nil && errors.Is(srcErr, ErrClosed) {
			return VerifyReport{}, srcErr
		}
		// Not waited for the index (a failure before): check up to the
		// committed head.
		src.events = l.log.Head().Seq
		if err := db.waitIndexed(ctx, l, src.events); err != nil {
			return VerifyReport{}, err
		}
	}
	// The segments' records up to #events (the index's digest) and their
	// first n leaves (the tree).
	events := src.events
	// The index: a digest of what it holds for events up to #src.n,
	// computed while the segments are verified; the digest of what it
	// should hold is computed from the records by the goroutines that
	// verify the segments, with the leaf hashes of the tree, which one
	// goroutine feeds, in ledger order, through the tree file's checker.
	// One read of the segments for everything.
	type result struct {
		d   *index.Digest
		err error
	}
	idx, idxWhy := db.verifyIndex(l, events)
	dctx, cancelDigest := context.WithCancel(ctx)
	defer cancelDigest()
	indexed := make(chan result, 1)
	go func() {
		if idx == nil {
			indexed <- result{}
			return
		}
		d, err := idx.Digest(dctx, l.meta.ID, events)
		indexed <- result{d, err}
	}()
	feed := newLeafFeed(ctx, l.meta.ID, events, src.n, srcErr == nil && src.t != nil)
	var res treeCheck
	checked := make(chan treeCheck, 1)
	if feed.leaves {
		var cpSize uint64
		if src.cp != nil {
			cpSize = src.cp.Size
		}
		go func() { checked <- feed.check(src.t, cpSize) }()
	}
	head, err := l.log.VerifyVisit(ctx, progress, feed.visitor())
	feed.close()
	if feed.leaves {
		res = <-checked
	}
	if err != nil {
		cancelDigest()
		<-indexed
		return VerifyReport{}, fmt.Errorf("engine: verify %s: %w", l.meta.Name, err)
	}
	if feed.rxErr != nil {
		cancelDigest()
		<-indexed
		return VerifyReport{}, fmt.Errorf("engine: verify %s: %w", l.meta.Name, feed.rxErr)
	}
	got := <-indexed
	if err := ctx.Err(); err != nil {
		return VerifyReport{}, err
	}
	// From here on the segments are intact: what fails is the tree (the
	// events are not those it committed to, or the tree file), then the
	// index.
	report := VerifyReport{Events: head.Seq, Head: head.ID}
	if src.cp != nil {
		report.CheckpointSize, report.CheckpointOrigin = src.cp.Size, src.cp.Origin
	}
	if srcErr != nil {
		return report, srcErr
	}
	report.TreeSize, report.TreeNotChecked = src.n, src.why
	if res.fed != src.n && res.err == nil {
		return VerifyReport{}, fmt.Errorf("engine: verify %s: the segments' check handed %d leaves of the %d wanted", l.meta.Name, res.fed, src.n)
	}
	if err := l.judgeTree(ctx, src, res); err != nil {
		if ctx.Err() != nil {
			return VerifyReport{}, ctx.Err()
		}
		return report, err
	}
	if idx == nil {
		report.IndexNotChecked = idxWhy
		return report, nil
	}
	if got.err != nil {
		if ctx.Err() != nil {
			return VerifyReport{}, got.err
		}
		return report, indexDamaged(l.meta.Name, events, got.err)
	}
	if diff := got.d.Diff(feed.want); diff != "" {
		if err := l.locateIndexMismatch(ctx, idx, segment.Head{Seq: events}); err != nil {
			if ctx.Err() != nil {
				return VerifyReport{}, err
			}
			return report, indexDamaged(l.meta.Name, events, err)
		}
		return report, indexDamaged(l.meta.Name, events, fmt.Errorf("%w: the index disagrees with the segments (index against segments): %s", segment.ErrCorruption, diff))
	}
	return report, nil
}

// locateIndexMismatch walks the index's ID entries beside the segments up
// to head and returns an error naming the first disagreement, or nil if
// they agree (then another family differs).
func (l *ledger) locateIndexMismatch(ctx context.Context, idx *index.Index, head segment.Head) error {
	next, stop := iter.Pull2(idx.TimeRange(ctx, l.meta.ID, eventid.ID{}, maxID, false))
	defer stop()
	it := l.log.NewIterator(1, segment.FirstOffset)
	defer it.Close()
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
