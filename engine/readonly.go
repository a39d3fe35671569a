package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// The range of Options.FollowInterval.
const (
	defaultFollowInterval                = 50 * time.Millisecond
	minFollowInterval, maxFollowInterval = time.Millisecond, time.Hour
)

// roDB is the state of a DB opened with OpenReadOnly.
type roDB struct {
	temp string    // the private directory: index, metadata snapshot
	hold io.Closer // the flock on temp (nil where there is none): see makePrivateDir
	// mu serializes the looks at the segments (Follow) and the building
	// of the private index, so that a ledger's index never claims
	// records that its catch-up did not read.
	mu     sync.Mutex
	hidden map[string]segment.Hidden // by ledger name, as of the open
	// passed: ledgers that appeared after the open and that the reader
	// will not show (see discoverLedgers); under mu.
	passed   map[eventid.LedgerID]bool
	stop     chan struct{}
	done     chan struct{}
	interval time.Duration
	// The durable witnesses (evidence.go): the metadata snapshot's
	// records, and the index's markers when no writer held the directory.
	known      map[eventid.LedgerID]ledgerMeta
	idxWitness map[eventid.LedgerID]segment.Head
	// With Options.VerifyIndex: the writer's index, opened read-only
	// while the DB holds the directory (wHold), or why not (wIdxWhy).
	wIdx        *index.Index
	wHold       io.Closer
	wIdxWhy     string
	wIdxMissing bool // the index is missing or cannot be opened
	// metaInPlace: the metadata file is opened where it is, read-only,
	// while the DB holds the directory (wHold), not a copy.
	metaInPlace bool
	// The writer's tree files, opened read-only by Verify; under mu.
	trees map[eventid.LedgerID]*tree.File
	// pending: what the next writer's Open repairs (Pending).
	pending []string
	// metaErr: why the writer's Open would fail on the metadata file
	// (MetaDamaged).
	metaErr error
}

// HiddenTail is a ledger whose last segment ends with bytes that a
// read-only DB does not show (see OpenReadOnly).
type HiddenTail struct {
	Ledger string
	segment.Hidden
}

