package engine

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// ExpectedStream is a condition on an (entity, key) stream: its latest
// event must be Head, or, with a zero Head, the stream must have no event.
type ExpectedStream struct {
	Entity, Key string
	Head        eventid.ID
}

// Selector selects events as Replay does: Entity with Keys selects those
// streams, Entity alone all of its keys, Events by event name; with both
// Entity and Events, an event must match both.
type Selector struct {
	Entity string
	Keys   []string
	Events []string
	// After is the event the condition is relative to: the append fails
	// if an event the selector matches came after it.
	After eventid.ID
}

// inflight is an event of a batch that the segment log has prepared (its
// ID is known) but that is not in the index yet. A ledger keeps them, in
// sequence order, so that a condition checked inside the commit sees the
// batches committed before it whether or not they are indexed yet.
type inflight struct {
	entity, key, event string
	id                 eventid.ID
	seq                uint64
	// idem, batchLen and digest are set on the first event of a batch
	// appended with an idempotency key: digest is its events' (see
	// idemDigest), which a retry's is compared with.
	idem     string
	batchLen uint32
	digest   [index.DigestSize]byte
}

// prepared records the events of a batch the log has prepared. Called in
// commit order.
func (l *ledger) prepared(b *segment.Batch) {
	digest, _ := b.Tag.(*[index.DigestSize]byte) // set by Append with an idempotency key
	l.preparedDigest(b, digest)
}

// preparedDigest is prepared with the digest of the batch's events, if the
// append computed it already (nil: computed here, if the batch has an
// idempotency key).
func (l *ledger) preparedDigest(b *segment.Batch, digest *[index.DigestSize]byte) {
	if b.IdempotencyKey != nil && digest == nil {
		d := digestOfEntries(b.Entries)
		digest = &d
	}
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	for i, id := range b.IDs {
		e := &b.Entries[i]
		f := inflight{entity: e.Entity, key: e.Key, event: e.Event, id: id, seq: b.FirstSeq + uint64(i)}
		if i == 0 && b.IdempotencyKey != nil {
			f.idem, f.batchLen, f.digest = string(b.IdempotencyKey), uint32(len(b.IDs)), *digest
		}
		l.pending = append(l.pending, f)
	}
}

// aborted forgets the events of a prepared batch that will not be
// committed. Called in reverse commit order, so they are at the end.
func (l *ledger) aborted(b *segment.Batch) {
	l.pendMu.Lock()
	for len(l.pending) > 0 && l.pending[len(l.pending)-1].seq >= b.FirstSeq {
		l.pending = l.pending[:len(l.pending)-1]
	}
	l.pendMu.Unlock()
	// The leaves groupWritten hashed for its group are not for a group
	// that will be published (the segment log's committing goroutine
	// calls both, in turn).
	l.hookFirst = 0
	// Wake the retries waiting for this batch's outcome (awaitFirst). With
	// idxMu held, so that none misses it between its check and its wait.
	l.idxMu.Lock()
	if b.FirstSeq <= l.idxWritten {
		// The segment log's hook indexed it during the fsync that failed:
		// the index holds records the segments do not (see idxAhead).
		l.idxAhead = true
		l.idxWritten = b.FirstSeq - 1
	}
	l.cond.Broadcast()
	l.idxMu.Unlock()
}

// duplicate is what Check returns when a batch's idempotency key was used
// before: the first append with it is at firstSeq, count events, whose
// digest is digest (after awaitFirst, the one in the index).
type duplicate struct {
	firstSeq uint64
	count    uint32
	digest   [index.DigestSize]byte
}

func (d *duplicate) Error() string {
	return fmt.Sprintf("engine: idempotency key already used by the append at #%d", d.firstSeq)
}

// idempotent looks for an earlier append with this key, in flight or
// indexed, as of head.
func (l *ledger) idempotent(key string, head segment.Head) (*duplicate, error) {
	l.pendMu.Lock()
	for _, e := range l.pending {
		if e.idem == key && e.seq <= head.Seq && e.batchLen > 0 {
			l.pendMu.Unlock()
			return &duplicate{firstSeq: e.seq, count: e.batchLen, digest: e.digest}, nil
		}
	}
	l.pendMu.Unlock()
	k, found, err := l.db.idx.Idempotency(l.meta.ID, []byte(key))
	if err != nil || !found {
		return nil, err
	}
	return &duplicate{firstSeq: k.FirstSeq, count: k.Count, digest: k.Digest}, nil
}

// inFlight reports whether the batch at seq with this key is still in
// flight (prepared, not yet indexed nor aborted).
func (l *ledger) inFlight(key string, seq uint64) bool {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	for _, e := range l.pending {
		if e.seq == seq && e.idem == key {
			return true
		}
	}
	return false
}

