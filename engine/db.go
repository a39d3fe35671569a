package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/mod/sumdb/note"
)

// A data directory:
//
//	DIR/LOCK              names the process holding the directory (package dirlock)
//	DIR/meta.db           bbolt: one record per ledger (name, ID, genesis, head, witness)
//	DIR/index/            Pebble: the index of every ledger
//	DIR/ledgers/LLLLLLLL/ the segment files of ledger LLLLLLLL (its ID in hex),
//	                      its NAME, its Merkle tree and latest checkpoint
//	DIR/signing.key       the key that signs the checkpoints (merkle.go)
const (
	lockFile   = dirlock.File
	metaFile   = "meta.db"
	indexDir   = "index"
	ledgersDir = "ledgers"
)

// dataDirMarkers are the entries only an annal data directory holds. One
// is enough: a directory where some of them were deleted is still annal's,
// and Open recovers it (rebuilds the index, the metadata). LOCK counts
// only alone (see hasMarker).
var dataDirMarkers = [...]string{lockFile, metaFile, indexDir, indexDir + ".broken", ledgersDir, signingKeyFile, signingKeyFile + signerStateSuffix, signingKeyFile + signerStateSuffix + signerLockSuffix, signingPubFile}

// ignoredEntries are entries an empty directory may hold: the root of a
// freshly made ext2/3/4 file system, a common place for a data directory,
// has lost+found.
var ignoredEntries = [...]string{"lost+found"}

// IsDataDir reports whether dir holds annal data: one of DIR/meta.db,
// DIR/index, DIR/index.broken, DIR/ledgers, DIR/signing.key (any of them: a directory where
// only some remain is annal's, and Open recovers it), or DIR/LOCK alone
// (other stores, Pebble's DIR/index among them, have a LOCK too). A
// missing directory holds none (false, nil). Open refuses a directory that
// is neither empty nor a data directory; the annal command refuses, for
// every command but create, import and demo, one that is not a data
// directory.
func IsDataDir(dir string) (bool, error) {
	names, err := vfs.Default.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("engine: list the data directory %s: %w", dir, err)
	}
	return hasMarker(names), nil
}

func hasMarker(names []string) bool {
	others := 0
	for _, n := range names {
		switch {
		case n == lockFile:
		case slices.Contains(dataDirMarkers[:], n):
			return true
		case !slices.Contains(ignoredEntries[:], n):
			others++
		}
	}
	// LOCK is annal's only alone (an Open that stopped right after
	// taking it): Pebble, LevelDB and RocksDB directories have one too,
	// DIR/index among them.
	return others == 0 && slices.Contains(names, lockFile)
}

// checkDirFor says why Open must not use dir: it is a directory, not
// empty (apart from ignoredEntries), with no annal data in it. A missing
// directory, an empty one and a data directory are fine; what is not a
// directory is left to mkdirSynced to report. Nothing is created.
func checkDirFor(fs vfs.FS, dir string) error {
	fi, err := fs.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: the data directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("engine: list the data directory %s: %w", dir, err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(ignoredEntries[:], n) })
	if len(names) == 0 || hasMarker(names) {
		return nil
	}
	slices.Sort(names)
	sample := names[:min(len(names), 5)]
	more := ""
	if len(names) > len(sample) {
		more = fmt.Sprintf(", … (%d entries)", len(names))
	}
	return invalid("data directory %s is not empty and holds no annal data (no meta.db, index or ledgers, nor a LOCK alone); it has %s%s: use an empty or new directory", dir, strings.Join(quoteAll(sample), ", "), more)
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

// DB is an open data directory. It is safe for concurrent use.
type DB struct {
	dir  string
	opts Options
	fs   vfs.FS
	lock io.Closer
	meta *bolt.DB
	idx  *index.Index

	// mu guards closed and the maps of ledgers. Lock order (see "Locks"
	// in doc.go): creating → mu → a ledger's segment log (ioMu: CreateLedger
	// and Import append and open logs under the read lock) → its idxMu →
	// its pendMu. Appends take mu only to find the ledger (db.ledger), and
	// none of the log's hooks takes it.
	mu     sync.RWMutex
	closed bool
	byName map[string]*ledger
	byID   map[eventid.LedgerID]*ledger
	broken map[string]error // ledgers that failed recovery, by name or ID hex
	// brokenIDs: the key in broken of each ledger whose ID is known.
	brokenIDs map[eventid.LedgerID]string
	// indexRebuilt: why Open rebuilt the index, if it did.
	indexRebuilt error
	// metaRebuilt: why Open rebuilt the metadata file, if it did, while
	// the loss of the consumers' positions is not accepted
	// (ErrPositionsLost; AcceptLostPositions clears it). Guarded by lostMu.
	metaRebuilt error
	lostMu      sync.RWMutex // taken alone: no other lock is taken under it
	// watch: the identity of the files the DB holds by path (nil with
	// Options.fs); see checkDir.
	watch    *dirWatch
	creating sync.Mutex // serializes CreateLedger; taken before mu
	renamed  []Renamed  // the ledgers Open renamed (see registerLedgers)

	// The witness writer (witness.go), started by Open and stopped by
	// Close before its final metadata write. witnessed holds, by ledger,
	// the witness sequence number that open wrote, for the writer.
	witnessed                map[*ledger]uint64
	witnessStop, witnessDone chan struct{}
	// oldWitness: the witnesses read from an index before Open rebuilt
	// it (keepWitnesses), by ledger.
	oldWitness    map[eventid.LedgerID]segment.Head
	witnessWrites atomic.Int64 // its transactions, for tests

	// The Merkle trees (merkle.go): the signing key and its verifier, why
	// Open rebuilt trees, and the checkpointer, started by Open and
	// stopped by Close before it closes files.
	key      tree.Key
	signer   *stateSigner
	keyErr   error // a read-only DB with no key: why (verifier nil)
	verifier note.Verifier
	// unsigned: the ledgers Open refused for their checkpoint evidence
	// only (ErrUnsigned), which AcceptLedger may accept; accepting: the
	// ledger AcceptLedger is recovering (recoverTree signs it as it is).
	unsigned          map[eventid.LedgerID]unsignedLedger
	accepting         eventid.LedgerID
	treeRebuilt       map[eventid.LedgerID]error
	ckStop, ckDone    chan struct{}
	checkpointsIssued atomic.Int64 // by the checkpointer, for tests
	// cosigners: Options.TlogWitnesses, asked to cosign each checkpoint
	// (tlogwitness.go); made at first use.
	cosigners     *cosigners
	cosignersOnce sync.Once

	// readers: the reads in progress, which Close waits for before it
	// closes files (lifecycle.go).
	readers readers
	// consumers: the live named consumers (consumer.go).
	consumers consumerSet
	// ro: set by OpenReadOnly (readonly.go).
	ro *roDB
	// repl: the replica store (replication.go), nil without
	// Options.Replica.
	repl *replicas
	// node is the DB's lease and watch in a bucket shared by nodes
	// (Options.Node; nodes.go), nil without.
	node *node

	// test holds the calls this package's tests make the DB do; zero
	// outside them.
	test testHooks
}

