// Package ndjson reads and verifies ledgers in the Evently NDJSON download
// format, one event a line:
//
//	{"entity":…,"key":…,"event":…,"eventId":…,"timestamp":…,"meta":{…},"data":…}
//
// The timestamp is ISO-8601 UTC with 3 or 6 fraction digits
// ("2022-01-14T02:05:17.275209Z", "2022-01-14T14:43:04.680Z") and is read to
// the microsecond. The first line is the ledger's genesis event.
//
// A [Reader] parses lines strictly (by package canon's rules: valid UTF-8, no
// duplicate or unknown fields) and canonicalizes meta and data; a [Verifier]
// recomputes every event's ID from its content, the ledger ID and the
// previous event's ID, as DESIGN.md and the Event ID seed define it. Neither
// needs a database: `annal verify-file` is these two in a loop, and the
// engine's import uses the same pair.
package ndjson

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

// DefaultMaxLineBytes is the longest line a [Reader] accepts unless told
// otherwise: a line longer than this is an error, not an unbounded allocation.
const DefaultMaxLineBytes = 16 << 20

// Event is one parsed line. Meta and Data hold canonical JSON.
type Event struct {
	Entity string
	Key    string
	Event  string
	// ID is the eventId field as written in the line.
	ID eventid.ID
	// Micros is the timestamp field in microseconds since the Unix epoch.
	Micros uint64
	Meta   []byte
	Data   []byte
}

// Content returns the fields the event's checksum covers.
func (e *Event) Content() eventid.Content {
	return eventid.Content{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
}

// Reader reads events from NDJSON text. It is not safe for concurrent use.
type Reader struct {
	r            *bufio.Reader
	line         int
	maxLineBytes int
	buf          []byte
	p            lineParser
	ev           Event
}

// lineParser parses lines into Events, keeping scratch space from one line
// to the next. It is not safe for concurrent use.
type lineParser struct {
	canon  canon.Canonicalizer
	fields [numFields]bool
	// Meta and data canonicalized by the slow path (parseSlow).
	meta, data []byte
}

// NewReader returns a Reader of r with [DefaultMaxLineBytes] as its line limit.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), maxLineBytes: DefaultMaxLineBytes}
}

// SetMaxLineBytes changes the longest line the Reader accepts.
func (r *Reader) SetMaxLineBytes(n int) { r.maxLineBytes = n }

// Line returns the number of the line last read, counting from 1.
func (r *Reader) Line() int { return r.line }

// Next parses the next line. It returns io.EOF after the last line (a final
// newline is optional). The returned Event, including its Meta and Data
// slices, is valid until the next call; copy what must outlive it.
//
// Errors are *LineError values naming the line. One that matches [ErrRead]
// means the input itself could not be read; any other means the line is not
// a valid event.
func (r *Reader) Next() (*Event, error) {
	line, err := r.readLine()
	if err != nil {
		return nil, err
	}
	if err := r.p.parse(line, &r.ev, false); err != nil {
		return nil, &LineError{Line: r.line, Err: err}
	}
	return &r.ev, nil
}

func (r *Reader) readLine() ([]byte, error) {
	var err error
	r.buf, err = ReadLine(r.r, r.buf[:0], r.maxLineBytes)
	switch {
	case err == nil:
		r.line++
		return r.buf, nil
	case err == io.EOF:
		return nil, io.EOF
	case errors.Is(err, ErrLineTooLong):
		r.line++
		return nil, &LineError{Line: r.line, Err: err}
	default:
		return nil, &LineError{Line: r.line + 1, Err: fmt.Errorf("%w: %w", ErrRead, err)}
	}
}

// ReadLine appends the next line of r, without its "\n" or "\r\n" ending,
// to buf. The last line needs no line ending. It returns io.EOF only when no
// byte is left, and an error matching [ErrLineTooLong] (with buf unchanged)
// for a line longer than max bytes; the rest of that line stays unread.
func ReadLine(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	start := len(buf)
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)-start+len(chunk) > max+2 { // +2: room for "\r\n"
			return buf[:start], fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(buf) == start {
				return buf, io.EOF
			}
		default:
			return buf[:start], err
		}
		line := bytes.TrimSuffix(buf[start:], []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		return buf[:start+len(line)], nil
	}
}

const (
	fieldEntity = iota
	fieldKey
	fieldEvent
	fieldEventID
	fieldTimestamp
	fieldMeta
	fieldData
	numFields
)

var fieldNames = [numFields]string{"entity", "key", "event", "eventId", "timestamp", "meta", "data"}