// OpenReadOnly opens the data directory dir to read it, whether or not a
// writer (a DB opened with Open, in this process or another) has it
// open. It blocks no running writer and changes no byte in dir: no
// recovery, no cut, no file created. It holds the directory (its flock,
// as a writer does) only when no writer holds it, for the few
// milliseconds it reads the index's durable witnesses and checks the
// metadata file (a writer that starts then is refused, ErrLocked), and,
// with Options.VerifyIndex, until Close.
//
// Every ledger's segments are verified (from the first record, but for
// the stamped segments, below), and reads see a verified prefix of each
// ledger: what a writer had committed when
// the DB opened, or since (see below), never a record that is not
// completely written, nor one that the writer's recovery would cut (the
// tail of the last segment from its first invalid record, an unfinished
// batch: see segment.OpenReadOnly). When no writer runs, such a tail is
// a torn write that the writer's next Open cuts; HiddenTails lists them.
// A ledger whose sealed segments fail verification is unavailable, as
// with Open; so is one that fails the evidence the writer's Open checks
// (see evidence.go): its durable witness, its checkpoint file (signed by
// the directory's key, read and never created, for this ledger, and the
// root of the events it covers), a checkpoint file missing on a ledger
// of more than its genesis event, one older than the signer's state.
//
// Subscribe follows the ledgers as the writer commits: each ledger's
// segments are looked at again every Options.FollowInterval. Reads that
// need the index (Get, GetPrefix, GetSeq, Scan, Replay, StreamHead,
// Export, a Subscribe with a cursor) use a private index that the DB
// builds from the segments, in a directory of its own under
// Options.TempDir, when one of them first needs a ledger's, and brings
// up to date at each such read; Subscribe without a cursor and Ledgers
// need none. Ledgers that the writer creates after the open are shown
// once their genesis event is complete (see discoverLedgers). Writes,
// Checkpoint and consumers fail with ErrReadOnly. LatestCheckpoint is the
// checkpoint checked at the open; Verify, VerifyCheckpoint and the proofs
// (ProveInclusion, ProveConsistency) read the writer's tree file
// read-only, and Verify the writer's index with Options.VerifyIndex (see
// VerifyReport).
//
// With Options.UseIndex, when no writer holds the directory, the DB holds
// it until Close and reads the directory's own index, read-only, instead
// of a private one. With Options.CacheDir, the segments verified whole
// are stamped there, and a later open skips those that did not change
// (see Options.CacheDir). Whether it reads every record or not, it shows
// what the writer's Open would: the stamps spare the records that an
// open verified before and whose files did not change since, as the
// writer's Open is spared them (docs/decisions/reads-cost-what-they-read.md).
// Close removes the private directory; one that a reader killed before
// its Close left in TempDir is removed by the next OpenReadOnly (see
// makePrivateDir).
func OpenReadOnly(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	var fs vfs.FS = vfs.Default
	if o.fs != nil {
		fs = o.fs
	}
	if ok, err := IsDataDir(dir); err != nil {
		return nil, err
	} else if !ok && o.fs == nil {
		return nil, invalid("%s is not an annal data directory (no meta.db, index or ledgers)", dir)
	}
	if o.fs == nil {
		if err := tempOutsideDataDir(dir, o.TempDir); err != nil {
			return nil, err
		}
		if o.CacheDir != "" && inside(dir, o.CacheDir) {
			return nil, invalid("read-only open of %s: Options.CacheDir %s is inside the data directory, which a reader does not change: give a directory outside it", dir, o.CacheDir)
		}
	}
	temp, hold, err := makePrivateDir(o.TempDir)
	if err != nil {
		return nil, fmt.Errorf("engine: read-only open: a private directory in %q: %w", o.TempDir, err)
	}
	db := &DB{dir: dir, opts: o, fs: fs,
		byName: map[string]*ledger{}, byID: map[eventid.LedgerID]*ledger{}, broken: map[string]error{},
		ro: &roDB{temp: temp, hold: hold, hidden: map[string]segment.Hidden{}, interval: o.FollowInterval}}
	if err := db.openReadOnly(); err != nil {
		db.closeReadOnly()
		return nil, withPermissionHint(dir, err)
	}
	db.noteReaderCache()
	db.ro.stop, db.ro.done = make(chan struct{}), make(chan struct{})
	go db.followLoop()
	return db, nil
}

