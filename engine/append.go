package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// EventInput is an event to append. Meta must be a JSON object, or nil or
// empty, which mean {} (as in the command and in an exported line without
// meta); Data may be any JSON value, and must be one: a nil Data is
// ErrInvalid (most likely a payload lost on the way, such as an ignored
// json.Marshal error). The engine stores and hashes their canonical form
// (package canon), so any formatting of the same JSON gives the same ID.
type EventInput struct {
	Entity string // what the event is about, e.g. "order"
	Key    string // which one, e.g. "order-42"
	Event  string // what happened, e.g. "order-placed"
	Meta   []byte // JSON object; nil or empty means {}
	Data   []byte // JSON value
}

// AppendOptions are the options of one append. The zero value appends
// with the DB's durability and no condition.
type AppendOptions struct {
	// Durability overrides Options.Durability for this append.
	Durability Durability
	// ExpectedHead, if not zero, makes the append fail with a
	// *ConditionError unless the ledger's last event is this one.
	ExpectedHead eventid.ID
	// ExpectedStreams makes the append fail with a *ConditionError unless
	// each stream's latest event is the one given (or, for a zero Head,
	// the stream has none).
	ExpectedStreams []ExpectedStream
	// IfNoneSince makes the append fail with a *ConditionError if an event
	// the selector matches was appended after Selector.After.
	//
	//
	// Every condition is checked atomically with the append, inside the
	// commit: against every event committed before it, indexed or not.
	IfNoneSince *Selector
	// IdempotencyKey, if not empty, makes the append happen once: a later
	// append to the same ledger with the same key and the same events
	// appends nothing and returns the first one's result, with Replayed
	// set (after waiting for its outcome if it is still being committed).
	// The key's earlier result wins over the conditions: the retry is
	// not checked against them again, so a condition that held for the
	// first append and would fail now (the head moved on since) does not
	// fail the retry. One with the same
	// key and other events (another number of events, or any difference
	// in an entity, key, event name, or the canonical form of a meta or
	// data) appends nothing and fails with an *IdempotencyMismatchError
	// (ErrIdempotencyMismatch) that carries the first one's result.
	// Events are compared by a SHA-256 digest of their canonical content,
	// kept with the key. Keys are kept as long as the ledger.
	IdempotencyKey string
}

// AppendResult is what an append stored: its events' IDs, in order, and
// their sequence numbers in the ledger (IDs[i] is event FirstSeq+i; the
// genesis event is 1).
type AppendResult struct {
	IDs      []eventid.ID
	FirstSeq uint64
	// Replayed is true when this call appended nothing and returned the
	// result of an earlier append with the same IdempotencyKey (and the
	// same events); false when this call appended the events. An earlier
	// result is returned as it is, whatever the conditions of this call
	// (ExpectedHead, ExpectedStreams, IfNoneSince) would say now.
	Replayed bool
}

// Seq returns the sequence number of the i-th event of the append.
func (r AppendResult) Seq(i int) uint64 { return r.FirstSeq + uint64(i) }

// Last returns the ID and sequence number of the append's last event.
func (r AppendResult) Last() (eventid.ID, uint64) {
	if len(r.IDs) == 0 {
		return eventid.ID{}, 0
	}
	return r.IDs[len(r.IDs)-1], r.Seq(len(r.IDs) - 1)
}

