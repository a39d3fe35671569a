package segment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/invariants"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Durability says when an append returns relative to stable storage.
type Durability int8

const (
	// DefaultDurability means the Log's Options.Durability (for a Batch) or
	// Sync (for Options).
	DefaultDurability Durability = iota
	// Sync: Append returns after the records are on stable storage (fsync).
	Sync
	// Interval: Append returns after the write; a background fsync runs at
	// most every Options.SyncInterval. A crash loses at most the appends of
	// the last interval (plus the one in progress).
	Interval
	// None: Append returns after the write to the OS; the OS decides when
	// the data reaches the disk. A crash of the process loses nothing; a
	// crash of the machine may lose any appends since the last sync.
	None
)

func (d Durability) String() string {
	switch d {
	case DefaultDurability:
		return "default"
	case Sync:
		return "sync"
	case Interval:
		return "interval"
	case None:
		return "none"
	}
	return fmt.Sprintf("Durability(%d)", int8(d))
}

// Options configures a Log. The zero value is safe: Sync durability, 64 MiB
// segments, the real file system.
type Options struct {
	// FS is the file system; nil means vfs.Default.
	FS vfs.FS
	// Ledger is the ID of the ledger the segments hold.
	Ledger eventid.LedgerID
	// SegmentSize is the size after which the Log starts a new segment
	// (a batch is never split, so a segment may exceed it by one batch).
	// 0 means 64 MiB; at most 1 GiB.
	SegmentSize int64
	// Durability is the default for appends; DefaultDurability means Sync.
	Durability Durability
	// SyncInterval is the longest time between syncs in Interval mode.
	// 0 means 50 ms.
	SyncInterval time.Duration
	// MaxRecordSize bounds the meta and data of one entry together, in
	// bytes. 0 means 16 MiB.
	MaxRecordSize int
	// Now is the time source of the ledger's clock; nil means time.Now.
	Now func() time.Time
	// Watch makes the Log record the identity of its directory and
	// segment files as it creates or opens them, and the first bytes of
	// the last record it wrote, for CheckFiles. For files of the
	// operating system's file system only (FS vfs.Default, or an FS
	// wrapping it). A read-only Log records the identity of its
	// directory and of the segments it opens, and Follow fails
	// (ErrFileChanged) once the directory, or the segment it follows,
	// was removed or replaced.
	Watch bool
	// MaxOpenSegments bounds how many sealed segments the Log keeps open
	// for reads (a descriptor and, where segments are mapped, a memory
	// map each), besides the active one: the least recently used is
	// closed when another is opened. A handle in use by a read or an
	// Iterator is closed once it is let go. 0 means
	// DefaultMaxOpenSegments (64).
	MaxOpenSegments int
	// Witness, for Open, is a head that an earlier Log of this ledger
	// reported as durable (Log.Durable), kept outside the segments: the
	// engine keeps it in its metadata. Open refuses, as corruption and
	// before changing any file, segments that no longer hold it: a
	// missing segment, a cut or zeroed tail, a record replaced. The zero
	// Head means no witness. A witness whose Loc is zero (an older
	// metadata record that knew only the sequence number and ID) is
	// checked by those alone. See docs/recovery.md, "The durable witness".
	Witness Head
	// VerifySealed, for Open, verifies every record of every segment
	// whatever the progress marker says, except the sealed segments of
	// Stamps whose files are as they were stamped: Open then says in
	// Recovery.Stamps what it verified, for the caller to keep and give
	// to the next Open. Without it, Open verifies from the progress marker.
	VerifySealed bool
	// Stamps are the stamps an earlier Open returned (Recovery.Stamps), for
	// VerifySealed.
	Stamps []Stamp
	// Hooks are the owner's part of every commit (see Hooks): given
	// once, for the Log's life. A read-only Log calls none.
	Hooks Hooks
	// Limit, for OpenReadOnly, bounds what the Log shows by what its
	// caller vouches for (a follower that lays the segments and verified
	// them up to a record): called at each look at the segments (the open,
	// Follow), it returns the last record the Log may show, or ok false
	// for no bound. The Log shows no record after it, whatever the files
	// hold, and the record it reaches there must be that one (its ID,
	// sequence number and place) or Follow fails with ErrDiverged. A
	// bound never goes back.
	Limit func() (last Head, ok bool)

	// test holds the calls this package's tests make the Log do; zero
	// outside them.
	test testHooks
}

// testHooks are calls that this package's tests make a Log do where
// they interfere with it. They are the Log's own (Options.test, set
// before Create or Open, or l.opts.test, set on an open Log before the
// calls they race with), so that tests share no package state. Each is
// nil unless a test sets it.
type testHooks struct {
	// zeroFill is called before each write of zeros (writeZeros) with
	// its offset and length.
	zeroFill func(off, n int64)
	// seal is called before sealEnd cuts the zeros.
	seal func()
	// afterSize is called by a read-only Log between the Stat that
	// gives a segment's size and the reads of its records.
	afterSize func(seg uint64)
	// judge is called by judgeTail before it judges.
	judge func()
	// stamp is called as stampWritten begins (false) and ends (true): its
	// file system calls, whose failure only leaves a stamp out, are
	// between the two.
	stamp func(done bool)
}

const (
	defaultSegmentSize   = 64 << 20
	maxSegmentSize       = 1 << 30
	defaultSyncInterval  = 50 * time.Millisecond
	defaultMaxRecordSize = 16 << 20
	// maxBatchBytes bounds one batch, so that offsets fit the format.
	maxBatchBytes = 1 << 30
)