func (db *DB) openReadOnly() error {
	if db.opts.VerifyIndex || db.opts.UseIndex {
		// Held from now on if no writer holds it: nothing changes the
		// segments, the index or the metadata while they are read.
		db.openWriterIndex()
	}
	// The key that checks the checkpoints, read, never created.
	if err := db.loadReaderKey(); err != nil {
		return err
	}
	known := map[eventid.LedgerID]ledgerMeta{}
	db.meta = db.metaSnapshot()
	if db.meta != nil {
		// The consumers' positions lost with a metadata file the writer
		// rebuilt, as long as it says so: the reader reports it too.
		if why, err := meta.PositionsLost(db.meta); err == nil && why != "" {
			db.metaRebuilt = positionsLost(why)
		}
		metas, err := meta.Load(db.meta)
		if err == nil {
			for _, m := range metas {
				known[m.ID] = m
			}
		} else {
			db.ro.metaErr = err
		}
	}
	// What the writer's Open would say of it, when no writer holds the
	// directory (a live writer's file, copied, may be torn by a commit).
	if !db.writerHolds() {
		if err := db.metaCopyError(); err != nil {
			db.ro.metaErr = err
		}
	} else {
		db.ro.metaErr = nil
	}
	db.ro.known = known
	names, err := db.fs.List(filepath.Join(db.dir, ledgersDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine: list ledgers: %w", err)
	}
	sort.Strings(names)
	var ids []eventid.LedgerID
	for _, name := range names {
		id, err := eventid.ParseLedgerID(name)
		if err != nil || id.String() != name {
			continue
		}
		if fi, err := db.fs.Stat(db.ledgerDir(id)); err != nil || !fi.IsDir() {
			continue
		}
		ids = append(ids, id)
	}
	// A ledger the metadata knows whose directory is gone, as Open says.
	for id, m := range known {
		if !slices.Contains(ids, id) {
			key := m.Name
			if key == "" {
				key = id.String()
			}
			db.setBroken(key, id, fmt.Errorf("%w: ledger %s (%q): its segment directory is missing", ErrLedgerUnavailable, id, m.Name))
		}
	}
	if db.ro.wIdx != nil {
		db.ro.idxWitness = indexWitnesses(db.ro.wIdx, ids)
	} else {
		db.ro.idxWitness = db.readIndexWitnesses(ids)
	}
	var opened []*ledger
	var refused []openRefusal
	for _, id := range ids {
		var found ledgerMeta
		l, err := db.openLedgerReadOnly(id, &found)
		switch {
		case errors.Is(err, errNotYet):
			continue
		case err != nil:
			// Under the name the writer's Open gives it (see
			// registerLedgers).
			refused = append(refused, openRefusal{id: id, err: withPermissionHint(db.dir, fmt.Errorf("%w: ledger %s: %w", ErrLedgerUnavailable, id, err)), found: found})
			continue
		}
		opened = append(opened, l)
	}
	db.registerLedgers(opened, refused, known)
	for name, l := range db.byName {
		if h := l.log.HiddenTail(); h.Why != "" {
			db.ro.hidden[name] = h
		}
	}
	if err := db.chooseIndex(); err != nil {
		return err
	}
	db.findPending()
	return nil
}

// chooseIndex sets the index the read-only DB reads: with
// Options.UseIndex, the writer's, opened read-only while the DB holds
// the directory (openWriterIndex), if it covers exactly what the DB
// shows of every ledger (each one's progress marker is its head);
// otherwise the reader's index kept in Options.CacheDir (openCachedIndex),
// or else a private index in its private directory: either is built from
// the segments, or extended, when a read first needs a ledger's
// (roIndex). A DB that does not read the writer's index lets the
// directory go, but with Options.VerifyIndex.
func (db *DB) chooseIndex() error {
	if db.opts.UseIndex && db.ro.wIdx != nil && db.indexCoversShown(db.ro.wIdx) {
		db.idx = db.ro.wIdx
		for _, l := range db.byID {
			h := l.log.Head()
			l.idxMu.Lock()
			l.indexed, l.idxHead = h.Seq, h
			l.idxMu.Unlock()
		}
		return nil
	}
	if !db.opts.VerifyIndex && db.ro.wHold != nil {
		db.ro.wIdx.Close()
		hold := db.ro.wHold
		db.ro.wIdx, db.ro.wHold = nil, nil
		if db.ro.metaInPlace {
			// Opened in place, it holds bbolt's shared lock, which a
			// writer's Open would wait for: a copy instead, taken
			// before the directory is let go.
			db.meta.Close()
			db.meta, db.ro.metaInPlace = db.metaSnapshot(), false
		}
		hold.Close()
	}
	if db.idx = db.openCachedIndex(); db.idx != nil {
		return nil
	}
	var err error
	if db.idx, err = index.Open(filepath.Join(db.ro.temp, indexDir), index.Options{CacheSize: db.opts.CacheSize}); err != nil {
		return fmt.Errorf("engine: read-only open: the private index: %w", err)
	}
	return nil
}

// indexCoversShown reports whether x's progress marker of every ledger
// the DB shows is the ledger's head: x then holds every event shown, and
// none past it (a marker ahead of the head, or at another record, is an
// index that the writer's next Open rebuilds or catches up).
func (db *DB) indexCoversShown(x *index.Index) bool {
	for _, l := range db.byID {
		m, ok, err := x.Progress(l.meta.ID)
		if err != nil || !ok || m != l.log.Head() {
			return false
		}
	}
	return true
}

// findPending records what the next writer's Open will repair: a
// metadata file that is missing or cannot be read, an index that is
// missing or cannot be opened (looked at with Options.VerifyIndex), a
// ledger's tree file that is missing.
func (db *DB) findPending() {
	path := filepath.Join(db.dir, metaFile)
	if db.opts.metaPath != "" {
		path = db.opts.metaPath
	}
	if db.meta == nil && db.ro.metaErr == nil {
		why := metaMissing(path)
		if why == "" {
			why = "unreadable"
		}
		db.ro.pending = append(db.ro.pending, fmt.Sprintf("the metadata file %s is %s: the next writer's open rebuilds it from the segments (the positions of named consumers, kept in it, are then lost)", path, why))
	}
	if db.ro.wIdxMissing {
		db.ro.pending = append(db.ro.pending, db.ro.wIdxWhy)
	}
	names := make([]string, 0, len(db.byName))
	for name := range db.byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		l := db.byName[name]
		p := db.treePath(l)
		if _, err := db.fs.Stat(p); errors.Is(err, os.ErrNotExist) {
			db.ro.pending = append(db.ro.pending, fmt.Sprintf("ledger %s: its Merkle tree file %s is missing: the next writer's open rebuilds it from the segments (they give the signed checkpoint's root)", name, p))
		}
	}
}

