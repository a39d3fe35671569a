package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
)

// Named consumers: a subscription whose position, the last event its
// caller acknowledged, is kept in the metadata file (meta.db) across
// restarts. See "Consumers" in docs/engine.md for the guarantees and the
// two classic bugs this design rules out.
//
// The position only ever moves to an event that Events handed to the
// caller and the caller then acknowledged: never to an event read but not
// yet yielded, never to the ledger's head, never by a timer. A stored
// position always names an event on stable storage (the ledger is synced
// up to it first), so no crash can leave it past the ledger's end.

// positionsLost is the error of the lost positions, why (when and how the
// metadata file was lost) as the marker in the file records it.
func positionsLost(why string) error {
	return fmt.Errorf("%w: %s; the positions of named consumers were only in it and are lost: every consumer call fails with this error until DB.AcceptLostPositions (annal accept-lost-positions) accepts the loss; then each consumer starts again at the first event of its ledger (at least once) unless SetConsumerPosition gives it a position (restoring meta.db from a backup instead keeps the positions it holds)",
		ErrPositionsLost, why)
}

// positionsErr returns the lost positions' error while they are not
// accepted, or nil.
func (db *DB) positionsErr() error {
	db.lostMu.RLock()
	defer db.lostMu.RUnlock()
	return db.metaRebuilt
}

// AcceptLostPositions clears the state in which the consumers' positions
// are lost (ErrPositionsLost; see MetaRebuilt): an operator's explicit
// act, once whoever runs the consumers knows that their positions are
// gone. Every named consumer then starts again at the first event of its
// ledger, unless SetConsumerPosition sets its position first. The marker
// is removed from the metadata file (synced) before it returns, so the
// next Open no longer reports it. Nothing to accept is not an error.
func (db *DB) AcceptLostPositions() error {
	if err := db.readOnlyErr("AcceptLostPositions writes the metadata file"); err != nil {
		return err
	}
	db.lostMu.Lock()
	defer db.lostMu.Unlock()
	if db.metaRebuilt == nil {
		return nil
	}
	if err := db.checkDir(false); err != nil {
		return err
	}
	s := &db.consumers
	s.mu.Lock() // Close closes meta.db once it holds it
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := meta.ClearPositionsLost(db.meta); err != nil {
		return fmt.Errorf("engine: accept the lost consumer positions: %w", err)
	}
	db.metaRebuilt = nil
	return nil
}

// defaultAckInterval is ConsumerOptions.Interval's default.
const defaultAckInterval = time.Second

// ConsumerOptions configure a named consumer: the events it receives
// (Subscribe's selector) and how durable its acknowledgements are.
type ConsumerOptions struct {
	// Entity with Keys selects those streams; Entity alone, all of its
	// keys; Events selects by event name; with both, an event must match
	// both. An empty selector selects every event, the genesis included.
	// The selector may change from one DB.Consumer to the next: the
	// position is a point in the ledger, and events that a new selector
	// matches before it are not delivered.
	Entity string
	Keys   []string
	Events []string
	// Durability of acknowledgements (zero means Sync):
	//   - Sync: Ack returns once the position is in meta.db and synced
	//     (one bbolt commit, an fsync, per Ack that moves the position);
	//   - Interval: Ack records the position in memory; it is written
	//     within Interval, and by Flush, Close and DB.Close. A crash loses
	//     at most the acknowledgements of the last Interval;
	//   - None: the position is written only by Flush, Close and
	//     DB.Close. A crash loses every acknowledgement since.
	// What a crash loses is acknowledgements, never events: the consumer
	// resumes after the last position written, and receives again what
	// followed it (at least once).
	Durability Durability
	// Interval, with Interval durability, is the longest time an
	// acknowledgement waits before it is written. Zero means 1 s;
	// negative is ErrInvalid.
	Interval time.Duration
}