// Check reports what is wrong with o, as Create and Open would: a
// SegmentSize out of range or an unknown Durability.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o *Options) withDefaults() (Options, error) {
	r := *o
	if r.FS == nil {
		r.FS = vfs.Default
	}
	if r.SegmentSize == 0 {
		r.SegmentSize = defaultSegmentSize
	}
	if r.SegmentSize < headerSize+minFrame || r.SegmentSize > maxSegmentSize {
		return r, fmt.Errorf("segment: SegmentSize %d out of range [%d, %d]", r.SegmentSize, headerSize+minFrame, maxSegmentSize)
	}
	if r.Durability == DefaultDurability {
		r.Durability = Sync
	}
	if r.Durability < Sync || r.Durability > None {
		return r, fmt.Errorf("segment: unknown durability %v", r.Durability)
	}
	if r.SyncInterval <= 0 {
		r.SyncInterval = defaultSyncInterval
	}
	if r.MaxRecordSize <= 0 {
		r.MaxRecordSize = defaultMaxRecordSize
	}
	if r.MaxOpenSegments <= 0 {
		r.MaxOpenSegments = DefaultMaxOpenSegments
	}
	return r, nil
}

// Entry is an event to append. Meta and Data must be canonical JSON (meta
// an object), as package canon writes them; the Log stores and hashes them
// as given.
type Entry struct {
	Entity, Key, Event string
	Meta, Data         []byte
	// Micros, if not 0, is the event's timestamp (an import keeps the
	// timestamps it is given); it must be after the ledger head's. If 0,
	// the ledger's clock assigns one.
	Micros uint64
	// ID, if not zero, is the ID the entry must get: the append fails with
	// ErrIDMismatch otherwise, unless the batch is Verified (an import,
	// which verifies every ID before it appends).
	ID eventid.ID
}

// Head is the last record of a ledger.
type Head struct {
	ID  eventid.ID // the genesis ID of the ledger while Seq == 0
	Seq uint64     // 0 for an empty ledger
	Loc Location   // where the record is; zero while Seq == 0
}

// Location is where a record's frame is.
type Location struct {
	Segment uint64
	Offset  int64
	Size    int64 // frame bytes
}

// End returns the offset just after the record.
func (l Location) End() int64 { return l.Offset + l.Size }

// Batch is a group of entries appended all or nothing.
type Batch struct {
	Entries []Entry
	// Durability overrides the Log's default for this batch.
	Durability Durability
	// IdempotencyKey, if not nil, is stored with the batch's first record
	// (with the batch's length), outside the event checksum, so that an
	// index of idempotency keys can be rebuilt from the segments. At most
	// MaxNameLen bytes. The Log does not check it for duplicates: Check
	// can, and Hooks.Prepared can record it.
	IdempotencyKey []byte
	// Check, if not nil, is called in commit order with the head that the
	// batch would follow, before any of its IDs is computed; an error
	// rejects this batch alone and Append returns it. It must be quick:
	// other appends wait while it runs. It is the batch's own (the
	// conditions of one append), not the Log's: see Hooks for the
	// contract it runs under.
	Check func(head Head) error
	// Tag is the caller's data about the batch, which the Log neither
	// reads nor keeps: for its Hooks, which get the batch.
	Tag any
	// Verified says that every entry's ID is set and was computed by the
	// caller, from the entry's content and Micros, the Log's ledger and
	// the ID before it (the Log's head for the first entry), as
	// eventid.Content.ID computes it: the Log takes the IDs as they are
	// instead of computing each again (see entryID). For input whose
	// chain the caller verified line by line (an import); a wrong ID
	// would be stored as it is, and reported by the next verification.
	Verified bool

	// Set by a successful Append:
	IDs       []eventid.ID
	Locations []Location
	FirstSeq  uint64
}

// Log is the segment log of one ledger: appends with group commit,
// reads, and verification. It is safe for concurrent use.
type Log struct {
	dir    string
	fs     vfs.FS
	opts   Options
	ledger eventid.LedgerID
	clock  *eventid.Clock

	// Lock order: ioMu → fsyncMu → mu; ioMu → readMu; ioMu → the
	// fileWatch's mu (files); roMu → mu (a read-only Log). mu is the
	// last: it is held alone, or under the others, and no lock is taken
	// under it. The Hooks run with ioMu held (see Hooks), so the owner's
	// locks they take come after ioMu: the engine's order is ioMu → its
	// ledger's idxMu → pendMu.

	// mu guards the queue of appends and the Log's state (closed,
	// failed); the leader lets go of it before it takes ioMu.
	mu      sync.Mutex
	idle    sync.Cond // signalled when leading turns false (Close waits on it)
	queue   []*pending
	leading bool  // an Append is committing a group
	closed  bool  // guarded by mu
	failed  error // guarded by mu; once set, appends fail with it

	// ioMu is held by whoever writes or syncs the active segment: the
	// committing leader, Sync, Close; the interval syncer holds it only
	// to look at the segment before its fsync and to record the fsync
	// after it (see syncLoop).
	ioMu sync.Mutex
	// fsyncMu is held by whoever fsyncs the active segment or replaces
	// or closes its file: the interval syncer holds it during its fsync,
	// which runs without ioMu, so that appends are written meanwhile;
	// every other fsync (fsyncWith), a rotation's and a truncation's
	// change of file, and Close take it under ioMu (ioMu before fsyncMu),
	// so that no fsync overlaps another and none runs on a closed file.
	fsyncMu sync.Mutex
	// The fields below are guarded by ioMu.
	file   vfs.File // the active (last) segment, open for writing
	segNum uint64   // its number
	// size is the bytes written to the active segment.
	// Invariant: synced <= size; size is the end of the last whole record.
	size   int64
	synced int64 // bytes of the active segment known to be durable
	head   Head  // the last record written
	buf    []byte
	dirty  bool // written but not synced (Interval mode)
	// last is the first bytes of the last record written to the active
	// segment (of its header while it has none), published with the
	// head for CheckFiles (Options.Watch).
	last mark
	// prealloc is how far the active segment's blocks are allocated
	// (preallocate), beyond its size.
	prealloc int64
	// zeroed is how far the active segment is written with zeros ahead
	// of its records (zeroFill); 0 or at most size if not beyond them.
	// The file's size is then zeroed, not size: the zeros are unwritten
	// space, which recovery and readers take for the end of the records.
	zeroed int64

	// committed is what readers may see: the head and the end of the
	// active segment after the last complete commit.
	committed atomic.Pointer[position]
	// durable is the last record known to be on stable storage: set
	// after each fsync of the active segment (a Sync group, the interval
	// syncer, Sync, a rotation's seal, Close) and by Create and Open,
	// which sync what they leave. Invariant: durable.Seq <= head.Seq, and
	// durable only moves forward.
	durable atomic.Pointer[Head]

	// readMu guards readers; sealEnd takes it under ioMu.
	readMu  sync.RWMutex
	readers map[uint64]*segFile // open read handles by segment; nil once closed
	mapped  bool                // segments are read from memory maps (segFile)
	// useClock counts the handles opened: the use stamp of segFile.used.
	useClock atomic.Uint64

	// files is the identity of the Log's files (Options.Watch), for
	// CheckFiles; nil if not watched.
	files *fileWatch

	// written are the stamps of the segments this Log sealed, and at
	// Close of the one it leaves (WrittenStamps); guarded by ioMu.
	// openSeq is the head's sequence number when Open returned: a Log
	// that appended nothing stamps nothing.
	written []Stamp
	openSeq uint64

	// ro is set for a Log opened with OpenReadOnly (readonly.go); roMu
	// serializes its looks at the segments (Follow).
	ro   *roState
	roMu sync.Mutex

	stopSync chan struct{}
	syncDone chan struct{}

	// group is the leader's scratch list of a group's batches for
	// Hooks.Written and Hooks.Committed (guarded by ioMu).
	group []*Batch

	stats struct {
		writes, syncs, batches, records, bytes atomic.Int64
	}
}