// MetaDamaged returns, for a DB opened with OpenReadOnly, why the
// writer's Open would fail on the metadata file (damaged: cut short, a
// record it cannot read), or nil. The reader itself goes on without it
// (the names are in the segments); its durable witnesses then come from
// the index alone. Nil when a writer holds the directory: the reader's
// copy of a live file may be torn by a commit.
func (db *DB) MetaDamaged() error {
	if db.ro == nil {
		return nil
	}
	return db.ro.metaErr
}

// metaCopyError returns the error the writer's Open gives for the
// metadata file, found on a copy of it in the private directory (Open's
// checks, on the copy), or nil if it is missing or empty (Open rebuilds
// it) or the copy opens.
func (db *DB) metaCopyError() error {
	path := filepath.Join(db.dir, metaFile)
	if db.opts.metaPath != "" {
		path = db.opts.metaPath
	}
	if err := regularFile(vfs.Default, path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("engine: the metadata file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	tmp := filepath.Join(db.ro.temp, metaFile+".check")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil
	}
	defer os.Remove(tmp)
	if err := meta.CheckSize(tmp, path, int64(len(b))); err != nil {
		return err
	}
	m, err := openMeta(tmp, "")
	if err == nil {
		_, err = meta.Load(m)
		m.Close()
	}
	if err == nil {
		return nil
	}
	return errors.New(strings.ReplaceAll(err.Error(), tmp, path))
}

// writerHolds reports whether a writer holds the data directory (its
// flock), as far as this reader can tell.
func (db *DB) writerHolds() bool {
	if db.opts.fs != nil || db.ro.wHold != nil {
		return false // a test's file system, or this DB holds it
	}
	dir, err := filepath.EvalSymlinks(db.dir)
	if err != nil {
		return false
	}
	f, err := dirlock.Hold(dir)
	if err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	f.Close()
	return false
}

// Pending returns, for a DB opened with OpenReadOnly, what the next
// writer's Open will repair, in words: the metadata file or the index
// missing or unreadable (the index only with Options.VerifyIndex), a
// ledger's tree file missing; HiddenTails lists the torn writes it will
// cut. A read-only DB repairs nothing. Nil for a DB opened with Open.
func (db *DB) Pending() []string {
	if db.ro == nil {
		return nil
	}
	return slices.Clone(db.ro.pending)
}

// metaSnapshot returns the metadata file as of now, opened read-only
// from a private copy, or nil if there is none or it cannot be read.
// bbolt's own read-only open would wait for a writer's exclusive flock
// for as long as the writer runs; the copy takes no lock. The metadata
// is used only for what the segments do not hold (the name a ledger had
// in it, consumer positions): a copy torn by a concurrent commit, which
// bbolt may refuse, costs only those.
func (db *DB) metaSnapshot() (m *bolt.DB) {
	path := filepath.Join(db.dir, metaFile)
	if db.opts.metaPath != "" {
		path = db.opts.metaPath
	}
	if regularFile(vfs.Default, path) != nil {
		return nil // a named pipe would block the read for ever
	}
	tmp := path
	if db.ro.wHold == nil {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			return nil
		}
		tmp = filepath.Join(db.ro.temp, metaFile)
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return nil
		}
	} else if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil
	}
	// Held by this DB (openWriterIndex), the file is opened where it is,
	// read-only: no writer commits to it meanwhile.
	defer func() {
		if r := recover(); r != nil {
			m = nil
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	m, err := bolt.Open(tmp, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil
	}
	if meta.Tx(m, false, func(tx *bolt.Tx) error {
		if tx.Bucket(meta.BucketLedgers) == nil {
			return errors.New("no ledgers bucket")
		}
		return nil
	}) != nil {
		m.Close()
		return nil
	}
	db.ro.metaInPlace = tmp == path
	return m
}

// ReadOnly reports whether the DB was opened with OpenReadOnly.
func (db *DB) ReadOnly() bool { return db.ro != nil }

// HiddenTails returns the ledgers whose last segment ended, when the DB
// opened read-only, with bytes it does not show: a write in progress when
// a writer runs, a torn write (which the writer's next Open cuts) when
// none does. By ledger name; empty for a DB opened with Open.
func (db *DB) HiddenTails() []HiddenTail {
	if db.ro == nil {
		return nil
	}
	var out []HiddenTail
	for name, h := range db.ro.hidden {
		out = append(out, HiddenTail{Ledger: name, Hidden: h})
	}
	slices.SortFunc(out, func(a, b HiddenTail) int {
		switch {
		case a.Ledger < b.Ledger:
			return -1
		case a.Ledger > b.Ledger:
			return 1
		}
		return 0
	})
	return out
}

// readOnlyErr returns ErrReadOnly, saying what was refused, for a DB
// opened read-only; nil otherwise.
func (db *DB) readOnlyErr(what string) error {
	if db.ro == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrReadOnly, what)
}

