package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// evently is the timestamp of the Evently download format: ISO-8601 UTC
// with six fraction digits.
const evently = "2006-01-02T15:04:05.000000Z"

// appendEventLine appends ev as one line of the Evently NDJSON download
// format (ndjson.AppendLine), without the newline: what an Evently export
// holds and `annal verify-file` accepts.
func appendEventLine(dst []byte, ev *engine.Event) []byte {
	dst = ndjson.AppendLine(dst, ev.ID, ev.ID.Micros(), ev.Entity, ev.Key, ev.Event, ev.Meta, ev.Data)
	return dst[:len(dst)-1]
}

// eventWriter writes events in one output format: a table (time, seq,
// entity, key, event, ID, data cut short), one JSON array, or NDJSON lines
// in the Evently format. Call begin, write for each event, then end; or,
// for one event alone (a JSON object rather than an array), write and
// flush.
type eventWriter struct {
	format string
	array  bool // begin opened a JSON array
	w      *bufio.Writer
	tw     *tabwriter.Writer // table of a scan: aligned in blocks of rows
	widths []int             // table of a stream: columns that only grow
	rows   int               // rows of a stream's table written
	n      int
	line   []byte
	indent bytes.Buffer
}

// tableFlushRows is how many table rows are aligned together: a long scan
// is printed as it goes instead of held in memory to align every row.
const tableFlushRows = 1000

func newEventWriter(w io.Writer, format string) *eventWriter {
	ew := &eventWriter{format: format, w: bufio.NewWriterSize(w, 64<<10)}
	if format == formatTable {
		ew.tw = newTable(ew.w)
	}
	return ew
}

// newEventStream returns an eventWriter for events that come one at a time
// and are flushed one by one: its table cannot be aligned in advance, so
// each column is as wide as its widest cell so far.
func newEventStream(w io.Writer, format string) *eventWriter {
	if format == formatJSON {
		format = formatNDJSON // a stream has no end to close an array at
	}
	ew := &eventWriter{format: format, w: bufio.NewWriterSize(w, 64<<10)}
	if format == formatTable {
		// Time and ID have fixed widths; the others start as their names.
		ew.widths = make([]int, len(eventColumns))
		ew.widths[0], ew.widths[5] = len(evently), 2*eventid.Size
	}
	return ew
}

var eventColumns = []string{"TIME", "SEQ", "ENTITY", "KEY", "EVENT", "ID", "DATA"}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

func (ew *eventWriter) begin() {
	switch {
	case ew.widths != nil:
		ew.grow(eventColumns)
		ew.writeRow(eventColumns)
	case ew.format == formatTable:
		fmt.Fprintln(ew.tw, strings.Join(eventColumns, "\t"))
	case ew.format == formatJSON:
		ew.w.WriteByte('[')
		ew.array = true
	}
}

// row writes a row of a stream's table. A cell wider than its column so
// far widens it, and the header is written again above the row, so that
// every row lines up with the header above it (the rows before it keep the
// alignment of theirs).
func (ew *eventWriter) row(cells []string) {
	if ew.grow(cells) && ew.rows > 0 {
		ew.writeRow(eventColumns)
	}
	ew.writeRow(cells)
	ew.rows++
}

// grow widens the columns of a stream's table to fit cells, and reports
// whether one grew. The last column (the data) is not padded.
func (ew *eventWriter) grow(cells []string) bool {
	grown := false
	for i, c := range cells[:len(cells)-1] {
		if n := utf8.RuneCountInString(c); n > ew.widths[i] {
			ew.widths[i], grown = n, true
		}
	}
	return grown
}

// fit widens the columns of a stream's table to fit ev, before the header
// is written: tail fits the last events of the ledger, so that the rows
// to come most likely fit the header.
func (ew *eventWriter) fit(ev *engine.Event) {
	if ew.widths != nil {
		ew.grow(ew.cells(ev))
	}
}

func (ew *eventWriter) writeRow(cells []string) {
	for i, c := range cells {
		ew.w.WriteString(c)
		if i < len(cells)-1 {
			ew.w.WriteString(strings.Repeat(" ", ew.widths[i]-utf8.RuneCountInString(c)+2))
		}
	}
	ew.w.WriteByte('\n')
}