// ConsumerPosition is an event of a ledger, by ID and sequence number.
// The zero value is the start of the ledger (before its genesis event).
type ConsumerPosition struct {
	ID  eventid.ID
	Seq uint64
}

// ConsumerState is where a live consumer is.
type ConsumerState struct {
	// Delivered is the last event Events handed to the caller (through
	// this Consumer value, since DB.Consumer).
	Delivered ConsumerPosition
	// Acked is the last event the caller acknowledged: Events resumes
	// after it.
	Acked ConsumerPosition
	// Stored is the last acknowledged position written to meta.db: where
	// the consumer resumes after a crash.
	Stored ConsumerPosition
}

// ConsumerInfo describes a consumer's stored position (DB.Consumers).
type ConsumerInfo struct {
	Ledger   string           // the ledger's name
	Name     string           // the consumer's name
	Position ConsumerPosition // the stored position
	Entity   string           // the selector it was last used with
	Keys     []string
	Events   []string
	Updated  time.Time // when the position was last written
	Live     bool      // a Consumer of this DB holds the name now
}

// Consumer is a named, durable subscription to a ledger, made by
// DB.Consumer. Its methods are safe for concurrent use, but one Events
// iteration at a time.
type Consumer struct {
	db   *DB
	l    *ledger
	key  consumerKey
	sel  Selector
	opts ConsumerOptions

	iterating atomic.Bool
	done      chan struct{} // closed by Close or DB.Close

	mu                       waitLock
	closed                   bool
	delivered, acked, stored ConsumerPosition
	timer                    *time.Timer // the Interval write due, if any
	flushErr                 error       // the last background write's failure
}

type consumerKey struct {
	ledger eventid.LedgerID
	name   string
}

// consumerSet is the DB's live consumers.
type consumerSet struct {
	mu     waitLock
	closed bool // DB.Close has begun: no new consumer
	live   map[consumerKey]*Consumer
}

// waitLock is a mutex whose wait a context can end (lockContext): the
// consumer writes' locks, held during a write of meta.db and an fsync. It
// is a channel with one slot, full while the lock is held; the zero value
// is unlocked.
type waitLock struct {
	once sync.Once
	slot chan struct{}
}

func (m *waitLock) ch() chan struct{} {
	m.once.Do(func() { m.slot = make(chan struct{}, 1) })
	return m.slot
}

// Lock locks m, waiting as long as it takes.
func (m *waitLock) Lock() { m.ch() <- struct{}{} }

