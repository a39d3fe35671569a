package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
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

// inclusionJSON is the JSON form of an InclusionProof (docs/format.md,
// section 9.4).
type inclusionJSON struct {
	Ledger        eventid.LedgerID `json:"ledger"`
	EventID       eventid.ID       `json:"eventId"`
	Seq           uint64           `json:"seq"`
	LeafIndex     uint64           `json:"leafIndex"`
	TreeSize      uint64           `json:"treeSize"`
	LeafHash      tree.Hash        `json:"leafHash"`
	InclusionPath []tree.Hash      `json:"inclusionPath"`
	Checkpoint    *string          `json:"checkpoint,omitempty"`
}

// MarshalJSON writes the proof as `annal prove --format json` does
// (docs/format.md, section 9.4):
// {"ledger":"<8 hex>","eventId":"<32 hex>","seq":…,"leafIndex":…,
// "treeSize":…,"leafHash":"<base64>","inclusionPath":["<base64>",…],
// "checkpoint":"<signed note>"}, checkpoint only when the proof has one.
func (p InclusionProof) MarshalJSON() ([]byte, error) {
	j := inclusionJSON{Ledger: p.Ledger, EventID: p.ID, Seq: p.Seq, TreeSize: p.TreeSize,
		LeafHash: p.LeafHash, InclusionPath: p.Hashes, Checkpoint: noteString(p.Checkpoint)}
	if p.Seq > 0 {
		j.LeafIndex = p.Seq - 1
	}
	if j.InclusionPath == nil {
		j.InclusionPath = []tree.Hash{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes. Errors match ErrInvalid,
// among them a leafIndex that is not seq-1. It does not verify the proof.
func (p *InclusionProof) UnmarshalJSON(b []byte) error {
	var j inclusionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: inclusion proof JSON: %w", ErrInvalid, err)
	}
	if j.Seq == 0 || j.LeafIndex != j.Seq-1 {
		return fmt.Errorf("%w: inclusion proof JSON: leafIndex %d is not seq %d - 1", ErrInvalid, j.LeafIndex, j.Seq)
	}
	if j.EventID.Ledger() != j.Ledger {
		return fmt.Errorf("%w: inclusion proof JSON: eventId %s is of ledger %s, not of ledger %s", ErrInvalid, j.EventID, j.EventID.Ledger(), j.Ledger)
	}
	if j.Seq > j.TreeSize {
		return fmt.Errorf("%w: inclusion proof JSON: event #%d is not in a tree of size %d", ErrInvalid, j.Seq, j.TreeSize)
	}
	*p = InclusionProof{Ledger: j.Ledger, ID: j.EventID, Seq: j.Seq, TreeSize: j.TreeSize, LeafHash: j.LeafHash,
		Hashes: j.InclusionPath, Checkpoint: noteBytes(j.Checkpoint)}
	return nil
}

// consistencyJSON is the JSON form of a ConsistencyProof (docs/format.md,
// section 9.4).
type consistencyJSON struct {
	Ledger          eventid.LedgerID `json:"ledger"`
	OldSize         uint64           `json:"oldSize"`
	NewSize         uint64           `json:"newSize"`
	OldRoot         tree.Hash        `json:"oldRoot"`
	NewRoot         tree.Hash        `json:"newRoot"`
	ConsistencyPath []tree.Hash      `json:"consistencyPath"`
	Checkpoint      *string          `json:"checkpoint,omitempty"`
}

// MarshalJSON writes the proof as `annal prove --consistency --format
// json` does (docs/format.md, section 9.4): {"ledger":"<8 hex>",
// "oldSize":…,"newSize":…,"oldRoot":"<base64>","newRoot":"<base64>",
// "consistencyPath":["<base64>",…],"checkpoint":"<signed note>"},
// checkpoint only when the proof has one.
func (p ConsistencyProof) MarshalJSON() ([]byte, error) {
	j := consistencyJSON{Ledger: p.Ledger, OldSize: p.OldSize, NewSize: p.NewSize, OldRoot: p.OldRoot, NewRoot: p.NewRoot,
		ConsistencyPath: p.Hashes, Checkpoint: noteString(p.Checkpoint)}
	if j.ConsistencyPath == nil {
		j.ConsistencyPath = []tree.Hash{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes. Errors match ErrInvalid.
// It does not verify the proof.
func (p *ConsistencyProof) UnmarshalJSON(b []byte) error {
	var j consistencyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: consistency proof JSON: %w", ErrInvalid, err)
	}
	if j.OldSize == 0 || j.OldSize > j.NewSize {
		return fmt.Errorf("%w: consistency proof JSON: oldSize %d is not 1 to newSize %d", ErrInvalid, j.OldSize, j.NewSize)
	}
	*p = ConsistencyProof{Ledger: j.Ledger, OldSize: j.OldSize, NewSize: j.NewSize, OldRoot: j.OldRoot, NewRoot: j.NewRoot,
		Hashes: j.ConsistencyPath, Checkpoint: noteBytes(j.Checkpoint)}
	return nil
}

// noteString and noteBytes convert a signed note for JSON: nil is no
// member at all.
func noteString(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func noteBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}