// awaitFirst waits for the outcome of the first append with an
// idempotency key, then returns its result, or found false if it was not
// committed after all (its group failed). It sets d.digest to the digest
// the index holds for it, which the caller compares its own with. If ctx
// ends first, it returns an error matching ctx.Err(): the caller's append,
// which found the key used, appended nothing.
func (l *ledger) awaitFirst(ctx context.Context, key string, d *duplicate) (res AppendResult, found bool, err error) {
	// The end of ctx wakes the wait: a broadcast under idxMu, so that it
	// cannot come between the wait's look at ctx and its cond.Wait.
	stop := context.AfterFunc(ctx, func() {
		l.idxMu.Lock()
		l.cond.Broadcast()
		l.idxMu.Unlock()
	})
	defer stop()
	l.idxMu.Lock()
	for l.indexed < d.firstSeq+uint64(d.count)-1 && l.inFlight(key, d.firstSeq) {
		if err := ctx.Err(); err != nil {
			l.idxMu.Unlock()
			return res, false, fmt.Errorf("engine: ledger %s: idempotency key %q: %w while waiting for the outcome of the first append with the key (#%d): this append appended nothing; append again with the key to learn it", l.meta.Name, key, err, d.firstSeq)
		}
		l.cond.Wait()
	}
	idxErr, published := l.idxErr, l.indexed
	l.idxMu.Unlock()
	if idxErr != nil {
		// Without the index the outcome cannot be told: appending again
		// could append twice.
		return res, false, idxErr
	}
	k, found, err := l.db.idx.Idempotency(l.meta.ID, []byte(key))
	if err != nil || !found {
		return res, false, err
	}
	if k.FirstSeq+uint64(k.Count)-1 > published {
		// Not published: a batch indexed during its fsync (indexWritten),
		// still in flight, or aborted when that fsync failed. The caller
		// tries again: its Check finds the one in flight and waits for it.
		return res, false, nil
	}
	// Usually the batch Check found; if that one failed, the append with
	// the key that was committed after it.
	first, count := k.FirstSeq, k.Count
	d.firstSeq, d.count, d.digest = first, count, k.Digest
	res.FirstSeq = first
	for seq := first; seq < first+uint64(count); seq++ {
		id, ok, err := l.db.idx.BySeq(l.meta.ID, seq)
		if err != nil {
			return res, false, err
		}
		if !ok {
			return res, false, fmt.Errorf("engine: ledger %s: the index has idempotency key %q at #%d but no event #%d", l.meta.Name, key, first, seq)
		}
		res.IDs = append(res.IDs, id)
	}
	return res, true, nil
}

// inflightDigest returns the digest of an idempotent batch that is being
// indexed: the one its append computed and prepared kept in flight, so
// that the index write does not hash the events again.
func (l *ledger) inflightDigest(b *segment.Batch) [index.DigestSize]byte {
	l.pendMu.Lock()
	i, found := slices.BinarySearchFunc(l.pending, b.FirstSeq, func(e inflight, seq uint64) int { return cmp.Compare(e.seq, seq) })
	var d [index.DigestSize]byte
	ok := found && l.pending[i].batchLen > 0
	if ok {
		d = l.pending[i].digest
	}
	l.pendMu.Unlock()
	if !ok {
		d = digestOfEntries(b.Entries)
	}
	return d
}

// indexedUpTo forgets the in-flight events the index now has.
func (l *ledger) indexedUpTo(seq uint64) {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	i := 0
	for i < len(l.pending) && l.pending[i].seq <= seq {
		i++
	}
	l.pending = slices.Delete(l.pending, 0, i)
}

// streamHead returns the latest event of a stream as of head: an in-flight
// one, or else the index's.
func (l *ledger) streamHead(entity, key string, head segment.Head) (eventid.ID, error) {
	// The ID is copied while pendMu is held: indexedUpTo shifts the
	// slice's elements in place (slices.Delete), so a pointer into it
	// may read another event's fields once the lock is let go.
	l.pendMu.Lock()
	for i := len(l.pending) - 1; i >= 0; i-- {
		if e := l.pending[i]; e.seq <= head.Seq && e.entity == entity && e.key == key {
			l.pendMu.Unlock()
			return e.id, nil
		}
	}
	l.pendMu.Unlock()
	p, found, err := l.db.idx.StreamHead(l.meta.ID, []byte(entity), []byte(key))
	if err != nil || !found {
		return eventid.ID{}, err
	}
	return p.ID, nil
}

// seqOf returns the sequence number of an event of the ledger.
func (l *ledger) seqOf(id eventid.ID) (uint64, bool, error) {
	l.pendMu.Lock()
	for _, e := range l.pending {
		if e.id == id {
			l.pendMu.Unlock()
			return e.seq, true, nil
		}
	}
	l.pendMu.Unlock()
	seq, _, found, err := l.db.idx.Lookup(id)
	return seq, found, err
}

func (s *Selector) matches(entity, key, event string) bool {
	if s.Entity != "" && (entity != s.Entity || len(s.Keys) > 0 && !slices.Contains(s.Keys, key)) {
		return false
	}
	return len(s.Events) == 0 || slices.Contains(s.Events, event)
}