// lockContext locks m, or returns ctx's error, not holding m, if ctx
// ends first.
func (m *waitLock) lockContext(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case m.ch() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock unlocks m, which must be locked.
func (m *waitLock) Unlock() {
	select {
	case <-m.ch():
	default:
		panic("engine: unlock of an unlocked waitLock")
	}
}

// errConsumerClosed is the cause of an Events context cancelled by Close.
var errConsumerClosed = errors.New("consumer closed")

// Consumer opens the named consumer of a ledger (by name or ID hex): it
// resumes after the position stored under that name, or starts at the
// ledger's first event if none is. Until Close (or DB.Close), no other
// Consumer of this DB may take the name (ErrConsumerInUse). Positions are
// kept by ledger ID, so a ledger renamed by Open keeps its consumers.
//
// A position is lost with meta.db: while a rebuilt one says so (see
// MetaRebuilt) Consumer fails with ErrPositionsLost; once
// AcceptLostPositions accepts the loss, every consumer starts again at
// the ledger's first event (at least once, not exactly once).
func (db *DB) Consumer(ledgerName, name string, o ConsumerOptions) (*Consumer, error) {
	if err := db.readOnlyErr("a consumer stores its position"); err != nil {
		return nil, err
	}
	if err := db.positionsErr(); err != nil {
		return nil, err
	}
	if p := names.ShownProblem(name); p != "" {
		return nil, invalid("consumer name %s", p)
	}
	switch {
	case o.Durability != 0 && o.Durability != Sync && o.Durability != Interval && o.Durability != None:
		return nil, invalid("consumer %q: durability %v is not Sync, Interval or None", name, o.Durability)
	case o.Interval < 0:
		return nil, invalid("consumer %q: Interval %v is negative (0 means %v)", name, o.Interval, defaultAckInterval)
	case o.Entity == "" && len(o.Keys) > 0:
		return nil, invalid("consumer %q: keys without an entity", name)
	}
	if o.Durability == 0 {
		o.Durability = Sync
	}
	if o.Interval == 0 {
		o.Interval = defaultAckInterval
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return nil, err
	}
	c := &Consumer{db: db, l: l, key: consumerKey{l.meta.ID, name}, opts: o, done: make(chan struct{}),
		sel: Selector{Entity: o.Entity, Keys: slices.Clone(o.Keys), Events: slices.Clone(o.Events)}}
	s := &db.consumers
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.live[c.key] != nil {
		return nil, fmt.Errorf("%w: consumer %q of ledger %s is held by another Consumer of this DB (Close it first)", ErrConsumerInUse, name, l.meta.Name)
	}
	r, found, err := meta.GetConsumer(db.meta, l.meta.ID, name)
	if err != nil {
		return nil, fmt.Errorf("engine: consumer %q of ledger %s: %w (DeleteConsumer removes the record)", name, l.meta.Name, err)
	}
	if found {
		c.acked = ConsumerPosition{ID: eventid.ID(r.ID), Seq: r.Seq}
		c.stored = c.acked
	}
	if s.live == nil {
		s.live = map[consumerKey]*Consumer{}
	}
	s.live[c.key] = c
	return c, nil
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.key.name }

// Events yields the selected events after the consumer's acknowledged
// position, then each new one as it commits, as Subscribe does, until
// ctx ends, Close, or DB.Close (then ctx's error or ErrClosed, once). A
// second Events of the same Consumer while one runs yields ErrInvalid.
// Each Events starts again after the acknowledged position, so events
// yielded and not acknowledged come again (at least once).
func (c *Consumer) Events(ctx context.Context) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if !c.iterating.CompareAndSwap(false, true) {
			yield(Event{}, invalid("consumer %q of ledger %s: Events is already running (one at a time)", c.key.name, c.l.meta.Name))
			return
		}
		defer c.iterating.Store(false)
		if err := c.db.positionsErr(); err != nil {
			yield(Event{}, err)
			return
		}
		c.mu.Lock()
		closed, start := c.closed, c.acked
		c.mu.Unlock()
		if closed {
			yield(Event{}, c.closedErr())
			return
		}
		cctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			select {
			case <-c.done:
				cancel(errConsumerClosed)
			case <-cctx.Done():
			}
		}()
		o := SubscribeOptions{Entity: c.sel.Entity, Keys: c.sel.Keys, Events: c.sel.Events, After: start.ID, AfterSeq: start.Seq}
		for ev, err := range c.db.Subscribe(cctx, c.l.meta.ID.String(), o) {
			if err != nil {
				switch {
				case ctx.Err() == nil && errors.Is(context.Cause(cctx), errConsumerClosed):
					err = c.closedErr()
				case !start.IsZero() && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid)):
					err = fmt.Errorf("engine: consumer %q of ledger %s: its position %s #%d is not an event of the ledger (DeleteConsumer starts it again from the first event): %w",
						c.key.name, c.l.meta.Name, start.ID, start.Seq, err)
				}
				yield(Event{}, err)
				return
			}
			// Delivered before the yield: the caller may Ack it in the
			// loop body. Not after Close.
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				yield(Event{}, c.closedErr())
				return
			}
			if ev.Seq > c.delivered.Seq {
				c.delivered = ConsumerPosition{ID: ev.ID, Seq: ev.Seq}
			}
			c.mu.Unlock()
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// IsZero reports whether p is the start of the ledger.
func (p ConsumerPosition) IsZero() bool { return p.Seq == 0 && p.ID.IsZero() }