// followLoop looks at every ledger's segments each FollowInterval and
// wakes the subscribers of those that grew.
func (db *DB) followLoop() {
	defer close(db.ro.done)
	t := time.NewTicker(db.ro.interval)
	defer t.Stop()
	for {
		select {
		case <-db.ro.stop:
			return
		case <-t.C:
			db.followAll()
		}
	}
}

// readOnlyHooks are calls a test makes a read-only DB do where it forces
// an interleaving (Options.roHooks); each is nil unless a test sets it.
type readOnlyHooks struct {
	// followAllRead is called by followAll once it entered the read,
	// before it takes ro.mu.
	followAllRead func()
	// roIndexLocked is called by roIndex once it holds ro.mu.
	roIndexLocked func()
}

// followAll looks once at the segments of every ledger.
func (db *DB) followAll() {
	if db.enterRead() != nil {
		return
	}
	defer db.exitRead()
	if h := db.opts.roHooks; h != nil && h.followAllRead != nil {
		h.followAllRead()
	}
	db.ro.mu.Lock()
	defer db.ro.mu.Unlock()
	db.discoverLedgers()
	for _, l := range db.openLedgers(nil) {
		db.followLedger(l)
	}
}

// followLedger looks once at the segments of l and wakes its subscribers
// if it grew. Called with ro.mu held.
func (db *DB) followLedger(l *ledger) {
	moved, err := l.log.Follow()
	if err == nil && !moved {
		return
	}
	l.idxMu.Lock()
	if err != nil && l.idxErr == nil {
		l.idxErr = fmt.Errorf("engine: following ledger %s: %w", l.meta.Name, err)
	}
	l.wake()
	l.idxMu.Unlock()
}