// Stats counts what a Log did since it was opened.
type Stats struct {
	Writes  int64 // write system calls for groups of batches
	Syncs   int64 // fsyncs of segments
	Batches int64 // batches committed
	Records int64 // records committed
	Bytes   int64 // bytes of committed records
}

// Stats returns the Log's counters. Records/Syncs is how many records
// shared an fsync (group commit).
func (l *Log) Stats() Stats {
	return Stats{
		Writes:  l.stats.writes.Load(),
		Syncs:   l.stats.syncs.Load(),
		Batches: l.stats.batches.Load(),
		Records: l.stats.records.Load(),
		Bytes:   l.stats.bytes.Load(),
	}
}

// position is a committed state of the log.
type position struct {
	head   Head
	segNum uint64 // the active segment
	end    int64  // its committed size
	mark   mark   // the first bytes of head's record (Log.last)
}

// pending is a batch waiting in Append.
type pending struct {
	b    *Batch
	err  error
	wake chan struct{} // signalled once: committed (err set), or lead is set
	lead bool          // this Append is to commit the next group
}

// Create creates the first segment of a new ledger in dir (made if
// missing) and returns the Log, ready for the ledger's genesis entry.
func Create(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := o.FS.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", dir, err)
	}
	// The directory's own entry must be durable too, or a crash can lose
	// the whole ledger however well its files were synced.
	if err := SyncDir(o.FS, o.FS.PathDir(dir)); err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", dir, err)
	}
	names, err := o.FS.List(dir)
	if err != nil {
		return nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	for _, name := range names {
		if _, ok := parseSegmentName(name); ok {
			return nil, fmt.Errorf("%w in %s", ErrExists, dir)
		}
	}
	l := newLog(dir, o)
	if o.Watch {
		l.files = newFileWatch(dir)
	}
	genesis := Head{ID: eventid.Genesis(o.Ledger)}
	if err := l.createSegment(1, genesis); err != nil {
		return nil, err
	}
	l.head = genesis
	l.publish()
	l.markDurable(genesis)
	l.start()
	return l, nil
}

func newLog(dir string, o Options) *Log {
	l := &Log{dir: dir, fs: o.FS, opts: o, ledger: o.Ledger, readers: map[uint64]*segFile{}, mapped: mappable(o.FS)}
	l.idle.L = &l.mu
	return l
}

// start begins the background work of an open Log.
func (l *Log) start() {
	l.clock = eventid.NewClock(l.head.ID.Micros(), l.opts.Now)
	if l.opts.Durability == Interval {
		l.startSyncLoop()
	}
}

// startSyncLoop starts the background fsync of Interval mode. It is
// called before the Log is shared, or by the committing leader (Close
// reads stopSync only once no leader is left).
func (l *Log) startSyncLoop() {
	l.stopSync = make(chan struct{})
	l.syncDone = make(chan struct{})
	go l.syncLoop()
}

// Dir returns the directory of the segments.
func (l *Log) Dir() string { return l.dir }

// Ledger returns the ledger ID.
func (l *Log) Ledger() eventid.LedgerID { return l.ledger }

// Head returns the last committed record.
func (l *Log) Head() Head { return l.committed.Load().head }

// Durable returns the last record known to be on stable storage: every
// record up to it was fsynced (by a Sync append's group, the Interval
// syncer, Sync, the seal of a segment before rotation, Close, or the sync
// that Create and Open end with). It lags Head by the appends written in
// Interval or None mode since the last fsync. It is an atomic load: the
// engine reads it to keep a witness of the head outside the segments
// (see Options.Witness) without an fsync of its own.
func (l *Log) Durable() Head {
	if h := l.durable.Load(); h != nil {
		return *h
	}
	return Head{}
}

// markDurable records h as the last record known durable. Called with
// ioMu held (or before the Log is shared), so calls are ordered.
func (l *Log) markDurable(h Head) {
	if d := l.durable.Load(); d != nil && d.Seq >= h.Seq {
		return
	}
	l.durable.Store(&h)
}