func (c *Consumer) closedErr() error {
	return fmt.Errorf("%w: consumer %q of ledger %s", ErrClosed, c.key.name, c.l.meta.Name)
}

// Ack acknowledges the event id and every event before it (a cumulative
// acknowledgement, as a Kafka offset): the consumer's position moves to
// id, and the next Events, in this process or after a restart, resumes
// after it. With Sync durability it returns once the position is on
// stable storage.
//
// id must be an event that Events handed to the caller through this
// Consumer: an event not yet delivered, one the selector does not match,
// or one of another ledger is ErrInvalid, and the position does not move.
// An event at or before the acknowledged position is a no-op (nil): the
// position never goes back. Since Ack is cumulative, handlers running
// concurrently must acknowledge an event only once every event before it
// is handled.
//
// If ctx ends before the position is written (with Sync durability) or
// recorded (Interval, None), Ack returns an error matching ctx.Err() and
// the position does not move: ctx ends its wait for another write of the
// consumer's position (an Ack, Flush, or the Interval write), and is
// looked at again before the ledger's fsync and before the write of
// meta.db, neither of which it interrupts once begun.
func (c *Consumer) Ack(ctx context.Context, id eventid.ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.db.positionsErr(); err != nil {
		return err
	}
	if err := c.mu.lockContext(ctx); err != nil {
		return fmt.Errorf("engine: consumer %q of ledger %s: ack %s: %w: the position did not move", c.key.name, c.l.meta.Name, id, err)
	}
	defer c.mu.Unlock()
	if c.closed {
		return c.closedErr()
	}
	where := fmt.Sprintf("consumer %q of ledger %s: ack %s", c.key.name, c.l.meta.Name, id)
	switch {
	case id.IsZero():
		return invalid("%s: the zero ID", where)
	case id.Ledger() != c.l.meta.ID:
		return invalid("%s: an ID of another ledger (%s, not %s)", where, id.Ledger(), c.l.meta.ID)
	case id == c.acked.ID:
		return nil
	}
	var seq uint64
	if id == c.delivered.ID {
		seq = c.delivered.Seq
	} else {
		e, found, err := c.l.names(id)
		if err != nil {
			return fmt.Errorf("engine: %s: %w", where, err)
		}
		switch {
		case !found:
			return invalid("%s: the ledger has no such event, so it was not delivered", where)
		case e.seq <= c.acked.Seq:
			return nil
		case e.seq > c.delivered.Seq:
			return invalid("%s: #%d was not delivered yet (the last event Events yielded is #%d); a consumer acknowledges only what it was given", where, e.seq, c.delivered.Seq)
		case !c.sel.matches(e.entity, e.key, e.event):
			return invalid("%s: #%d (%q/%q %q) does not match the consumer's selector, so it was not delivered", where, e.seq, e.entity, e.key, e.event)
		}
		seq = e.seq
	}
	if seq <= c.acked.Seq {
		return nil
	}
	prev := c.acked
	c.acked = ConsumerPosition{ID: id, Seq: seq}
	switch c.opts.Durability {
	case Sync:
		if err := c.store(ctx); err != nil {
			c.acked = prev // not acknowledged: Ack may be called again
			return err
		}
	case Interval:
		if c.timer == nil {
			c.timer = time.AfterFunc(c.opts.Interval, c.flushDue)
		}
		if err := c.flushErr; err != nil {
			c.flushErr = nil
			return fmt.Errorf("engine: %s: recorded, but the last background write of the position failed (it is tried again): %w", where, err)
		}
	}
	return nil
}