// parse parses line into ev: by the fast path when the line is in the
// form an export writes (parseFast), otherwise by the slow one, which
// gives the canonical form or the error. With stable set, line's bytes
// never change: ev's names and its Meta and Data may then point into them.
// Otherwise ev's names are strings of their own and its Meta and Data are
// valid until line or the parser's next call changes.
func (p *lineParser) parse(line []byte, ev *Event, stable bool) error {
	if p.parseFast(line, ev, stable) {
		return nil
	}
	return p.parseSlow(line, ev)
}

// parseSlow parses line by canon's rules (Members, then Append for meta
// and data), as every line was parsed before the fast path: it defines
// the errors, and what the fast path must agree with.
func (p *lineParser) parseSlow(line []byte, ev *Event) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return ErrEmptyLine
	}
	p.fields = [numFields]bool{}
	err := canon.Members(line, func(name string, value []byte) error {
		f := fieldIndex(name)
		if f < 0 {
			return fmt.Errorf("%w %q", ErrUnknownField, name)
		}
		p.fields[f] = true
		var err error
		switch f {
		case fieldEntity:
			ev.Entity, err = str(name, value)
		case fieldKey:
			ev.Key, err = str(name, value)
		case fieldEvent:
			ev.Event, err = str(name, value)
		case fieldEventID:
			ev.ID, err = parseEventID(value)
		case fieldTimestamp:
			ev.Micros, err = timestamp(value)
		case fieldMeta:
			if p.meta, err = p.canon.AppendObject(p.meta[:0], value); err != nil {
				err = fmt.Errorf("meta: %w", err)
			}
			ev.Meta = p.meta
		case fieldData:
			if p.data, err = p.canon.Append(p.data[:0], value); err != nil {
				err = fmt.Errorf("data: %w", err)
			}
			ev.Data = p.data
		}
		return err
	})
	if err != nil {
		return err
	}
	for f, seen := range p.fields {
		if !seen {
			return fmt.Errorf("%w %q", ErrMissingField, fieldNames[f])
		}
	}
	return nil
}

func fieldIndex(name string) int {
	for i, n := range fieldNames {
		if n == name {
			return i
		}
	}
	return -1
}

func str(name string, value []byte) (string, error) {
	if len(value) == 0 || value[0] != '"' {
		return "", fmt.Errorf("%w: %s must be a string", ErrFieldType, name)
	}
	s, err := canon.Unquote(nil, value)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(s), nil
}

func parseEventID(value []byte) (eventid.ID, error) {
	if len(value) != 34 || value[0] != '"' || value[33] != '"' {
		return eventid.ID{}, fmt.Errorf("%w: eventId must be a string of 32 hex characters, found %s", ErrFieldType, clip(value))
	}
	id, err := eventid.ParseBytes(value[1:33])
	if err != nil {
		return eventid.ID{}, fmt.Errorf("eventId: %w", err)
	}
	return id, nil
}

// timestamp reads "YYYY-MM-DDTHH:MM:SS.fffZ" or "….ffffffZ" to the µs.
// It gives the errors; fastTimestamp is what parses nearly every line.
func timestamp(value []byte) (uint64, error) {
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		if us, ok := fastTimestamp(value[1 : len(value)-1]); ok {
			return us, nil
		}
	}
	return slowTimestamp(value)
}

// slowTimestamp is timestamp by time.Parse, with the errors.
func slowTimestamp(value []byte) (uint64, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w %s: %s (want ISO-8601 UTC with 3 or 6 fraction digits, like 2022-01-14T02:05:17.275209Z)", ErrTimestamp, clip(value), why)
	}
	if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
		return 0, bad("not a string")
	}
	s := value[1 : len(value)-1]
	if len(s) != len("2006-01-02T15:04:05.000Z") && len(s) != len("2006-01-02T15:04:05.000000Z") {
		return 0, bad("wrong length")
	}
	if s[len(s)-1] != 'Z' || s[19] != '.' {
		return 0, bad("not UTC with a fraction")
	}
	t, err := time.Parse("2006-01-02T15:04:05", string(s[:19]))
	if err != nil {
		return 0, bad(err.Error())
	}
	frac := s[20 : len(s)-1]
	var us uint64
	for _, c := range frac {
		if c < '0' || c > '9' {
			return 0, bad("fraction is not digits")
		}
		us = us*10 + uint64(c-'0')
	}
	if len(frac) == 3 {
		us *= 1000
	}
	sec := t.Unix()
	if sec < 0 {
		return 0, bad("before 1970")
	}
	return uint64(sec)*1_000_000 + us, nil
}

// clip shortens a value for an error message.
func clip(b []byte) string {
	const max = 80
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…"
	}
	return string(b)
}
