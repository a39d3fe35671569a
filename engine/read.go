package engine

import (
	"context"
	"encoding/hex"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// Event is a stored event.
type Event struct {
	ID     eventid.ID
	Ledger string // the ledger's name
	Seq    uint64 // 1 for the genesis event
	Entity string
	Key    string
	Event  string
	Meta   []byte // canonical JSON object
	Data   []byte // canonical JSON value
}

// Time returns the event's time (from its ID).
func (e *Event) Time() time.Time { return e.ID.Time() }

// readableLedger returns the open ledger with that name (or ID), if its
// index can be read.
func (db *DB) readableLedger(name string) (*ledger, error) {
	l, err := db.ledger(name)
	if err != nil {
		return nil, err
	}
	return l, l.readable()
}

func (l *ledger) readable() error {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	return l.idxErr
}

// read reads the event at pos from the segments.
func (l *ledger) read(pos index.Position) (Event, error) {
	r, err := l.log.ReadAt(pos.Loc)
	if err != nil {
		return Event{}, fmt.Errorf("engine: read %s of ledger %s: %w", pos.ID, l.meta.Name, err)
	}
	if r.ID != pos.ID || r.Seq != pos.Seq {
		return Event{}, fmt.Errorf("%w: the index points %s #%d to %s #%d in ledger %s", segment.ErrCorruption, pos.ID, pos.Seq, r.ID, r.Seq, l.meta.Name)
	}
	return l.event(r, false), nil
}

// event makes an Event of a record of the ledger. With borrowed set, the
// record's slices belong to a reader that reuses them, so meta and data
// are copied; otherwise the Event takes them.
//
// A borrowed record is copied with one allocation: the names, meta and
// data share one new buffer, which nothing writes to afterwards (Meta and
// Data are capped, so an append to them copies).
func (l *ledger) event(r *segment.Record, borrowed bool) Event {
	if !borrowed {
		return Event{ID: r.ID, Ledger: l.meta.Name, Seq: r.Seq, Entity: string(r.Entity), Key: string(r.Key), Event: string(r.Event), Meta: r.Meta, Data: r.Data}
	}
	ne, nk, nv, nm := len(r.Entity), len(r.Key), len(r.Event), len(r.Meta)
	buf := make([]byte, 0, ne+nk+nv+nm+len(r.Data))
	buf = append(append(append(append(append(buf, r.Entity...), r.Key...), r.Event...), r.Meta...), r.Data...)
	str := func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
	i := 0
	next := func(n int) []byte { b := buf[i : i+n : i+n]; i += n; return b }
	return Event{ID: r.ID, Ledger: l.meta.Name, Seq: r.Seq, Entity: str(next(ne)), Key: str(next(nk)), Event: str(next(nv)), Meta: next(nm), Data: next(len(r.Data))}
}

// Get returns the event with that ID; the ID names its ledger.
func (db *DB) Get(ctx context.Context, id eventid.ID) (Event, error) {
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	db.mu.RLock()
	l, ok := db.byID[id.Ledger()]
	closed := db.closed
	db.mu.RUnlock()
	if closed {
		return Event{}, ErrClosed
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: %s (no ledger %s)", ErrNotFound, id, id.Ledger())
	}
	if err := l.readable(); err != nil {
		return Event{}, err
	}
	seq, loc, found, err := db.idx.Lookup(id)
	if err != nil {
		return Event{}, err
	}
	if !found || seq > l.log.Head().Seq {
		return Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return l.read(index.Position{ID: id, Seq: seq, Loc: loc})
}

// GetPrefix returns the one event whose hex ID starts with prefix (at
// least 4 hex digits, either case), like a short git hash. A prefix that
// matches several events is an *AmbiguousError listing some of them.
func (db *DB) GetPrefix(ctx context.Context, prefix string) (Event, error) {
	p := strings.ToLower(prefix)
	if len(p) < 4 || len(p) > 32 {
		return Event{}, invalid("ID prefix %q: want 4 to 32 hex digits", prefix)
	}
	whole, err := hex.DecodeString(p[:len(p)/2*2])
	if err != nil {
		return Event{}, invalid("ID prefix %q is not hex", prefix)
	}
	odd := -1
	if len(p)%2 == 1 {
		v, err := strconv.ParseUint(p[len(p)-1:], 16, 8)
		if err != nil {
			return Event{}, invalid("ID prefix %q is not hex", prefix)
		}
		odd = int(v)
	}
	db.mu.RLock()
	ids := make([]eventid.LedgerID, 0, len(db.byID))
	for id := range db.byID {
		ids = append(ids, id)
	}
	db.mu.RUnlock()
	found, err := db.idx.PrefixMatches(ids, whole, odd, 5)
	if err != nil {
		return Event{}, err
	}
	switch len(found) {
	case 0:
		return Event{}, fmt.Errorf("%w: no event ID starts with %q", ErrNotFound, prefix)
	case 1:
		return db.Get(ctx, found[0])
	}
	return Event{}, &AmbiguousError{Prefix: prefix, Candidates: found}
}

// GetSeq returns the event with sequence number seq (1 is the genesis
// event) of a ledger.
func (db *DB) GetSeq(ctx context.Context, ledgerName string, seq uint64) (Event, error) {
	l, err := db.readableLedger(ledgerName)
	if err != nil {
		return Event{}, err
	}
	if seq == 0 || seq > l.log.Head().Seq {
		return Event{}, fmt.Errorf("%w: ledger %s has no event #%d (it has %d)", ErrNotFound, l.meta.Name, seq, l.log.Head().Seq)
	}
	id, ok, err := db.idx.BySeq(l.meta.ID, seq)
	if err != nil {
		return Event{}, err
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: ledger %s event #%d is not in the index", ErrNotFound, l.meta.Name, seq)
	}
	return db.Get(ctx, id)
}

// ScanOptions select a time range of a ledger.
type ScanOptions struct {
	// From and To bound the events' times, both inclusive; zero means the
	// start or the end of the ledger.
	From, To time.Time
	// After, if not zero, starts after this event (exclusive), in the
	// scan's direction: for paging, pass the last ID of the page before.
	After eventid.ID
	// Reverse scans from the newest event to the oldest.
	Reverse bool
	// Limit stops after that many events; 0 means no limit.
	Limit int
}

// Scan returns the events of a ledger in a time range, in time order (or
// reverse), as an iterator. It sees the events committed when each step
// reads the index: a consistent prefix of the ledger.
func (db *DB) Scan(ctx context.Context, ledgerName string, o ScanOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.readableLedger(ledgerName)
		if err != nil {
			yield(Event{}, err)
			return
		}
		// Unbounded, a scan covers every ID of the ledger, whatever its time.
		lo, hi := eventid.MinForLedger(l.meta.ID), eventid.MaxForLedger(l.meta.ID)
		if !o.From.IsZero() {
			lo = l.meta.ID.MinForTime(o.From)
		}
		if !o.To.IsZero() {
			hi = l.meta.ID.MaxForTime(o.To)
		}
		if !o.After.IsZero() {
			if o.After.Ledger() != l.meta.ID {
				yield(Event{}, invalid("after %s: an ID of another ledger", o.After))
				return
			}
			if o.Reverse {
				hi = prevID(o.After)
			} else {
				lo = nextID(o.After)
			}
		}
		head := l.visible().Seq
		if !o.Reverse {
			l.scanForward(ctx, lo, hi, head, o.Limit, yield)
			return
		}
		n := 0
		for pos, err := range db.idx.TimeRange(ctx, l.meta.ID, lo, hi, true) {
			if err != nil {
				yield(Event{}, err)
				return
			}
			if pos.Seq > head {
				continue // committed after the scan began
			}
			ev, err := l.read(pos)
			if !yield(ev, err) || err != nil {
				return
			}
			if n++; o.Limit > 0 && n >= o.Limit {
				return
			}
		}
	}
}

// scanForward yields the events with IDs in [lo, hi] up to sequence number
// head, at most limit (0: no limit). Time order is ledger order, so it is
// one index seek for the first event and then a sequential walk of the
// segments, which reads in large blocks instead of one read an event.
func (l *ledger) scanForward(ctx context.Context, lo, hi eventid.ID, head uint64, limit int, yield func(Event, error) bool) {
	var first index.Position
	found := false
	for pos, err := range l.db.idx.TimeRange(ctx, l.meta.ID, lo, hi, false) {
		if err != nil {
			yield(Event{}, err)
			return
		}
		first, found = pos, true
		break
	}
	if !found || first.Seq > head {
		return
	}
	it := l.log.NewIterator(first.Loc.Segment, first.Loc.Offset)
	for n := 0; it.Next(); {
		r := it.Record()
		if r.Seq > head || r.ID.Compare(hi) > 0 {
			return
		}
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				yield(Event{}, err)
				return
			}
		}
		if !yield(l.event(r, true), nil) {
			return
		}
		if n++; limit > 0 && n >= limit {
			return
		}
	}
	if err := it.Err(); err != nil {
		yield(Event{}, err)
	}
}