// createSegment creates segment n, following prev, writes and syncs its
// header and the directory, and makes it the active segment. On error
// the partly created file is removed and the active segment is unchanged.
func (l *Log) createSegment(n uint64, prev Head) error {
	path := l.fs.PathJoin(l.dir, segmentName(n))
	if _, err := l.fs.Stat(path); err == nil {
		return &CorruptionError{File: path, Problem: "segment to be created already exists"}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("segment: stat %s: %w", path, err)
	}
	f, err := l.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	h := header{ledger: l.ledger, number: n, prevID: prev.ID, prevSeq: prev.Seq, created: uint64(time.Now().UnixMicro())}
	hb := h.encode()
	err = writeFull(f, hb, 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = SyncDir(l.fs, l.dir)
	}
	if err != nil {
		f.Close()
		if rmErr := l.fs.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			// A header-less last segment is removed by recovery; but
			// we cannot go on writing after it here.
			l.setFailed(fmt.Errorf("%w: creating %s: %w; removing it: %w", ErrFailed, path, err, rmErr))
		}
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	if l.files != nil {
		// By path: the identity os.SameFile compares (a vfs.File's
		// Stat is not an os.FileInfo of the os package).
		fi, _ := os.Lstat(path)
		l.files.setActive(n, path, fi, l.size)
		l.last.set(n, 0, hb)
	}
	l.fsyncMu.Lock()
	if l.file != nil {
		l.file.Close()
	}
	l.file, l.segNum, l.size, l.synced, l.prealloc, l.zeroed = f, n, headerSize, headerSize, 0, 0
	l.fsyncMu.Unlock()
	return nil
}

func writeFull(f vfs.File, b []byte, off int64) error {
	n, err := f.WriteAt(b, off)
	if err == nil && n < len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	return err
}

// SyncDir makes the entries of directory dir durable (fsync of the
// directory): a file created, renamed or removed in it survives a crash
// only once its directory is synced.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return d.Close()
}

func (l *Log) setFailed(err error) {
	l.mu.Lock()
	if l.failed == nil {
		l.failed = err
	}
	l.mu.Unlock()
}

func (l *Log) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// publish makes the state after the last commit visible to readers.
// Called with ioMu held (or before the Log is shared).
func (l *Log) publish() {
	l.committed.Store(&position{head: l.head, segNum: l.segNum, end: l.size, mark: l.last})
}

// Append appends the batch's entries, all or nothing, and returns when
// they are as durable as the batch's durability asks. Concurrent appends
// are committed together: one write and one sync serve all the batches
// waiting at that moment. On success the batch's IDs, Locations and
// FirstSeq are set. An error fails this batch alone, except for a failed
// write or sync, which fails every batch of its group; after a failed sync
// the Log refuses all further appends (ErrFailed).
func (l *Log) Append(b *Batch) error { return l.AppendContext(context.Background(), b) }

// AppendContext is Append, whose waits ctx ends. An append waits while
// another commits a group (and the group's sync, when it is in that
// group): if ctx ends while the batch waits its turn, it leaves the queue
// and AppendContext returns an error matching ctx.Err() that says nothing
// was appended; if ctx ends once the batch is in a group being committed
// by another append, AppendContext returns at once with an error matching
// ctx.Err() that says the batch may have been appended: its group's
// commit goes on, and calls the batch's Prepared, Aborted and the Log's
// hooks as for any other. An append that commits its group itself (the
// one that found no commit under way) is not interrupted: it returns its
// result. The batch must not be used again before the Log's hooks have
// seen it (or the Log is closed).
func (l *Log) AppendContext(ctx context.Context, b *Batch) error {
	if l.ro != nil {
		return ErrReadOnly
	}
	if err := l.validate(b); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return notAppended(err)
	}
	p := &pending{b: b, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.failed != nil {
		l.mu.Unlock()
		return l.failed
	}
	if l.leading {
		// Another Append is committing: wait to be committed by a later
		// group, or to be handed the lead.
		l.queue = append(l.queue, p)
		l.mu.Unlock()
		select {
		case <-p.wake:
		case <-ctx.Done():
			return l.abandon(p, ctx.Err())
		}
		if !p.lead {
			return p.err
		}
		l.mu.Lock()
	}
	l.leading = true
	l.lead(p)
	return p.err
}

// abandon ends the wait of a queued append whose context ended (with
// err): it takes the batch out of the queue if no group took it yet, and
// hands the lead on if the batch was handed it and did not take it (no
// group of its own then either). Otherwise the batch is in a group being
// committed: its outcome is p.err if the group is done, else unknown.
func (l *Log) abandon(p *pending, err error) error {
	l.mu.Lock()
	if i := slices.Index(l.queue, p); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		l.mu.Unlock()
		return notAppended(err)
	}
	if p.lead {
		// Its wake is sent, or will be, into its channel's free slot.
		next := l.passLead()
		l.mu.Unlock()
		if next != nil {
			next.wake <- struct{}{}
		}
		return notAppended(err)
	}
	l.mu.Unlock()
	select {
	case <-p.wake:
		return p.err
	default:
		return fmt.Errorf("segment: append: %w while its batch was being committed: it may have been appended", err)
	}
}

// notAppended is the error of an append whose context ended (err) before
// its batch was committed.
func notAppended(err error) error {
	return fmt.Errorf("segment: append: %w before its batch was committed: nothing was appended", err)
}

// lead commits p and everything queued behind it as one group, then hands
// the lead to the first batch queued meanwhile, if any. Each waiter is
// woken once, by its own channel: no herd of 64 goroutines on every
// commit. Called with mu held and leading set; returns with mu released.
func (l *Log) lead(p *pending) {
	group := append([]*pending{p}, l.queue...)
	l.queue = l.queue[:0]
	failed := l.failed
	if l.closed {
		failed = ErrClosed
	}
	l.mu.Unlock()

	if failed != nil {
		for _, q := range group {
			q.err = failed
		}
	} else {
		l.commit(group)
	}

	l.mu.Lock()
	next := l.passLead()
	l.mu.Unlock()
	for _, q := range group[1:] {
		q.wake <- struct{}{}
	}
	if next != nil {
		next.wake <- struct{}{}
	}
}

// passLead hands the lead to the first batch queued, and returns it for
// the caller to wake once mu is released; with none queued, the Log is
// idle. Called with mu held and leading set.
func (l *Log) passLead() *pending {
	if len(l.queue) == 0 {
		l.leading = false
		l.idle.Broadcast()
		return nil
	}
	next := l.queue[0]
	l.queue = l.queue[1:]
	next.lead = true
	return next
}

