package engine

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

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
	if l.db.ro != nil {
		return l.db.roIndex(l)
	}
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
		// The record's buffer is the Event's alone, and nothing writes
		// to the names' bytes (Meta and Data are capped): the strings
		// share it instead of three more copies.
		return Event{ID: r.ID, Ledger: l.meta.Name, Seq: r.Seq, Entity: bytesString(r.Entity), Key: bytesString(r.Key), Event: bytesString(r.Event), Meta: r.Meta, Data: r.Data}
	}
	ne, nk, nv, nm := len(r.Entity), len(r.Key), len(r.Event), len(r.Meta)
	buf := make([]byte, 0, ne+nk+nv+nm+len(r.Data))
	buf = append(append(append(append(append(buf, r.Entity...), r.Key...), r.Event...), r.Meta...), r.Data...)
	i := 0
	next := func(n int) []byte { b := buf[i : i+n : i+n]; i += n; return b }
	return Event{ID: r.ID, Ledger: l.meta.Name, Seq: r.Seq, Entity: bytesString(next(ne)), Key: bytesString(next(nk)), Event: bytesString(next(nv)), Meta: next(nm), Data: next(len(r.Data))}
}

// Get returns the event with that ID; the ID names its ledger.
func (db *DB) Get(ctx context.Context, id eventid.ID) (Event, error) {
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	db.mu.RLock()
	l, ok := db.byID[id.Ledger()]
	closed := db.closed
	name, unavailable, refused := db.brokenByID(id.Ledger())
	db.mu.RUnlock()
	if closed {
		return Event{}, ErrClosed
	}
	if !ok && refused {
		return Event{}, fmt.Errorf("get %s of ledger %s: %w", id, name, unavailable)
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: %s (no ledger %s)", ErrNotFound, id, id.Ledger())
	}
	if err := l.readable(); err != nil {
		return Event{}, err
	}
	if err := db.enterRead(); err != nil {
		return Event{}, err
	}
	defer db.exitRead()
	seq, loc, found, err := db.idx.Lookup(id)
	if err != nil {
		return Event{}, fmt.Errorf("engine: get %s: %w", id, err)
	}
	if !found || seq > l.log.Head().Seq || l.unstored(seq) {
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
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	db.mu.RLock()
	ids := make([]eventid.LedgerID, 0, len(db.byID))
	for id := range db.byID {
		ids = append(ids, id)
	}
	db.mu.RUnlock()
	if err := db.roIndexAll(); err != nil {
		return Event{}, err
	}
	if err := db.enterRead(); err != nil {
		return Event{}, err
	}
	found, err := db.idx.PrefixMatches(ids, whole, odd, 5)
	db.exitRead()
	if err != nil {
		return Event{}, fmt.Errorf("engine: get prefix %q: %w", prefix, err)
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
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	l, err := db.readableLedger(ledgerName)
	if err != nil {
		return Event{}, err
	}
	// What readers see (visible): an event committed and not yet indexed
	// is not there yet, as for every other read.
	if h := l.visible().Seq; seq == 0 || seq > h {
		return Event{}, fmt.Errorf("%w: ledger %s has no event #%d (it has %d)", ErrNotFound, l.meta.Name, seq, h)
	}
	if err := db.enterRead(); err != nil {
		return Event{}, err
	}
	id, ok, err := db.idx.BySeq(l.meta.ID, seq)
	db.exitRead()
	if err != nil {
		return Event{}, fmt.Errorf("engine: get event #%d of ledger %s: %w", seq, l.meta.Name, err)
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: ledger %s event #%d is not in the index", ErrNotFound, l.meta.Name, seq)
	}
	return db.Get(ctx, id)
}

// ScanOptions select a time range of a ledger.
type ScanOptions struct {
	// From and To bound the events' times, both inclusive; zero means the
	// start or the end of the ledger. Both are taken to the microsecond
	// (an event's time has that precision): a bound inside a microsecond
	// includes the events of that whole microsecond.
	From, To time.Time
	// After, if not zero, starts after this event (exclusive), in the
	// scan's direction: for paging, pass the last ID of the page before.
	// It must be an ID of the ledger, not necessarily of one of its
	// events (it stands for a point in the ledger's order).
	After eventid.ID
	// AfterSeq, if not zero, starts after the event with this sequence
	// number (exclusive), in the scan's direction: the other form of the
	// cursor. With After too, both must name the same event.
	AfterSeq uint64
	// Reverse scans from the newest event to the oldest.
	Reverse bool
	// Limit stops after that many events; 0 means no limit. A negative
	// Limit is ErrInvalid.
	Limit int
}

// Scan returns the events of a ledger in a time range, in time order (or
// reverse), as an iterator. It sees the events committed when it starts:
// a consistent prefix of the ledger.
//
// It reads the events in chunks of at most 64 and looks at ctx and at
// Close before each: once ctx is cancelled or Close has begun, it yields
// at most 64 more events, then ctx's error or ErrClosed, and stops. It
// holds no file and no index iterator while the loop body runs, which may
// call Close. Its other errors are the engine's, wrapping the cause.
func (db *DB) Scan(ctx context.Context, ledgerName string, o ScanOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.readableLedger(ledgerName)
		if err == nil && o.Limit < 0 {
			err = invalid("scan: limit %d is negative (0 means no limit)", o.Limit)
		}
		if err == nil && !o.After.IsZero() && o.After.Ledger() != l.meta.ID {
			err = invalid("scan: after %s: an ID of another ledger", o.After)
		}
		if err != nil {
			yield(Event{}, err)
			return
		}
		head := l.visible()
		// Unbounded, a scan covers every ID of the ledger, whatever its
		// time, up to the head when it starts.
		lo, hi := eventid.MinForLedger(l.meta.ID), head.ID
		if !o.From.IsZero() {
			lo = l.meta.ID.MinForTime(o.From)
		}
		if t := l.meta.ID.MaxForTime(o.To); !o.To.IsZero() && t.Compare(hi) < 0 {
			hi = t
		}
		var it *segment.Iterator // forwards
		defer func() {
			if it != nil {
				it.Close()
			}
		}()
		started := false
		fill := func(buf []Event, want int) ([]Event, bool, error) {
			if !started {
				started = true
				after, empty, err := l.scanCursor(o, head)
				if err != nil || empty {
					return buf, false, err
				}
				if !after.IsZero() {
					if p := prevID(after); o.Reverse && p.Compare(hi) < 0 {
						hi = p
					} else if n := nextID(after); !o.Reverse && n.Compare(lo) > 0 {
						lo = n
					}
				}
				if !o.Reverse {
					// Time order is ledger order: one index seek for the
					// first event, then a sequential walk of the segments,
					// which reads in large blocks instead of one read an
					// event.
					pos, found, err := l.firstInRange(ctx, lo, hi, false)
					if err != nil || !found {
						return buf, false, err
					}
					it = l.log.NewIterator(pos.Loc.Segment, pos.Loc.Offset)
				}
			}
			if o.Reverse {
				// One index seek a chunk: no Pebble iterator stays open
				// while the loop body runs.
				var err error
				for pos, e := range l.db.idx.TimeRange(ctx, l.meta.ID, lo, hi, true) {
					if e != nil {
						err = l.indexErr("scan", e)
						break
					}
					if len(buf) == want {
						return buf, true, nil
					}
					ev, e := l.read(pos)
					if e != nil {
						err = e
						break
					}
					buf = append(buf, ev)
					hi = prevID(pos.ID)
				}
				return buf, false, err
			}
			for len(buf) < want {
				if !it.Next() {
					if err := it.Err(); err != nil {
						return buf, false, fmt.Errorf("engine: scan of ledger %s: %w", l.meta.Name, err)
					}
					return buf, false, nil
				}
				r := it.Record()
				if r.Seq > head.Seq || r.ID.Compare(hi) > 0 {
					return buf, false, nil
				}
				buf = append(buf, l.event(r, true))
			}
			return buf, true, nil
		}
		db.chunked(ctx, o.Limit, yield, fill)
	}
}

// scanCursor returns the ID a scan starts after (zero: none), from
// o.After and o.AfterSeq; empty means no event can follow. Called with
// enterRead held.
func (l *ledger) scanCursor(o ScanOptions, head segment.Head) (after eventid.ID, empty bool, err error) {
	if o.AfterSeq == 0 {
		return o.After, false, nil
	}
	if !o.After.IsZero() {
		seq, _, found, err := l.db.idx.Lookup(o.After)
		if err != nil {
			return eventid.ID{}, false, l.indexErr("scan", err)
		}
		if !found || seq != o.AfterSeq {
			return eventid.ID{}, false, invalid("scan: after %s and after sequence number %d name different events", o.After, o.AfterSeq)
		}
		return o.After, false, nil
	}
	if o.AfterSeq > head.Seq {
		// After the end: nothing follows; backwards, everything does.
		return eventid.ID{}, !o.Reverse, nil
	}
	id, found, err := l.db.idx.BySeq(l.meta.ID, o.AfterSeq)
	if err != nil {
		return eventid.ID{}, false, l.indexErr("scan", err)
	}
	if !found {
		return eventid.ID{}, false, fmt.Errorf("%w: scan after sequence number %d: not in the index of ledger %s", ErrNotFound, o.AfterSeq, l.meta.Name)
	}
	return id, false, nil
}

// firstInRange returns the first indexed event of l with an ID in
// [lo, hi], or the last with reverse. Called with enterRead held.
func (l *ledger) firstInRange(ctx context.Context, lo, hi eventid.ID, reverse bool) (index.Position, bool, error) {
	for pos, err := range l.db.idx.TimeRange(ctx, l.meta.ID, lo, hi, reverse) {
		if err != nil {
			return index.Position{}, false, l.indexErr("read", err)
		}
		return pos, true, nil
	}
	return index.Position{}, false, nil
}

// indexErr wraps an error of the index met by a read of l.
func (l *ledger) indexErr(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("engine: %s of ledger %s: %w", what, l.meta.Name, err)
}

// chunked runs an iterator's reads: before each chunk it looks at ctx and
// at Close, then fill appends at most want events to buf (want is at most
// checkEvery, and the rest of limit) with enterRead held, and says whether
// more may follow. The chunk is yielded after exitRead, so that the loop
// body runs with no read in progress: a Close it calls does not wait for
// it, and one from another goroutine waits at most for one chunk's reads.
// An error of fill is yielded after the events before it.
func (db *DB) chunked(ctx context.Context, limit int, yield func(Event, error) bool, fill func(buf []Event, want int) ([]Event, bool, error)) {
	buf := make([]Event, 0, checkEvery)
	n := 0
	for {
		if err := db.stopped(ctx); err != nil {
			yield(Event{}, err)
			return
		}
		if err := db.enterRead(); err != nil {
			yield(Event{}, err)
			return
		}
		want := checkEvery
		if limit > 0 {
			want = min(want, limit-n)
		}
		var more bool
		var err error
		func() {
			defer db.exitRead()
			buf, more, err = fill(buf[:0], want)
		}()
		for i := range buf {
			if !yield(buf[i], nil) {
				return
			}
		}
		n += len(buf)
		if err != nil {
			if c := ctx.Err(); c != nil && errors.Is(err, c) {
				err = c
			}
			yield(Event{}, err)
			return
		}
		if !more || limit > 0 && n >= limit {
			return
		}
	}
}

// maxID is the largest event ID: every ID sorts at or before it.
var maxID = eventid.ID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

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

// ReplayOptions select the events of a ledger to replay, in ledger order
// (or reverse). The bounds and the cursor are Scan's.
type ReplayOptions struct {
	// Entity with Keys selects those streams; Entity alone, all of its
	// keys. Empty selects by Events only.
	Entity string
	Keys   []string
	// Events selects by event name; with Entity, both must match.
	Events []string
	// From and To bound the events' times, both inclusive; zero means the
	// start or the end of the ledger. Both are taken to the microsecond
	// (an event's time has that precision): a bound inside a microsecond
	// includes the events of that whole microsecond.
	From, To time.Time
	// After, if not zero, starts after this event (exclusive) in the
	// replay's direction: for paging, pass the last ID of the page before.
	// It must be an ID of the ledger (not necessarily of one of its
	// events: it stands for a point in the ledger's order).
	After eventid.ID
	// AfterSeq, if not zero, starts after the event with this sequence
	// number (exclusive), in the replay's direction: the other form of the
	// cursor. With After too, both must name the same event.
	AfterSeq uint64
	// Reverse replays from the newest event to the oldest.
	Reverse bool
	// Limit stops after that many events; 0 means no limit. A negative
	// Limit is ErrInvalid.
	Limit int
}

// Replay returns the events of a ledger selected by entity and keys, by
// event names, or by both, in ledger order (or reverse), within Scan's
// bounds. It sees the events committed when it starts, and stops on
// cancel and Close as Scan does.
func (db *DB) Replay(ctx context.Context, ledgerName string, o ReplayOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l, err := db.readableLedger(ledgerName)
		switch {
		case err != nil:
		case o.Entity == "" && len(o.Events) == 0:
			err = invalid("replay needs an entity or event names")
		case o.Entity == "" && len(o.Keys) > 0:
			err = invalid("replay: keys without an entity")
		case o.Limit < 0:
			err = invalid("replay: limit %d is negative (0 means no limit)", o.Limit)
		case !o.After.IsZero() && o.After.Ledger() != l.meta.ID:
			err = invalid("replay: after %s: an ID of another ledger", o.After)
		}
		if err != nil {
			yield(Event{}, err)
			return
		}
		rp := &replay{l: l, ctx: ctx, reverse: o.Reverse}
		started := false
		db.chunked(ctx, o.Limit, yield, func(buf []Event, want int) ([]Event, bool, error) {
			if !started {
				started = true
				if err := rp.start(&o); err != nil {
					return buf, false, err
				}
			}
			return rp.fill(buf, want)
		})
	}
}

