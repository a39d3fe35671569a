package engine

import (
	"crypto"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Durability says when an append returns relative to stable storage; see
// segment.Durability.
type Durability = segment.Durability

// MinCacheSize is the smallest Options.CacheSize (other than 0, the
// default): Pebble takes its two memtables, at least 4 MiB each, out of it.
const MinCacheSize = 8 << 20

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
	// Zero means Sync; Sync, Interval or None (ErrInvalid otherwise).
	Durability Durability
	// SyncInterval is the longest time between syncs in Interval mode.
	// Zero means 50 ms; otherwise 1 ms to 1 h (ErrInvalid outside).
	SyncInterval time.Duration
	// SegmentSize is the size at which a ledger starts a new segment file.
	// Zero means 64 MiB; at most 1 GiB, and at least the smallest
	// segment (a header and one record: ErrInvalid outside).
	SegmentSize int64
	// MaxEventSize bounds the canonical meta and data of one event
	// together, in bytes. Zero means 1 MiB; otherwise 1 KiB to 16 MiB
	// (ErrInvalid outside).
	MaxEventSize int
	// CacheSize is the index's memory budget in bytes: Pebble's block
	// cache, out of which it also takes its memtables (a quarter of it,
	// at least 4 MiB and at most 64 MiB each; Pebble holds up to two).
	// Zero means 128 MiB; otherwise 8 MiB to 1 TiB (ErrInvalid outside).
	// With cgo this memory is C memory, outside the Go heap: see
	// "Memory" in docs/engine.md.
	CacheSize int64
	// FullVerifyOnOpen verifies every record of every ledger when the DB
	// opens, and checks every event against the tree, instead of sparing
	// the sealed segments unchanged since an earlier Open verified them
	// (docs/recovery.md, "Stamps"). For OpenReadOnly, it reads every
	// record whatever the stamps, the writer's and its own
	// (Options.CacheDir); annal verify sets it.
	FullVerifyOnOpen bool
	// WitnessInterval is how often a background writer records in the
	// metadata file the durable head of every ledger whose durable head
	// advanced: one bbolt transaction (one fsync of meta.db) an interval
	// at most, none when nothing was appended, never on an append's path.
	// Open refuses a ledger whose segments no longer hold its witness
	// (acknowledged events lost). Events acknowledged within the last
	// interval (plus one bbolt commit) before a crash are not covered:
	// see "The durable witness" in docs/recovery.md. Zero means 1 s;
	// otherwise 1 ms to 1 h (ErrInvalid outside).
	WitnessInterval time.Duration

	// Signer, if set, signs the ledgers' checkpoints (an Ed25519 key in a
	// KMS or HSM behind crypto.Signer); SignerName names it in the notes
	// ("" : "annal-" and 8 hex digits of the public key's SHA-256). If
	// nil, a key file signs: SigningKeyFile, else the directory's own
	// DIR/signing.key (created owner-only by the first Open, never while
	// checkpoints signed by another key are in the directory:
	// ErrSigningKeyMissing). Every key signs only consistent extensions of
	// what it signed before (its memory: SignerState). See
	// docs/engine.md, "Checkpoints and proofs" and "The signer's memory".
	Signer     crypto.Signer
	SignerName string
	// SignerState is the file in which Signer's memory is kept: the last
	// checkpoint it signed for each ledger (see "The signer's memory" in
	// docs/engine.md). A signer refuses any checkpoint that is not a
	// consistent extension of the last one it signed; a state file
	// outside the data directory is what keeps someone who can rewrite
	// the directory from rolling a ledger back. "" means
	// DIR/signing.key.state. Ignored without Signer.
	SignerState string
	// SigningKeyFile, if set and Signer is nil, is the key file that signs
	// the ledgers' checkpoints instead of DIR/signing.key (the same
	// format; created, owner-only, if missing and no checkpoint in the
	// directory is signed by another key), with its memory in
	// SigningKeyFile+".state". Kept outside the data directory, with its
	// state file, it protects the ledgers against someone who can rewrite
	// the directory but not read the key. Several DBs may use it at once
	// (each signature locks the state: SigningKeyFile+".state.lock"). Open
	// writes its verifier (public) key beside it, SigningKeyFile with
	// ".key" replaced by ".pub" (or ".pub" appended), for readers that may
	// not read the private key (see "The signer's memory" in
	// docs/engine.md).
	SigningKeyFile string

	// CheckpointInterval is how often a background writer issues a signed
	// checkpoint of each ledger whose durable head passed its latest
	// checkpoint (one tree-file fsync, a signature and one small file
	// written and synced per ledger; nothing while nothing is appended).
	// A checkpoint covers only events durable in the segments. Zero means
	// 10 s; negative: only on Close and on request (DB.Checkpoint);
	// otherwise 100 ms to 24 h (ErrInvalid outside).
	CheckpointInterval time.Duration
	// TlogWitnesses are C2SP tlog witnesses (annal witness; not the
	// durable witness of WitnessInterval) that each checkpoint is sent to
	// before it is stored or published: a witness cosigns it only as a
	// consistent extension of the last checkpoint it cosigned for the
	// ledger, and its cosignature is added to the signed checkpoint.
	// With fewer than TlogWitnessQuorum cosignatures the checkpoint is
	// neither written nor shipped, and the error (wrapping
	// cosign.ErrQuorum) says which witnesses refused and why. A
	// checkpoint is stored as soon as the quorum cosigned it: the other
	// witnesses' answers are not waited for (each request takes at most
	// 10 s, in the background; DB.TlogWitnessStatus reports them). A
	// public key given twice, even under
	// two names, is ErrInvalid (one witness). None (nil) means
	// checkpoints are not cosigned. See "Tlog witnesses" in docs/engine.md.
	TlogWitnesses []cosign.WitnessConfig
	// TlogWitnessQuorum is how many of TlogWitnesses must cosign a
	// checkpoint: 0 means all of them; otherwise 1 to
	// len(TlogWitnesses) (ErrInvalid outside).
	TlogWitnessQuorum int
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
	// RebuildIndex makes Open rebuild the index from the segments: the
	// old one is moved to DIR/index.broken (replacing an earlier one), and
	// every ledger is verified from its first record and re-indexed (see
	// IndexRebuilt). The index is derived data, so nothing is lost; use
	// it when Verify reports ErrIndexDamaged. It takes about 15 s for
	// 10^7 events on 2 cores (a full Verify about 6 s); see Progress.
	RebuildIndex bool
	// Progress, if not nil, is called now and then while Open indexes a
	// ledger's events (after a rebuild, a crash, or a lost index): what
	// names the work ("index ledger NAME"), done counts the events
	// indexed so far and total those to index. It is called from the
	// goroutine that called Open, every few thousand events and once at
	// the end of each ledger.
	Progress func(what string, done, total int64)

	// FollowInterval, for OpenReadOnly, is how often the DB looks at the
	// segments for what a writer committed since (Subscribe follows at
	// this pace). Zero means 50 ms; otherwise 1 ms to 1 h (ErrInvalid
	// outside). Open ignores it.
	FollowInterval time.Duration
	// TempDir, for OpenReadOnly, is where the DB makes its private
	// directory (its index, a copy of the metadata file), removed by
	// Close; one that a reader killed before its Close left there is
	// removed by the next OpenReadOnly with the same TempDir. Empty means
	// os.TempDir(). Open ignores it.
	TempDir string
	// VerifyIndex, for OpenReadOnly, also opens the writer's index (read
	// only) so that Verify can compare it with the segments, when no
	// writer holds the directory: the DB then holds it (its flock, as a
	// writer does) until Close, so that no writer starts meanwhile (one
	// that tries is ErrLocked). When a writer holds it, or the index
	// cannot be opened, Verify says that it did not check the index and
	// why (VerifyReport.IndexNotChecked). annal verify sets it. Open
	// ignores it.
	VerifyIndex bool
	// UseIndex, for OpenReadOnly: when no writer holds the data
	// directory, the DB holds it (its flock, as a writer does) until
	// Close and reads the directory's own index, opened read-only (no
	// byte of the directory is written), in place of a private index
	// built from the segments: reads then cost what they read, not the
	// ledger's size. A writer that starts meanwhile fails with ErrLocked.
	// The index is used only if it covers exactly what the DB shows of
	// every ledger (each ledger's progress marker is its head, as after
	// a writer's Close); otherwise, or when a writer holds the directory,
	// the DB lets the directory go (but with VerifyIndex) and builds its
	// private index as without it. For short reads (annal's read
	// commands set it), not for a DB that follows ledgers for long
	// (annal tail does not): no writer could start meanwhile. Open
	// ignores it.
	UseIndex bool
	// CacheDir, for OpenReadOnly: a directory outside the data directory
	// where the DB keeps, for each data directory and ledger, the stamps
	// of the sealed segments it verified whole (and whose events passed
	// the checkpoint evidence), so that a later OpenReadOnly skips them
	// as the writer's Open skips the segments it stamped (see "Stamps"
	// in docs/recovery.md). Empty means none: only the writer's stamps
	// spare work. A stamp is a cache, never evidence: Verify with Full
	// reads every record. The caches of data directories that no longer
	// exist, or that no read-only open used for 30 days, are removed by a
	// later OpenReadOnly, at most once an hour (never an index another
	// reader has open). annal sets it to its directory in the user's
	// cache directory (os.UserCacheDir). Open ignores it.
	CacheDir string

	// Replica, if set, replicates every ledger to an S3-compatible
	// bucket: the URL s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true
	// (every parameter optional; credentials from the standard AWS
	// chain, never in the URL). See "Replication" in docs/engine.md and
	// docs/replication.md. A malformed URL is ErrInvalid, naming the part.
	// OpenReadOnly ignores it (a reader never writes to the bucket).
	Replica string
	// Replication is how appends wait for the bucket: Replicated (the
	// default with a Replica: an append returns once its events are
	// durable locally and stored) or Shipped (once durable locally; they
	// are stored within ShipInterval). Set without Replica: ErrInvalid.
	Replication Replication
	// MinFlushInterval: Replicated mode uploads a chunk as soon as
	// events are pending and an upload slot is free, but at most once per
	// MinFlushInterval. Zero means no lower bound; at most 1 s. While
	// other uploads are in flight, a cut waits a little for the appenders
	// the last acknowledgements released (docs/replication.md, "Modes").
	MinFlushInterval time.Duration
	// ShipInterval: Shipped mode stores every event within it. Zero
	// means 1 s; otherwise 10 ms to 1 h.
	ShipInterval time.Duration
	// StoreTimeout bounds how long a Replicated append waits for the
	// store to make progress before it fails with an error naming the
	// endpoint (its events may yet be stored: see "Replication" in
	// docs/engine.md), and how long Close waits to ship what is pending.
	// Zero means 10 s; otherwise 100 ms to 10 min.
	StoreTimeout time.Duration
	// PublishTiles, with a Replica, also publishes each ledger in the
	// bucket as a C2SP tlog-tiles log (tiles, entry bundles, beside its
	// checkpoint: docs/replication.md, "Tiles"), so that anyone can
	// verify inclusion and consistency from the bucket with a generic
	// tlog client. It costs two PUTs per 256 events (a full tile and its
	// entry bundle, about $0.04 per million events at S3's $0.005 per
	// 1,000 PUTs: 300 times what Shipped mode's chunks cost at a high
	// rate) and the bundles' bytes (each event's export line once more),
	// so it is off unless asked for. A Writer without it neither writes
	// nor collects tiles: those in the bucket stay as they are.
	PublishTiles bool
	// GCGrace is how long a chunk the bucket no longer needs is kept
	// before it is deleted (docs/replication.md, "Garbage collection"),
	// and a partial tile after the checkpoint that has its full tile
	// (docs/replication.md, "Tiles").
	// Zero means 10 min; otherwise 1 s to 24 h, and more than
	// StoreTimeout.
	GCGrace time.Duration
	// Node, with a Replica, makes the DB one of several nodes that share
	// the bucket (docs/replication.md, "Nodes and ownership"): it keeps
	// a lease under nodes/ (renewed every NodeLease/3), records itself as
	// the owner of the ledgers it takes (ledgers/ID/owner) and claims the
	// names of those it creates (names/), so that no two nodes make two
	// ledgers of one name; Open leaves a ledger that another node writes
	// (its newest manifest's writer, by the leases) to it (ErrNotOwner;
	// DB.TakeLedger takes it). A node
	// that cannot renew its lease within NodeLease refuses appends with
	// ErrNotOwner until it can. Empty (the zero Node): none of this, and
	// no such object is written.
	Node Node
	// NodeLease is the node's lease: other nodes take its ledgers once
	// they have seen its lease object unchanged for longer, by their own
	// clocks. Zero means 10 s; otherwise 500 ms to 10 min. Only with Node.
	NodeLease time.Duration
	// TakeOverDeadNodes, with Node, has the DB watch the other nodes'
	// leases (every NodeLease/3) and take over (DB.TakeLedger) the ledgers
	// of a node whose lease it has seen unchanged for longer than that
	// node's lease (or that owns a ledger and has had no lease object for
	// that long), each such ledger going to one live node by rendezvous
	// hashing of its ID over the live nodes' names.
	TakeOverDeadNodes bool

	// replicaStore, if set, is the replica's store instead of the one
	// Replica names (tests: a store.Memory, or a fault-injecting
	// wrapper), with replicaEndpoint naming it in errors.
	replicaStore    store.Store
	replicaEndpoint string

	// fs, if set, holds the segments and the index instead of the OS file
	// system, and metaPath is then where the metadata file lives (bbolt
	// needs a real file). For crash tests: see crash_test.go.
	fs       vfs.FS
	metaPath string

	// laidBound, for OpenReadOnly, is a follower's bound on what the DB
	// shows of each ledger: the last record the follower laid and
	// verified (ok false: none yet, no bound), or an error for a ledger
	// the follower does not follow, which the DB does not open. See
	// segment.Options.Limit.
	laidBound func(eventid.LedgerID) (last segment.Head, ok bool, err error)
	// roHooks, for OpenReadOnly, are calls the tests make the DB do
	// where they force an interleaving; nil outside them.
	roHooks *readOnlyHooks
}