// idemOf returns the idempotency key that entry i of b carries: the
// batch's, on its first entry.
func idemOf(b *Batch, i int) []byte {
	if i == 0 {
		return b.IdempotencyKey
	}
	return nil
}

// validate checks what can be checked of a batch before it is queued.
func (l *Log) validate(b *Batch) error {
	if len(b.Entries) == 0 {
		return fmt.Errorf("segment: empty batch")
	}
	if len(b.IdempotencyKey) > MaxNameLen {
		return fmt.Errorf("%w: idempotency key is %d bytes, the limit is %d", ErrTooLarge, len(b.IdempotencyKey), MaxNameLen)
	}
	if b.Durability < DefaultDurability || b.Durability > None {
		return fmt.Errorf("segment: unknown durability %v", b.Durability)
	}
	total := 0
	for i := range b.Entries {
		e := &b.Entries[i]
		for _, name := range [...]struct {
			what string
			n    int
		}{{"entity", len(e.Entity)}, {"key", len(e.Key)}, {"event name", len(e.Event)}} {
			if name.n > MaxNameLen {
				return fmt.Errorf("%w: entry %d: %s is %d bytes, the limit is %d", ErrTooLarge, i, name.what, name.n, MaxNameLen)
			}
		}
		if n := len(e.Meta) + len(e.Data); n > l.opts.MaxRecordSize {
			return fmt.Errorf("%w: entry %d: meta and data are %d bytes, the limit is %d", ErrTooLarge, i, n, l.opts.MaxRecordSize)
		}
		total += frameLen(e.Entity, e.Key, e.Event, e.Meta, e.Data, idemOf(b, i))
	}
	if total > maxBatchBytes {
		return fmt.Errorf("%w: batch of %d bytes, the limit is %d", ErrTooLarge, total, maxBatchBytes)
	}
	return nil
}

// commit writes a group of batches with one write and at most one sync,
// calling the Log's Hooks as their contract says (see Hooks). It is
// called by the leader only, so it runs alone.
func (l *Log) commit(group []*pending) {
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	// The interval syncer's fsync may have failed since lead looked: no
	// write, and above all no fsync, may follow a failed one.
	if err := l.failure(); err != nil {
		for _, p := range group {
			p.err = err
		}
		return
	}

	size := 0
	for _, p := range group {
		for i := range p.b.Entries {
			e := &p.b.Entries[i]
			size += frameLen(e.Entity, e.Key, e.Event, e.Meta, e.Data, idemOf(p.b, i))
		}
	}
	if l.size > headerSize && l.size+int64(size) > l.opts.SegmentSize {
		if err := l.rotate(); err != nil {
			for _, p := range group {
				p.err = err
			}
			return
		}
	}

	// Encode every batch whose check passes, chained from the head, in
	// a buffer made large enough for all of them at once (grown frame by
	// frame, a batch of MBs was copied over and over).
	l.buf = slices.Grow(l.buf[:0], size)
	head := l.head
	var accepted []*pending
	var sync, interval bool
	for _, p := range group {
		start, before := len(l.buf), head
		var err error
		head, err = l.encode(p.b, head)
		if err != nil {
			p.err = err
			l.buf, head = l.buf[:start], before
			continue
		}
		accepted = append(accepted, p)
		if h := l.opts.Hooks.Prepared; h != nil {
			h(p.b)
		}
		switch l.durability(p.b) {
		case Sync:
			sync = true
		case Interval:
			interval = true
		}
	}
	if len(accepted) == 0 {
		return
	}

	base := l.size
	// Small Sync groups land in zeros written ahead (zeroFill); large
	// ones, whose fsync is shared by many records, would pay for the
	// zeros' bytes more than they save, and take preallocated blocks.
	zero := sync && len(l.buf) <= zeroGroupMax
	if !zero {
		l.preallocate(base + int64(len(l.buf)))
	}
	if err := writeFull(l.file, l.buf, base); err != nil {
		err = l.undo(base, fmt.Errorf("segment: write %d bytes to %s at %d: %w", len(l.buf), segmentName(l.segNum), base, err))
		l.abort(accepted, err)
		return
	}
	l.size += int64(len(l.buf))
	prevLast := l.last
	if l.files != nil {
		l.last.set(l.segNum, base+head.Loc.Offset, l.buf[head.Loc.Offset:])
	}
	if zero {
		// Before the group's fsync, which makes the zeros durable with
		// the records: the next groups land in written blocks.
		l.zeroFill()
	}
	l.stats.writes.Add(1)
	head.Loc.Segment = l.segNum
	head.Loc.Offset += base
	for _, p := range accepted {
		for i := range p.b.Locations {
			p.b.Locations[i].Segment = l.segNum
			p.b.Locations[i].Offset += base
		}
	}
	// The hook, with the batches complete: during the fsync if there is
	// one, else now.
	var hook func()
	if written := l.opts.Hooks.Written; written != nil {
		hook = func() { l.callHook(written, accepted) }
	}
	if sync {
		// After a failed fsync the kernel may have dropped the dirty
		// pages and cleared the error, so a later fsync could succeed
		// without the data: fsync fails the Log for good.
		if err := l.fsyncWith(hook); err != nil {
			l.last = prevLast
			l.undo(base, err)
			l.abort(accepted, err)
			return
		}
	} else {
		if hook != nil {
			hook()
		}
		l.dirty = true
		if interval && l.stopSync == nil {
			// An Interval batch in a Log whose default is another mode:
			// its sync is due within SyncInterval all the same.
			l.startSyncLoop()
		}
	}
	l.head = head
	if sync {
		l.markDurable(head)
	}
	l.stats.batches.Add(int64(len(accepted)))
	l.stats.bytes.Add(int64(len(l.buf)))
	for _, p := range accepted {
		l.stats.records.Add(int64(len(p.b.IDs)))
	}
	l.publish()
	if invariants.Enabled {
		l.checkInvariants()
	}
	if records := l.opts.Hooks.Records; records != nil {
		first := accepted[0].b
		records(Span{
			Segment: l.segNum, Offset: base, Bytes: l.buf,
			FirstSeq: first.FirstSeq, FirstID: first.IDs[0],
			Last: head, Durable: sync,
		})
	}
	if committed := l.opts.Hooks.Committed; committed != nil {
		l.callHook(committed, accepted)
	}
}