// discoverLedgers opens the ledgers that the writer created since the
// open, once their genesis event is complete, so that Ledgers, reads and
// Subscribe see them. A ledger is shown under the name in its NAME file
// (written before its genesis event); one without a valid NAME file, or
// whose name the reader already shows for another ledger, or whose
// segments fail verification, is passed over for good (the reader shows
// it as Open would only once opened again), and so is one whose
// directory holds no segment. Called with ro.mu held, from followAll.
func (db *DB) discoverLedgers() {
	entries, err := db.fs.List(filepath.Join(db.dir, ledgersDir))
	if err != nil {
		return
	}
	for _, name := range entries {
		id, err := eventid.ParseLedgerID(name)
		if err != nil || id.String() != name || db.ro.passed[id] {
			continue
		}
		db.mu.RLock()
		_, open := db.byID[id]
		_, _, broken := db.brokenByID(id)
		db.mu.RUnlock()
		if open || broken {
			continue
		}
		if fi, err := db.fs.Stat(db.ledgerDir(id)); err != nil || !fi.IsDir() {
			continue
		}
		l, err := db.openLedgerReadOnly(id, nil)
		if errors.Is(err, errNotYet) {
			continue
		}
		if err != nil {
			db.passLedger(id)
			continue
		}
		log := l.log
		named, hasFile, nerr := readNameFile(db.fs, log.Dir())
		if nerr != nil || !hasFile || names.LedgerProblem(named, name) != "" {
			log.Close()
			db.passLedger(id)
			continue
		}
		l.meta.Name = named
		db.mu.Lock()
		_, taken := db.byName[named]
		if _, refused := db.broken[named]; refused {
			taken = true // a refused ledger's name is its own
		}
		if !taken && !db.closed {
			db.byName[named], db.byID[id] = l, l
		}
		db.mu.Unlock()
		if taken {
			log.Close()
			db.passLedger(id)
		}
	}
}

// errNotYet: a ledger directory whose ledger is being created (no
// segment yet, or an unfinished genesis event; an unfinished creation
// would be removed by the writer's recovery).
var errNotYet = errors.New("ledger being created")

// noGenesisError is a failure to read a ledger's genesis event, as it is.
type noGenesisError struct{ error }

func (e noGenesisError) Unwrap() error { return e.error }

// openLedgerReadOnly opens ledger id's segments read-only, with its
// metadata from its genesis event: the one way OpenReadOnly and
// discoverLedgers open a ledger.
//
// The ledger must pass the evidence the writer's Open checks (see
// evidence.go): its durable witness, its checkpoint file, the signer's
// state. Both are read before the segments: a live writer only moves
// them forward, and the segments, read after, hold what they say.
//
// found, if not nil, gets the metadata of its genesis event once read,
// even if the ledger is refused after (its name, for registerLedgers).
func (db *DB) openLedgerReadOnly(id eventid.LedgerID, found *ledgerMeta) (*ledger, error) {
	w := db.roWitness(id)
	ev := db.readEvidence(id)
	dir := db.ledgerDir(id)
	so := db.segmentOptions(id)
	if !db.opts.FullVerifyOnOpen {
		// The sealed segments that an open verified and that did not
		// change since are not read again (stamps.go, readercache.go).
		so.VerifySealed, so.Stamps = true, db.readerStamps(id)
	}
	if bound := db.opts.laidBound; bound != nil {
		// A follower's DB shows what the follower laid and verified,
		// not whatever else the files come to hold: nothing of a
		// ledger it does not follow.
		if _, _, err := bound(id); err != nil {
			return nil, err
		}
		so.Limit = func() (segment.Head, bool) {
			h, ok, _ := bound(id)
			return h, ok
		}
	}
	log, err := segment.OpenReadOnly(dir, so)
	if errors.Is(err, segment.ErrNoLog) {
		if w.Seq != 0 {
			return nil, lostEverySegment(dir, w)
		}
		return nil, errNotYet
	}
	if err != nil {
		return nil, err
	}
	if err := log.CheckWitness(w); err != nil {
		log.Close()
		return nil, err
	}
	if log.Head().Seq == 0 {
		log.Close()
		return nil, errNotYet
	}
	l := newLedger(db, ledgerMeta{})
	l.log = log // read-only: no hooks, the log commits nothing
	if l.meta, err = metaFromGenesis(log); err != nil {
		log.Close()
		return nil, noGenesisError{err}
	}
	if found != nil {
		*found = l.meta
	}
	if err := db.checkReaderEvidence(l, ev); err != nil {
		log.Close()
		return nil, err
	}
	db.keepReaderStamps(l)
	return l, nil
}

// passLedger records that discoverLedgers passes over ledger id.
func (db *DB) passLedger(id eventid.LedgerID) {
	if db.ro.passed == nil {
		db.ro.passed = map[eventid.LedgerID]bool{}
	}
	db.ro.passed[id] = true
}

