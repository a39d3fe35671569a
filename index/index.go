package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configures an Index. The zero value is safe: the real file
// system, 64 MiB of memory for Pebble, read-write.
type Options struct {
	// FS is the file system; nil means vfs.Default.
	FS vfs.FS
	// CacheSize is Pebble's memory budget in bytes: its block cache, out
	// of which it also takes its memtables (a quarter of the budget, at
	// least 4 MiB and at most 64 MiB, each; Pebble keeps up to two, the
	// one being filled and one flushed or kept for reuse). 0 means 128 MiB.
	CacheSize int64
	// ReadOnly opens an existing index for reading only (Pebble's ReadOnly):
	// nothing is created or written, and Commit, DeleteLedger and Flush
	// fail.
	ReadOnly bool
	// TailSize is the number of records a ledger's tail (see Tail) holds
	// before it is written to Pebble; 0 means DefaultTailSize.
	TailSize int
	// Logger receives Pebble's messages. nil means Pebble's informational
	// messages (WAL replay, compactions) are dropped and its errors go to
	// the standard library's log.
	Logger pebble.Logger
}

const (
	defaultCacheSize = 128 << 20
	// Pebble takes its memtables out of the block cache's budget; the
	// memtable is a quarter of it, within these bounds, so that the two
	// Pebble may hold leave half of the budget to the block cache. The
	// memtable's size sets how often the index's entries are flushed and
	// compacted: in format 2 (five entries an event), Pebble's default,
	// 4 MiB, ran appends at a third of the speed; 16 MiB (a quarter of 64
	// MiB, the budget before) ran batches of 1,000 at 157-170k events/s,
	// 32 MiB at 203-213k (engine BenchmarkAppend, same run). The price of a larger
	// memtable is in recovery: a crash loses the unflushed memtable, which
	// Open re-indexes from the segments (docs/benchmarks.md, open after a
	// crash).
	minMemTableSize = 4 << 20
	maxMemTableSize = 64 << 20
)

// Index is the Pebble index of every ledger of a data directory. It is safe
// for concurrent use, except that Close must not run concurrently with
// any other call or iteration.
type Index struct {
	*health
	db       *pebble.DB
	readOnly bool
	closed   atomic.Bool
	bgErr    chan error // Pebble's background errors (EventListener)
	tails    sync.Map   // eventid.LedgerID -> *Tail
	// flushHook, when set (tests), runs in each flush of a tail before
	// its Pebble commit (committed false) and after it, before the
	// snapshot without the flushed part is published (committed true).
	// An atomic pointer: a flush started by an idle timer may run while
	// a test sets it.
	flushHook atomic.Pointer[func(committed bool)]
	tailN     int // Options.TailSize
}

// health is what Pebble's event listener and logger tell the Index about
// its background work, and what the Index does about it.
type health struct {
	// failed is set when Pebble met an error it treats as fatal (see
	// fatalLogger), or when a write waits on flushes that fail (see
	// call); every later call returns it.
	failed atomic.Pointer[error]
	// flushErr is the error of the last flush, nil once one succeeds.
	flushErr atomic.Pointer[error]
	// stalled is set while Pebble holds writes back until its memtables
	// are flushed (or its level 0 compacted).
	stalled atomic.Bool
	// parked is set when a goroutine of Pebble's stopped in Fatalf, maybe
	// holding its locks: Pebble's Close would wait for it.
	parked atomic.Bool

	// mu guards stuck and abandoned.
	mu sync.Mutex
	// stuck counts the calls given up on (see call) that are still inside
	// Pebble.
	stuck int
	// abandoned is set by Close when calls were stuck: the last of them to
	// return closes Pebble (close).
	abandoned bool
	close     func() error
}