// testHooks are calls that this package's tests make a DB do where they
// interfere with it (kill the process, fail a write, change the
// directory). They are the DB's own, set on an open DB before the calls
// they race with, so that tests share no package state. Each is nil
// unless a test sets it.
type testHooks struct {
	// importCommit is called by an import's commit at its steps
	// ("renamed": the segments in place, nothing else written;
	// "indexed": indexed, the metadata not yet written).
	importCommit func(step string)
	// appended is called by Append once the segment log has stored a
	// batch, before the watch's second look.
	appended func()
	// backup is called after each file a backup writes, with its path in
	// the temporary directory; an error it returns fails the backup as a
	// failed write would.
	backup func(path string) error
	// treeWrite is called by the goroutine that writes leaves to a
	// ledger's tree file (startTreeWriteLocked) before it begins.
	treeWrite func()
}

// Open opens the data directory dir, creating it if needed, and recovers
// every ledger: it verifies every record of each ledger's segments but
// those of sealed segments unchanged since an earlier Open verified them
// (all of them with Options.FullVerifyOnOpen), checks the events it read
// against the tree and the latest signed checkpoint, cuts a torn
// write, and brings the index and the metadata up to the tail. A ledger
// that fails verification is refused (ErrLedgerUnavailable, wrapping the
// segment.ErrCorruption that says where) and the others open; see
// Unavailable. So is a ledger whose segments no longer hold its durable
// witness, the head that the metadata or the index recorded as durable
// ("acknowledged events lost"; see witness.go): nothing is cut then.
//
// Only one DB may have a directory open: a second Open, from this or
// another process, fails with ErrLocked (a *LockedError naming the
// holder), whatever was deleted in the directory; see "One writer" in
// package dirlock. Options out of range fail with ErrInvalid, before anything is
// created; so does a directory that is not empty and holds no annal data
// (see IsDataDir), so that a mistyped path does not scatter a database
// among someone's files.
func Open(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	var fs vfs.FS = privateFS{vfs.Default}
	if o.fs != nil {
		fs = o.fs
	}
	if err := checkDirFor(fs, dir); err != nil {
		return nil, err
	}
	if _, ok, err := readFollowerFile(fs, dir); err != nil {
		return nil, err
	} else if ok {
		return nil, invalid("%s is a follower's copy of a bucket (it holds %s): read it with OpenReadOnly (annal's read commands), or make it the writer with Takeover (annal takeover URL DIR)", dir, followerFile)
	}
	if err := mkdirSynced(fs, dir); err != nil {
		return nil, withPermissionHint(dir, fmt.Errorf("engine: create %s: %w", dir, err))
	}
	if o.fs == nil {
		// The directory is resolved once: every file is then opened and
		// created under the directory itself, not through a symbolic
		// link that may be pointed elsewhere while the DB is open.
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, fmt.Errorf("engine: resolve %s: %w", dir, err)
		}
		dir = real
	}
	var lock io.Closer
	var dirFile *os.File
	var err error
	if o.fs != nil {
		// A test's file system (crash tests): its own lock on DIR/LOCK.
		if lock, err = fs.Lock(dirlock.Path(dir)); err != nil {
			if !dirlock.Held(err) {
				// An I/O error (a full disk, EIO), not another user.
				return nil, fmt.Errorf("engine: lock %s: %w", dirlock.Path(dir), err)
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
		}
	} else if lock, dirFile, err = lockDataDir(dir); err != nil {
		return nil, withPermissionHint(dir, err)
	}
	metaPath := filepath.Join(dir, metaFile)
	if o.metaPath != "" {
		metaPath = o.metaPath
	}
	db := &DB{dir: dir, opts: o, fs: fs, lock: lock,
		byName: map[string]*ledger{}, byID: map[eventid.LedgerID]*ledger{}, broken: map[string]error{}}
	if err := db.open(); err != nil {
		db.closeStores()
		return nil, withPermissionHint(dir, err)
	}
	// Every ledger compared with its bucket and taken (replication.go),
	// before any is reachable.
	if err := db.startReplication(); err != nil {
		db.Close()
		return nil, err
	}
	// The marker of lost positions lasts until AcceptLostPositions; one
	// left where no ledger opened (a directory whose only ledger was an
	// unfinished CreateLedger) guards nothing and is removed.
	switch why, err := meta.PositionsLost(db.meta); {
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("engine: metadata %s: %w", metaPath, err)
	case why != "" && len(db.byID)+len(db.broken) == 0:
		if err := meta.ClearPositionsLost(db.meta); err != nil {
			db.Close()
			return nil, fmt.Errorf("engine: metadata %s: %w", metaPath, err)
		}
	case why != "":
		db.metaRebuilt = positionsLost(why)
	}
	if dirFile != nil {
		// What the DB holds by path from now on; see checkDir.
		if db.watch, err = newDirWatch(dirFile, dir, dirlock.Path(dir), metaPath, filepath.Join(dir, indexDir), filepath.Join(dir, ledgersDir)); err != nil {
			db.Close()
			return nil, err
		}
		db.watch.ledgers = db.checkLedgerFiles
	}
	db.startWitnessWriter()
	db.startCheckpointer()
	// Last: the watch of the other nodes takes ledgers (TakeLedger), which
	// uses all of the above (db.watch among them).
	db.startWatch()
	return db, nil
}

