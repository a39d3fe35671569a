package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

func newGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID|PREFIX|NAME#SEQ",
		Short: "Print one event, by ID, hex prefix or ledger sequence number",
		Long: `get prints one event, named by
  - its Event ID in any text form: 32 hex digits, UUID, base64 or base32;
  - a prefix of its hex ID, at least 4 digits, like a short git hash (a prefix
    that matches several events exits 1 and lists them);
  - a ledger name (or ID) and a sequence number: orders#1 is the genesis event
    of ledger orders.

--format table prints a key/value listing; ndjson prints the event as one line
in the Evently download format ({"entity","key","event","eventId","timestamp",
"meta","data"}); json prints the same object indented. An event that is not
there exits 1; an argument that names none of the forms above (such as a
prefix shorter than 4 digits) is a usage error, exit 2.`,
		Args:        usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{idArgsAnnotation: "the argument may be an ID"},
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			if err := checkEventArg("get", args[0]); err != nil {
				return err
			}
			db, dir, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			ev, err := getEvent(cmd.Context(), db, dir, args[0])
			if err != nil {
				return err
			}
			if format == formatTable {
				return writeEventDetail(cmd.OutOrStdout(), &ev)
			}
			ew := newEventWriter(cmd.OutOrStdout(), format)
			if err := ew.write(&ev); err != nil {
				return err
			}
			return ew.flush()
		},
	}
}

// checkEventArg returns a usage error for an argument of get (or prove:
// command) that names none of its forms (getEvent), before the data
// directory is opened.
func checkEventArg(command, arg string) error {
	if i := strings.LastIndexByte(arg, '#'); i >= 0 {
		seq, err := strconv.ParseUint(arg[i+1:], 10, 64)
		if err != nil || seq == 0 {
			return usageErr("%s %q: %q is not a sequence number (1 is the genesis event)", command, arg, arg[i+1:])
		}
		return nil
	}
	_, err := eventid.Parse(arg)
	switch {
	case err == nil:
		return nil
	case isHex(arg) && len(arg) < 4:
		return usageErr("%s %q: an ID prefix has 4 to 31 hex digits", command, arg)
	case isHex(arg) && len(arg) < 2*eventid.Size:
		return nil
	}
	return usageErr("%s %q: not an Event ID (hex, UUID, base64 or base32), a hex prefix or NAME#SEQ: %w", command, arg, err)
}