// Open opens the index in dir, creating dir and an empty index if they do
// not exist (unless opts.ReadOnly). It returns an error wrapping
// ErrFormatVersion if the index was written by a newer format, and one
// wrapping ErrCorruption if it holds data but no format version.
//
// Pebble locks the directory, so a second Open of the same directory, in
// this process or another, fails until the first is closed.
func Open(dir string, opts Options) (*Index, error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	size := opts.CacheSize
	if size <= 0 {
		size = defaultCacheSize
	}
	po := &pebble.Options{
		FS:           fs,
		ReadOnly:     opts.ReadOnly,
		Logger:       opts.Logger,
		MemTableSize: uint64(min(max(size/4, minMemTableSize), maxMemTableSize)),
		// No write-ahead log: the index is rebuilt from the segments, so
		// what a crash takes from its memtables is indexed again on
		// Open (see Durability in the package doc). Without it a commit
		// does no I/O, and Pebble's reaction to a failed write or sync
		// of its log (a panic, or a fatal error of the Go runtime when
		// it fails while the log is being rotated) cannot happen.
		DisableWAL: true,
	}
	if po.Logger == nil {
		po.Logger = quietLogger{}
	}
	// Pebble's default reaction to a damaged file is Logger.Fatalf, which
	// exits the process. The index is derived data: the corruption error
	// Pebble also returns reaches the caller, which rebuilds the index.
	logger := po.Logger
	h := &health{}
	po.Logger = fatalLogger{logger, h}
	bgErr := make(chan error, 1)
	po.EventListener = &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		// One line: Pebble's own rendering of info carries the stack of
		// its error (%+v). The error also reaches the caller.
		logger.Errorf("index: damaged file %s: %s (the index is derived from the segments and can be rebuilt)", info.Path, firstLine(info.Details))
	}, BackgroundError: func(err error) {
		// A failed flush or compaction, which Pebble retries: Flush
		// waits for this or for the flush.
		select {
		case bgErr <- err:
		default:
		}
	}, FlushEnd: func(info pebble.FlushInfo) {
		// A flush that writes no table ends with an error that is not
		// one (Pebble's errEmptyTable).
		if info.Err != nil && info.Err.Error() != "pebble: empty table" {
			err := info.Err
			h.flushErr.Store(&err)
		} else {
			h.flushErr.Store(nil)
		}
	}, WriteStallBegin: func(pebble.WriteStallBeginInfo) {
		h.stalled.Store(true)
	}, WriteStallEnd: func() {
		h.stalled.Store(false)
	}}
	if !opts.ReadOnly {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("index: create %s: %w", dir, err)
		}
		// Only a writer may ratchet an existing store's format.
		po.FormatMajorVersion = pebble.FormatNewest
	}
	// Compactions wait for Open to return (see compactionGate).
	gate := newCompactionGate()
	po.Experimental.CompactionScheduler = gate
	if !opts.ReadOnly {
		if err := checkWritable(fs, dir); err != nil {
			return nil, err
		}
	}
	// After the last return before the DB takes its reference: a cache
	// dropped with a reference held is a leak that Pebble's invariant
	// checks (-tags invariants, without -race) end the process for.
	cache := pebble.NewCache(size)
	po.Cache = cache
	var db *pebble.DB
	err := openPebble(dir, po, h, &db)
	cache.Unref() // the DB holds its own reference
	if err != nil {
		gate.abandon()
		return nil, fmt.Errorf("index: open %s: %w", dir, err)
	}
	gate.release()
	x := &Index{health: h, db: db, readOnly: opts.ReadOnly, bgErr: bgErr, tailN: opts.TailSize}
	h.close = db.Close
	if err := x.checkVersion(); err != nil {
		_ = x.Close()
		return nil, fmt.Errorf("index: open %s: %w", dir, err)
	}
	return x, nil
}

// openPebble runs pebble.Open, recovering its panics. Open may wait for
// a flush of what it replays, on one of Pebble's goroutines: if that
// flush fails for good (Fatalf, see fatalLogger), Open would wait for
// ever, so openPebble then returns the failure, and leaves Pebble.
func openPebble(dir string, po *pebble.Options, h *health, db **pebble.DB) error {
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		func() {
			defer recoverFatal("open", &r.err)
			r.db, r.err = pebble.Open(dir, po)
		}()
		done <- r
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			*db = r.db
			return r.err
		case <-tick.C:
			if p := h.failed.Load(); p != nil {
				return *p
			}
		}
	}
}

// writeCheckFile is created and removed by Open to see that the index
// directory can be written.
const writeCheckFile = "write-check.tmp"