const (
	defaultMaxEventSize = 1 << 20
	// defaultWitnessInterval: one small bbolt commit a second while
	// appends go on.
	defaultWitnessInterval = time.Second
	// maxNameLen bounds ledger names, entities, keys, event names and
	// idempotency keys, in bytes.
	maxNameLen = names.MaxLen
)

// The ranges of the options (docs/engine.md, "Options and their
// defaults"). Zero is the default of each and always accepted.
const (
	// An interval below 1 ms is no cheaper than Sync (an fsync takes
	// 0.1 to a few ms) and costs CPU while idle: the syncer's ticker
	// fires every interval once an Interval append started it (measured
	// idle: 1 ns burns 44% of a core, 1 ms 4%, 50 ms under 1%). Above an
	// hour the window a crash loses is no longer an interval.
	minSyncInterval, maxSyncInterval = time.Millisecond, time.Hour
	// The witness writer's interval: the same floor (its timer), and the
	// window of acknowledged events that a lost tail goes unnoticed in
	// must stay bounded.
	minWitnessInterval, maxWitnessInterval = time.Millisecond, time.Hour
	// The index's budget: Pebble takes its memtables out of it, at
	// least 4 MiB each and two at most, so less than 8 MiB is not a
	// budget it keeps; 1 TiB is the command's bound too.
	minCacheSize, maxCacheSize = MinCacheSize, 1 << 40
	// An event's canonical meta and data: the genesis event (actor, name,
	// description) needs a few hundred bytes; above 16 MiB (the segment
	// log's own default bound of a record) an event is a file, better
	// kept outside and referred to, and every reader buffers a whole one.
	minMaxEventSize, maxMaxEventSize = 1 << 10, 16 << 20
	// The checkpointer's interval: each checkpoint costs an fsync of the
	// tree file, a signature and a small file written and synced per
	// ledger that grew; above a day a checkpoint is no longer a cadence.
	minCheckpointInterval, maxCheckpointInterval = 100 * time.Millisecond, 24 * time.Hour
)