// Flush writes the acknowledged position to meta.db now, and returns once
// it is on stable storage (for Interval and None durability; with Sync
// it is there already). If ctx ends first, as for Ack, Flush returns an
// error matching ctx.Err() and the stored position is as it was (the
// acknowledged one is kept, and written later as its durability says).
func (c *Consumer) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.mu.lockContext(ctx); err != nil {
		return fmt.Errorf("engine: consumer %q of ledger %s: flush: %w: the position was not written", c.key.name, c.l.meta.Name, err)
	}
	defer c.mu.Unlock()
	if c.closed {
		return c.closedErr()
	}
	c.flushErr = nil
	return c.store(ctx)
}

// Position returns where the consumer is: the last event delivered,
// acknowledged and stored.
func (c *Consumer) Position() ConsumerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConsumerState{Delivered: c.delivered, Acked: c.acked, Stored: c.stored}
}

// Close writes the acknowledged position (whatever the durability), ends
// a running Events with ErrClosed, and frees the name. Closing a consumer
// that DB.Close already closed (it wrote the position) returns nil.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	err := c.store(context.Background())
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	s := &c.db.consumers
	s.mu.Lock()
	if s.live[c.key] == c {
		delete(s.live, c.key)
	}
	s.mu.Unlock()
	return err
}

// flushDue is the Interval timer's write.
func (c *Consumer) flushDue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	if c.closed {
		return
	}
	if err := c.store(context.Background()); err != nil {
		c.flushErr = err
		c.timer = time.AfterFunc(c.opts.Interval, c.flushDue) // try again
	}
}

// store writes the acknowledged position, if it moved, to meta.db, after
// making the ledger durable up to it: a stored position is never past
// the ledger's end after a crash. Called with c.mu held; DB.Close takes
// c.mu (closeAll) before it closes the ledgers' logs and meta.db. If ctx
// has ended before the fsync or before the write, it returns an error
// matching ctx.Err() and writes nothing.
func (c *Consumer) store(ctx context.Context) error {
	pos := c.acked
	if pos == c.stored {
		return nil
	}
	where := fmt.Sprintf("consumer %q of ledger %s: store position #%d", c.key.name, c.l.meta.Name, pos.Seq)
	if err := c.db.checkDir(false); err != nil {
		return fmt.Errorf("engine: %s: %w", where, err)
	}
	if c.l.log.Durable().Seq < pos.Seq {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("engine: %s: %w: not stored", where, err)
		}
		if err := c.l.log.Sync(); err != nil {
			return fmt.Errorf("engine: %s: sync the ledger up to it first: %w", where, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: %s: %w: not stored", where, err)
	}
	if err := meta.PutConsumers(c.db.meta, c.record(pos)); err != nil {
		return fmt.Errorf("engine: %s: %w", where, err)
	}
	c.stored = pos
	return nil
}

func (c *Consumer) record(pos ConsumerPosition) meta.Consumer {
	r := meta.Consumer{Ledger: uint32(c.key.ledger), Name: c.key.name, Seq: pos.Seq,
		Entity: c.sel.Entity, Keys: c.sel.Keys, Events: c.sel.Events, Updated: c.db.opts.Now().UTC()}
	if !pos.ID.IsZero() {
		r.ID = pos.ID[:]
	}
	return r
}

// closeAll is DB.Close's first step, after the reads stopped and before
// any file closes: every live consumer is closed (its Events end with
// ErrClosed, Ack and Flush fail with it) and no new one opens. It returns
// the records of the positions acknowledged and not yet stored, for
// storeConsumers once the logs are closed (synced).
func (db *DB) closeConsumers() []dueConsumer {
	s := &db.consumers
	s.mu.Lock()
	s.closed = true
	live := make([]*Consumer, 0, len(s.live))
	for _, c := range s.live {
		live = append(live, c)
	}
	s.live = nil
	s.mu.Unlock()
	var due []dueConsumer
	for _, c := range live {
		c.mu.Lock()
		if !c.closed {
			if c.timer != nil {
				c.timer.Stop()
				c.timer = nil
			}
			c.closed = true
			close(c.done)
			if c.acked != c.stored && c.acked.Seq > c.stored.Seq {
				due = append(due, dueConsumer{c.record(c.acked), c.l})
			}
		}
		c.mu.Unlock()
	}
	return due
}

// dueConsumer is a position for DB.Close to store, with its ledger.
type dueConsumer struct {
	meta.Consumer
	l *ledger
}

// storeConsumers writes, in one bbolt commit, the positions closeConsumers
// returned, each if its ledger is durable up to it (Close synced the logs).
func (db *DB) storeConsumers(due []dueConsumer) error {
	var errs []error
	ok := make([]meta.Consumer, 0, len(due))
	for _, r := range due {
		if d := r.l.log.Durable().Seq; d < r.Seq {
			errs = append(errs, fmt.Errorf("engine: consumer %q of ledger %s: position #%d not stored: the ledger is durable only up to #%d", r.Name, r.l.meta.Name, r.Seq, d))
			continue
		}
		ok = append(ok, r.Consumer)
	}
	if len(ok) > 0 {
		if err := meta.PutConsumers(db.meta, ok...); err != nil {
			errs = append(errs, fmt.Errorf("engine: store the positions of %d consumers: %w", len(ok), err))
		}
	}
	return errors.Join(errs...)
}

// Consumers returns the consumers with a stored position in a ledger (by
// name or ID hex), by name. A Consumer that has acknowledged nothing yet
// has no stored position, and is not listed.
func (db *DB) Consumers(ledgerName string) ([]ConsumerInfo, error) {
	if err := db.positionsErr(); err != nil {
		return nil, err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return nil, err
	}
	s := &db.consumers
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		// Close began after db.ledger: meta.db may be closed already.
		return nil, ErrClosed
	}
	if db.meta == nil {
		return nil, fmt.Errorf("%w: the metadata file could not be read", ErrReadOnly)
	}
	rs, err := meta.ListConsumers(db.meta, l.meta.ID)
	if err != nil {
		return nil, fmt.Errorf("engine: consumers of ledger %s: %w", l.meta.Name, err)
	}
	out := make([]ConsumerInfo, len(rs))
	for i, r := range rs {
		out[i] = ConsumerInfo{Ledger: l.meta.Name, Name: r.Name, Position: ConsumerPosition{ID: eventid.ID(r.ID), Seq: r.Seq},
			Entity: r.Entity, Keys: r.Keys, Events: r.Events, Updated: r.Updated, Live: s.live[consumerKey{l.meta.ID, r.Name}] != nil}
	}
	return out, nil
}