// checkWritable returns an error matching ErrNotWritable if a file cannot
// be created in dir for lack of permission or on a read-only file system:
// Pebble writes a new MANIFEST on every Open, and its failure there is
// fatal to it.
func checkWritable(fs vfs.FS, dir string) error {
	notWritable := func(err error) bool {
		return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EPERM)
	}
	// Pebble's lock first: an index that another process or DB holds is
	// reported as Pebble reports it (a lock conflict, which the engine
	// calls ErrLocked), before this check creates a file in a directory
	// that is not ours to touch.
	lock, err := fs.Lock(fs.PathJoin(dir, "LOCK"))
	if err != nil {
		if notWritable(err) && !errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("%w: %s: %w", ErrNotWritable, dir, err)
		}
		return fmt.Errorf("index: open %s: %w", dir, err)
	}
	lock.Close()
	path := fs.PathJoin(dir, writeCheckFile)
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		if notWritable(err) {
			return fmt.Errorf("%w: %s: %w", ErrNotWritable, dir, err)
		}
		return fmt.Errorf("index: open %s: %w", dir, err)
	}
	err = f.Close()
	if rerr := fs.Remove(path); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("index: open %s: %w", dir, err)
	}
	return nil
}

// firstLine returns the first line of err's message.
func firstLine(err error) string {
	if err == nil {
		return ""
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// fatalLogger turns Pebble's Logger.Fatalf, which by default exits the
// process, into a panic that the Index's calls recover (recoverFatal), so
// that a full disk or an I/O error fails the index, not the program. A
// Fatalf on one of Pebble's background goroutines (a flush or a
// compaction whose MANIFEST update failed), where no call of the Index
// could recover a panic, fails the Index instead and stops that goroutine
// for good: Pebble's state is unknown then, and the Index touches it no
// more (see call and Close).
type fatalLogger struct {
	pebble.Logger
	h *health
}

// fatalError is what fatalLogger.Fatalf panics with.
type fatalError struct {
	msg  string
	errs []error // the error arguments, for errors.Is
}

func (e *fatalError) Error() string   { return e.msg }
func (e *fatalError) Unwrap() []error { return e.errs }

func (l fatalLogger) Fatalf(format string, args ...any) {
	l.Errorf(format, args...)
	e := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			e.errs = append(e.errs, err)
		}
	}
	if l.h != nil && !calledByIndex() {
		err := fatal("in the background", e)
		l.h.failed.CompareAndSwap(nil, &err)
		l.h.parked.Store(true)
		select {} // Fatalf must not return
	}
	panic(e)
}

// calledByIndex reports whether a method of the Index (or Open), which
// recovers a panic, is on the calling goroutine's stack: whether Pebble
// runs a call of the Index rather than its own background work.
func calledByIndex() bool {
	var pcs [256]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/annal-db/annal/index.") &&
			!strings.Contains(f.Function, "compactionGate") && !strings.Contains(f.Function, "fatalLogger") {
			return true
		}
		if !more {
			return false
		}
	}
}

// recoverFatal, deferred around a call into Pebble, turns a panic of that
// call (Pebble's own, or fatalLogger's where Pebble would exit) into an
// error matching ErrFailed.
func recoverFatal(what string, err *error) {
	if r := recover(); r != nil {
		*err = fatal(what, r)
	}
}

func fatal(what string, r any) error {
	cause, ok := r.(error)
	if !ok {
		cause = fmt.Errorf("%v", r)
	}
	return fmt.Errorf("%w: %s: pebble: %w", ErrFailed, what, cause)
}

// guard is recoverFatal for a call on an open Index, which it also marks
// failed: Pebble's state after such a panic is unknown.
func (x *Index) guard(what string, err *error) {
	if r := recover(); r != nil {
		e := fatal(what, r)
		x.failed.CompareAndSwap(nil, &e)
		*err = *x.failed.Load()
	}
}

// quietLogger is the default Logger: a library should not fill its
// caller's log with Pebble's routine messages, but errors are kept.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}