// roIndex brings the private index of ledger l up to what the DB shows
// of it (its log's head), for a read that needs the index: the first
// builds it from the segments, the next add what the writer committed
// since. The head readers see (visible) is then that head.
func (db *DB) roIndex(l *ledger) error {
	// enterRead before ro.mu, as followAll takes them: taken the other
	// way round, a Close waiting for the readers (stopReads) blocks this
	// enterRead while ro.mu is held, and followAll, a reader, waits for
	// ro.mu: a deadlock.
	if err := db.enterRead(); err != nil {
		return err
	}
	defer db.exitRead()
	db.ro.mu.Lock()
	defer db.ro.mu.Unlock()
	if h := db.opts.roHooks; h != nil && h.roIndexLocked != nil {
		h.roIndexLocked()
	}
	l.idxMu.Lock()
	from, err := l.idxHead, l.idxErr
	l.idxMu.Unlock()
	if err != nil || from.Seq == l.log.Head().Seq {
		return err
	}
	err = l.catchUp(from, "")
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if err != nil && l.idxErr == nil {
		l.idxErr = fmt.Errorf("engine: index of ledger %s (read-only): %w", l.meta.Name, err)
	}
	return l.idxErr
}

// followHead is the head up to which Subscribe yields: what the DB
// shows, which a read-only DB does not index to show.
func (l *ledger) followHead() segment.Head {
	if l.db.ro != nil {
		return l.log.Head()
	}
	return l.visible()
}

// followErr returns why a read-only DB stopped following l, if it did.
func (l *ledger) followErr() error {
	if l.db.ro == nil {
		return nil
	}
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	return l.idxErr
}

// followableLedger is readableLedger for Subscribe, which needs no index.
func (db *DB) followableLedger(name string) (*ledger, error) {
	if db.ro == nil {
		return db.readableLedger(name)
	}
	l, err := db.ledger(name)
	if err != nil {
		return nil, err
	}
	return l, l.followErr()
}

// closeReadOnly is Close for a DB opened read-only.
func (db *DB) closeReadOnly() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed = true
	db.mu.Unlock()
	db.stopReads()
	if db.ro.stop != nil {
		close(db.ro.stop)
		<-db.ro.done
	}
	var errs []error
	for _, l := range db.byID {
		if err := l.log.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range db.ro.trees {
		t.Close()
	}
	if db.ro.wIdx != nil && db.ro.wIdx != db.idx {
		errs = append(errs, db.ro.wIdx.Close())
	}
	errs = append(errs, db.closeStores())
	if db.ro.wHold != nil {
		db.ro.wHold.Close() // after the index and the metadata are closed
	}
	if err := os.RemoveAll(db.ro.temp); err != nil {
		errs = append(errs, fmt.Errorf("engine: remove the private directory: %w", err))
	}
	if db.ro.hold != nil {
		db.ro.hold.Close() // after the removal: no other reader takes it for stale before
	}
	return errors.Join(errs...)
}

// The private directory of a read-only DB is TempDir/annal-ro-*, made as
// TempDir/.annal-ro-init-* and renamed once held: a directory under the
// final name is held (an exclusive flock on it) from before it has that
// name until Close has removed it. A reader killed before its Close
// leaves its directory behind, no longer held: the next read-only open
// with the same TempDir removes it (removeStalePrivateDirs). Only a
// directory that holds privateMarker, which every reader writes first,
// is ever removed, so nothing annal did not make is.
const (
	privatePrefix     = "annal-ro-"
	privateInitPrefix = ".annal-ro-init-"
	privateMarker     = "ANNAL-READER"
	// privateInitStale is the age after which a directory still under
	// its first name, and not held, is taken for a reader killed while
	// making it; before that it may be a reader between its mkdir and its
	// flock.
	privateInitStale = 10 * time.Minute
)

// tempOutsideDataDir refuses (ErrInvalid, naming both) a directory for
// the reader's private directory (tempDir, else the system's, TMPDIR)
// that is the data directory dir or inside it: the reader would create
// files in the directory it promises not to change (in ledgers/, or in a
// ledger's own directory), and a reader killed there would leave them.
// Both are compared with their symbolic links resolved.
func tempOutsideDataDir(dir, tempDir string) error {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	if inside(dir, tempDir) {
		return invalid("read-only open of %s: the directory for its private files (Options.TempDir, else TMPDIR) %s is inside the data directory, which a reader does not change: give a directory outside it", dir, tempDir)
	}
	return nil
}