// cells are the cells of ev's row in a table.
func (ew *eventWriter) cells(ev *engine.Event) []string {
	return []string{ev.ID.Time().UTC().Format(evently), strconv.FormatUint(ev.Seq, 10),
		safeName(ev.Entity), safeName(ev.Key), safeName(ev.Event), ev.ID.String(), safeJSON(clipRunes(ev.Data, maxTableData))}
}

// maxTableData is how much of an event's data a table row shows, in runes.
const maxTableData = 60

func (ew *eventWriter) write(ev *engine.Event) error {
	if ew.format == formatTable {
		cells := ew.cells(ev)
		if ew.widths != nil {
			ew.row(cells)
			return nil
		}
		fmt.Fprintln(ew.tw, strings.Join(cells, "\t"))
		if ew.n++; ew.n%tableFlushRows == 0 {
			return ew.tw.Flush()
		}
		return nil
	}
	ew.line = appendEventLine(ew.line[:0], ev)
	ew.n++
	if ew.format == formatNDJSON {
		ew.line = append(ew.line, '\n')
		_, err := ew.w.Write(ew.line)
		return err
	}
	ew.indent.Reset()
	if !ew.array {
		json.Indent(&ew.indent, ew.line, "", "  ")
		ew.indent.WriteByte('\n')
	} else {
		if ew.n > 1 {
			ew.w.WriteByte(',')
		}
		ew.w.WriteString("\n  ")
		json.Indent(&ew.indent, ew.line, "  ", "  ")
	}
	_, err := ew.w.Write(ew.indent.Bytes())
	return err
}

// flush writes out what has been written so far.
func (ew *eventWriter) flush() error {
	if ew.tw != nil {
		if err := ew.tw.Flush(); err != nil {
			return err
		}
	}
	return ew.w.Flush()
}

func (ew *eventWriter) end() error {
	if ew.array {
		if ew.n > 0 {
			ew.w.WriteByte('\n')
		}
		ew.w.WriteString("]\n")
	}
	return ew.flush()
}

// writeEventDetail writes one event as a key/value listing, for people.
func writeEventDetail(w io.Writer, ev *engine.Event) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "ledger\t%s\nseq\t%d\nid\t%s\ntime\t%s\nentity\t%s\nkey\t%s\nevent\t%s\nmeta\t%s\ndata\t%s\n",
		safeName(ev.Ledger), ev.Seq, ev.ID, ev.ID.Time().UTC().Format(evently), safeName(ev.Entity), safeName(ev.Key), safeName(ev.Event),
		safeJSON(string(ev.Meta)), safeJSON(string(ev.Data)))
	return tw.Flush()
}

// clipRunes returns b as a string of at most n runes, ending in "…" if it
// was cut.
func clipRunes(b []byte, n int) string {
	if utf8.RuneCount(b) <= n {
		return string(b)
	}
	i := 0
	for range n - 1 {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return string(b[:i]) + "…"
}

// jsonTime is a time in JSON output: RFC 3339, microseconds, UTC.
type jsonTime time.Time

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return strconv.AppendQuote(nil, time.Time(t).UTC().Format(rfc3339Micro)), nil
}

// tableTime is a time in a table: to the second, UTC.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeJSON writes v in format json (one indented document) or ndjson (one
// line).
func writeJSON(w io.Writer, format string, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if format == formatJSON {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// humanBytes writes a size for people: 512 B, 1.5 KiB, 12.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func idOrNone(id eventid.ID) string {
	if id.IsZero() {
		return "no event"
	}
	return id.String()
}

// Escaping for people. A ledger's names and values come from its writers,
// and an imported ledger from anyone: printed raw, an escape sequence, a
// carriage return or a newline in a name would act on the operator's
// terminal or forge rows, and a bidirectional override or a zero-width
// character would make one name look like another. Every table and message
// the command prints passes what it did not write itself through one of
// these. JSON and NDJSON output needs none: JSON encoding escapes the
// control characters, and what it leaves raw is machine output.

// escapeMode says how appendEscaped writes an escaped character.
type escapeMode int

const (
	escapeText escapeMode = iota // \x1b, \n, \u202e; a backslash as it is (messages)
	escapeName                   // as escapeText, and a backslash as \\ (names in tables)
	escapeJSON                   // \u001b, \u202e: JSON text stays JSON with the same meaning
)

// mustEscape reports whether r is escaped for a terminal: a control
// character (C0, DEL, C1), a format character (Unicode category Cf: the
// zero-width characters U+200B-U+200F, the bidirectional embeddings,
// overrides and isolates U+202A-U+202E and U+2066-U+2069, U+FEFF, the tag
// characters) or a line or paragraph separator (U+2028, U+2029).
func mustEscape(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r < 0xa0:
		return true
	}
	return r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r)
}