// durationOption is a duration option and its range, for checkDurations.
type durationOption struct {
	name     string
	v        time.Duration
	lo, hi   time.Duration
	fallback string // what 0 means
}

// checkDurations returns an error matching ErrInvalid naming the first
// option set (not 0) outside its range.
func checkDurations(ds ...durationOption) error {
	for _, d := range ds {
		if d.v != 0 && (d.v < d.lo || d.v > d.hi) {
			return fmt.Errorf("%w: options: %s %v is out of range: 0 (the default, %s) or %v to %v", ErrInvalid, d.name, d.v, d.fallback, d.lo, d.hi)
		}
	}
	return nil
}

// check says what is wrong with options after withDefaults, as an error
// matching ErrInvalid that names the option and its range: an option the
// segment log refuses would otherwise make every ledger look unavailable,
// and one out of range would run (a core burnt by a 1 ns SyncInterval).
func (o *Options) check() error {
	if err := (segment.Options{SegmentSize: o.SegmentSize, Durability: o.Durability}).Check(); err != nil {
		return fmt.Errorf("%w: options: %w", ErrInvalid, err)
	}
	if err := checkDurations(
		durationOption{"SyncInterval", o.SyncInterval, minSyncInterval, maxSyncInterval, (50 * time.Millisecond).String()},
		durationOption{"WitnessInterval", o.WitnessInterval, minWitnessInterval, maxWitnessInterval, defaultWitnessInterval.String()},
		durationOption{"FollowInterval", o.FollowInterval, minFollowInterval, maxFollowInterval, defaultFollowInterval.String()},
	); err != nil {
		return err
	}
	if err := o.checkReplication(); err != nil {
		return err
	}
	if err := o.checkTlogWitnesses(); err != nil {
		return err
	}
	if c := o.CheckpointInterval; c > 0 && (c < minCheckpointInterval || c > maxCheckpointInterval) {
		return fmt.Errorf("%w: options: CheckpointInterval %v is out of range: 0 (the default, %v), negative (off: checkpoints on Close and on request only) or %v to %v",
			ErrInvalid, c, defaultCheckpointInterval, minCheckpointInterval, maxCheckpointInterval)
	}
	for _, n := range [...]struct {
		name     string
		v        int64
		lo, hi   int64
		fallback string
	}{
		{"CacheSize", o.CacheSize, minCacheSize, maxCacheSize, "128 MiB"},
		{"MaxEventSize", int64(o.MaxEventSize), minMaxEventSize, maxMaxEventSize, "1 MiB"},
	} {
		if n.v != 0 && (n.v < n.lo || n.v > n.hi) {
			return fmt.Errorf("%w: options: %s %d is out of range: 0 (the default, %s) or %s to %s", ErrInvalid, n.name, n.v, n.fallback, sizeText(n.lo), sizeText(n.hi))
		}
	}
	return nil
}

// sizeText writes a power-of-two size in bytes with its unit.
func sizeText(n int64) string {
	for _, u := range [...]struct {
		unit string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s (%d)", n/u.n, u.unit, n)
		}
	}
	return fmt.Sprintf("%d bytes", n)
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
	if r.CheckpointInterval == 0 {
		r.CheckpointInterval = defaultCheckpointInterval
	}
	if r.MaxEventSize == 0 {
		r.MaxEventSize = defaultMaxEventSize
	}
	if r.FollowInterval == 0 {
		r.FollowInterval = defaultFollowInterval
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.replicaDefaults()
	return r
}