// checkInvariants panics if the Log's state after a commit breaks what
// its fields' comments state (size, synced, head, durable, committed).
// Called by the leader at the end of a commit, with ioMu held, under the
// invariants build tag only (see package invariants).
func (l *Log) checkInvariants() {
	var problem string
	pos := l.committed.Load()
	switch d := l.Durable(); {
	case l.synced > l.size:
		problem = fmt.Sprintf("synced %d past size %d", l.synced, l.size)
	case d.Seq > l.head.Seq:
		problem = fmt.Sprintf("durable #%d past head #%d", d.Seq, l.head.Seq)
	case l.head.Loc.Segment != l.segNum || l.head.Loc.End() != l.size:
		problem = fmt.Sprintf("head #%d at %+v, not the last record of segment %d (size %d)", l.head.Seq, l.head.Loc, l.segNum, l.size)
	case pos.head != l.head || pos.segNum != l.segNum || pos.end != l.size:
		problem = fmt.Sprintf("published #%d, segment %d at %d; written #%d, segment %d at %d", pos.head.Seq, pos.segNum, pos.end, l.head.Seq, l.segNum, l.size)
	default:
		return
	}
	panic(fmt.Sprintf("segment: invariant broken after a commit of ledger %s: %s", l.ledger, problem))
}

// preallocChunk is how far ahead of its end the active segment's blocks
// are allocated.
const preallocChunk = 1 << 20

// preallocate allocates the blocks of the active segment up to end and a
// chunk beyond, if not done yet, keeping its size (fallocate with
// FALLOC_FL_KEEP_SIZE, as Pebble does for its WAL): the size that readers
// and recovery follow is unchanged, and the fsync of an append has no
// blocks to allocate. It is an optimization: an error is ignored (the
// write that follows allocates the blocks itself). It serves groups
// without a Sync batch, whose writes are not followed by an fsync on the
// append path; a Sync group's records land in zeros written ahead
// (zeroFill) instead, which measured faster for an fsync. Called with
// ioMu.
func (l *Log) preallocate(end int64) {
	if end <= l.prealloc {
		return
	}
	from := max(l.prealloc, l.size, l.zeroed)
	to := min(end+preallocChunk, max(l.opts.SegmentSize, end))
	if to > from && l.file.Preallocate(from, to-from) == nil {
		l.prealloc = to
	}
}

// zeroChunk is how far ahead of its records the active segment is
// written with zeros (zeroFill), at most; zeroMin, at least.
// zeroGroupMax is the largest group written that fills zeros ahead.
const (
	zeroChunk    = 4 << 20
	zeroMin      = 64 << 10
	zeroGroupMax = 64 << 10
)

// zeroFill keeps the active segment written with zeros ahead of its
// records, for Sync appends: an fsync after a write that overwrites
// blocks already written and synced inside the file's size commits the
// data alone, one after a write that grows the file (or fills blocks
// that fallocate left unwritten) commits their allocation and the new
// size too, and takes about twice as long (docs/decisions/, "Segments
// written before use"). When fewer than half a chunk of zeros is left
// ahead of the records, it writes a chunk more at the zeroed end (never
// over a record: it runs under ioMu, as the writes of records do), up to
// the segment size limit; the group's fsync that follows makes them
// durable. The chunk grows with the segment, from zeroMin to zeroChunk,
// so that a small ledger's segment is not a MiB of zeros.
//
// It is an optimization: a failed write of zeros is ignored (the records
// then grow the file as they did before), and zeroed is advanced all the
// same, so that a full disk is not asked again at every append. Called
// with ioMu.
func (l *Log) zeroFill() {
	ahead := min(max(l.size-headerSize, zeroMin), zeroChunk)
	if l.zeroed-l.size >= ahead/2 {
		return
	}
	from := max(l.zeroed, l.size)
	to := min(l.size+ahead, l.opts.SegmentSize)
	if to <= from {
		return
	}
	writeZeros(l.file, from, to-from, l.opts.test.zeroFill)
	l.zeroed = to
}

// zeroPiece is the size of one write of zeros, from a buffer of zeroPool.
const zeroPiece = 256 << 10

// zeroPool holds buffers of zeroPiece zeros, shared by the Logs of a
// process (a buffer of zeroChunk in each Log of an engine with many
// ledgers would be MiBs each).
var zeroPool = sync.Pool{New: func() any { b := make([]byte, zeroPiece); return &b }}