func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// checkVersion reads V; for a new, empty index it writes it.
func (x *Index) checkVersion() (err error) {
	defer x.guard("format version", &err)
	key := []byte{famVersion}
	v, found, err := x.get(key)
	if err != nil {
		return err
	}
	if found {
		if len(v) != versionLen {
			return corruptf(key, "value is %d bytes, want %d", len(v), versionLen)
		}
		got := binary.BigEndian.Uint32(v)
		if got >= 1 && got < formatVersion {
			return fmt.Errorf("%w %d: this build reads version %d; the index is derived from the segments and can be rebuilt", ErrOldFormat, got, formatVersion)
		}
		if got != formatVersion {
			return fmt.Errorf("%w %d: this build reads version %d", ErrFormatVersion, got, formatVersion)
		}
		return nil
	}
	it, err := x.db.NewIter(nil)
	if err != nil {
		return err
	}
	hasData := it.First()
	var first []byte
	if hasData {
		first = slices.Clone(it.Key())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if hasData {
		return corruptf(key, "no format version, but the index holds data (first key %s)", describeKey(first))
	}
	if x.readOnly {
		return nil // an empty index: every lookup finds nothing
	}
	return x.db.Set(key, binary.BigEndian.AppendUint32(nil, formatVersion), pebble.NoSync)
}

// Close writes the tails to Pebble, makes everything written durable (see
// Flush) and closes the index. Closing twice returns ErrClosed.
func (x *Index) Close() (err error) {
	if x.closed.Load() {
		return ErrClosed
	}
	var tailErr error
	if !x.readOnly && x.usable() == nil {
		tailErr = x.FlushTails()
	}
	if x.closed.Swap(true) {
		return ErrClosed
	}
	x.mu.Lock()
	if x.parked.Load() {
		x.mu.Unlock()
		return *x.failed.Load()
	}
	if x.stuck > 0 {
		// Pebble's Close would wait for them: it is closed when the
		// last returns (call), if ever.
		x.abandoned = true
		x.mu.Unlock()
		return *x.failed.Load()
	}
	x.mu.Unlock()
	if p := x.failed.Load(); p != nil {
		// Pebble's state after its failure is unknown: its Close may
		// fail or panic too, which is recovered.
		defer x.guard("close", &err)
		return errors.Join(*p, x.db.Close())
	}
	if !x.readOnly {
		err = errors.Join(tailErr, x.flush())
	}
	defer x.guard("close", &err)
	return errors.Join(err, x.db.Close())
}

// Flush makes every batch committed so far and every ledger's tail
// durable: it writes the tails to Pebble (FlushTails), then flushes
// Pebble's memtables to sorted tables (the index has no write-ahead log).
// Its cost is bounded by the memtable size. If the flush fails (a full disk), Flush
// returns the error instead of waiting for Pebble's retries; the batches
// stay readable.
func (x *Index) Flush() error {
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.FlushTails(); err != nil {
		return err
	}
	return x.flush()
}

// Checkpoint is Flush, its errors prefixed "index: checkpoint".
//
// Deprecated: use Flush. (In annal "checkpoint" means the signed Merkle
// checkpoint only.)
func (x *Index) Checkpoint() error {
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.FlushTails(); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	if err := x.flush(); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	return nil
}

func (x *Index) flush() (err error) {
	defer x.guard("flush", &err)
	select {
	case <-x.bgErr: // an older failure
	default:
	}
	var flushed <-chan struct{}
	if err := x.call("flush", func() (err error) {
		flushed, err = x.db.AsyncFlush()
		return err
	}); err != nil {
		return fmt.Errorf("index: flush: %w", err)
	}
	select {
	case <-flushed:
		return nil
	case err := <-x.bgErr:
		return fmt.Errorf("index: flush: %w", err)
	}
}

// stallGiveUp is how long a write may wait, held back by Pebble, while
// Pebble's flushes fail, before the Index gives up on it (see call).
const stallGiveUp = 2 * time.Second

// call runs f, a call into Pebble that may wait for its memtables to be
// flushed (a commit, a flush): Pebble holds writes back while too much of
// its memtables is unflushed, and retries a failed flush for ever, so on a
// full disk such a call would never return. f runs on a goroutine of its
// own, and if Pebble holds it back while its flushes fail for stallGiveUp,
// or Pebble fails, call returns an error matching ErrFailed and the
// flush's error (syscall.ENOSPC, say) and the Index fails: f stays inside
// Pebble, which Close then leaves to close when f returns.
//
// Always on its own goroutine, even when no flush runs or fails as call
// begins: whether f will be held back is not known then. A memtable
// filled meanwhile, or by f itself, starts a flush that may fail, and f
// may be held back behind it (in Pebble's write stall, or behind another
// write stalled so); on the caller's goroutine nothing would give up on
// it. A loaded machine made this happen, now and then, between a flush
// that succeeded and the next, which failed (engine's
// TestIndexDiskFullNoHang hung in Open's re-indexing).
func (x *Index) call(what string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		var err error
		func() {
			defer recoverFatal(what, &err)
			err = f()
		}()
		done <- err
	}()
	tick := time.NewTicker(stallGiveUp / 20)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		if p := x.failed.Load(); p != nil {
			return x.giveUp(done, *p)
		}
		p := x.flushErr.Load()
		if p == nil || !x.stalled.Load() {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) >= stallGiveUp {
			e := fmt.Errorf("%w: %s: Pebble holds writes back until its memtables are flushed, and its flushes fail: %w", ErrFailed, what, *p)
			x.failed.CompareAndSwap(nil, &e)
			return x.giveUp(done, *x.failed.Load())
		}
	}
}