func (db *DB) open() error {
	var err error
	for _, sub := range []string{ledgersDir, indexDir} {
		if err = mkdirSynced(db.fs, filepath.Join(db.dir, sub)); err != nil {
			return fmt.Errorf("engine: create %s: %w", sub, err)
		}
	}
	// The key that signs and checks the ledgers' checkpoints, before any
	// ledger is recovered (DIR/signing.key is created on first use).
	if err := db.loadKey(); err != nil {
		return err
	}
	metaPath := filepath.Join(db.dir, metaFile)
	if db.opts.metaPath != "" {
		metaPath = db.opts.metaPath
	}
	// A metadata file missing (or empty) beside ledger directories is
	// rebuilt from the segments, and the consumers' positions, which only
	// it held, are lost: the new file says so until the loss is accepted.
	lost := ""
	if missing := metaMissing(metaPath); missing != "" {
		names, lerr := db.fs.List(filepath.Join(db.dir, ledgersDir))
		if lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
			return fmt.Errorf("engine: list ledgers: %w", lerr)
		}
		if slices.ContainsFunc(names, isLedgerDirName) {
			lost = fmt.Sprintf("the metadata file %s was %s at the Open of %s and was rebuilt from the segments", metaPath, missing, time.Now().UTC().Format(time.RFC3339))
		}
	}
	if db.meta, err = openMeta(metaPath, lost); err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			// bbolt's flock on the file: another process has it open.
			return fmt.Errorf("%w: %s: its metadata file is locked by another process: %w", ErrLocked, db.dir, err)
		}
		return err
	}
	if db.idx, err = db.openIndex(); err != nil {
		return err
	}
	metas, err := meta.Load(db.meta)
	if err != nil {
		return err
	}
	known := map[eventid.LedgerID]ledgerMeta{}
	for _, m := range metas {
		known[m.ID] = m
	}
	// Every ledger directory is a ledger, whether or not the metadata
	// knows it (a crash may come between the two).
	names, err := db.fs.List(filepath.Join(db.dir, ledgersDir))
	if err != nil {
		return fmt.Errorf("engine: list ledgers: %w", err)
	}
	// An import interrupted by a crash leaves a ".import-*" directory,
	// never a ledger (see import.go); nothing can be importing now.
	// Its events may be indexed already (see importer.index): their
	// entries first, then the directory (a crash between leaves it, for
	// the next Open to do again).
	for _, id := range importLeftoverLedgers(names) {
		if err := db.idx.DeleteLedger(id); err != nil {
			return fmt.Errorf("engine: remove the index entries of an interrupted import of ledger %s: %w", id, err)
		}
	}
	if err := removeImportLeftovers(db.fs, filepath.Join(db.dir, ledgersDir), names); err != nil {
		return fmt.Errorf("engine: remove an interrupted import: %w", err)
	}
	if err := removeTakeLeftovers(db.fs, filepath.Join(db.dir, ledgersDir), names); err != nil {
		return err
	}
	var ids []eventid.LedgerID
	for _, name := range names {
		// Only the name ledgerDir gives (lower-case hex) is a ledger: an
		// upper-case copy would name the same ledger a second time.
		id, err := eventid.ParseLedgerID(name)
		if err != nil || id.String() != name {
			continue
		}
		// A Stat that fails (an I/O error) does not make the ledger
		// vanish: recovering it reports what is wrong, if anything is.
		if fi, err := db.fs.Stat(filepath.Join(db.dir, ledgersDir, name)); err == nil && !fi.IsDir() || errors.Is(err, os.ErrNotExist) {
			continue
		}
		ids = append(ids, id)
	}
	for id := range known {
		if !slices.Contains(ids, id) {
			// By name, as Unavailable says and as Ledger and
			// CreateLedger look it up.
			key := known[id].Name
			if key == "" {
				key = id.String()
			}
			db.setBroken(key, id, fmt.Errorf("%w: ledger %s (%q): its segment directory is missing", ErrLedgerUnavailable, id, known[id].Name))
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	// Open reads of the index its format version (index.Open) and each
	// ledger's progress marker. Pebble checks a block's checksum when it
	// reads the block: a damaged one here is found now, and the index is
	// rebuilt as one that cannot be opened is, rather than every ledger
	// refused. (Damage elsewhere in it is found by the reads that reach
	// it, which then fail.)
	//
	// Each ledger's marker is where recovery starts verifying (none
	// with FullVerifyOnOpen, or after a rebuild).
	markers := map[eventid.LedgerID]segment.Head{}
	progressErr := map[eventid.LedgerID]error{}
	if !db.opts.FullVerifyOnOpen {
		for _, id := range ids {
			head, ok, err := db.idx.Progress(id)
			if err != nil && (pebble.IsCorruptionError(err) || errors.Is(err, index.ErrCorruption)) {
				db.keepWitnesses(db.idx) // those that can still be read
				db.idx.Close()           // its error is the damage again
				db.idx = nil
				if db.idx, err = db.rebuildIndex(err); err != nil {
					return err
				}
				clear(markers)
				clear(progressErr)
				break
			}
			switch {
			case err != nil:
				progressErr[id] = err
			case ok:
				markers[id] = head
			}
		}
	}
	var recovered []*ledger
	var refused []openRefusal
	for _, id := range ids {
		m, ok := known[id]
		err := progressErr[id]
		var l *ledger
		var found ledgerMeta
		if err == nil {
			l, err = db.recoverLedger(id, m, ok, markers[id], &found)
		}
		if errors.Is(err, errUnfinishedCreate) {
			// A crash in CreateLedger before the genesis event was
			// durable: the ledger was never acknowledged and holds no
			// event. Remove what is left of it.
			if err = db.removeLedgerDir(id); err == nil {
				continue
			}
		}
		if err != nil {
			r := openRefusal{id: id, err: withPermissionHint(db.dir, fmt.Errorf("%w: ledger %s: %w", ErrLedgerUnavailable, id, err)), found: found}
			if errors.Is(err, ErrUnsigned) {
				// Refused for its checkpoint evidence only: AcceptLedger
				// may accept it.
				r.unsigned = &unsignedLedger{meta: m, haveMeta: ok}
			}
			refused = append(refused, r)
			continue
		}
		recovered = append(recovered, l)
	}
	// Names are given once every ledger is known: two may claim one, and
	// a refused ledger keeps its own.
	db.registerLedgers(recovered, refused, known)
	if err := db.keepRefusedWitnesses(); err != nil {
		return err
	}
	var changed []ledgerMeta
	db.witnessed = map[*ledger]uint64{}
	for _, l := range db.byID {
		m := l.currentMeta()
		changed = append(changed, m)
		db.witnessed[l] = m.Witness.Seq
	}
	// A record of the version before msgpack is rewritten once, that of
	// a refused ledger as it was read (its witness included).
	for _, m := range metas {
		if m.Legacy && !slices.ContainsFunc(changed, func(c ledgerMeta) bool { return c.ID == m.ID }) {
			changed = append(changed, m)
		}
	}
	if len(changed) > 0 {
		if err := meta.Put(db.meta, changed...); err != nil {
			return fmt.Errorf("engine: write metadata: %w", err)
		}
	}
	return nil
}

func (db *DB) segmentOptions(id eventid.LedgerID) segment.Options {
	return segment.Options{
		FS:            db.fs,
		Ledger:        id,
		SegmentSize:   db.opts.SegmentSize,
		Durability:    db.opts.Durability,
		SyncInterval:  db.opts.SyncInterval,
		MaxRecordSize: db.opts.MaxEventSize,
		Now:           db.opts.Now,
		// The writer's watch of the ledger's files (watch.go), and a
		// read-only follower's (segment.Log.Follow: its directory and the
		// segment it follows removed or replaced): files of the operating
		// system's file system only.
		Watch: db.opts.fs == nil,
	}
}

func (db *DB) ledgerDir(id eventid.LedgerID) string {
	return filepath.Join(db.dir, ledgersDir, id.String())
}

// recoverLedger opens one ledger's segments from marker (the index's
// progress marker; the zero Head to verify them all), and brings the index
// up to the tail.
//
// found, if not nil, gets the metadata of the ledger's genesis event once
// it is read, even if the ledger is refused after: a refused ledger keeps
// the name it has (see registerLedgers).
func (db *DB) recoverLedger(id eventid.LedgerID, m ledgerMeta, haveMeta bool, marker segment.Head, found *ledgerMeta) (*ledger, error) {
	dir := db.ledgerDir(id)
	// Its metadata is set below, once the segments are read.
	l := newLedger(db, ledgerMeta{ID: id})
	so := l.writerOptions()
	// Recovery refuses segments that lost what a witness says was
	// durable, before it cuts anything.
	so.Witness = db.witness(id, m, haveMeta)
	// Every record is verified, but those of the sealed segments that
	// an earlier Open verified and that did not change since (stamps.go;
	// none with FullVerifyOnOpen).
	so.VerifySealed = true
	if !db.opts.FullVerifyOnOpen {
		so.Stamps = readStamps(db.fs, dir)
	}
	log, rec, err := segment.Open(dir, so, marker)
	if errors.Is(err, segment.ErrNoLog) && so.Witness.Seq != 0 {
		// Not an unfinished creation: a witness (the metadata's, or the
		// index's when meta.db is gone) says events were durable.
		return nil, lostEverySegment(dir, so.Witness)
	}
	if errors.Is(err, segment.ErrNoLog) && !haveMeta {
		return nil, errUnfinishedCreate
	}
	if errors.Is(err, segment.ErrProgressMismatch) {
		// The index is ahead of the segments (their unsynced tail was
		// lost while the index's was not) or wrong: rebuild it. Open
		// checked the witness first: had a durable record been lost,
		// it would have said so (corruption) instead; the second Open
		// checks it again.
		if err := db.idx.DeleteLedger(id); err != nil {
			return nil, err
		}
		marker = segment.Head{}
		log, rec, err = segment.Open(dir, so, marker)
	}
	if err != nil {
		return nil, err
	}
	if log.Head().Seq == 0 {
		log.Close()
		if !haveMeta {
			return nil, errUnfinishedCreate
		}
		return nil, fmt.Errorf("%w: ledger %s (%q) has lost its genesis event: its segments hold no event", segment.ErrCorruption, id, m.Name)
	}
	l.log = log
	name := m.Name
	if name == "" {
		name = id.String()
	}
	// Rebuilding the index rebuilds every tree file too (recoverTree):
	// catchUp from the first record writes the new one beside the old, in
	// the same pass over the segments.
	var built *tree.File
	if db.opts.RebuildIndex && marker.Seq == 0 {
		if built, err = createTreeTmp(db.fs, dir, id); err != nil {
			log.Close()
			return nil, err
		}
	}
	if err := l.catchUpTree(marker, name, built); err != nil {
		log.Close()
		discardTreeTmp(db.fs, dir, built)
		return nil, err
	}
	if !haveMeta || m.Genesis.IsZero() {
		if m, err = metaFromGenesis(log); err != nil {
			log.Close()
			discardTreeTmp(db.fs, dir, built)
			return nil, err
		}
	}
	l.meta = m
	if found != nil {
		*found = m
	}
	// The Merkle tree, once the segments are recovered and indexed.
	if err := db.recoverTree(l, built, rec); err != nil {
		log.Close()
		return nil, err
	}
	writeStamps(db.fs, dir, so.Stamps, rec.Stamps)
	return l, nil
}

// openIndex opens the index. The index is derived from the segments: one
// that cannot be opened (a crash while Pebble was creating it, damage) is
// moved to DIR/index.broken, replacing any earlier one, and rebuilt; see
// IndexRebuilt. One of a newer format is refused: a newer annal wrote it; so is one that cannot be read for lack of
// permission or of file descriptors.
func (db *DB) openIndex() (*index.Index, error) {
	path := filepath.Join(db.dir, indexDir)
	if db.opts.RebuildIndex {
		// The index is moved aside: keep the witnesses it holds first,
		// the only ones left when meta.db is gone.
		old, err := index.Open(path, index.Options{FS: db.fs, CacheSize: db.opts.CacheSize})
		if err == nil {
			db.keepWitnesses(old)
			old.Close()
		} else if systemError(err) {
			// A full disk, a permission, too many open files: the
			// rebuild would fail as well (and Pebble, left behind by
			// the failed open, holds the index's lock: the rebuild's
			// error was "lock held by current process"). The cause is
			// the error, and nothing is moved.
			return nil, fmt.Errorf("engine: open the index %s to rebuild it: %w; nothing was moved or changed: the index is rebuilt once that is cured", path, err)
		}
		return db.rebuildIndex(errRebuildAsked)
	}
	idx, err := index.Open(path, index.Options{FS: db.fs, CacheSize: db.opts.CacheSize})
	if err != nil && dirlock.Held(err) {
		// Another process (or DB) has the index open: not damage.
		return nil, fmt.Errorf("%w: %s: its index %s is locked by another process or DB: %w", ErrLocked, db.dir, path, err)
	}
	if errors.Is(err, index.ErrNotWritable) || errors.Is(err, syscall.EROFS) {
		return nil, fmt.Errorf("engine: open index: %s is not writable (no permission, or a read-only file system); the events in the segments are not affected: %w", path, err)
	}
	// A full disk, a format from a newer annal, a missing permission or
	// too many open files say nothing of the index's state: report them,
	// and move nothing.
	if err == nil || errors.Is(err, index.ErrFormatVersion) || errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EMFILE) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		if err != nil {
			return nil, fmt.Errorf("engine: open index: %w", err)
		}
		return idx, nil
	}
	return db.rebuildIndex(err)
}