// getEvent finds the event arg names: NAME#SEQ, an ID in any text form, or
// a hex prefix.
func getEvent(ctx context.Context, db *engine.DB, dir, arg string) (engine.Event, error) {
	if i := strings.LastIndexByte(arg, '#'); i >= 0 {
		name, seqText := arg[:i], arg[i+1:]
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil || seq == 0 {
			return engine.Event{}, usageErr("get %q: %q is not a sequence number (1 is the genesis event)", arg, seqText)
		}
		ev, err := db.GetSeq(ctx, name, seq)
		if err != nil {
			return ev, ledgerError(dir, name, err)
		}
		return ev, nil
	}
	id, parseErr := eventid.Parse(arg)
	prefix := isHex(arg) && len(arg) < 2*eventid.Size
	if parseErr == nil {
		ev, err := db.Get(ctx, id)
		// A 22 or 26 hex digit prefix is also a base64 or base32 ID.
		if !(errors.Is(err, engine.ErrNotFound) && prefix) {
			if err != nil {
				return ev, ledgerError(dir, "", err)
			}
			return ev, nil
		}
	}
	if !prefix {
		return engine.Event{}, usageErr("get %q: not an Event ID (hex, UUID, base64 or base32), a hex prefix or NAME#SEQ: %w", arg, parseErr)
	}
	ev, err := db.GetPrefix(ctx, arg)
	var amb *engine.AmbiguousError
	if errors.As(err, &amb) {
		lines := []string{fmt.Sprintf("ID prefix %s is ambiguous; it matches:", safeText(strconv.Quote(arg)))}
		for _, c := range amb.Candidates {
			l := "  " + c.String()
			if ev, err := db.Get(ctx, c); err == nil {
				l += fmt.Sprintf("  %s#%d  %s", safeName(ev.Ledger), ev.Seq, ev.ID.Time().UTC().Format(evently))
			}
			lines = append(lines, l)
		}
		return ev, &exitErr{code: exitError, err: &linesError{lines}}
	}
	if err != nil {
		return ev, ledgerError(dir, "", err)
	}
	return ev, nil
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

type scanFlags struct {
	from, to, after string
	entity          string
	keys, events    []string
	limit           int
	reverse         bool
}

func newScanCmd(g *globals) *cobra.Command {
	var f scanFlags
	cmd := &cobra.Command{
		Use:   "scan NAME",
		Short: "Print the events of a ledger in a time range, or of streams",
		Long: `scan prints the events of ledger NAME in time order (ledger order).

--from and --to bound the events' times, both inclusive. A time is
  - RFC 3339: 2024-05-01T12:00:00Z, 2024-05-01T14:00:00.5+02:00;
  - a date and time with a space (or a T) and no zone, read as UTC (the
    zone of every time annal prints), or with one: 2024-05-01 12:00:00,
    2024-05-01 12:00, 2024-05-01 14:00:00+02:00;
  - a date, midnight UTC: 2024-05-01;
  - now, or relative to now: 1h or -1h (an hour ago; a time without a sign
    is that long ago, as kubectl's and nats's --since read it), 30m, 7d,
    1h30m, +2w (two weeks ahead); units ms s m h d w;
  - Unix seconds: 1714564800, 1714564800.250 (a number is always seconds:
    write milliseconds as a fraction; 10^11 or more is refused);
  - an Event ID, standing for its time.

--after ID starts after that event (in the scan's direction) and --limit N
stops after N events: to page, pass the last ID of one page as --after of the
next. --reverse scans from the newest event back.

--entity E selects the events of entity E, --key K (repeatable, needs
--entity) those of its streams (E, K), --event V (repeatable) those named V;
with both --entity and --event an event must match both. These replay the
ledger's stream indexes in ledger order; --from, --to, --after, --limit and
--reverse work with them as with a time scan.

Output: a table (time, seq, entity, key, event, ID and the data cut short),
NDJSON lines in the Evently download format, or one JSON array of the same
objects. NDJSON of a whole ledger is what 'annal verify-file' verifies.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			q, err := f.query(cmd, time.Now())
			if err != nil {
				return err
			}
			db, info, dir, err := g.openLedger(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			name := info.Name
			ew := newEventWriter(cmd.OutOrStdout(), format)
			ew.begin()
			for ev, err := range q.events(cmd.Context(), db, name) {
				if err != nil {
					ew.end()
					return ledgerError(dir, name, err)
				}
				if err := ew.write(&ev); err != nil {
					return err
				}
			}
			return ew.end()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the earliest time (inclusive): RFC 3339, '2024-05-01 12:00:00' (UTC), a date, now, 1h or -1h (ago), +1h, Unix seconds or an Event ID")
	fl.StringVar(&f.to, "to", "", "the latest time (inclusive), in the forms of --from")
	fl.StringVar(&f.after, "after", "", "start after this event ID (paging)")
	fl.IntVar(&f.limit, "limit", 0, "stop after this many events (0: no limit)")
	fl.BoolVar(&f.reverse, "reverse", false, "newest first")
	fl.StringVar(&f.entity, "entity", "", "only the events of this entity")
	fl.StringArrayVar(&f.keys, "key", nil, "only the events of this key of --entity (repeatable)")
	fl.StringArrayVar(&f.events, "event", nil, "only the events with this name (repeatable)")
	return cmd
}

// scanQuery is what scan asks for.
type scanQuery struct {
	scan   engine.ScanOptions
	replay *engine.ReplayOptions // nil for a time scan
}

// query checks the flags and makes the query.
func (f *scanFlags) query(cmd *cobra.Command, now time.Time) (scanQuery, error) {
	var q scanQuery
	var err error
	if f.from != "" {
		if q.scan.From, err = parseTime(f.from, now); err != nil {
			return q, usageErr("scan: --from: %w", err)
		}
	}
	if f.to != "" {
		if q.scan.To, err = parseTime(f.to, now); err != nil {
			return q, usageErr("scan: --to: %w", err)
		}
	}
	if !q.scan.From.IsZero() && !q.scan.To.IsZero() && q.scan.To.Before(q.scan.From) {
		return q, usageErr("scan: --to %s is before --from %s", q.scan.To.UTC().Format(evently), q.scan.From.UTC().Format(evently))
	}
	if f.after != "" {
		if q.scan.After, err = eventid.Parse(f.after); err != nil {
			return q, usageErr("scan: --after: %w", err)
		}
	}
	if f.limit < 0 {
		return q, usageErr("scan: --limit must not be negative")
	}
	q.scan.Limit, q.scan.Reverse = f.limit, f.reverse
	if cmd.Flags().Changed("entity") && f.entity == "" {
		return q, usageErr("scan: --entity is empty")
	}
	if f.entity == "" && len(f.keys) == 0 && len(f.events) == 0 {
		return q, nil
	}
	if f.entity == "" && len(f.keys) > 0 {
		return q, usageErr("scan: --key needs --entity")
	}
	q.replay = &engine.ReplayOptions{Entity: f.entity, Keys: f.keys, Events: f.events,
		From: q.scan.From, To: q.scan.To, After: q.scan.After, Reverse: q.scan.Reverse, Limit: q.scan.Limit}
	return q, nil
}

// events runs the query.
// name must be the ledger's name, not its ID.
func (q *scanQuery) events(ctx context.Context, db *engine.DB, name string) iter.Seq2[engine.Event, error] {
	if q.replay == nil {
		return db.Scan(ctx, name, q.scan)
	}
	return db.Replay(ctx, name, *q.replay)
}

func newTailCmd(g *globals) *cobra.Command {
	var after string
	var fromStart bool
	cmd := &cobra.Command{
		Use:   "tail NAME",
		Short: "Follow a ledger, printing events as they commit",
		Long: `tail prints the events of ledger NAME as they commit, until SIGINT or
SIGTERM; then it exits 0. It starts at the current head (only new events),
after an event with --after ID, or at the genesis event with --from-start.
Output is as scan's, flushed after every event; --format json
writes NDJSON, since a stream has no end to close a JSON array at. A table's
columns start as wide as the ledger's last 100 events need; a wider value
later widens its column, and the header is written again above its row.

tail opens the data directory read-only, so it runs beside the process that
writes it (annal append, a service): it looks at the ledger's segments every
50 ms and prints each event the writer commits, never one that is not
completely written. It changes nothing in the directory.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			var from eventid.ID
			if after != "" {
				if fromStart {
					return usageErr("tail: --after and --from-start exclude each other")
				}
				if from, err = eventid.Parse(after); err != nil {
					return usageErr("tail: --after: %w", err)
				}
			}
			db, info, dir, err := g.openLedger(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			name := info.Name
			if after == "" && !fromStart {
				from = info.Head
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if err := follow(ctx, db, name, from, cmd.OutOrStdout(), format); err != nil {
				return ledgerError(dir, name, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "start after this event ID")
	cmd.Flags().BoolVar(&fromStart, "from-start", false, "start at the genesis event")
	return cmd
}

// tableFitEvents is how many of the last events tail's table is made wide
// enough for before it starts.
const tableFitEvents = 100

// follow writes the events of ledger name after the event after (all of
// them for the zero ID) as they commit, flushing each, until ctx ends.
func follow(ctx context.Context, db *engine.DB, name string, after eventid.ID, w io.Writer, format string) error {
	ew := newEventStream(w, format)
	if format == formatTable {
		// The columns as wide as the last events need, so that the
		// header lines up with the rows to come.
		for ev, err := range db.Scan(ctx, name, engine.ScanOptions{Reverse: true, Limit: tableFitEvents}) {
			if err != nil {
				break // the subscription says what is wrong
			}
			ew.fit(&ev)
		}
	}
	ew.begin()
	if err := ew.flush(); err != nil {
		return err
	}
	for ev, err := range db.Subscribe(ctx, name, engine.SubscribeOptions{After: after}) {
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil
			}
			return err
		}
		if err := ew.write(&ev); err != nil {
			return err
		}
		if err := ew.flush(); err != nil {
			return err
		}
	}
	return nil
}
