package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

// Bounds of one append from standard input. A batch takes the lines that
// are already read when the append before it returns, up to these; the
// reader reads ahead while an append is in flight, up to readAheadBytes.
const (
	maxBatchEvents = 1000
	maxBatchBytes  = 4 << 20
	readAheadBytes = 8 << 20
	// maxAppendLine bounds one input line; an event's canonical meta and
	// data are bounded by the engine (1 MiB by default) anyway.
	maxAppendLine = ndjson.DefaultMaxLineBytes
)

type appendFlags struct {
	entity, key, event, meta, data string
	expectHead                     string
	idempotencyKey                 string
	durability                     string
}

func newAppendCmd(g *globals) *cobra.Command {
	var f appendFlags
	cmd := &cobra.Command{
		Use:   "append NAME",
		Short: "Append events to a ledger: NDJSON from standard input, or one from flags",
		Long: `append appends events to the ledger NAME and prints each event's ID in hex on
its own line, in every output format.

From standard input, one JSON object a line with the members entity, key and
event (strings), meta (an object; default {}) and data (any JSON value;
default {}); blank lines are skipped. Lines that are already read are appended
together, up to 1000 events or 4 MiB, and the IDs of each append are printed
and flushed as soon as it returns: with the default --durability sync an ID
is printed only once its event is on stable storage, so every printed ID
survives a crash. A bad line stops the command with its line number and exit
1, after the events of the lines before it are appended and printed.
SIGINT or SIGTERM stops it after the append in flight.

With --entity, --key and --event (and optionally --meta and --data) append
appends that one event and does not read standard input.

--expect-head ID appends only if the ledger's last event is ID; from standard
input, each further append must follow the one before directly, so the whole
input lands after ID with nothing between, or the command stops. A failed
condition exits 4 and says the ledger's current head.

--idempotency-key K appends once: a later append with the same key appends
nothing and prints the first one's IDs, and says so on standard error
("annal: idempotency key K was used by an earlier append: ..."), so that
standard output holds the IDs alone either way. The key's earlier result
wins over --expect-head: the retry is not checked against it again. The
same key with other events appends nothing and exits 6. From standard
input the whole input is then one all-or-nothing append, read to its end
first.

--durability interval or none returns (and prints IDs) before the events are
synced: faster, and a machine crash may lose them.

If the data directory's or the ledger's files are removed, moved or replaced
while append runs (rm of a segment, a restore of a copy), it stops within
100 ms and exits 1 saying which file: appends would go to files that are no
longer the ledger's. IDs printed in those 100 ms may name events lost with
the files; the next command that opens the directory says so.

A printed ID is stored. If closing the data directory fails after IDs were
printed (on a full disk, say), append exits 0 and says on standard error
that the close failed and that the events are stored: appending them again
would store them twice. With --durability interval or none it exits 1 and
says that they may not be on stable storage.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			opts, err := f.options()
			if err != nil {
				return err
			}
			var one *engine.EventInput
			if f.fromFlags(cmd) {
				if one, err = f.input(cmd); err != nil {
					return err
				}
			}
			// A missing data directory has no ledger to append to: it is
			// an error, and append does not make one.
			db, dir, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			name := args[0]
			a := &appender{db: db, dir: dir, name: name, opts: opts, out: bufio.NewWriter(cmd.OutOrStdout()), stderr: cmd.ErrOrStderr()}
			// Printed IDs are stored: a failure to close after them is a
			// warning, not a failed append (closeDBStored).
			defer closeDBStored(db, &err, cmd.ErrOrStderr(), a.stored, a.unsure)
			if _, err := db.Ledger(name); err != nil {
				return ledgerError(dir, name, err)
			}
			if one != nil {
				return a.appendOne(cmd.Context(), one)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if isTerminal(cmd.InOrStdin()) {
				fmt.Fprintln(cmd.ErrOrStderr(), "annal: reading NDJSON events from standard input (end with Ctrl-D)")
			}
			if opts.IdempotencyKey != "" {
				return a.appendAll(ctx, cmd.InOrStdin())
			}
			return a.appendStream(ctx, cmd.InOrStdin())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.entity, "entity", "", "append one event: its entity")
	fl.StringVar(&f.key, "key", "", "append one event: its key")
	fl.StringVar(&f.event, "event", "", "append one event: its event name")
	fl.StringVar(&f.meta, "meta", "{}", "append one event: its meta, a JSON object")
	fl.StringVar(&f.data, "data", "{}", "append one event: its data, a JSON value")
	fl.StringVar(&f.expectHead, "expect-head", "", "append only if the ledger's last event is this ID")
	fl.StringVar(&f.idempotencyKey, "idempotency-key", "", "append once: a retry with the same key prints the first IDs")
	fl.StringVar(&f.durability, "durability", "sync", "when an append returns: sync (on stable storage), interval or none")
	return cmd
}

// fromFlags reports whether the event is given by flags.
func (f *appendFlags) fromFlags(cmd *cobra.Command) bool {
	for _, n := range []string{"entity", "key", "event", "meta", "data"} {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// input returns the event the flags give.
func (f *appendFlags) input(cmd *cobra.Command) (*engine.EventInput, error) {
	for _, n := range []string{"entity", "key", "event"} {
		if !cmd.Flags().Changed(n) {
			return nil, usageErr("append: one event from flags needs --entity, --key and --event (--%s is missing)", n)
		}
	}
	meta, err := canon.AppendObject(nil, []byte(f.meta))
	if err != nil {
		return nil, usageErr("append: --meta: %w", err)
	}
	data, err := canon.Append(nil, []byte(f.data))
	if err != nil {
		return nil, usageErr("append: --data: %w", err)
	}
	return &engine.EventInput{Entity: f.entity, Key: f.key, Event: f.event, Meta: meta, Data: data}, nil
}

// options returns the append options the flags give.
func (f *appendFlags) options() (engine.AppendOptions, error) {
	var o engine.AppendOptions
	switch f.durability {
	case "sync":
		o.Durability = engine.Sync
	case "interval":
		o.Durability = engine.Interval
	case "none":
		o.Durability = engine.None
	default:
		return o, usageErr("append: --durability must be sync, interval or none, not %q", f.durability)
	}
	if f.expectHead != "" {
		id, err := eventid.Parse(f.expectHead)
		if err != nil {
			return o, usageErr("append: --expect-head: %w", err)
		}
		o.ExpectedHead = id
	}
	o.IdempotencyKey = f.idempotencyKey
	return o, nil
}

// appender appends to one ledger and prints the IDs.
type appender struct {
	db   *engine.DB
	dir  string
	name string
	opts engine.AppendOptions
	out  *bufio.Writer
	// stderr takes the note that an idempotency key's earlier result
	// was printed (replayed).
	stderr io.Writer
	n      int // events appended
}

// appendOne appends one event given by flags.
func (a *appender) appendOne(ctx context.Context, ev *engine.EventInput) error {
	res, err := a.db.Append(ctx, a.name, []engine.EventInput{*ev}, &a.opts)
	if err != nil {
		return a.fail(err)
	}
	return a.printResult(res)
}

// printResult prints the IDs of an append with an idempotency key, and
// says on standard error when they are an earlier append's (replayed):
// standard output holds the IDs alone either way.
func (a *appender) printResult(res engine.AppendResult) error {
	if err := a.print(res.IDs); err != nil {
		return err
	}
	if res.Replayed {
		last, lastSeq := res.Last()
		fmt.Fprintf(a.stderr, "annal: idempotency key %s was used by an earlier append (events #%d-#%d, last %s): its IDs were printed, nothing was appended\n",
			safeText(strconv.Quote(a.opts.IdempotencyKey)), res.FirstSeq, lastSeq, last)
	}
	return nil
}

// stored says which events are stored and durable: with --durability
// sync, those whose IDs were printed.
func (a *appender) stored() string {
	if a.n == 0 || a.opts.Durability != engine.Sync {
		return ""
	}
	if a.n == 1 {
		return "the event whose ID was printed is stored (it was on stable storage before its ID was printed): do not append it again"
	}
	return fmt.Sprintf("the %d events whose IDs were printed are stored (each was on stable storage before its ID was printed): do not append them again", a.n)
}

// unsure says which events were acknowledged but may not be durable: with
// --durability interval or none, those whose IDs were printed.
func (a *appender) unsure() string {
	if a.n == 0 || a.opts.Durability == engine.Sync {
		return ""
	}
	if a.n == 1 {
		return fmt.Sprintf("the event whose ID was printed was appended without waiting for stable storage (--durability %s) and may not be on it", durabilityName(a.opts.Durability))
	}
	return fmt.Sprintf("the %d events whose IDs were printed were appended without waiting for stable storage (--durability %s) and may not be on it", a.n, durabilityName(a.opts.Durability))
}

func durabilityName(d engine.Durability) string {
	switch d {
	case engine.Interval:
		return "interval"
	case engine.None:
		return "none"
	}
	return "sync"
}

// print writes ids and flushes them.
func (a *appender) print(ids []eventid.ID) error {
	var line [33]byte
	for _, id := range ids {
		a.out.Write(append(id.AppendHex(line[:0]), '\n'))
	}
	a.n += len(ids)
	if err := a.out.Flush(); err != nil {
		return &exitErr{code: exitError, err: fmt.Errorf("write IDs: %w", err)}
	}
	if !a.opts.ExpectedHead.IsZero() && len(ids) > 0 {
		// The next append must follow this one directly.
		a.opts.ExpectedHead = ids[len(ids)-1]
	}
	return nil
}

// fail turns a failed append into the command's error.
func (a *appender) fail(err error) error {
	err = ledgerError(a.dir, a.name, err)
	if a.n > 0 {
		var ee *exitErr
		if errors.As(err, &ee) && ee.err != nil {
			ee.err = fmt.Errorf("%w (after %d events appended)", ee.err, a.n)
		}
	}
	return err
}

// inputEvent is an event read from a line of standard input, or the error
// that line has.
type inputEvent struct {
	line int
	ev   engine.EventInput
	size int
	err  error
}

// lineReader parses the lines of standard input into events.
type lineReader struct {
	in   *bufio.Reader
	line int
}

// next returns the next event, or io.EOF after the last line.
func (r *lineReader) next() inputEvent {
	for {
		buf, err := ndjson.ReadLine(r.in, nil, maxAppendLine)
		if err == io.EOF {
			return inputEvent{err: io.EOF}
		}
		r.line++
		if err != nil {
			return inputEvent{line: r.line, err: fmt.Errorf("line %d: %w", r.line, err)}
		}
		if len(bytes.TrimSpace(buf)) == 0 {
			continue
		}
		ev, err := parseEventLine(buf)
		if err != nil {
			return inputEvent{line: r.line, err: fmt.Errorf("line %d: %w", r.line, err)}
		}
		return inputEvent{line: r.line, ev: ev, size: len(buf)}
	}
}

// parseEventLine parses one input line: a JSON object with the members
// entity, key, event, meta and data. The slices of the event share line's
// array.
func parseEventLine(line []byte) (engine.EventInput, error) {
	ev := engine.EventInput{Meta: []byte("{}"), Data: []byte("{}")}
	var seen [3]bool
	err := canon.Members(line, func(name string, value []byte) error {
		var s *string
		switch name {
		case "entity":
			s, seen[0] = &ev.Entity, true
		case "key":
			s, seen[1] = &ev.Key, true
		case "event":
			s, seen[2] = &ev.Event, true
		case "meta":
			if value[0] != '{' {
				return fmt.Errorf("meta must be a JSON object, not %s", clipRunes(value, 40))
			}
			ev.Meta = value
			return nil
		case "data":
			ev.Data = value
			return nil
		case "eventId", "timestamp":
			return fmt.Errorf("unknown member %q: append makes IDs and timestamps (a ledger in the Evently format is imported, not appended)", name)
		default:
			return fmt.Errorf("unknown member %q: a line has entity, key, event, meta and data", name)
		}
		if value[0] != '"' {
			return fmt.Errorf("%s must be a string, not %s", name, clipRunes(value, 40))
		}
		v, err := canon.Unquote(nil, value)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(v) == 0 {
			return fmt.Errorf("%s is empty", name)
		}
		*s = string(v)
		return nil
	})
	if errors.Is(err, canon.ErrNotObject) {
		return ev, errors.New("not a JSON object: a line is one event, {\"entity\":…,\"key\":…,\"event\":…,\"meta\":{…},\"data\":…}")
	}
	if err != nil {
		return ev, err
	}
	for i, n := range []string{"entity", "key", "event"} {
		if !seen[i] {
			return ev, fmt.Errorf("%s is missing", n)
		}
	}
	return ev, nil
}

// appendAll appends all of in as one append (for an idempotency key, whose
// retry must be the same append).
func (a *appender) appendAll(ctx context.Context, in io.Reader) error {
	r := &lineReader{in: bufio.NewReaderSize(in, 64<<10)}
	var evs []engine.EventInput
	for {
		it := r.next()
		if it.err == io.EOF {
			break
		}
		if it.err != nil {
			return &exitErr{code: exitError, err: fmt.Errorf("%w (nothing appended: with --idempotency-key the input is one append)", it.err)}
		}
		evs = append(evs, it.ev)
	}
	if len(evs) == 0 {
		return nil
	}
	res, err := a.db.Append(ctx, a.name, evs, &a.opts)
	if err != nil {
		return a.fail(err)
	}
	return a.printResult(res)
}

// appendStream appends the events of in as they come, in batches of what
// has been read while the append before was in flight, and prints each
// batch's IDs as soon as its append returns.
func (a *appender) appendStream(ctx context.Context, in io.Reader) error {
	items := make(chan inputEvent, maxBatchEvents)
	budget := newByteBudget(readAheadBytes)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(items)
		r := &lineReader{in: bufio.NewReaderSize(in, 64<<10)}
		for {
			it := r.next()
			if it.err == io.EOF {
				return
			}
			if !budget.take(it.size, done) {
				return
			}
			select {
			case items <- it:
			case <-done:
				return
			}
			if it.err != nil {
				return
			}
		}
	}()

	var batch []engine.EventInput
	var lines []int
	for {
		batch, lines = batch[:0], lines[:0]
		size := 0
		var bad *inputEvent
		select {
		case <-ctx.Done():
			return &exitErr{code: exitError, err: fmt.Errorf("interrupted after %d events appended", a.n)}
		case it, ok := <-items:
			if !ok {
				return nil
			}
			if it.err != nil {
				bad = &it
				break
			}
			batch, lines, size = append(batch, it.ev), append(lines, it.line), it.size
		fill:
			for len(batch) < maxBatchEvents && size < maxBatchBytes {
				select {
				case it, ok := <-items:
					if !ok {
						break fill
					}
					if it.err != nil {
						bad = &it
						break fill
					}
					batch, lines, size = append(batch, it.ev), append(lines, it.line), size+it.size
				default:
					break fill
				}
			}
		}
		if len(batch) > 0 {
			err := a.appendBatch(ctx, batch, lines)
			budget.give(size)
			if err != nil {
				return err
			}
		}
		if bad != nil {
			return &exitErr{code: exitError, err: bad.err}
		}
	}
}

// appendBatch appends a batch of events read from lines. If the engine
// refuses one of them as invalid (nothing is then stored), it appends the
// events before that one, in halves, so that the error can name its line.
func (a *appender) appendBatch(ctx context.Context, batch []engine.EventInput, lines []int) error {
	res, err := a.db.Append(ctx, a.name, batch, &a.opts)
	if err == nil {
		return a.print(res.IDs)
	}
	if !errors.Is(err, engine.ErrInvalid) {
		return a.fail(err)
	}
	if len(batch) == 1 {
		return &exitErr{code: exitError, err: fmt.Errorf("line %d: %w", lines[0], err)}
	}
	mid := len(batch) / 2
	if err := a.appendBatch(ctx, batch[:mid], lines[:mid]); err != nil {
		return err
	}
	return a.appendBatch(ctx, batch[mid:], lines[mid:])
}

// byteBudget bounds the bytes read ahead of the appends.
type byteBudget struct {
	mu    sync.Mutex
	freed chan struct{} // closed and replaced when bytes are given back
	left  int
	max   int
}

func newByteBudget(n int) *byteBudget {
	return &byteBudget{left: n, max: n, freed: make(chan struct{})}
}

// take waits until n bytes are left (or nothing is taken, for a line
// longer than the budget) and takes them; false if done closed first.
func (b *byteBudget) take(n int, done <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if n <= b.left || b.left == b.max {
			b.left -= n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-done:
			return false
		}
	}
}

// give returns n bytes.
func (b *byteBudget) give(n int) {
	b.mu.Lock()
	b.left += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