// replay is a Replay in progress: it merges the index families it reads
// (one a stream, an entity, or one an event name) by sequence number,
// reading each in chunks, so that no index iterator stays open between
// two chunks.
type replay struct {
	l       *ledger
	ctx     context.Context
	lo, hi  uint64 // the sequence numbers to replay, both inclusive
	reverse bool
	names   map[string]bool // with an entity: the event names to keep
	srcs    []*replaySource
}

// replaySource is one index family read by a replay.
type replaySource struct {
	scan    func(index.SeqRange) iter.Seq2[index.Position, error]
	buf     []index.Position // read, not yet merged: buf[i:]
	i       int
	last    uint64 // the sequence number of the last position read
	started bool
	done    bool // nothing follows buf
}

// start sets the replay's range of sequence numbers from o's bounds and
// cursor, and its sources. Called with enterRead held.
func (rp *replay) start(o *ReplayOptions) error {
	l := rp.l
	head := l.visible()
	rp.lo, rp.hi = 1, head.Seq
	// Time order is ledger order: a time bound, or an ID, is the sequence
	// number of the first (or last) event on its side.
	bound := func(lo, hi eventid.ID, last bool) (uint64, bool, error) {
		if hi.Compare(head.ID) > 0 {
			hi = head.ID
		}
		pos, found, err := l.firstInRange(rp.ctx, lo, hi, last)
		return pos.Seq, found, err
	}
	empty := false
	narrow := func(lo, hi eventid.ID, last bool) error {
		seq, found, err := bound(lo, hi, last)
		switch {
		case err != nil:
			return err
		case !found:
			empty = true
		case last:
			rp.hi = min(rp.hi, seq)
		default:
			rp.lo = max(rp.lo, seq)
		}
		return nil
	}
	first, end := eventid.MinForLedger(l.meta.ID), eventid.MaxForLedger(l.meta.ID)
	if !o.From.IsZero() {
		if err := narrow(l.meta.ID.MinForTime(o.From), end, false); err != nil {
			return err
		}
	}
	if !o.To.IsZero() {
		if err := narrow(first, l.meta.ID.MaxForTime(o.To), true); err != nil {
			return err
		}
	}
	switch {
	case !o.After.IsZero() && o.AfterSeq != 0:
		seq, _, found, err := l.db.idx.Lookup(o.After)
		if err != nil {
			return l.indexErr("replay", err)
		}
		if !found || seq != o.AfterSeq {
			return invalid("replay: after %s and after sequence number %d name different events", o.After, o.AfterSeq)
		}
		rp.cursor(seq, &empty)
	case o.AfterSeq != 0:
		rp.cursor(o.AfterSeq, &empty)
	case !o.After.IsZero() && o.Reverse:
		if err := narrow(first, prevID(o.After), true); err != nil {
			return err
		}
	case !o.After.IsZero():
		if err := narrow(nextID(o.After), end, false); err != nil {
			return err
		}
	}
	if empty || rp.lo > rp.hi {
		return nil
	}
	id := l.meta.ID
	add := func(scan func(index.SeqRange) iter.Seq2[index.Position, error]) {
		rp.srcs = append(rp.srcs, &replaySource{scan: scan})
	}
	names := map[string]bool{}
	for _, n := range o.Events {
		names[n] = true
	}
	switch {
	case o.Entity != "" && len(o.Keys) > 0:
		keys := map[string]bool{}
		for _, k := range o.Keys {
			if keys[k] {
				continue
			}
			keys[k] = true
			add(func(r index.SeqRange) iter.Seq2[index.Position, error] {
				return l.db.idx.StreamRange(rp.ctx, id, []byte(o.Entity), []byte(k), r)
			})
		}
	case o.Entity != "":
		add(func(r index.SeqRange) iter.Seq2[index.Position, error] {
			return l.db.idx.EntityEventsRange(rp.ctx, id, []byte(o.Entity), r)
		})
	default:
		for n := range names {
			add(func(r index.SeqRange) iter.Seq2[index.Position, error] {
				return l.db.idx.EventNameRange(rp.ctx, id, []byte(n), r)
			})
		}
	}
	if o.Entity != "" && len(names) > 0 {
		rp.names = names
	}
	return nil
}