// giveUp leaves a call that is stuck inside Pebble, and returns err.
func (x *Index) giveUp(done chan error, err error) error {
	x.mu.Lock()
	x.stuck++
	x.mu.Unlock()
	go func() {
		<-done
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.stuck--; x.stuck == 0 && x.abandoned {
			func() {
				defer func() { _ = recover() }()
				_ = x.close()
			}()
		}
	}()
	return err
}

// usable returns ErrClosed after Close, and the failure after Pebble
// failed. Pebble panics when a closed DB is used; this turns a late call
// into an error.
func (x *Index) usable() error {
	if x.closed.Load() {
		return ErrClosed
	}
	if p := x.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// get returns a copy of the value of key.
func (x *Index) get(key []byte) (value []byte, found bool, err error) {
	if err := x.usable(); err != nil {
		return nil, false, err
	}
	v, closer, err := x.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("index: get %s: %w", describeKey(key), readErr(err))
	}
	value = slices.Clone(v)
	return value, true, closer.Close()
}

// DeleteLedger removes every key of a ledger, its progress marker
// included, so that it can be re-indexed from its segments. It is one
// Pebble batch of range deletions, one per family. The ledger's tail is
// dropped when the batch is applied (not if it fails).
func (x *Index) DeleteLedger(ledger eventid.LedgerID) (err error) {
	if err := x.usable(); err != nil {
		return err
	}
	defer x.guard("delete ledger", &err)
	b := x.db.NewBatch()
	for _, fam := range ledgerFamilies {
		start := appendLedgerPrefix(nil, fam, ledger)
		// start begins with a family tag below 0xff, so it has a successor.
		if err := b.DeleteRange(start, prefixSuccessor(start), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("index: delete ledger %v: %w", ledger, err)
		}
	}
	// Not flushed: if a crash takes the deletion back, the entries it
	// brings back are those the engine found wrong or useless before
	// (see the package doc).
	// The tail is dropped once the deletion is applied, not before: if
	// it fails, readers still see the tail's records.
	apply := func() error { return x.call("delete ledger", func() error { return b.Commit(pebble.NoSync) }) }
	if err := x.replaceTails([]eventid.LedgerID{ledger}, apply); err != nil {
		if !errors.Is(err, ErrFailed) { // else Pebble may be applying b still
			_ = b.Close()
		}
		return fmt.Errorf("index: delete ledger %v: %w", ledger, err)
	}
	return b.Close()
}