// writeZeros writes n zeros at offset off of f, in pieces of zeroPiece,
// calling hook (if not nil: tests) before each piece.
func writeZeros(f vfs.File, off, n int64, hook func(off, n int64)) error {
	bp := zeroPool.Get().(*[]byte)
	defer zeroPool.Put(bp)
	b := *bp
	for n > 0 {
		k := min(n, int64(len(b)))
		if hook != nil {
			hook(off, k)
		}
		err := writeFull(f, b[:k], off)
		// A file system may scribble on the bytes it was given (Pebble's
		// memory file system's Write does, under its invariants): the
		// buffer must hold zeros for its next use.
		clear(b[:k])
		if err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// sealEnd cuts the zeros ahead of the records of the active segment, so
// that a sealed (or closed) segment ends at its last record, as readers
// of sealed segments and older versions of annal expect. Called with
// ioMu; a failure fails the Log (the file may have been replaced:
// truncate).
func (l *Log) sealEnd() error {
	if l.zeroed <= l.size {
		return nil
	}
	if h := l.opts.test.seal; h != nil {
		h()
	}
	l.fsyncMu.Lock()
	err := truncate(l.fs, l.fs.PathJoin(l.dir, segmentName(l.segNum)), &l.file, l.size)
	l.fsyncMu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: cutting the zeros after the records of %s: %w", ErrFailed, segmentName(l.segNum), err)
		l.setFailed(err)
		return err
	}
	l.zeroed, l.prealloc = 0, 0
	// A read handle opened before the cut may be of the file it replaced
	// (truncate on a file system without ftruncate): its size is not
	// the segment's; the records' end is.
	l.readMu.RLock()
	if s := l.readers[l.segNum]; s != nil {
		s.final.Store(l.size)
	}
	l.readMu.RUnlock()
	return nil
}

func (l *Log) durability(b *Batch) Durability {
	if b.Durability == DefaultDurability {
		return l.opts.Durability
	}
	return b.Durability
}

// encode appends the frames of b's entries to l.buf, following head, and
// returns the new head. Locations are set relative to the start of l.buf.
func (l *Log) encode(b *Batch, head Head) (Head, error) {
	if b.Check != nil {
		if err := b.Check(head); err != nil {
			return head, err
		}
	}
	b.IDs = slices.Grow(b.IDs[:0], len(b.Entries)) // one allocation each, not a growth per entry
	b.Locations = slices.Grow(b.Locations[:0], len(b.Entries))
	b.FirstSeq = head.Seq + 1
	for i := range b.Entries {
		e := &b.Entries[i]
		c := eventid.Content{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
		if head.Seq == 0 {
			if got := c.LedgerID(); got != l.ledger {
				return head, fmt.Errorf("%w: entry %d hashes to ledger %s, not %s", ErrNotGenesis, i, got, l.ledger)
			}
		}
		micros := e.Micros
		if micros == 0 {
			var ok bool
			if micros, ok = l.clock.NextAtMost(eventid.MaxMicros); !ok {
				return head, timeLimit(i, micros, head)
			}
		} else {
			if micros > eventid.MaxMicros {
				return head, timeLimit(i, micros, head)
			}
			if micros <= head.ID.Micros() {
				return head, fmt.Errorf("%w: entry %d at %d µs, head at %d µs", ErrTimeOrder, i, micros, head.ID.Micros())
			}
			l.clock.Observe(micros)
		}
		id, err := l.entryID(b, e, &c, micros, head.ID)
		if err != nil {
			return head, fmt.Errorf("%w: entry %d: %w", ErrIDMismatch, i, err)
		}
		off := len(l.buf)
		l.buf = appendFrame(l.buf, uint32(l.synced), id, head.ID, head.Seq+1, e.Entity, e.Key, e.Event, e.Meta, e.Data, idemOf(b, i), uint32(len(b.Entries)), i < len(b.Entries)-1)
		loc := Location{Offset: int64(off), Size: int64(len(l.buf) - off)}
		b.IDs = append(b.IDs, id)
		b.Locations = append(b.Locations, loc)
		head = Head{ID: id, Seq: head.Seq + 1, Loc: loc}
	}
	return head, nil
}

// entryID returns the ID of entry e of b, whose content is c, at micros
// after prev: e.ID as it is for a Verified batch (if it is of this ledger
// and time), else the ID computed, which e.ID must equal if set.
func (l *Log) entryID(b *Batch, e *Entry, c *eventid.Content, micros uint64, prev eventid.ID) (eventid.ID, error) {
	if b.Verified && !e.ID.IsZero() && e.ID.Micros() == micros && e.ID.Ledger() == l.ledger {
		return e.ID, nil
	}
	id := c.ID(l.ledger, micros, prev)
	if !e.ID.IsZero() && e.ID != id {
		return id, fmt.Errorf("expected %s, given %s", id, e.ID)
	}
	return id, nil
}

// timeLimit is the error for entry i, whose time would be micros, past
// eventid.MaxMicros.
func timeLimit(i int, micros uint64, head Head) error {
	if head.Seq > 0 && head.ID.Micros() >= eventid.MaxMicros {
		return fmt.Errorf("%w: the ledger's last event (#%d) is at %s, and each event's time is after the one before it (max(now, last+1)): this ledger can take no more events", eventid.ErrTimeLimit, head.Seq, eventid.MaxTime.Format(time.RFC3339Nano))
	}
	when := "after the year 292,277"
	if micros <= math.MaxInt64 {
		when = time.UnixMicro(int64(micros)).UTC().Format(time.RFC3339Nano)
	}
	return fmt.Errorf("%w: entry %d would be at %s (the clock or the time given is past the year 9999)", eventid.ErrTimeLimit, i, when)
}

// undo removes a failed write from the end of the active segment. If that
// is impossible the Log fails. It returns the error to report.
func (l *Log) undo(size int64, cause error) error {
	l.fsyncMu.Lock() // truncate may replace the file
	err := truncate(l.fs, l.fs.PathJoin(l.dir, segmentName(l.segNum)), &l.file, size)
	l.fsyncMu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: %w; then removing the partial write failed: %w", ErrFailed, cause, err)
		l.setFailed(err)
		return err
	}
	l.size = size
	l.synced = min(l.synced, size)
	l.prealloc, l.zeroed = 0, 0 // the cut freed the blocks past it
	return cause
}

// rotate seals the active segment and starts the next. Called with ioMu.
func (l *Log) rotate() error {
	if err := l.sealEnd(); err != nil {
		return err
	}
	if err := l.fsync(); err != nil {
		return err
	}
	sealed := l.segNum
	l.stampWritten()
	if err := l.createSegment(sealed+1, l.head); err != nil {
		return err
	}
	// Its read handle was mapped as the active segment, at the segment
	// size limit, with the pages reads touched: the next read maps it
	// at its final size.
	l.dropFile(sealed)
	return nil
}

// stampWritten notes the stamp of the active segment as this Log wrote
// it, once it is sealed (rotate) or closed: its file's identity now, the
// head its header continues from, its last record. Only a segment that
// ends with its last record and holds one (after sealEnd and the fsync)
// gets one, and only while the Log has not failed. Called with ioMu.
func (l *Log) stampWritten() {
	if l.failure() != nil || l.head.Loc.Segment != l.segNum || l.head.Loc.End() != l.size {
		return
	}
	if h := l.opts.test.stamp; h != nil {
		h(false)
		defer h(true)
	}
	fi, err := l.file.Stat()
	if err != nil {
		return
	}
	id := fileIdentity(fi)
	if !id.valid() || id.Size != l.size {
		return
	}
	s, err := readHeader(l.fs, l.dir, l.segNum, l.ledger)
	if s != nil && s.file != nil {
		s.file.Close()
	}
	if err != nil || s == nil || s.hdr.prevSeq >= l.head.Seq {
		return
	}
	l.written = append(l.written, Stamp{Segment: l.segNum, File: id, Prev: Head{ID: s.hdr.prevID, Seq: s.hdr.prevSeq}, Last: l.head})
}

// WrittenStamps returns the stamps of the segments this Log sealed, and,
// once it is closed without failure after it appended, of the segment it
// was writing (none if it appended nothing): each
// says that the file holds, as its identity shows, what this Log wrote
// and synced, which it verified as it encoded each record, not read back.
// They are for readers (OpenReadOnly's Options.Stamps), which a writer's
// session would otherwise leave to read those segments whole once; a
// writer's Open keeps to its own (Recovery.Stamps), read from the files.
// Nil for a read-only Log.
func (l *Log) WrittenStamps() []Stamp {
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	return slices.Clone(l.written)
}

// fsync syncs the active segment. Its failure fails the Log (ErrFailed).
// Called with ioMu.
func (l *Log) fsync() error { return l.fsyncWith(nil) }

// fsyncWith is fsync, running also (if not nil) during the fsync, on
// another goroutine; it returns once both are done. Called with ioMu.
func (l *Log) fsyncWith(also func()) error {
	// After the interval syncer's fsync, which may have failed (and
	// cleared the error it saw) while this one waited for fsyncMu.
	l.fsyncMu.Lock()
	defer l.fsyncMu.Unlock()
	if err := l.failure(); err != nil {
		if also != nil {
			also()
		}
		return err
	}
	l.stats.syncs.Add(1)
	var err error
	if also == nil {
		err = l.file.Sync()
	} else {
		// The fsync on this goroutine, the other work on another: the
		// fsync is usually the longer, and when it returns this goroutine
		// goes on at once, without waiting to be woken by the other.
		done := make(chan struct{})
		go func() { also(); close(done) }()
		err = l.file.Sync()
		<-done
	}
	if err != nil {
		err = fmt.Errorf("%w: fsync %s: %w", ErrFailed, segmentName(l.segNum), err)
		l.setFailed(err)
		return err
	}
	l.synced = l.size
	l.dirty = false
	// Everything written to the active segment is durable, and the
	// segments before it were sealed: l.head is. (In commit, l.head is
	// still the previous group's here; commit marks its own head after.)
	l.markDurable(l.head)
	return nil
}

// Sync makes every record written so far durable.
func (l *Log) Sync() error {
	if l.ro != nil {
		return ErrReadOnly
	}
	if err := l.failure(); err != nil {
		return err
	}
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	// Checked with ioMu held: a failed fsync of the interval syncer may
	// have ended while this one waited for ioMu.
	if err := l.failure(); err != nil {
		return err
	}
	if l.synced == l.size || l.file == nil {
		return nil
	}
	return l.fsync()
}

func (l *Log) syncLoop() {
	defer close(l.syncDone)
	t := time.NewTicker(l.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stopSync:
			return
		case <-t.C:
			l.backgroundSync()
		}
	}
}

