package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// MarshalJSON writes the event as the line Export writes for it, without
// the newline: the Evently download format (docs/format.md, section 5),
//
//	{"entity":…,"key":…,"event":…,"eventId":"<32 hex>","timestamp":"2026-11-23T11:18:20.123456Z","meta":{…},"data":…}
//
// with meta and data as JSON (their canonical form), the ID in hex and the
// timestamp, the ID's time, in RFC 3339 UTC with 6 fraction digits. Ledger
// and Seq are not in the line. A nil Meta is written {} and a nil Data
// null (an Event that a read returned has both).
//
// json.Marshal escapes <, > and & in the result (\u003c, …: the same JSON
// value); a json.Encoder with SetEscapeHTML(false) writes the line byte
// for byte.
func (e Event) MarshalJSON() ([]byte, error) {
	meta, data := e.Meta, e.Data
	if len(meta) == 0 {
		meta = emptyObject
	}
	if len(data) == 0 {
		data = []byte("null")
	}
	line := ndjson.AppendLine(nil, e.ID, e.ID.Micros(), e.Entity, e.Key, e.Event, meta, data)
	return line[:len(line)-1], nil
}

// UnmarshalJSON reads an event written by MarshalJSON, or any line of the
// Evently download format (as package ndjson reads it: exactly the seven
// members, meta an object; meta and data are kept in canonical form), in
// any formatting. The timestamp must be the ID's time. Ledger and Seq,
// which the line does not carry, are left as they were. It does not
// verify the ID against the content: ndjson.Verifier and Import do, with
// the event before it. Errors match ErrInvalid. JSON null leaves e
// unchanged, as encoding/json's convention has it (and eventid.ID's).
func (e *Event) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	// One line: a document spread over several (indented) is compacted
	// first; a newline inside a JSON string is always escaped.
	var line bytes.Buffer
	if err := json.Compact(&line, b); err != nil {
		return fmt.Errorf("%w: event JSON: %w", ErrInvalid, err)
	}
	r := ndjson.NewReader(&line)
	ev, err := r.Next()
	if err == io.EOF {
		return fmt.Errorf("%w: event JSON: empty", ErrInvalid)
	}
	if err != nil {
		return fmt.Errorf("%w: event JSON: %w", ErrInvalid, err)
	}
	if ev.Micros != ev.ID.Micros() {
		return fmt.Errorf("%w: event JSON: timestamp %s is not the time of eventId %s (%s)", ErrInvalid,
			ndjson.AppendTimestamp(nil, ev.Micros), ev.ID, ndjson.AppendTimestamp(nil, ev.ID.Micros()))
	}
	e.ID, e.Entity, e.Key, e.Event = ev.ID, ev.Entity, ev.Key, ev.Event
	e.Meta, e.Data = slices.Clone(ev.Meta), slices.Clone(ev.Data)
	return nil
}

// ledgerJSON is the JSON form of a LedgerInfo: the members of the
// command's `annal ledgers --format json`, IDs in hex, times in RFC 3339
// UTC with 6 fraction digits (null for none).
type ledgerJSON struct {
	Name        string           `json:"name"`
	ID          eventid.LedgerID `json:"id"`
	Genesis     eventid.ID       `json:"genesis"`
	Description string           `json:"description"`
	Actor       string           `json:"actor"`
	Created     jsonTime         `json:"created"`
	Count       uint64           `json:"count"`
	Head        eventid.ID       `json:"head"`
	First       jsonTime         `json:"first"`
	Last        jsonTime         `json:"last"`
	Bytes       int64            `json:"bytes"`
}

// MarshalJSON writes the ledger as `annal ledgers --format json` does:
// {"name":…,"id":"<8 hex>","genesis":"<32 hex>","description":…,"actor":…,
// "created":"2026-11-23T11:18:20.123456Z","count":…,"head":"<32 hex>",
// "first":…,"last":…,"bytes":…}; a zero time is null.
func (l LedgerInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(ledgerJSON{Name: l.Name, ID: l.ID, Genesis: l.Genesis, Description: l.Description, Actor: l.Actor,
		Created: jsonTime(l.Created), Count: l.Count, Head: l.Head, First: jsonTime(l.First), Last: jsonTime(l.Last), Bytes: l.Bytes})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *LedgerInfo) UnmarshalJSON(b []byte) error {
	var j ledgerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: ledger JSON: %w", ErrInvalid, err)
	}
	*l = LedgerInfo{Name: j.Name, ID: j.ID, Genesis: j.Genesis, Description: j.Description, Actor: j.Actor,
		Created: time.Time(j.Created), Count: j.Count, Head: j.Head, First: time.Time(j.First), Last: time.Time(j.Last), Bytes: j.Bytes}
	return nil
}

// jsonTime is a time in RFC 3339 UTC with 6 fraction digits (the IDs'
// precision), null when zero.
type jsonTime time.Time

const rfc3339Micro = "2006-01-02T15:04:05.000000Z07:00"

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(time.Time(t).UTC().Format(rfc3339Micro))
}

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = jsonTime{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = jsonTime(v)
	return nil
}