// Progress returns how far a ledger has been indexed in Pebble: the head
// that the last committed SetProgress recorded, or the last record of the
// last flush of its tail (records in the tail are not counted: a crash
// loses them, and Open indexes them again from the segments). found is false if the ledger has
// never been indexed (or was deleted).
func (x *Index) Progress(ledger eventid.LedgerID) (head segment.Head, found bool, err error) {
	key := appendProgressKey(nil, ledger)
	v, found, err := x.get(key)
	if err != nil || !found {
		return segment.Head{}, false, err
	}
	head, _, err = decodeProgress(key, v)
	return head, err == nil, err
}

// Durable returns the durable head that the last committed
// SetProgressDurable (or flush of the ledger's tail) recorded for a ledger: a record that the ledger's
// segments held on stable storage then. found is false if there is none
// (never recorded, deleted, or an index written before it existed).
// The write was not synced: a crash may take it back to an earlier one,
// never forward.
func (x *Index) Durable(ledger eventid.LedgerID) (durable segment.Head, found bool, err error) {
	key := appendProgressKey(nil, ledger)
	v, found, err := x.get(key)
	if err != nil || !found {
		return segment.Head{}, false, err
	}
	_, durable, err = decodeProgress(key, v)
	return durable, err == nil && durable.Seq != 0, err
}

// lookupPebble is Lookup in Pebble: the T block whose last ID is the
// first at or after id holds it if any does.
func (x *Index) lookupPebble(id eventid.ID) (seq uint64, loc segment.Location, found bool, err error) {
	if err := x.usable(); err != nil {
		return 0, segment.Location{}, false, err
	}
	var lo, hi, key [timeKeyLen]byte
	ledgerBounds(lo[:0], hi[:0], famTime, id.Ledger())
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lo[:ledgerPrefixLen], UpperBound: hi[:ledgerPrefixLen]})
	if err != nil {
		return 0, segment.Location{}, false, readErr(err)
	}
	if it.SeekGE(appendTimeKey(key[:0], id.Ledger(), id)) {
		var v []byte
		if v, err = it.ValueAndErr(); err == nil {
			var r blockReader
			for ok := r.init(it.Key(), v); ok && r.next() && r.micros <= id.Micros(); {
				if r.micros == id.Micros() && r.checksum == id.Checksum() {
					seq, loc, found = r.seq, r.loc, true
					break
				}
			}
			err = r.err
		}
	}
	if err2 := errors.Join(it.Error(), it.Close()); err == nil && err2 != nil {
		err = readErr(err2)
	}
	if err != nil {
		return 0, segment.Location{}, false, err
	}
	return seq, loc, found, nil
}

// ledgerBounds writes into lo and hi (each of capacity ledgerPrefixLen or
// more) the bounds of the keys of a family of a ledger.
func ledgerBounds(lo, hi []byte, fam byte, ledger eventid.LedgerID) {
	lo = appendLedgerPrefix(lo, fam, ledger)
	hi = append(hi, lo...)
	// The successor of the prefix: the family tag is below 0xff.
	for i := ledgerPrefixLen - 1; i >= 0; i-- {
		if hi[i]++; hi[i] != 0 {
			break
		}
	}
}

// bySeqPebble is BySeq in Pebble.
func (x *Index) bySeqPebble(ledger eventid.LedgerID, seq uint64) (id eventid.ID, found bool, err error) {
	if err := x.usable(); err != nil {
		return eventid.ID{}, false, err
	}
	r := seqResolver{x: x, ctx: context.Background(), ledger: ledger}
	p, found, err := r.find(seq)
	if err = errors.Join(err, r.close()); err != nil {
		if pebble.IsCorruptionError(err) {
			err = readErr(err)
		}
		return eventid.ID{}, false, err
	}
	return p.ID, found, nil
}

// Idem is the batch that an idempotency key appended: the sequence number
// of its first event, its number of events, and the digest of their
// content that the engine computed (Record.Digest).
type Idem struct {
	FirstSeq uint64
	Count    uint32
	Digest   [DigestSize]byte
}

// idempotencyPebble is Idempotency in Pebble.
func (x *Index) idempotencyPebble(ledger eventid.LedgerID, key []byte) (Idem, bool, error) {
	k := appendIdemKey(nil, ledger, key)
	v, found, err := x.get(k)
	if err != nil || !found {
		return Idem{}, false, err
	}
	if len(v) != idemValueLen {
		return Idem{}, false, corruptf(k, "value is %d bytes, want %d", len(v), idemValueLen)
	}
	d := Idem{FirstSeq: binary.BigEndian.Uint64(v[0:8]), Count: binary.BigEndian.Uint32(v[8:12])}
	copy(d.Digest[:], v[12:])
	return d, true, nil
}