// backgroundSync is the interval syncer's fsync of what was written to
// the active segment. It holds ioMu only to look at the segment before
// the fsync and to record the fsync after it, not during it: the
// committing leader writes the next groups meanwhile (in Interval and
// None mode an append does not wait for an fsync, and it does not wait
// for this one either). The fsync covers at least what was written
// before it began (size, head); what is written during it stays dirty
// for the next one. A failure fails the Log before fsyncMu is released,
// so that no other fsync (fsyncWith) can succeed in its place.
func (l *Log) backgroundSync() {
	if l.failure() != nil {
		return
	}
	l.ioMu.Lock()
	if !l.dirty || l.file == nil || l.synced == l.size {
		l.dirty = false
		l.ioMu.Unlock()
		return
	}
	f, seg, size, head := l.file, l.segNum, l.size, l.head
	l.fsyncMu.Lock()
	l.ioMu.Unlock()
	if l.failure() != nil { // a failed fsync ended while this one waited
		l.fsyncMu.Unlock()
		return
	}
	l.stats.syncs.Add(1)
	err := f.Sync()
	if err != nil {
		l.setFailed(fmt.Errorf("%w: fsync %s: %w", ErrFailed, segmentName(seg), err))
	}
	l.fsyncMu.Unlock()
	if err != nil {
		return
	}
	l.ioMu.Lock()
	if l.segNum == seg { // else the rotation's seal synced it, and marked head
		l.synced = max(l.synced, min(size, l.size))
		if l.size == size {
			l.dirty = false
		}
		l.markDurable(head)
	}
	l.ioMu.Unlock()
}

// Close syncs what was written (in every durability mode) and closes the
// files. Appends after Close fail with ErrClosed. After the Log failed
// (ErrFailed), Close returns that error: what was written since the last
// good fsync may not be durable.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	for l.leading {
		l.idle.Wait()
	}
	l.mu.Unlock()
	if l.stopSync != nil {
		close(l.stopSync)
		<-l.syncDone
	}
	l.ioMu.Lock()
	err := l.syncLocked() // the failure, if the Log failed
	if err == nil && l.file != nil {
		err = l.sealEnd()
	}
	if err == nil && l.file != nil && l.ro == nil && l.head.Seq != l.openSeq {
		l.stampWritten()
	}
	if l.file != nil {
		if cerr := l.file.Close(); err == nil {
			err = cerr
		}
		l.file = nil
	}
	l.ioMu.Unlock()
	l.readMu.Lock()
	for _, s := range l.readers {
		// Closed now, as every read is over (a holder's release then
		// closes nothing).
		s.evicted.Store(true)
		s.closeOnce.Do(func() { s.close() })
	}
	l.readers = nil
	l.readMu.Unlock()
	return err
}