// DeleteConsumer removes the stored position of a consumer: the next
// DB.Consumer of that name starts at the ledger's first event. A live
// consumer is ErrConsumerInUse; a name with no stored position,
// ErrConsumerNotFound. If ctx ends before the position is removed (while
// DeleteConsumer waits for another write of the consumers' positions to
// end), it returns an error matching ctx.Err() and the position stays;
// the write of meta.db is not interrupted once begun.
func (db *DB) DeleteConsumer(ctx context.Context, ledgerName, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.positionsErr(); err != nil {
		return err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return err
	}
	s := &db.consumers
	if err := s.mu.lockContext(ctx); err != nil {
		return fmt.Errorf("engine: delete consumer %q of ledger %s: %w: not deleted", name, l.meta.Name, err)
	}
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.live[consumerKey{l.meta.ID, name}] != nil {
		return fmt.Errorf("%w: consumer %q of ledger %s is live (Close it first)", ErrConsumerInUse, name, l.meta.Name)
	}
	if err := db.checkDir(false); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: delete consumer %q of ledger %s: %w: not deleted", name, l.meta.Name, err)
	}
	found, err := meta.DeleteConsumer(db.meta, l.meta.ID, name)
	if err != nil {
		return fmt.Errorf("engine: delete consumer %q of ledger %s: %w", name, l.meta.Name, err)
	}
	if !found {
		return fmt.Errorf("%w: ledger %s has no consumer %q", ErrConsumerNotFound, l.meta.Name, name)
	}
	return nil
}

