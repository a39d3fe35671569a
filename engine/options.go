package engine

import (
	"fmt"
	"time"

	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Durability says when an append returns relative to stable storage; see
// segment.Durability.
type Durability = segment.Durability

// Durability modes.
const (
	// Sync: an append returns after its events are on stable storage.
	Sync = segment.Sync
	// Interval: an append returns after the write; a background fsync runs
	// at most every Options.SyncInterval, so a machine crash loses at most
	// that window. A process crash loses nothing.
	Interval = segment.Interval
	// None: an append returns after the write to the OS.
	None = segment.None
)

// Options configures a DB. The zero value is safe: Sync durability, the
// tail of every ledger verified on open, files only the owner can read.
type Options struct {
	// Durability is the default for appends (an append may override it).
	// Zero means Sync.
	Durability Durability
	// SyncInterval is the longest time between syncs in Interval mode.
	// Zero means 50 ms.
	SyncInterval time.Duration
	// SegmentSize is the size at which a ledger starts a new segment file.
	// Zero means 64 MiB.
	SegmentSize int64
	// MaxEventSize bounds the canonical meta and data of one event
	// together, in bytes. Zero means 1 MiB.
	MaxEventSize int
	// CacheSize is the index's memory budget in bytes: Pebble's block
	// cache, out of which it also takes its memtables (a quarter of it,
	// at least 4 MiB and at most 64 MiB each; Pebble holds up to two).
	// Zero means 128 MiB. With cgo this memory is C memory, outside the
	// Go heap: see "Memory" in docs/engine.md.
	CacheSize int64
	// FullVerifyOnOpen verifies every record of every ledger when the DB
	// opens, instead of only what follows the index's checkpoint.
	FullVerifyOnOpen bool
	// WitnessInterval is how often a background writer records in the
	// metadata file the durable head of every ledger whose durable head
	// advanced: one bbolt transaction (one fsync of meta.db) an interval
	// at most, none when nothing was appended, never on an append's path.
	// Open refuses a ledger whose segments no longer hold its witness
	// (acknowledged events lost). Events acknowledged within the last
	// interval (plus one bbolt commit) before a crash are not covered:
	// see "The durable witness" in docs/recovery.md. Zero means 1 s;
	// negative is ErrInvalid.
	WitnessInterval time.Duration
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
	// RebuildIndex makes Open rebuild the index from the segments: the
	// old one is moved to DIR/index.broken (replacing an earlier one), and
	// every ledger is verified from its first record and re-indexed (see
	// IndexRebuilt). The index is derived data, so nothing is lost; use
	// it when Verify reports ErrIndexDamaged. It takes about as long as
	// verifying every ledger (80 s for 10^7 events); see Progress.
	RebuildIndex bool
	// Progress, if not nil, is called now and then while Open indexes a
	// ledger's events (after a rebuild, a crash, or a lost index): what
	// names the work ("index ledger NAME"), done counts the events
	// indexed so far and total those to index. It is called from the
	// goroutine that called Open, every few thousand events and once at
	// the end of each ledger.
	Progress func(what string, done, total int64)

	// fs, if set, holds the segments and the index instead of the OS file
	// system, and metaPath is then where the metadata file lives (bbolt
	// needs a real file). For crash tests: see crash_test.go.
	fs       vfs.FS
	metaPath string
}

const (
	defaultMaxEventSize = 1 << 20
	// defaultWitnessInterval: one small bbolt commit a second while
	// appends go on.
	defaultWitnessInterval = time.Second
	// maxNameLen bounds ledger names, entities, keys, event names and
	// idempotency keys, in bytes.
	maxNameLen = 1024
)

// check says what is wrong with options after withDefaults, as an error
// matching ErrInvalid: an option the segment log refuses would otherwise
// make every ledger look unavailable.
func (o *Options) check() error {
	if err := (segment.Options{SegmentSize: o.SegmentSize, Durability: o.Durability}).Check(); err != nil {
		return fmt.Errorf("%w: options: %w", ErrInvalid, err)
	}
	if o.WitnessInterval < 0 {
		return fmt.Errorf("%w: options: WitnessInterval %v is negative (0 means %v)", ErrInvalid, o.WitnessInterval, defaultWitnessInterval)
	}
	if o.CacheSize < 0 {
		return fmt.Errorf("%w: options: CacheSize %d is negative (0 means 128 MiB)", ErrInvalid, o.CacheSize)
	}
	return nil
}

func (o *Options) withDefaults() Options {
	r := Options{}
	if o != nil {
		r = *o
	}
	if r.Durability == segment.DefaultDurability {
		r.Durability = Sync
	}
	if r.WitnessInterval == 0 {
		r.WitnessInterval = defaultWitnessInterval
	}
	if r.MaxEventSize <= 0 {
		r.MaxEventSize = defaultMaxEventSize
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}
