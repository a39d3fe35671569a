// Package peer puts annal and the systems it is compared with behind one
// interface, so that every workload of the comparison harness
// (bench/cmd/compare) runs the same code against each of them, on the same
// events, on real files.
//
// The peers store what annal stores, and no more: an event's entity, key,
// event name, meta and data, keyed by a 16-byte time-sortable ID (8 bytes
// of big-endian Unix microseconds, then 8 bytes of a big-endian sequence
// number), with a secondary index of (entity, key) → ID where the peer
// has indexes, so that an entity stream can be replayed. They compute no
// checksums chained from event to event and no content IDs: those are
// what annal adds, and what it pays for.
package peer

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine"
)

// Mode is the durability asked of an append: annal's own modes, which
// each peer maps to what it offers.
type Mode = engine.Durability

const (
	// Sync: durable (fsynced) when Append returns.
	Sync = engine.Sync
	// Interval: synced within a short interval (annal: 50 ms); a crash
	// may lose the last appends, never corrupt what was synced.
	Interval = engine.Interval
	// None: left to the operating system.
	None = engine.None
)

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Sync, Interval, None} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("peer: unknown durability mode %q (want sync, interval or none)", s)
}

// ID is an event's ID: annal's Event ID for annal, and for the peers 8
// bytes of big-endian Unix microseconds then 8 bytes of a big-endian
// sequence number. Both sort by time.
type ID [16]byte

// PeerID returns a peer's ID for the time t and sequence number seq.
func PeerID(t time.Time, seq uint64) ID {
	var id ID
	binary.BigEndian.PutUint64(id[:8], uint64(t.UnixMicro()))
	binary.BigEndian.PutUint64(id[8:], seq)
	return id
}

// PeerTime returns the time of a peer's ID.
func PeerTime(id ID) time.Time {
	return time.UnixMicro(int64(binary.BigEndian.Uint64(id[:8])))
}

// Event is an event to append: what annal's engine.EventInput holds.
// Meta and Data are canonical JSON (so annal's canonicalization does no
// reordering work, and the bytes stored are the same for every store).
type Event struct {
	Entity, Key, Name string
	Meta, Data        []byte
}

// Size is the bytes of content of e: what every store must keep.
func (e *Event) Size() int {
	return len(e.Entity) + len(e.Key) + len(e.Name) + len(e.Meta) + len(e.Data)
}

// Store is one system under test, open on a directory. Every method is
// safe for concurrent use, except Close.
type Store interface {
	// Append stores the events as one atomic batch, durable as the
	// store's mode says once it returns, and returns their IDs in order.
	Append(events []Event) ([]ID, error)
	// Get reads the event with the given ID and returns its content size
	// (Event.Size). The event's bytes must be copied out of the store's
	// buffers, as a caller would keep them.
	Get(id ID) (int, error)
	// Scan reads every event whose time is in [from, to], in ID order,
	// copying each out, and returns how many and their content bytes.
	Scan(from, to time.Time) (n int, bytes int64, err error)
	// Replay reads the events of the stream (entity, key) in order,
	// copying each out, and returns how many and their content bytes.
	Replay(entity, key string) (n int, bytes int64, err error)
	// Verify checks what the store offers to check of everything it
	// holds (annal: every chain, checksum and index; the peers: see each)
	// and returns how many events it covered.
	Verify() (n int, err error)
	// TimeOf returns the time carried by an ID this store returned.
	TimeOf(id ID) time.Time
	// Close closes the store; a clean close, after which Open finds no
	// recovery to do.
	Close() error
}

// Opener opens (creating if need be) a store in dir with the given
// durability for appends.
type Opener func(dir string, mode Mode) (Store, error)

// Info describes a store for the report.
type Info struct {
	Name    string // short name used in tables, CSV and flags
	Version string // module version
	What    string // one line: how the events are stored
	Open    Opener
}

var registry []Info

// Register adds a store; each adapter file registers itself in init.
func Register(i Info) { registry = append(registry, i) }

// All returns the registered stores, annal first, then in the order
// registered.
func All() []Info {
	out := make([]Info, 0, len(registry))
	for _, i := range registry {
		if i.Name == "annal" {
			out = append(out, i)
		}
	}
	for _, i := range registry {
		if i.Name != "annal" {
			out = append(out, i)
		}
	}
	return out
}

// Lookup returns the store named name.
func Lookup(name string) (Info, error) {
	for _, i := range registry {
		if i.Name == name {
			return i, nil
		}
	}
	return Info{}, fmt.Errorf("peer: unknown store %q", name)
}