// SetConsumerPosition stores a consumer's position explicitly: the next
// DB.Consumer of that name resumes after the event after (the zero ID:
// from the ledger's first event), whether or not the name had a position.
// It is the operator's or the program's decision, as a reset of a Kafka
// consumer group's offsets: moving forward skips events the consumer was
// never given, which is its purpose (to start a new consumer at the
// ledger's head, for instance); Ack never does. An event of another
// ledger, or one the ledger does not have, is ErrInvalid; a live
// consumer, ErrConsumerInUse. The ledger is synced up to the event and
// the position written and synced before it returns. If ctx ends before
// the position is written, as for Consumer.Ack, SetConsumerPosition
// returns an error matching ctx.Err() and the stored position is as it
// was.
func (db *DB) SetConsumerPosition(ctx context.Context, ledgerName, name string, after eventid.ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.readOnlyErr("SetConsumerPosition"); err != nil {
		return err
	}
	if err := db.positionsErr(); err != nil {
		return err
	}
	if p := names.ShownProblem(name); p != "" {
		return invalid("consumer name %s", p)
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("set the position of consumer %q of ledger %s to %s", name, l.meta.Name, after)
	var pos ConsumerPosition
	if !after.IsZero() {
		if after.Ledger() != l.meta.ID {
			return invalid("%s: an ID of another ledger (%s, not %s)", where, after.Ledger(), l.meta.ID)
		}
		e, found, err := l.names(after)
		if err != nil {
			return fmt.Errorf("engine: %s: %w", where, err)
		}
		if !found {
			return invalid("%s: the ledger has no such event", where)
		}
		pos = ConsumerPosition{ID: after, Seq: e.seq}
	}
	s := &db.consumers
	if err := s.mu.lockContext(ctx); err != nil {
		return fmt.Errorf("engine: %s: %w: not stored", where, err)
	}
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.live[consumerKey{l.meta.ID, name}] != nil {
		return fmt.Errorf("%w: consumer %q of ledger %s is live (Close it first)", ErrConsumerInUse, name, l.meta.Name)
	}
	// As Consumer.store: a live one is impossible now (s.mu), so a
	// Consumer value made for the write.
	c := &Consumer{db: db, l: l, key: consumerKey{l.meta.ID, name}, acked: pos, stored: ConsumerPosition{Seq: ^uint64(0)}}
	if r, found, err := meta.GetConsumer(db.meta, l.meta.ID, name); err == nil && found {
		c.sel = Selector{Entity: r.Entity, Keys: r.Keys, Events: r.Events}
	}
	if err := c.store(ctx); err != nil {
		return err
	}
	return nil
}

// eventNames is what Ack needs of an event: its sequence number and names.
type eventNames struct {
	seq                uint64
	entity, key, event string
}

// names returns the sequence number and names of an event of the ledger:
// an in-flight one's, or else the segments' record that the index points
// to.
func (l *ledger) names(id eventid.ID) (eventNames, bool, error) {
	l.pendMu.Lock()
	for i := range l.pending {
		if e := l.pending[i]; e.id == id {
			l.pendMu.Unlock()
			return eventNames{e.seq, e.entity, e.key, e.event}, true, nil
		}
	}
	l.pendMu.Unlock()
	if err := l.db.enterRead(); err != nil {
		return eventNames{}, false, err
	}
	defer l.db.exitRead()
	seq, loc, found, err := l.db.idx.Lookup(id)
	if err != nil || !found {
		return eventNames{}, false, err
	}
	ev, err := l.read(index.Position{ID: id, Seq: seq, Loc: loc})
	if err != nil {
		return eventNames{}, false, err
	}
	return eventNames{seq, ev.Entity, ev.Key, ev.Event}, true, nil
}