// Append appends events to the ledger, all or nothing, and returns their
// IDs in order, with their sequence numbers. It returns once they are as
// durable as asked and in the index, so a read that follows sees them. Bad input fails with
// ErrInvalid and an error that says which event and what; nothing is
// stored then.
//
// ctx ends every wait of Append, which then returns an error matching
// ctx.Err() (errors.Is(err, context.Canceled), or
// context.DeadlineExceeded) whose message says which of these it was:
//   - while the batch waits for its turn behind another append's commit
//     (or before): "nothing was appended";
//   - while another append commits the group the batch is in (its write,
//     and its fsync with Sync durability): "it may have been appended".
//     The commit goes on without the caller, and the events may be in
//     the ledger (and readable) or not. To learn which, append them again
//     with the same IdempotencyKey: that returns the first one's result
//     if it was appended, and appends them if not. Without a key, only a
//     read (Replay, Scan) can tell;
//   - while a retry with an IdempotencyKey waits for the outcome of the
//     first append with the key, still being committed: this append
//     appended nothing, and the first one's outcome is not known yet;
//   - while a failed condition waits for the index to show what it saw:
//     the error matches ErrConditionFailed too (a *ConditionError), and
//     nothing was appended, but a read may not see Found yet.
//
// An append that commits its group itself (the one that found no commit
// under way) is not interrupted during its write and fsync: it returns
// its result.
//
// With Options.Replica in Replicated mode, an append also waits until
// its events are stored in the bucket (no read shows them before), and
// fails with ErrNotStored when the store made no progress for
// StoreTimeout or ctx ended meanwhile: its events are durable locally and
// may yet be stored and visible; retry with the same IdempotencyKey. A
// ledger another writer took fails every append with ErrFenced.
func (db *DB) Append(ctx context.Context, ledgerName string, events []EventInput, opts *AppendOptions) (AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return AppendResult{}, fmt.Errorf("engine: append to %s: %w: nothing was appended", ledgerName, err)
	}
	// At most every watchInterval, a look at the directory's and the
	// ledgers' files (watch.go): a writer whose files were
	// removed or replaced under it stops.
	if err := db.checkDir(false); err != nil {
		return AppendResult{}, err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return AppendResult{}, err
	}
	// A ledger whose checkpoints the signer refused: events appended now
	// could never be signed.
	if err := l.refusedErr(); err != nil {
		return AppendResult{}, err
	}
	// A fenced ledger: another writer has it (replication.go).
	if err := l.replicaRefused(); err != nil {
		return AppendResult{}, err
	}
	// Each group is indexed during its fsync (groupWritten) and published
	// by the goroutine that committed it once both are done (published),
	// before its appenders are woken: the segment log's hooks, given when
	// the log was opened (writerOptions).
	if len(events) == 0 {
		return AppendResult{}, invalid("no events to append")
	}
	var o AppendOptions
	if opts != nil {
		o = *opts
	}
	if o.Durability < segment.DefaultDurability || o.Durability > None {
		return AppendResult{}, invalid("durability %v is not Sync, Interval or None", o.Durability)
	}
	if l.repl != nil && l.repl.mode == Replicated {
		// Durable locally before it is stored: the bucket never holds
		// events a local crash could lose (Options.Replication).
		o.Durability = Sync
	}
	b := &segment.Batch{Entries: make([]segment.Entry, len(events)), Durability: o.Durability}
	if err := db.entries(b.Entries, events); err != nil {
		return AppendResult{}, err
	}
	if b.Check, err = l.conditions(&o); err != nil {
		return AppendResult{}, err
	}
	// With an idempotency key, the digest of the events, which a retry's
	// is compared with (see idemDigest), kept with the in-flight batch
	// (the prepared hook takes it from Tag) and then in the index.
	// Allocated only then: an append without a key makes no digest.
	var digest *[index.DigestSize]byte
	if o.IdempotencyKey != "" {
		b.IdempotencyKey = []byte(o.IdempotencyKey)
		d := digestOfEntries(b.Entries)
		digest, b.Tag = &d, &d
	}
	for {
		err := l.log.AppendContext(ctx, b)
		var d *duplicate
		if errors.As(err, &d) {
			res, found, err := l.awaitFirst(ctx, o.IdempotencyKey, d)
			switch {
			case errors.Is(err, index.ErrClosed):
				// Close closed the index while this retry waited for the
				// first append's outcome.
				return AppendResult{}, fmt.Errorf("%w: append to %s: idempotency key %q: %w", ErrClosed, l.meta.Name, o.IdempotencyKey, err)
			case err != nil:
				return AppendResult{}, err
			case found && d.digest != *digest:
				return AppendResult{}, &IdempotencyMismatchError{Ledger: l.meta.Name, Key: o.IdempotencyKey, First: res, Events: len(b.Entries)}
			case found:
				// The first one's events, stored in the bucket before
				// this retry returns them (Replicated mode).
				_, last := res.Last()
				if err := l.replicaWait(ctx, res.FirstSeq, last); err != nil {
					return AppendResult{}, err
				}
				res.Replayed = true
				return res, nil
			}
			continue // the first append with the key failed: this one goes ahead
		}
		if errors.Is(err, segment.ErrClosed) || errors.Is(err, index.ErrClosed) {
			// Close closed the log (or the index, which a condition
			// reads) after this append passed db.ledger: the engine's
			// ErrClosed, as for an append after Close.
			return AppendResult{}, fmt.Errorf("%w: append to %s: %w", ErrClosed, l.meta.Name, err)
		}
		if errors.Is(err, segment.ErrTooLarge) {
			// Bad input too (a batch over the segment format's limit).
			return AppendResult{}, fmt.Errorf("%w: append to %s: %w", ErrInvalid, l.meta.Name, err)
		}
		if ce, ok := err.(*ConditionError); ok {
			// Read-your-conflicts: what the condition saw is readable
			// once the error is returned.
			if cerr := l.awaitIndexed(ctx, ce.seq); cerr != nil {
				return AppendResult{}, fmt.Errorf("engine: append to %s: %w (%w while waiting for the index to show what the condition saw: it may not be readable yet)", l.meta.Name, err, cerr)
			}
			// Replicated mode: readers see it once it is stored.
			if cerr := l.awaitStored(ctx, ce.seq); cerr != nil {
				return AppendResult{}, fmt.Errorf("engine: append to %s: %w (%w while waiting for the replica to store what the condition saw: it may not be readable yet)", l.meta.Name, err, cerr)
			}
		}
		if err != nil {
			return AppendResult{}, fmt.Errorf("engine: append to %s: %w", l.meta.Name, err)
		}
		break
	}
	if h := db.test.appended; h != nil {
		h()
	}
	// At most every watchInterval again, after the group's fsync and
	// before the append is acknowledged: a group written into a file
	// removed or replaced meanwhile is not acknowledged once the watch
	// knows (the caller cannot tell whether it is stored: as for a
	// failed fsync, it is not acknowledged).
	if err := db.checkDir(false); err != nil {
		return AppendResult{}, err
	}
	// Replicated mode: stored in the bucket too, and visible then.
	if err := l.replicaWait(ctx, b.FirstSeq, b.FirstSeq+uint64(len(b.IDs))-1); err != nil {
		return AppendResult{}, err
	}
	// The events are stored, as durable as asked, and published (the
	// segment log's committing goroutine called published before it woke
	// this append): an index failure does not undo that. It is kept by
	// the ledger and its reads report it until a reopen rebuilds the
	// index from the segments.
	return AppendResult{IDs: b.IDs, FirstSeq: b.FirstSeq}, nil
}

