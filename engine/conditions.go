package engine

import (
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
}

// prepared records the events of a batch the log has prepared. Called in
// commit order.
func (l *ledger) prepared(b *segment.Batch) {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	for i, id := range b.IDs {
		e := &b.Entries[i]
		l.pending = append(l.pending, inflight{entity: e.Entity, key: e.Key, event: e.Event, id: id, seq: b.FirstSeq + uint64(i)})
	}
}

// aborted forgets the events of a prepared batch that will not be
// committed. Called in reverse commit order, so they are at the end.
func (l *ledger) aborted(b *segment.Batch) {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	for len(l.pending) > 0 && l.pending[len(l.pending)-1].seq >= b.FirstSeq {
		l.pending = l.pending[:len(l.pending)-1]
	}
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
	l.pendMu.Lock()
	for i := len(l.pending) - 1; i >= 0; i-- {
		e := &l.pending[i]
		if e.seq <= head.Seq && e.entity == entity && e.key == key {
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
	for i, c := range o.ExpectedStreams {
		if err := checkName(fmt.Sprintf("expected stream %d: entity", i), c.Entity); err != nil {
			return nil, err
		}
		if err := checkName(fmt.Sprintf("expected stream %d: key", i), c.Key); err != nil {
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
	if o.ExpectedHead.IsZero() && len(o.ExpectedStreams) == 0 && o.IfNoneSince == nil {
		return nil, nil
	}
	want, streams, sel := o.ExpectedHead, slices.Clone(o.ExpectedStreams), o.IfNoneSince
	return func(h segment.Head) error {
		if !want.IsZero() && h.ID != want {
			return &ConditionError{Condition: "expected head", Head: h.ID, Expected: want, Found: h.ID}
		}
		for _, c := range streams {
			got, err := l.streamHead(c.Entity, c.Key, h)
			if err != nil {
				return err
			}
			if got != c.Head {
				return &ConditionError{Condition: fmt.Sprintf("expected head of stream %q/%q", c.Entity, c.Key), Head: h.ID, Expected: c.Head, Found: got}
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
				return &ConditionError{Condition: "no event matching the selector since " + sel.After.String(), Head: h.ID, Found: id}
			}
		}
		return nil
	}, nil
}