// PrefixMatches returns the IDs, in the given ledgers, whose 32-digit hex
// form starts with a given hex prefix: the whole bytes prefix, then, if
// oddNibble is not -1, one more digit whose value is oddNibble (0-15). It
// returns at most limit IDs (none if limit <= 0): the lowest matches, in ID
// order. A prefix longer than an ID matches nothing. Resolving a short ID
// asks for limit 2: one match is the event, two mean the prefix is
// ambiguous.
func (x *Index) PrefixMatches(ledgers []eventid.LedgerID, prefix []byte, oddNibble int, limit int) ([]eventid.ID, error) {
	if oddNibble < -1 || oddNibble > 15 {
		return nil, fmt.Errorf("%w: nibble %d, want -1 or 0-15", ErrInvalid, oddNibble)
	}
	if err := x.usable(); err != nil {
		return nil, err
	}
	if limit <= 0 || len(prefix) > eventid.Size || (len(prefix) == eventid.Size && oddNibble >= 0) {
		return nil, nil
	}
	var out []eventid.ID
	seen := make(map[eventid.LedgerID]bool, len(ledgers))
	for _, ledger := range ledgers {
		if seen[ledger] {
			continue
		}
		seen[ledger] = true
		lo := append(appendLedgerPrefix(nil, famTime, ledger), prefix...)
		var hi []byte
		if oddNibble >= 0 {
			lo = append(lo, byte(oddNibble)<<4)
			if oddNibble < 15 {
				hi = slices.Clone(lo)
				hi[len(hi)-1] += 0x10
			} else {
				hi = prefixSuccessor(lo[:len(lo)-1])
			}
		} else {
			hi = prefixSuccessor(lo)
		}
		var ids []eventid.ID
		if err := x.collectIDs(ledger, lo, hi, limit, &ids); err != nil {
			return nil, err
		}
		out = append(out, x.tailPrefixMatches(ledger, lo, hi, ids)...)
	}
	slices.SortFunc(out, eventid.ID.Compare)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// collectIDs appends to out the first limit IDs in [lo, hi) of the T
// blocks of a ledger.
func (x *Index) collectIDs(ledger eventid.LedgerID, lo, hi []byte, limit int, out *[]eventid.ID) error {
	it, err := x.familyIter(context.Background(), famTime, ledger)
	if err != nil {
		return err
	}
	n := 0
	var r blockReader
	for ok := it.SeekGE(lo); ok && n < limit; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return readErr(err)
		}
		var id eventid.ID
		for ok := r.init(it.Key(), v); ok && r.next() && n < limit; {
			id = r.id()
			k := appendTimeKey(make([]byte, 0, timeKeyLen), ledger, id)
			if bytes.Compare(k, lo) < 0 {
				continue
			}
			if hi != nil && bytes.Compare(k, hi) >= 0 {
				n = limit // past the prefix: done
				break
			}
			*out = append(*out, id)
			n++
		}
		if r.err != nil {
			_ = it.Close()
			return r.err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return readErr(err)
	}
	return nil
}

// Memory is what Pebble holds in memory for the index, in bytes.
type Memory struct {
	BlockCache int64 // blocks of index tables in the block cache
	MemTables  int64 // memtables: the one being filled, any being flushed, one kept for reuse
}

// Memory returns the memory Pebble holds now. With cgo (the default on
// Linux), Pebble allocates both from C, outside the Go heap, so this is
// how a caller sees it; see CacheSize.
func (x *Index) Memory() Memory {
	if x.closed.Load() {
		return Memory{}
	}
	m := x.db.Metrics()
	// ZombieSize: memtables flushed but still referenced, and the one
	// Pebble keeps to reuse.
	return Memory{BlockCache: m.BlockCache.Size, MemTables: int64(m.MemTable.Size + m.MemTable.ZombieSize)}
}