// appendEscaped appends s to dst with every character mustEscape names,
// and every byte that is not UTF-8, escaped as mode says.
func appendEscaped(dst []byte, s string, mode escapeMode) []byte {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			if mode == escapeJSON {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = fmt.Appendf(dst, `\x%02x`, s[i])
			}
		case r == '\\' && mode == escapeName:
			dst = append(dst, `\\`...)
		case !mustEscape(r):
			dst = append(dst, s[i:i+size]...)
		case mode != escapeJSON && r == '\t':
			dst = append(dst, `\t`...)
		case mode != escapeJSON && r == '\n':
			dst = append(dst, `\n`...)
		case mode != escapeJSON && r == '\r':
			dst = append(dst, `\r`...)
		case mode != escapeJSON && r < 0x80:
			dst = fmt.Appendf(dst, `\x%02x`, r)
		case r > 0xffff: // only tag characters and the like; JSON would need a surrogate pair
			if mode == escapeJSON {
				hi, lo := utf16.EncodeRune(r)
				dst = fmt.Appendf(dst, `\u%04x\u%04x`, hi, lo)
			} else {
				dst = fmt.Appendf(dst, `\U%08x`, r)
			}
		default:
			dst = fmt.Appendf(dst, `\u%04x`, r)
		}
		i += size
	}
	return dst
}

// needsEscape reports whether appendEscaped would change s.
func needsEscape(s string, mode escapeMode) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || mustEscape(r) || r == '\\' && mode == escapeName {
			return true
		}
		i += size
	}
	return false
}

func escape(s string, mode escapeMode) string {
	if !needsEscape(s, mode) {
		return s
	}
	return string(appendEscaped(make([]byte, 0, len(s)+16), s, mode))
}

// safeName returns a name (of a ledger, an entity, a key, an event) for a
// table or a message: control, format and separator characters and bytes
// that are not UTF-8 escaped (\x1b, \n, \u202e, \xff), and a backslash
// doubled, so that two different names never look the same.
func safeName(s string) string { return escape(s, escapeName) }

// safeText returns a message for a terminal, such as an error's text,
// with the characters safeName escapes escaped and a backslash kept (the
// names in messages are quoted already, with Go's escapes).
func safeText(s string) string { return escape(s, escapeText) }

// safeJSON returns JSON text (an event's meta or data, in a table) with the
// characters safeName escapes written as JSON escapes (\u202e): the same
// JSON value, nothing for a terminal to act on.
func safeJSON(s string) string { return escape(s, escapeJSON) }

// errorLine returns err's message on one line, for standard error and for
// the error field of verify's results. Errors from Pebble (the index) are
// cockroachdb/errors values: their Error is the short message, but a
// corruption error joins a "<corruption detail carrier>" line to it, and a
// message that embeds a "%+v" formatting carries a stack trace. Those lines
// are dropped, and so is a line that repeats one before it (a joined error
// can carry the same one twice); the rest are joined with "; ". The result
// is not escaped:
// safeText does that for a terminal.
func errorLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	kept := lines[:0]
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || t == "<corruption detail carrier>" || slices.Contains(kept, strings.TrimRight(l, " \t\r")) {
			continue
		}
		if isStackLine(l) {
			break // what follows is the rest of the trace
		}
		kept = append(kept, strings.TrimRight(l, " \t\r"))
	}
	return strings.Join(kept, "; ")
}

// isStackLine reports whether l starts the verbose form of a
// cockroachdb/errors error ("%+v"), or a Go stack trace.
func isStackLine(l string) bool {
	for _, p := range []string{"Wraps: (", "Error types: (", "  -- stack trace:", "  | ", "goroutine ", "\t/"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return len(l) > 3 && l[0] == '(' && l[1] >= '1' && l[1] <= '9' && strings.HasPrefix(l[2:], ") ")
}

// trimContext returns msg, an error's message printed after what
// ("verify orders: …"), without a repetition of what at its start (the
// engine's "engine: verify orders: "), so that the line says it once.
func trimContext(msg, what string) string {
	for _, p := range []string{"engine: " + what + ": ", what + ": "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

// errorText is errorLine escaped for a terminal.
func errorText(err error) string { return safeText(errorLine(err)) }