// inside reports whether path is the directory dir or inside it, both
// with their symbolic links resolved.
func inside(dir, path string) bool {
	resolve := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		return filepath.Clean(p)
	}
	d, t := resolve(dir), resolve(path)
	rel, err := filepath.Rel(d, t)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// makePrivateDir makes a read-only DB's private directory in tempDir (the
// system's temporary directory if empty), after removing those that
// killed readers left there, and returns it with what holds it (nil where
// flock is not available).
func makePrivateDir(tempDir string) (dir string, hold io.Closer, err error) {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	removeStalePrivateDirs(tempDir, time.Now())
	first, err := os.MkdirTemp(tempDir, privateInitPrefix+"*")
	if err != nil {
		return "", nil, err
	}
	f, err := dirlock.Hold(first)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		os.RemoveAll(first)
		return "", nil, err
	default:
		hold = f
	}
	// Who made it and when (informational): the marker that makes it
	// removable once no longer held.
	err = os.WriteFile(filepath.Join(first, privateMarker), []byte(dirlock.Info()), 0o600)
	if err == nil {
		dir = filepath.Join(tempDir, privatePrefix+strings.TrimPrefix(filepath.Base(first), privateInitPrefix))
		err = os.Rename(first, dir)
	}
	if err != nil {
		os.RemoveAll(first)
		if hold != nil {
			hold.Close()
		}
		return "", nil, err
	}
	return dir, hold, nil
}

// removeStalePrivateDirs removes from tempDir the private directories of
// read-only DBs that are no longer held (their reader was killed before
// its Close) and returns their paths. A directory that is held, that has
// no privateMarker, that cannot be opened (another user's) or, under its
// first name, that is younger than privateInitStale, is left alone.
func removeStalePrivateDirs(tempDir string, now time.Time) (removed []string) {
	entries, err := os.ReadDir(tempDir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		name := e.Name()
		init := strings.HasPrefix(name, privateInitPrefix)
		if !e.IsDir() || !init && !strings.HasPrefix(name, privatePrefix) {
			continue
		}
		p := filepath.Join(tempDir, name)
		if init {
			if fi, err := e.Info(); err != nil || now.Sub(fi.ModTime()) < privateInitStale {
				continue
			}
		}
		f, err := dirlock.Hold(p)
		if err != nil {
			continue // held by a live reader, or not ours to open
		}
		if fi, err := os.Lstat(filepath.Join(p, privateMarker)); err == nil && fi.Mode().IsRegular() {
			if os.RemoveAll(p) == nil {
				removed = append(removed, p)
			}
		}
		f.Close()
	}
	return removed
}

// readOnlyIndex brings the private index of l up to date on a read-only
// DB (roIndex); nil at once on a DB opened with Open.
func (db *DB) readOnlyIndex(l *ledger) error {
	if db.ro == nil {
		return nil
	}
	return db.roIndex(l)
}

// roIndexAll is readOnlyIndex for every ledger (GetPrefix looks in all).
func (db *DB) roIndexAll() error {
	if db.ro == nil {
		return nil
	}
	for _, l := range db.openLedgers(nil) {
		if err := db.roIndex(l); err != nil {
			return err
		}
	}
	return nil
}

// roAfterHead resolves, on a read-only DB, a subscription that starts
// after the ledger's head (annal tail) without the index: the head's
// location is known. ok is false if the cursor is another event.
func (db *DB) roAfterHead(l *ledger, o SubscribeOptions) (seg uint64, off int64, seq uint64, ok bool) {
	if db.ro == nil {
		return 0, 0, 0, false
	}
	h := l.log.Head()
	if o.After != h.ID && !o.After.IsZero() || o.AfterSeq != h.Seq && o.AfterSeq != 0 || h.Loc.Segment == 0 {
		return 0, 0, 0, false
	}
	return h.Loc.Segment, h.Loc.End(), h.Seq, true
}