// parallelCanonMin is the smallest batch whose second half entries
// canonicalizes on another goroutine, in parallel with the first: below
// it, starting and waiting for the goroutine costs about what it saves.
const parallelCanonMin = 64

// entries validates events and sets out (as long) to their entries, with
// their canonical meta and data. A batch of parallelCanonMin events or
// more is done in two halves, the second on another goroutine; the error
// is the first event's that fails, as when done in order.
func (db *DB) entries(out []segment.Entry, events []EventInput) error {
	if len(events) < parallelCanonMin {
		return db.entriesFrom(out, events, 0)
	}
	h := len(events) / 2
	second := make(chan error, 1)
	go func() { second <- db.entriesFrom(out[h:], events[h:], h) }()
	err := db.entriesFrom(out[:h], events[:h], 0)
	if err2 := <-second; err == nil {
		err = err2
	}
	return err
}

// entriesFrom is entries for events, the first of which is event first
// of the batch (for the errors), in order on this goroutine. Every
// event's canonical meta and data go into one buffer, sliced once it has
// stopped growing.
func (db *DB) entriesFrom(out []segment.Entry, events []EventInput, first int) error {
	var c canon.Canonicalizer
	// Sized for the input, which the canonical form of compact JSON
	// usually equals (that of spaced JSON is shorter; a number such as
	// 1e2, written out, is longer, and the buffer then grows): no growth
	// and copy of the whole buffer per few events.
	n := 0
	for i := range events {
		n += max(len(events[i].Meta), len(emptyObject)) + len(events[i].Data)
	}
	buf := make([]byte, 0, min(n, maxPresize))
	sizes := make([][2]int, len(events))
	for i := range events {
		var err error
		if out[i], buf, sizes[i][0], sizes[i][1], err = db.entry(&c, buf, first+i, &events[i]); err != nil {
			return err
		}
	}
	for i := range out {
		m, d := sizes[i][0], sizes[i][1]
		out[i].Meta, buf = buf[:m:m], buf[m:]
		out[i].Data, buf = buf[:d:d], buf[d:]
	}
	return nil
}

// maxPresize bounds the buffer entriesFrom sizes in advance for a
// batch's canonical meta and data (a larger one grows as needed).
const maxPresize = 16 << 20

// emptyObject is the meta of an event given none.
var emptyObject = []byte("{}")

// entry validates one event and appends the canonical form of its meta
// and then its data to buf, returning the entry (without Meta and Data,
// which the caller slices out of buf once it stops growing) and the sizes.
func (db *DB) entry(c *canon.Canonicalizer, buf []byte, i int, e *EventInput) (_ segment.Entry, _ []byte, metaLen, dataLen int, err error) {
	for _, f := range [...]struct{ what, v string }{{"entity", e.Entity}, {"key", e.Key}, {"event name", e.Event}} {
		if p := names.Problem(f.v); p != "" {
			return segment.Entry{}, buf, 0, 0, invalid("event %d: %s %s", i, f.what, p)
		}
	}
	start := len(buf)
	meta := e.Meta
	if len(meta) == 0 {
		meta = emptyObject // nil or empty: no meta (only whitespace is not empty: ErrInvalid)
	}
	if buf, err = c.AppendObject(buf, meta); err != nil {
		return segment.Entry{}, buf, 0, 0, fmt.Errorf("%w: event %d: meta: %w", ErrInvalid, i, err)
	}
	mid := len(buf)
	if buf, err = c.Append(buf, e.Data); err != nil {
		return segment.Entry{}, buf, 0, 0, fmt.Errorf("%w: event %d: data: %w", ErrInvalid, i, err)
	}
	if n := len(buf) - start; n > db.opts.MaxEventSize {
		return segment.Entry{}, buf, 0, 0, invalid("event %d: meta and data are %d bytes in canonical form, the limit is %d", i, n, db.opts.MaxEventSize)
	}
	return segment.Entry{Entity: e.Entity, Key: e.Key, Event: e.Event}, buf, mid - start, len(buf) - mid, nil
}