// nextID returns the ID right after id in byte order (id itself if it is
// the largest).
func nextID(id eventid.ID) eventid.ID {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i]++; id[i] != 0 {
			return id
		}
	}
	return maxID
}

// prevID returns the ID right before id in byte order (the zero ID for the
// zero ID).
func prevID(id eventid.ID) eventid.ID {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i]--; id[i] != 0xff {
			return id
		}
	}
	return eventid.ID{}
}

// ReplayOptions select the events of a ledger to replay, in ledger order.
type ReplayOptions struct {
	// Entity with Keys selects those streams; Entity alone, all of its
	// keys. Empty selects by Events only.
	Entity string
	Keys   []string
	// Events selects by event name; with Entity, both must match.
	Events []string
	// AfterSeq starts after that sequence number.
	AfterSeq uint64
}

// Replay returns the events of a ledger selected by entity and keys, by
// event names, or by both, in ledger order.
func (db *DB) Replay(ctx context.Context, ledgerName string, o ReplayOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.readableLedger(ledgerName)
		if err == nil && o.Entity == "" && len(o.Events) == 0 {
			err = invalid("replay needs an entity or event names")
		}
		if err == nil && o.Entity == "" && len(o.Keys) > 0 {
			err = invalid("replay: keys without an entity")
		}
		if err != nil {
			yield(Event{}, err)
			return
		}
		var sources []iter.Seq2[index.Position, error]
		names := map[string]bool{}
		for _, n := range o.Events {
			names[n] = true
		}
		switch {
		case o.Entity != "" && len(o.Keys) > 0:
			for _, k := range o.Keys {
				sources = append(sources, db.idx.Stream(ctx, l.meta.ID, []byte(o.Entity), []byte(k), o.AfterSeq))
			}
		case o.Entity != "":
			sources = append(sources, db.idx.EntityEvents(ctx, l.meta.ID, []byte(o.Entity), o.AfterSeq))
		default:
			for n := range names {
				sources = append(sources, db.idx.EventName(ctx, l.meta.ID, []byte(n), o.AfterSeq))
			}
		}
		head := l.visible().Seq
		for pos, err := range mergeBySeq(sources) {
			if err != nil {
				yield(Event{}, err)
				return
			}
			if pos.Seq > head {
				return // sources are in seq order: the rest came after the start
			}
			ev, err := l.read(pos)
			if err == nil && o.Entity != "" && len(names) > 0 && !names[ev.Event] {
				continue
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// mergeBySeq merges iterators that are each in sequence order.
func mergeBySeq(sources []iter.Seq2[index.Position, error]) iter.Seq2[index.Position, error] {
	return func(yield func(index.Position, error) bool) {
		type head struct {
			next func() (index.Position, error, bool)
			stop func()
			pos  index.Position
			ok   bool
		}
		hs := make([]*head, 0, len(sources))
		defer func() {
			for _, h := range hs {
				h.stop()
			}
		}()
		for _, s := range sources {
			next, stop := iter.Pull2(s)
			h := &head{next: next, stop: stop}
			var err error
			h.pos, err, h.ok = next()
			if err != nil {
				yield(index.Position{}, err)
				return
			}
			hs = append(hs, h)
		}
		for {
			var min *head
			for _, h := range hs {
				if h.ok && (min == nil || h.pos.Seq < min.pos.Seq) {
					min = h
				}
			}
			if min == nil {
				return
			}
			if !yield(min.pos, nil) {
				return
			}
			var err error
			min.pos, err, min.ok = min.next()
			if err != nil {
				yield(index.Position{}, err)
				return
			}
		}
	}
}