// cursor narrows the range to the events after seq in the replay's
// direction.
func (rp *replay) cursor(seq uint64, empty *bool) {
	switch {
	case !rp.reverse && seq >= rp.hi, rp.reverse && seq <= rp.lo:
		*empty = true
	case rp.reverse:
		rp.hi = min(rp.hi, seq-1)
	default:
		rp.lo = max(rp.lo, seq+1)
	}
}

// refill reads the next positions of s, at most checkEvery.
func (rp *replay) refill(s *replaySource) error {
	r := index.SeqRange{After: rp.lo - 1, Before: rp.hi + 1, Reverse: rp.reverse}
	if s.started {
		if rp.reverse {
			r.Before = s.last
		} else {
			r.After = s.last
		}
	}
	s.buf, s.i = s.buf[:0], 0
	for pos, err := range s.scan(r) {
		if err != nil {
			return rp.l.indexErr("replay", err)
		}
		s.buf = append(s.buf, pos)
		if len(s.buf) == checkEvery {
			break
		}
	}
	s.done = len(s.buf) < checkEvery
	if len(s.buf) > 0 {
		s.last, s.started = s.buf[len(s.buf)-1].Seq, true
	}
	return nil
}

// fill merges the sources' next positions and reads their events: at most
// want events, and at most checkEvery positions, so that a filter that
// keeps few events does not make a long chunk. Called with enterRead held.
func (rp *replay) fill(buf []Event, want int) ([]Event, bool, error) {
	for visited := 0; len(buf) < want && visited < checkEvery; visited++ {
		var best *replaySource
		for _, s := range rp.srcs {
			if s.i == len(s.buf) {
				if s.done {
					continue
				}
				if err := rp.refill(s); err != nil {
					return buf, false, err
				}
				if s.i == len(s.buf) {
					continue
				}
			}
			if best == nil || (s.buf[s.i].Seq < best.buf[best.i].Seq) != rp.reverse {
				best = s
			}
		}
		if best == nil {
			return buf, false, nil
		}
		pos := best.buf[best.i]
		best.i++
		ev, err := rp.l.read(pos)
		if err != nil {
			return buf, false, err
		}
		if rp.names != nil && !rp.names[ev.Event] {
			continue
		}
		buf = append(buf, ev)
	}
	for _, s := range rp.srcs {
		if s.i < len(s.buf) || !s.done {
			return buf, true, nil
		}
	}
	return buf, false, nil
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