// matchedSince returns the first event after afterSeq (and up to head)
// that the selector matches, if any.
func (l *ledger) matchedSince(s *Selector, afterSeq uint64, head segment.Head) (eventid.ID, bool, error) {
	l.pendMu.Lock()
	for _, e := range l.pending {
		if e.seq > afterSeq && e.seq <= head.Seq && s.matches(e.entity, e.key, e.event) {
			l.pendMu.Unlock()
			return e.id, true, nil
		}
	}
	l.pendMu.Unlock()
	ctx := context.Background()
	var sources []iter.Seq2[index.Position, error]
	switch {
	case s.Entity != "" && len(s.Keys) > 0:
		for _, k := range s.Keys {
			sources = append(sources, l.db.idx.Stream(ctx, l.meta.ID, []byte(s.Entity), []byte(k), afterSeq))
		}
	case s.Entity != "":
		sources = append(sources, l.db.idx.EntityEvents(ctx, l.meta.ID, []byte(s.Entity), afterSeq))
	default:
		for _, n := range s.Events {
			sources = append(sources, l.db.idx.EventName(ctx, l.meta.ID, []byte(n), afterSeq))
		}
	}
	for pos, err := range mergeBySeq(sources) {
		if err != nil {
			return eventid.ID{}, false, err
		}
		if pos.Seq > head.Seq {
			break
		}
		if s.Entity == "" || len(s.Events) == 0 {
			return pos.ID, true, nil
		}
		// Entity and event names: the index has no such pair; read it.
		r, err := l.log.ReadAt(pos.Loc)
		if err != nil {
			return eventid.ID{}, false, err
		}
		if slices.Contains(s.Events, string(r.Event)) {
			return pos.ID, true, nil
		}
	}
	return eventid.ID{}, false, nil
}

// conditions returns the Check of an append with these options, or nil.
func (l *ledger) conditions(o *AppendOptions) (func(segment.Head) error, error) {
	if !o.ExpectedHead.IsZero() && o.ExpectedHead.Ledger() != l.meta.ID {
		return nil, invalid("expected head %s is an ID of ledger %s, not of %s (%s)", o.ExpectedHead, o.ExpectedHead.Ledger(), l.meta.Name, l.meta.ID)
	}
	for i, c := range o.ExpectedStreams {
		if err := checkStoredName(fmt.Sprintf("expected stream %d: entity", i), c.Entity); err != nil {
			return nil, err
		}
		if err := checkStoredName(fmt.Sprintf("expected stream %d: key", i), c.Key); err != nil {
			return nil, err
		}
		if !c.Head.IsZero() && c.Head.Ledger() != l.meta.ID {
			return nil, invalid("expected stream %d: head %s is an ID of another ledger", i, c.Head)
		}
	}
	if s := o.IfNoneSince; s != nil {
		if s.Entity == "" && len(s.Events) == 0 {
			return nil, invalid("selector needs an entity or event names")
		}
		if s.Entity == "" && len(s.Keys) > 0 {
			return nil, invalid("selector has keys without an entity")
		}
		if s.After.IsZero() || s.After.Ledger() != l.meta.ID {
			return nil, invalid("selector: after %s is not an ID of ledger %s", s.After, l.meta.ID)
		}
	}
	if o.IdempotencyKey != "" {
		if err := checkName("idempotency key", o.IdempotencyKey); err != nil {
			return nil, err
		}
	}
	if o.ExpectedHead.IsZero() && len(o.ExpectedStreams) == 0 && o.IfNoneSince == nil && o.IdempotencyKey == "" {
		return nil, nil
	}
	want, streams, sel, idem := o.ExpectedHead, slices.Clone(o.ExpectedStreams), o.IfNoneSince, o.IdempotencyKey
	return func(h segment.Head) error {
		// A retry answers with the first append's result, whatever the
		// other conditions would say now.
		if idem != "" {
			d, err := l.idempotent(idem, h)
			if err != nil {
				return err
			}
			if d != nil {
				return d
			}
		}
		if !want.IsZero() && h.ID != want {
			return &ConditionError{Condition: "expected head", Head: h.ID, Expected: want, Found: h.ID, seq: h.Seq}
		}
		for _, c := range streams {
			got, err := l.streamHead(c.Entity, c.Key, h)
			if err != nil {
				return err
			}
			if got != c.Head {
				return &ConditionError{Condition: fmt.Sprintf("expected head of stream %q/%q", c.Entity, c.Key), Head: h.ID, Expected: c.Head, Found: got, seq: h.Seq}
			}
		}
		if sel != nil {
			afterSeq, found, err := l.seqOf(sel.After)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%w: selector: after %s", ErrNotFound, sel.After)
			}
			id, matched, err := l.matchedSince(sel, afterSeq, h)
			if err != nil {
				return err
			}
			if matched {
				return &ConditionError{Condition: "no event matching the selector since " + sel.After.String(), Head: h.ID, Found: id, seq: h.Seq}
			}
		}
		return nil
	}, nil
}