// keepWitnesses records the durable witness of every ledger in the
// ledgers directory that idx, an index about to be rebuilt, holds and can
// read: recovery uses them (see witness) as it would have used idx's.
func (db *DB) keepWitnesses(idx *index.Index) {
	names, err := db.fs.List(filepath.Join(db.dir, ledgersDir))
	if err != nil {
		return
	}
	for _, name := range names {
		id, err := eventid.ParseLedgerID(name)
		if err != nil || id.String() != name {
			continue
		}
		if d, ok, err := idx.Durable(id); err == nil && ok {
			if db.oldWitness == nil {
				db.oldWitness = map[eventid.LedgerID]segment.Head{}
			}
			db.oldWitness[id] = d
		}
	}
}

// keepRefusedWitnesses writes into the rebuilt index the witnesses that
// keepWitnesses read from the old one, of the ledgers Open refused: their
// only witness when meta.db is gone, which the next Open must find too.
// The marker's progress is the zero Head (nothing indexed: recovery
// verifies from the first record), its durable head the witness.
func (db *DB) keepRefusedWitnesses() error {
	b := db.idx.NewBatch()
	defer b.Close()
	n := 0
	for id, w := range db.oldWitness {
		if _, ok := db.byID[id]; !ok {
			b.SetProgressDurable(id, segment.Head{}, w)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := b.Commit(false); err != nil {
		return fmt.Errorf("engine: keep the durable witness of %d refused ledgers in the rebuilt index: %w", n, err)
	}
	return nil
}

// rebuildIndex moves the index to DIR/index.broken, replacing any earlier
// one, and opens a new, empty one, which Open fills from the segments. err
// says why; see IndexRebuilt.
func (db *DB) rebuildIndex(err error) (*index.Index, error) {
	path := filepath.Join(db.dir, indexDir)
	broken := filepath.Join(db.dir, indexDir+".broken")
	if rerr := db.fs.RemoveAll(broken); rerr != nil {
		return nil, fmt.Errorf("engine: open index: %w (and removing %s to rebuild it failed: %v)", err, broken, rerr)
	}
	if rerr := db.fs.Rename(path, broken); rerr != nil {
		return nil, fmt.Errorf("engine: open index: %w (and moving it aside to rebuild it failed: %v)", err, rerr)
	}
	if rerr := mkdirSynced(db.fs, path); rerr != nil {
		return nil, fmt.Errorf("engine: open index: %w (and creating a new one failed: %v)", err, rerr)
	}
	if err == errRebuildAsked {
		db.indexRebuilt = fmt.Errorf("engine: the index was rebuilt from the segments, as asked (the old one is in %s): %w", broken, err)
	} else {
		db.indexRebuilt = fmt.Errorf("engine: the index could not be opened and was rebuilt from the segments (the old one is in %s): %w", broken, err)
	}
	idx, err := index.Open(path, index.Options{FS: db.fs, CacheSize: db.opts.CacheSize})
	if err != nil {
		return nil, fmt.Errorf("engine: open a new index: %w", err)
	}
	return idx, nil
}

// progressEvery is how many records catchUp indexes between two calls of
// Options.Progress: a multiple of its batches of catchUpBatch.
const progressEvery = 16 * catchUpBatch

// catchUpBatch is how many records catchUp gathers into one index batch.
const catchUpBatch = 4096

// errRebuildAsked is why the index is rebuilt with Options.RebuildIndex.
var errRebuildAsked = errors.New("Options.RebuildIndex")

// IndexRebuilt returns why the index was rebuilt from the segments when
// the DB opened because it could not be opened (or what Open reads of it,
// each ledger's progress, was damaged), or nil if it was not.
// The segments are the truth and hold every event, so nothing is lost; the
// error is for the operator, who may want to know why (DIR/index.broken
// holds the old index until the next such rebuild).
func (db *DB) IndexRebuilt() error { return db.indexRebuilt }

// errUnfinishedCreate: a ledger directory without a genesis event that
// the metadata does not know, which a crash in CreateLedger leaves.
var errUnfinishedCreate = errors.New("unfinished ledger creation")

// removeLedgerDir removes the directory of a ledger and its index entries,
// durably.
func (db *DB) removeLedgerDir(id eventid.LedgerID) error {
	if err := db.idx.DeleteLedger(id); err != nil {
		return err
	}
	if err := db.fs.RemoveAll(db.ledgerDir(id)); err != nil {
		return fmt.Errorf("engine: remove the unfinished ledger %s: %w", id, err)
	}
	return segment.SyncDir(db.fs, filepath.Join(db.dir, ledgersDir))
}

// catchUp indexes every record after from (a progress marker, or the zero
// Head for all of them) up to the segment log's head.
//
// It calls Options.Progress, if set, every progressEvery records and at
// the end; name names the ledger there ("": no progress, for Import,
// which reports its own).
func (l *ledger) catchUp(from segment.Head, name string) error {
	return l.catchUpTree(from, name, nil)
}

// catchUpTree is catchUp that also appends the leaf of every record it
// reads to tf, if not nil (a tree file being rebuilt, from the first
// record: see recoverLedger).
//
// Two goroutines share the work: this one reads the segments and builds
// index batches of catchUpBatch records (and the tree's leaves), the
// other commits them, in order, while the next is built.
func (l *ledger) catchUpTree(from segment.Head, name string, tf *tree.File) error {
	seg, off := uint64(1), int64(segment.FirstOffset)
	if from.Seq != 0 {
		seg, off = from.Loc.Segment, from.Loc.End()
	}
	it := l.log.NewIterator(seg, off)
	defer it.Close()
	progress := l.db.opts.Progress
	if name == "" {
		progress = nil
	}
	what := "index ledger " + name
	total := int64(l.log.Head().Seq - from.Seq)
	c := l.db.startCommitter()
	b := l.db.idx.NewBatch()
	if from.Seq == 0 {
		// Indexed from the first record (no progress marker, or
		// FullVerifyOnOpen): the blocks and postings of an earlier
		// indexing would overlap the new ones, so the first commit
		// deletes them first.
		b.DeleteEvents(l.log.Ledger())
	}
	n, added := 0, 0
	var head segment.Head
	var leaves treeLeaves
	// The digest of each idempotent batch is computed over its records,
	// as the append computed it (reindexer); a batch's first record is
	// added at its last, and no progress marker is committed in between.
	var rx reindexer
	emit := func(r *index.Record) { b.Add(l.log.Ledger(), r) }
	fail := func(err error) error {
		b.Close()
		c.finish()
		return err
	}
	for it.Next() {
		r := it.Record()
		if err := rx.add(r, it.Location(), emit); err != nil {
			return fail(fmt.Errorf("ledger %s: %w", l.log.Ledger(), err))
		}
		if tf != nil {
			if err := leaves.add(tf, r); err != nil {
				return fail(fmt.Errorf("ledger %s: rebuild the tree file: %w", l.log.Ledger(), err))
			}
		}
		head = segment.Head{ID: r.ID, Seq: r.Seq, Loc: it.Location()}
		n++
		if added++; added >= catchUpBatch && !rx.open() {
			added = 0
			b.SetProgressDurable(l.log.Ledger(), head, l.log.Durable())
			if !c.commit(b) {
				return c.finish()
			}
			b = c.batch(l.db.idx)
		}
		if progress != nil && n%progressEvery == 0 {
			progress(what, int64(n), total)
		}
	}
	if err := it.Err(); err != nil {
		return fail(err)
	}
	if err := rx.end(); err != nil {
		return fail(fmt.Errorf("ledger %s: %w", l.log.Ledger(), err))
	}
	if tf != nil {
		if err := leaves.flush(tf); err != nil {
			return fail(fmt.Errorf("ledger %s: rebuild the tree file: %w", l.log.Ledger(), err))
		}
	}
	if head.Seq != 0 {
		b.SetProgressDurable(l.log.Ledger(), head, l.log.Durable())
		if !c.commit(b) {
			return c.finish()
		}
	} else if from.Seq == 0 {
		// No record at all: the deletion alone.
		if !c.commit(b) {
			return c.finish()
		}
	} else {
		b.Close()
	}
	if err := c.finish(); err != nil {
		return err
	}
	if head.Seq != 0 && progress != nil {
		progress(what, int64(n), total)
	}
	l.idxMu.Lock() // a read-only DB's readers may be looking (readonly.go)
	l.indexed, l.idxHead = l.log.Head().Seq, l.log.Head()
	l.idxMu.Unlock()
	return nil
}

// committer commits index batches on a goroutine of its own, in the order
// given, while the caller builds the next: see catchUpTree.
type committer struct {
	queue  chan *index.Batch
	free   chan *index.Batch // batches committed, for batch to reuse
	failed chan struct{}     // closed once a commit failed
	done   chan struct{}     // closed once the goroutine ended
	err    error             // the first commit's error; read after done
}

// committerFree is how many committed batches a committer keeps for
// reuse: one being built while one is queued and one is committed. A
// batch reused keeps the room its records, postings and Pebble batch grew
// to, which a new one grows again from nothing (an import's batches of
// thousands of events spent a third of their time growing slices).
const committerFree = 2

// startCommitter starts a committer.
func (db *DB) startCommitter() *committer {
	return db.startCommitterWith(func(commit func() error) error { return commit() })
}

// startCommitterWith starts a committer that commits each batch through
// wrap: wrap calls commit, or returns an error (then the batch is not
// committed, and that error is the committer's).
func (db *DB) startCommitterWith(wrap func(commit func() error) error) *committer {
	c := &committer{queue: make(chan *index.Batch, 1), free: make(chan *index.Batch, committerFree),
		failed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for b := range c.queue {
			if c.err == nil {
				if c.err = wrap(func() error { return b.Commit(false) }); c.err != nil {
					close(c.failed)
				}
			}
			if c.err == nil {
				// Committed, thus empty (Commit resets it): for reuse.
				select {
				case c.free <- b:
					continue
				default:
				}
			}
			b.Close()
		}
	}()
	return c
}

// batch returns an empty batch of idx to fill and queue with commit: one
// the committer committed, or a new one.
func (c *committer) batch(idx *index.Index) *index.Batch {
	select {
	case b := <-c.free:
		return b
	default:
		return idx.NewBatch()
	}
}

// commit queues b, which the committer commits and closes. It reports
// false, closing b, if an earlier commit failed (finish tells why).
func (c *committer) commit(b *index.Batch) bool {
	select {
	case c.queue <- b:
		return true
	case <-c.failed:
		b.Close()
		return false
	}
}

// finish waits for the batches queued to be committed, ends the
// goroutine, and returns the first commit's error.
func (c *committer) finish() error {
	close(c.queue)
	<-c.done
	close(c.free)
	for b := range c.free {
		b.Close()
	}
	return c.err
}

// treeLeaves gathers the leaves of records for a tree file, appending
// them treeChunk at a time.
type treeLeaves struct {
	leaves []tree.Hash
	buf    []byte
}

func (t *treeLeaves) add(f *tree.File, r *segment.Record) error {
	var h tree.Hash
	h, t.buf = leafHash(t.buf, r)
	t.leaves = append(t.leaves, h)
	if len(t.leaves) >= treeChunk {
		return t.flush(f)
	}
	return nil
}

func (t *treeLeaves) flush(f *tree.File) error {
	if len(t.leaves) == 0 {
		return nil
	}
	err := f.Append(t.leaves)
	t.leaves = t.leaves[:0]
	return err
}

// setBroken records ledger id as unavailable under key (its name, or its
// ID if no name is known), with why.
func (db *DB) setBroken(key string, id eventid.LedgerID, err error) {
	db.broken[key] = err
	if db.brokenIDs == nil {
		db.brokenIDs = map[eventid.LedgerID]string{}
	}
	db.brokenIDs[id] = key
}

// brokenByID returns why ledger id is unavailable, if it is, and the
// name (or ID) it is unavailable under.
func (db *DB) brokenByID(id eventid.LedgerID) (key string, err error, ok bool) {
	key, ok = db.brokenIDs[id]
	if !ok {
		key = id.String()
	}
	err, ok = db.broken[key]
	return key, err, ok
}

// Unavailable returns the ledgers that failed recovery when the DB opened,
// by name (or ledger ID, if the metadata did not know it), with why.
func (db *DB) Unavailable() map[string]error {
	db.mu.RLock()
	defer db.mu.RUnlock()
	out := make(map[string]error, len(db.broken))
	for k, v := range db.broken {
		out[k] = v
	}
	return out
}

// IndexMemory is the memory the index's Pebble holds, in bytes.
type IndexMemory = index.Memory

// IndexMemory returns what the index holds in memory now: its block cache
// and memtables, bounded together by Options.CacheSize. With cgo, the default on Linux,
// Pebble allocates them in C memory, which the Go runtime's statistics do
// not show; see "Memory" in docs/engine.md. Zero after Close.
func (db *DB) IndexMemory() IndexMemory {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed || db.idx == nil {
		return IndexMemory{}
	}
	return db.idx.Memory()
}

// Close syncs and closes every ledger, writes the metadata and flushes the
// index, and releases the directory.
func (db *DB) Close() error {
	if db.ro != nil {
		return db.closeReadOnly()
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed = true
	ledgers := make([]*ledger, 0, len(db.byID))
	for _, l := range db.byID {
		ledgers = append(ledgers, l)
	}
	db.mu.Unlock()
	// The node's lease renewal and its watch of the other nodes first: a
	// TakeLedger of the watch holds a read (its context is cancelled).
	db.stopNode()
	// Iterators and subscribers stop with ErrClosed; wait for the reads
	// touching files now.
	db.stopReads()
	// Consumers closed before the logs (no Ack syncs a closed log); their
	// positions written with the metadata.
	consumerPositions := db.closeConsumers()
	// Before the logs close, and before the last metadata write, which
	// must be the last: it holds the exact head of every ledger.
	db.stopWitnessWriter()
	db.stopCheckpointer()
	// A file replaced under the DB gets none of its writes: they would go
	// to an unlinked file, or into another's. Checked before the logs
	// close: a ledger whose own files changed is stopped by the check
	// (segment.Log.Fail), and its Close writes nothing into them.
	var errs []error
	dirErr := db.checkDir(true)
	if dirErr != nil {
		errs = append(errs, fmt.Errorf("%w (Close flushed neither the index nor the metadata)", dirErr))
	}
	// The replica Writers before the logs, which they read (a sealed
	// segment to store), each given a last checkpoint: Replicated mode's
	// have nothing pending (every append waited), Shipped mode's ship what
	// they can within StoreTimeout; the rest stays in the segments and
	// the next Open ships it.
	for _, l := range ledgers {
		if err := l.closeReplica(dirErr == nil); err != nil {
			errs = append(errs, err)
		}
	}
	// Nothing more is written to the bucket as this node's: the next
	// process of the node may take its lease at once.
	db.releaseLease()
	var metas []ledgerMeta
	for _, l := range ledgers {
		err := l.log.Close()
		if err != nil && !errors.Is(err, ErrDirectoryChanged) {
			errs = append(errs, fmt.Errorf("ledger %s: %w", l.meta.Name, err))
		}
		if err == nil && dirErr == nil {
			writeWrittenStamps(db.fs, l.log.Dir(), l.log.WrittenStamps())
		}
		metas = append(metas, l.currentMeta())
	}
	if db.idx != nil && dirErr == nil {
		// The index's witness of each ledger, exact now as the
		// metadata's: an append indexed before its sync (Interval, None)
		// left it behind, and with meta.db lost it is the only one.
		if err := db.indexWitnesses(ledgers); err != nil {
			errs = append(errs, err)
		}
		// Flush the memtables, so that the next Open does not replay them.
		if err := db.idx.Flush(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(consumerPositions) > 0 && dirErr == nil {
		if err := db.storeConsumers(consumerPositions); err != nil {
			errs = append(errs, err)
		}
	}
	if len(metas) > 0 && dirErr == nil {
		if err := meta.Put(db.meta, metas...); err != nil {
			errs = append(errs, err)
		}
	}
	// A signed checkpoint of every ledger that grew, its log synced by
	// its Close: of its head then.
	if dirErr == nil {
		errs = append(errs, db.closeCheckpoints(ledgers)...)
	}
	// The tlog witnesses' answers that came after their checkpoint's
	// quorum are not waited for.
	db.stopCosigners()
	for _, l := range ledgers {
		if dirErr != nil {
			l.dropTreePending()
		}
		if err := l.closeTree(); err != nil {
			errs = append(errs, fmt.Errorf("ledger %s: close the tree file: %w", l.meta.Name, err))
		}
	}
	errs = append(errs, db.closeStores())
	return errors.Join(errs...)
}

// indexWitnesses writes, in one index commit, the progress marker of
// every ledger whose records are all indexed, with its durable head:
// called by Close once the ledgers' logs are closed (synced).
func (db *DB) indexWitnesses(ledgers []*ledger) error {
	// The tails first: their flushes write progress markers too, which
	// would otherwise follow these.
	tailErr := db.idx.FlushTails()
	b := db.idx.NewBatch()
	defer b.Close()
	n := 0
	for _, l := range ledgers {
		l.idxMu.Lock()
		head, ok := l.log.Head(), l.idxErr == nil && !l.idxAhead
		ok = ok && l.indexed == head.Seq && head.Seq != 0 && head.Loc.Segment != 0
		l.idxMu.Unlock()
		if !ok {
			continue
		}
		// Unchanged (nothing appended since the last index commit, or
		// all of it synced then): no write, so a read-only use of the DB
		// leaves the index as it was.
		d := l.log.Durable()
		if p, found, err := db.idx.Progress(l.meta.ID); err == nil && found && p == head {
			if was, found, err := db.idx.Durable(l.meta.ID); err == nil && found && was == d {
				continue
			}
		}
		b.SetProgressDurable(l.meta.ID, head, d)
		n++
	}
	if n == 0 {
		return tailErr
	}
	return errors.Join(tailErr, b.Commit(false))
}

func (db *DB) closeStores() error {
	var errs []error
	if db.idx != nil {
		errs = append(errs, db.idx.Close())
	}
	if db.meta != nil {
		errs = append(errs, db.meta.Close())
	}
	if db.lock != nil {
		errs = append(errs, db.lock.Close())
	}
	return errors.Join(errs...)
}

// isLedgerDirName reports whether name, an entry of ledgers/, is the
// directory of a ledger: its ID in lower-case hex, as ledgerDir names it.
func isLedgerDirName(name string) bool {
	id, err := eventid.ParseLedgerID(name)
	return err == nil && id.String() == name
}

// systemError reports whether err is an error of the system, not of the
// data: a full disk or quota, a permission, a read-only file system, too
// many open files, no memory.
func systemError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, os.ErrPermission) ||
		errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, index.ErrNotWritable)
}
