package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// An import writes its segments in DIR/ledgers/.import-LLLLLLLL-XXXXXXXXXXXXXXXX
// (the ledger's ID and 16 random hex digits): not a ledger ID, so Open
// does not take it for a ledger. Only once every event is written and synced is the directory
// renamed to DIR/ledgers/LLLLLLLL, which is the moment the ledger comes to
// exist. A crash before leaves such a directory behind; see
// removeImportLeftovers.
const importDirPrefix = ".import-"

// importBatchBytes is how much event data (canonical meta and data) an
// import gathers into one segment append. A variable for tests.
var importBatchBytes = 4 << 20

// importChunkBytes is the size of the chunks of input that an import
// parses in parallel (ndjson.ChunkReader): a few of them are in memory at
// a time (see importChunksHeld), so their size sets most of an import's
// own memory. A variable for tests.
var importChunkBytes = 2 << 20

// ImportOptions are the options of Import.
type ImportOptions struct {
	// Name is the name of the new ledger. Empty means the genesis event's
	// data "name" (a string), or else its key. Either way the name must
	// follow the rule for ledger names (see "Names" in docs/engine.md):
	// a genesis event whose name does not fails with ErrInvalid, and
	// Name can choose another.
	//
	// The name is written in the ledger's directory (its NAME file)
	// before the ledger appears there, so that neither a lost metadata
	// file nor a crash during the import's last step can lose it.
	Name string
	// Progress, if not nil, is called now and then (after each batch of
	// events is written, and once at the end) with the events imported and
	// the bytes of input read so far. It is called from the goroutine that
	// called Import.
	Progress func(events, bytes int64)
}

// Import reads a whole ledger in the Evently NDJSON download format (see
// package ndjson and docs/format.md section 5) and stores it as a new
// ledger, with every event ID and timestamp as they are in the input. The
// first line must be the ledger's genesis event; every line is verified
// (its ID recomputed from its content, the ledger ID, its timestamp and the
// ID of the line before; timestamps strictly increasing) before it is
// stored.
//
// Import is all or nothing: the ledger appears, indexed and with its
// metadata, only if every line is valid and every write succeeded.
// Otherwise nothing is left in the directory, in the index or in the
// metadata.
//
// A bad line (not the format, not valid JSON, an ID that does not verify,
// an event of another ledger, a line too long, an event larger than
// Options.MaxEventSize) fails with an error that matches ErrInvalid and
// wraps an *ndjson.LineError naming the line; so does an input that cannot
// be read (that error also matches ndjson.ErrRead). Empty input fails with
// ErrInvalid (and ndjson.ErrNoEvents). A ledger whose ID or name exists in
// the directory fails with ErrLedgerExists before anything is written.
// When ctx ends, Import stops within 64 lines, removes what it wrote and
// returns ctx's error. When Close begins, it stops the same way and
// returns ErrClosed; Close removes what it wrote, and does not wait for an
// Import that is reading its input.
//
// Names (entity, key, event) are kept byte for byte, whatever their
// characters: a ledger whose IDs verify imports, whoever wrote it, and a
// name may hold what Append refuses in a new event (a control character
// such as a tab or a NUL, more than 1024 bytes). A name must be 1 to 65,535
// bytes (the segment format's limit; an empty name is what the reads take
// to mean any): a line with another fails as a bad line does (ErrInvalid,
// an *ndjson.LineError naming the line), although its ID verifies. See
// "Names" in docs/engine.md.
//
// The input is read ahead in chunks of about 2 MB, which are parsed in
// parallel (one goroutine a CPU, ndjson.ChunkReader); the chain is verified
// and the events written in input order. Reading goes on concurrently:
// Import may have read further than the line it fails at. At most a few
// chunks (the CPUs plus 4) are in memory at a time, their memory reused.
//
// Events are written without fsync, in batches of a few MB, and synced
// once at the end. Reading the input and writing the segments run
// concurrently with everything else; a ledger of the same ID or name
// created meanwhile makes Import fail with ErrLedgerExists at the end
// (and an import of the same ledger in progress makes it fail at once).
// The events are indexed as they are written, and the leaf hashes of the
// Merkle tree computed by the goroutines that parse the input; the index
// is flushed to disk while the segments are synced, before Import
// returns. The last
// step (moving the segments into place, committing the index's progress
// marker, writing the metadata, registering the ledger) excludes
// CreateLedger, other imports and Close until it is done; it is short.
func (db *DB) Import(ctx context.Context, r io.Reader, opts ImportOptions) (LedgerInfo, error) {
	if err := ctx.Err(); err != nil {
		return LedgerInfo{}, err
	}
	if err := db.checkDir(true); err != nil {
		return LedgerInfo{}, err
	}
	if opts.Name != "" {
		if err := checkLedgerName(opts.Name); err != nil {
			return LedgerInfo{}, fmt.Errorf("engine: import: %w", err)
		}
	}
	// The reader stops reading the input once ctx ends or Close begins.
	stop := func() error { return db.stopped(ctx) }
	// The leaf hashes of the Merkle tree are computed by the workers that
	// parse the lines, in parallel, not by the goroutine that writes. At
	// most importChunksHeld chunks are held beside those being read and
	// parsed (see importer.held), and their memory is reused.
	workers := runtime.GOMAXPROCS(0)
	rd := ndjson.NewChunkReaderLimit(r, workers, importChunkBytes, stop, eventLeafHash, workers+2+importChunksHeld)
	im := &importer{db: db, ctx: ctx, opts: opts, rd: rd, v: ndjson.NewVerifier(),
		entries: make([]segment.Entry, 0, importBatchEntries), leaves: make([]tree.Hash, 0, importBatchEntries)}
	info, err := im.run()
	im.rd.Close()
	if err != nil {
		im.cleanup()
		if c := ctx.Err(); c != nil && errors.Is(err, c) {
			return LedgerInfo{}, c
		}
		return LedgerInfo{}, err
	}
	return info, nil
}

// files runs f, which touches the import's files or the DB's, with
// enterRead held: Close waits for it, and once Close has begun files
// returns ErrClosed without running f. The import's own files are then
// Close's to remove (see abortImports).
func (im *importer) files(f func() error) error {
	if err := im.db.enterRead(); err != nil {
		return err
	}
	defer im.db.exitRead()
	return f()
}

// eventLeafHash returns the leaf hash of a parsed event: that of the
// record it is stored as (leafHash), the line being rebuilt from it as
// Export writes it. Called by a ChunkReader's workers, concurrently.
func eventLeafHash(ev *ndjson.Event) [32]byte {
	bp := leafBufs.Get().(*[]byte)
	var h tree.Hash
	h, *bp = lineLeafHash(*bp, ev.ID, ev.Entity, ev.Key, ev.Event, ev.Meta, ev.Data)
	leafBufs.Put(bp)
	return h
}

var leafBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// abortImports closes and removes the temporary segments of the imports
// in progress, and their index entries: called by Close once no read is
// in progress, when every import is reading its input, or is yet to find
// that Close has begun.
func (db *DB) abortImports() {
	r := &db.readers
	r.importsMu.Lock()
	defer r.importsMu.Unlock()
	for im := range r.imports {
		if im.log != nil {
			im.log.Close()
			im.log = nil
		}
		if im.tree != nil {
			im.tree.Close()
			im.tree = nil
		}
		if im.indexing {
			// The import's indexer commits with enterRead held: none
			// is committing now, and none will again.
			db.idx.DeleteLedger(im.id)
			im.indexing = false
		}
		if im.tmp != "" {
			db.fs.RemoveAll(im.tmp)
			segment.SyncDir(db.fs, filepath.Join(db.dir, ledgersDir))
			im.tmp = ""
		}
		delete(r.imports, im)
	}
}

// registerImport records (on) or forgets an import that may have a
// temporary directory or index entries, for abortImports. Called with
// enterRead held. It refuses (ErrLedgerExists) an import of the ledger ID
// that another import in progress has: the two would index the same
// ledger.
func (db *DB) registerImport(im *importer, on bool) error {
	r := &db.readers
	r.importsMu.Lock()
	defer r.importsMu.Unlock()
	if !on {
		delete(r.imports, im)
		return nil
	}
	for other := range r.imports {
		if other.id == im.id {
			return fmt.Errorf("%w: import: ledger %s is being imported (the input's genesis event gives that ID)", ErrLedgerExists, im.id)
		}
	}
	if r.imports == nil {
		r.imports = map[*importer]struct{}{}
	}
	r.imports[im] = struct{}{}
	return nil
}

// importer is one Import in progress.
type importer struct {
	db   *DB
	ctx  context.Context
	opts ImportOptions
	rd   *ndjson.ChunkReader
	v    *ndjson.Verifier

	// The chunk of parsed lines being read, the next event's place in it,
	// the number of the line last read, and the input read up to the end
	// of the chunk.
	chunk *ndjson.Chunk
	pos   int
	line  int
	bytes int64
	// The chunks read before chunk, whose events the batch may hold:
	// released (rd.Release) once the batch is written, so that the
	// reader reuses their memory.
	held []*ndjson.Chunk

	name string
	id   eventid.LedgerID
	tmp  string // the temporary directory, while it exists
	log  *segment.Log
	tree *tree.File // the tree, built in tmp as the events are written

	// The index entries of the events written are committed as they are
	// written, by ix's goroutine; indexing says that some may exist (in
	// the index, or queued), which a failed import deletes.
	ix       *committer
	indexing bool
	// Pebble's flush count when ix's goroutine last looked, once it has
	// (see compactEarly).
	flushes   int64
	flushSeen bool
	rec       index.Record // the record given to index.Batch.Add

	// The batch being gathered: entries whose names, Meta and Data point
	// into the chunks' events (which stay valid), their leaf hashes (the
	// chunks' Sums), the size of their meta and data, and the line of the
	// first entry.
	entries    []segment.Entry
	leaves     []tree.Hash
	leaf       tree.Hash // the leaf hash of the event next returned
	batchBytes int
	firstLine  int
	batch      segment.Batch
	ck         Checkpoint // signed once every event is written
}

// importChunksHeld is the most chunks of input the importer holds: a batch
// is written once it holds events of that many chunks before the one
// being read (events of small meta and data, whose batches fill up slower
// than the chunks do), so that the reader, with a limit of chunks in
// memory, can always read on.
const importChunksHeld = 2

// importBatchEntries is the room made at first for the entries of a batch:
// about as many as importBatchBytes holds of small events.
const importBatchEntries = 16 << 10

// addLeaves adds the leaves of the batch just written to the tree.
func (im *importer) addLeaves() error {
	if err := im.tree.Append(im.leaves); err != nil {
		return fmt.Errorf("the tree file: %w", err)
	}
	return nil
}

// index queues the index entries of the batch just written (without a
// progress marker: commit sets it once the ledger is in place) for the
// indexer's goroutine, which commits them while the next batch is read
// and written. The index gets them before the ledger exists: abortImports,
// cleanup and commit's undo delete them when the import fails, and Open
// those of an import a crash interrupted (see removeImportLeftovers).
func (im *importer) index() *index.Batch {
	db := im.db
	if im.ix == nil {
		im.ix = db.startCommitterWith(func(commit func() error) error {
			if err := db.enterRead(); err != nil {
				return err
			}
			defer db.exitRead()
			if err := commit(); err != nil {
				return err
			}
			im.compactEarly()
			return nil
		})
	}
	im.indexing = true
	b := im.ix.batch(db.idx)
	r := &im.rec
	for i := range im.batch.IDs {
		e := &im.batch.Entries[i]
		*r = index.Record{ID: im.batch.IDs[i], Seq: im.batch.FirstSeq + uint64(i), Loc: im.batch.Locations[i],
			Entity: stringBytes(e.Entity), Key: stringBytes(e.Key), Event: stringBytes(e.Event)}
		b.Add(im.id, r)
	}
	*r = index.Record{}
	return b
}

// compactEarly is called by the indexer's goroutine after each commit.
// Pebble compacts its flushed tables (level 0) into the levels below once
// two flushes overlap, and an import's entries overlap from one flush to
// the next (the postings of a stream, entity or event name interleave
// with those of the others). An import whose entries fill the memtables
// once and a half (10^6 events, with the default cache) thus ended with
// two flushes, the one Pebble made when the memtable filled and the
// last, and with the compaction of all its entries, which Close waited
// for. Once Pebble has flushed during the import and level 0 holds that
// flush alone, compactEarly flushes what the memtable holds then (little:
// one batch or two), so that the compaction starts now, beside the
// import; the last flush then lands alone in level 0, which Pebble
// leaves there. Pebble's flush count tells a new flush (its first call
// only records it).
func (im *importer) compactEarly() {
	idx := im.db.idx
	n, sublevels, err := idx.FlushState()
	if err != nil {
		return
	}
	if !im.flushSeen || n == im.flushes || sublevels != 1 {
		im.flushes, im.flushSeen = n, true
		return
	}
	// A failed flush is retried by Pebble, and one that keeps failing
	// fails the commits that follow, as when Pebble flushes on its own.
	_ = idx.Flush()
	im.flushes, _, _ = idx.FlushState()
}

// queueIndex hands the batch index built to the indexer. It may wait for
// the indexer (a full queue), which takes enterRead's read lock for each
// commit: it must run without that lock held (see flush).
func (im *importer) queueIndex(b *index.Batch) error {
	if !im.ix.commit(b) {
		err := im.ix.finish()
		im.ix = nil
		return fmt.Errorf("the index: %w", err)
	}
	return nil
}

// finishIndex waits for the index entries queued to be committed.
func (im *importer) finishIndex() error {
	if im.ix == nil {
		return nil
	}
	err := im.ix.finish()
	im.ix = nil
	if err != nil {
		return fmt.Errorf("engine: import of ledger %s: the index: %w", im.id, err)
	}
	return nil
}

// flushIndex starts flushing the index's memtables, which hold the
// import's entries (committed, not yet covered by a progress marker:
// what a crash leaves then is the entries of an interrupted import,
// which Open deletes), and returns a function that waits for the flush.
// It runs while the segments and the tree are synced and the ledger is
// committed, instead of after them in Close (or the next checkpoint);
// Close flushes what is left. Its error is not the import's: a failed
// flush is retried by Close, which reports it. The flush holds
// enterRead, so that Close waits for it before it closes the index.
func (im *importer) flushIndex() (wait func()) {
	db := im.db
	if db.enterRead() != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer db.exitRead()
		_ = db.idx.Flush()
	}()
	return func() { <-done }
}

// checkpointTree syncs and closes the import's tree, of n leaves, and
// writes a signed checkpoint of size n in the import's directory.
func (im *importer) checkpointTree(n uint64) (Checkpoint, error) {
	db := im.db
	t := im.tree
	im.tree = nil
	if t.Size() != n {
		t.Close()
		return Checkpoint{}, fmt.Errorf("the tree holds %d leaves, the segments %d events", t.Size(), n)
	}
	err := t.Sync()
	var root tree.Hash
	if err == nil {
		root, err = t.Root(n)
	}
	if err != nil {
		t.Close()
		return Checkpoint{}, fmt.Errorf("the tree file: %w", err)
	}
	// Signed as an extension of what the signer signed for this ledger
	// before, if anything (the same ledger imported again).
	body := tree.Checkpoint{Origin: tree.Origin(db.key.Signer.Name(), uint32(im.id)), Size: n, Root: root}
	msg, err := db.sign(t, body, nil)
	if err == nil {
		msg, err = db.cosign(t, body, msg) // Options.TlogWitnesses
	}
	if cerr := t.Close(); err == nil && cerr != nil {
		return Checkpoint{}, fmt.Errorf("the tree file: %w", cerr)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("sign the checkpoint: %w", err)
	}
	if err := writeFileAtomic(db.fs, im.tmp, checkpointFileName, msg, true); err != nil {
		return Checkpoint{}, err
	}
	return checkpointOf(im.id, body, msg), nil
}

func (im *importer) run() (LedgerInfo, error) {
	db := im.db
	ev, err := im.next()
	if err == io.EOF {
		return LedgerInfo{}, fmt.Errorf("%w: import: %w", ErrInvalid, ndjson.ErrNoEvents)
	}
	if err != nil {
		return LedgerInfo{}, err
	}
	im.id = im.v.Ledger()
	im.name = im.opts.Name
	if im.name == "" {
		im.name = genesisName(ev)
		if err := checkLedgerName(im.name); err != nil {
			return LedgerInfo{}, fmt.Errorf("engine: import: the genesis event names the ledger, but: %w (choose a name: ImportOptions.Name, annal import --name NAME)", err)
		}
	}
	if err := db.importTargetFree(im.name, im.id); err != nil {
		return LedgerInfo{}, err
	}

	// Write the segments in a temporary directory.
	if err := im.files(func() (err error) {
		if err := db.registerImport(im, true); err != nil {
			return err
		}
		// Entries left by an import of the same ledger that failed
		// to delete them: its events are written again.
		if err := db.idx.DeleteLedger(im.id); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		if im.tmp, err = db.makeImportDir(im.id); err != nil {
			return err
		}
		so := db.segmentOptions(im.id)
		so.Durability = None
		if im.log, err = segment.Create(im.tmp, so); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		if im.tree, err = tree.Create(db.fs, db.fs.PathJoin(im.tmp, treeFileName), uint32(im.id)); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		return nil
	}); err != nil {
		return LedgerInfo{}, err
	}
	if err := im.add(ev); err != nil {
		return LedgerInfo{}, err
	}
	for {
		ev, err := im.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return LedgerInfo{}, err
		}
		if err := im.add(ev); err != nil {
			return LedgerInfo{}, err
		}
	}
	if err := im.flush(); err != nil {
		return LedgerInfo{}, err
	}
	if err := im.finishIndex(); err != nil {
		return LedgerInfo{}, err
	}
	defer im.flushIndex()()
	var head segment.Head
	var meta ledgerMeta
	if err := im.files(func() error {
		if err := im.log.Sync(); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		head = im.log.Head()
		var err error
		if meta, err = metaFromGenesis(im.log); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		meta.Name = im.name
		err = im.log.Close()
		im.log = nil
		if err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		// The tree, synced, and a signed checkpoint of every imported
		// event, in the directory before it becomes the ledger (the name
		// file's directory sync below covers the checkpoint's entry).
		if im.ck, err = im.checkpointTree(head.Seq); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		// The name goes with the segments, before the rename that makes
		// the ledger exist: a crash in commit, or a lost metadata file,
		// leaves a ledger Open names as it was imported (see names.go).
		if err := writeNameFile(db.fs, im.tmp, im.name); err != nil {
			return fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
		}
		return nil
	}); err != nil {
		return LedgerInfo{}, err
	}
	if im.opts.Progress != nil {
		im.opts.Progress(int64(head.Seq), im.bytes)
	}
	if err := db.stopped(im.ctx); err != nil {
		return LedgerInfo{}, err
	}
	var info LedgerInfo
	err = im.files(func() (err error) {
		info, err = im.commit(head, meta)
		return err
	})
	return info, err
}

// next reads and verifies the next line. Errors name the line and match
// ErrInvalid; io.EOF is returned as it is. The lines are parsed ahead, in
// parallel (ndjson.ChunkReader); verifying the chain and applying the
// DB's rules is done here, in input order, so the first bad line is the
// one reported.
func (im *importer) next() (*ndjson.Event, error) {
	var err error
	for err == nil && (im.chunk == nil || im.pos == len(im.chunk.Events)) {
		if im.chunk != nil {
			im.held = append(im.held, im.chunk)
			im.chunk = nil
			if len(im.held) >= importChunksHeld {
				if err := im.flush(); err != nil {
					return nil, err
				}
			}
		}
		im.chunk, err = im.rd.Next()
		im.pos = 0
		if err == nil {
			im.bytes = im.chunk.End
		}
	}
	var le *ndjson.LineError
	if err == io.EOF || err != nil && !errors.As(err, &le) {
		return nil, err // the end, or ctx's error or ErrClosed (the reader's stop)
	}
	var ev *ndjson.Event
	if err == nil {
		ev = &im.chunk.Events[im.pos]
		im.leaf = im.chunk.Sums[im.pos]
		im.line = im.chunk.FirstLine + im.pos
		im.pos++
		if err = im.v.Verify(ev); err != nil {
			err = &ndjson.LineError{Line: im.line, Err: err}
		}
	}
	if err == nil {
		err = im.check(ev)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: import: %w", ErrInvalid, err)
	}
	if im.line%checkEvery == 0 {
		if err := im.db.stopped(im.ctx); err != nil {
			return nil, err
		}
	}
	return ev, nil
}

// check applies the rule for the names a ledger may hold and the limits
// of the DB to a line. The rule is not Append's: a name with a control
// character verifies, and a ledger that holds one imports byte for byte
// (names.StoredProblem; "Names" in docs/engine.md).
func (im *importer) check(ev *ndjson.Event) error {
	for _, f := range [...]struct{ what, v string }{{"entity", ev.Entity}, {"key", ev.Key}, {"event name", ev.Event}} {
		if p := names.StoredProblem(f.v); p != "" {
			return &ndjson.LineError{Line: im.line, Err: fmt.Errorf("%s %s", f.what, p)}
		}
	}
	if n := len(ev.Meta) + len(ev.Data); n > im.db.opts.MaxEventSize {
		return &ndjson.LineError{Line: im.line, Err: fmt.Errorf("meta and data are %d bytes in canonical form, the limit (Options.MaxEventSize) is %d", n, im.db.opts.MaxEventSize)}
	}
	return nil
}

// add adds a verified event to the batch, writing the batch first if the
// event's meta and data would take it over importBatchBytes. The entry
// points into the event, which a ChunkReader's chunk keeps valid.
func (im *importer) add(ev *ndjson.Event) error {
	n := len(ev.Meta) + len(ev.Data)
	if im.batchBytes+n > importBatchBytes && len(im.entries) > 0 {
		if err := im.flush(); err != nil {
			return err
		}
	}
	if len(im.entries) == 0 {
		im.firstLine = im.line
	}
	im.batchBytes += n
	im.entries = append(im.entries, segment.Entry{Entity: ev.Entity, Key: ev.Key, Event: ev.Event,
		Meta: ev.Meta, Data: ev.Data, Micros: ev.Micros, ID: ev.ID})
	im.leaves = append(im.leaves, im.leaf)
	return nil
}

// flush appends the gathered batch to the segments.
func (im *importer) flush() error {
	if len(im.entries) == 0 {
		im.releaseHeld()
		return nil
	}
	if err := im.db.stopped(im.ctx); err != nil {
		return err
	}
	// Verified: next verified each entry's ID (im.v), chained from the
	// line before, which is the head the segment log appends after: it
	// is not computed a second time.
	im.batch = segment.Batch{Entries: im.entries, Durability: None, Verified: true, IDs: im.batch.IDs[:0], Locations: im.batch.Locations[:0]}
	var seq uint64 // the head, for Progress
	var ib *index.Batch
	err := im.files(func() error {
		if err := im.log.Append(&im.batch); err != nil {
			return err
		}
		// Synced once at the end: the disk writes meanwhile.
		im.log.StartWriteback()
		seq = im.log.Head().Seq
		if err := im.addLeaves(); err != nil {
			return err
		}
		ib = im.index()
		return nil
	})
	if err == nil {
		// Queued outside files' read lock: the indexer takes it for
		// each commit, and once Close waits for the write lock a new
		// read lock waits too. Waiting for the indexer with one held (a
		// full queue) deadlocked with Close
		// (TestLifecycleCloseConcurrent).
		err = im.queueIndex(ib)
	}
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		// Every line was verified already: this is a write error, or
		// a check of the segment log that the Verifier lacks.
		err = fmt.Errorf("engine: import of ledger %s: lines %d to %d: %w", im.id, im.firstLine, im.firstLine+len(im.entries)-1, err)
		for _, e := range []error{segment.ErrIDMismatch, segment.ErrTimeOrder, segment.ErrTooLarge, segment.ErrNotGenesis} {
			if errors.Is(err, e) {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		return err
	}
	clear(im.entries) // let the chunks go
	im.entries = im.entries[:0]
	im.releaseHeld()
	im.leaves = im.leaves[:0]
	im.batchBytes = 0
	if im.opts.Progress != nil {
		im.opts.Progress(int64(seq), im.bytes)
	}
	return nil
}

// releaseHeld releases the chunks held, once the batch is written, indexed
// (the index batch holds copies of the names) and added to the tree:
// nothing points into the chunks before the one being read any longer.
func (im *importer) releaseHeld() {
	for i, c := range im.held {
		im.rd.Release(c)
		im.held[i] = nil
	}
	im.held = im.held[:0]
}

// commit moves the written and synced segments into place, indexes them,
// writes the metadata and registers the ledger. It is the only step of an
// import that runs alone with CreateLedger. It runs with enterRead held,
// so Close waits for it.
func (im *importer) commit(head segment.Head, lm ledgerMeta) (LedgerInfo, error) {
	db := im.db
	db.creating.Lock()
	defer db.creating.Unlock()
	if err := db.importTargetFreeLocked(im.name, im.id); err != nil {
		return LedgerInfo{}, err
	}
	final := db.ledgerDir(im.id)
	parent := filepath.Join(db.dir, ledgersDir)
	if err := db.fs.Rename(im.tmp, final); err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: import of ledger %s: move %s into place: %w", im.id, im.tmp, err)
	}
	im.tmp = ""
	db.registerImport(im, false)
	im.indexing = false // undo deletes the entries from here on
	// From here on, undo removes the ledger.
	undo := func(l *ledger, err error) (LedgerInfo, error) {
		if l != nil {
			l.log.Close()
			l.closeTree()
		}
		errs := []error{err}
		if rmErr := db.fs.RemoveAll(final); rmErr != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", final, rmErr))
		} else if syncErr := segment.SyncDir(db.fs, parent); syncErr != nil {
			errs = append(errs, syncErr)
		}
		if delErr := db.idx.DeleteLedger(im.id); delErr != nil {
			errs = append(errs, fmt.Errorf("removing its index entries: %w", delErr))
		}
		return LedgerInfo{}, fmt.Errorf("engine: import of ledger %s: %w", im.id, errors.Join(errs...))
	}
	if err := segment.SyncDir(db.fs, parent); err != nil {
		return undo(nil, err)
	}
	if h := db.test.importCommit; h != nil {
		h("renamed")
	}

	// Its events are indexed (im.index): the progress marker makes the
	// index cover them. The read lock keeps Close from closing the index
	// and the metadata meanwhile.
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return undo(nil, ErrClosed)
	}
	// The progress marker is the head just written and synced: nothing needs
	// verifying again (every ID was computed by the Log and compared).
	l := newLedger(db, lm)
	log, _, err := segment.Open(final, l.writerOptions(), head)
	if err != nil {
		db.mu.RUnlock()
		return undo(nil, err)
	}
	l.log = log
	err = l.markImported()
	if err == nil {
		// The tree written and synced in the temporary directory, with
		// the checkpoint of every event.
		l.tree, err = tree.OpenFile(db.fs, db.fs.PathJoin(final, treeFileName), uint32(im.id))
		if err == nil && l.tree.Size() != head.Seq {
			err = fmt.Errorf("the tree file holds %d leaves, the ledger %d events", l.tree.Size(), head.Seq)
		}
		ck := im.ck
		l.latest.Store(&ck)
	}
	if h := db.test.importCommit; err == nil && h != nil {
		h("indexed")
	}
	if err == nil {
		err = meta.Put(db.meta, l.currentMeta())
	}
	db.mu.RUnlock()
	if err != nil {
		return undo(l, err)
	}

	info, err := db.registerReplicated(im.ctx, l, im.name, im.id)
	if err != nil {
		return LedgerInfo{}, fmt.Errorf("engine: import of ledger %s: %w", im.id, err)
	}
	return info, nil
}

// markImported commits the progress marker of an imported ledger, whose
// events the import indexed as it wrote them: the index covers them from
// then on, as if catchUp had indexed them.
func (l *ledger) markImported() error {
	head := l.log.Head()
	b := l.db.idx.NewBatch()
	defer b.Close()
	if head.Seq != 0 {
		b.SetProgressDurable(l.log.Ledger(), head, l.log.Durable())
	}
	if err := b.Commit(false); err != nil {
		return err
	}
	l.idxMu.Lock()
	l.indexed, l.idxHead = head.Seq, head
	l.idxMu.Unlock()
	return nil
}

// cleanup removes what a failed import wrote before its commit; after
// Close began, Close does (abortImports).
func (im *importer) cleanup() {
	// The indexer first: nothing is committed after the deletion below.
	if im.ix != nil {
		im.ix.finish()
		im.ix = nil
	}
	im.files(func() error {
		if im.indexing {
			im.db.idx.DeleteLedger(im.id)
			im.indexing = false
		}
		if im.log != nil {
			im.log.Close()
			im.log = nil
		}
		if im.tree != nil {
			im.tree.Close()
			im.tree = nil
		}
		if im.tmp != "" {
			im.db.fs.RemoveAll(im.tmp)
			segment.SyncDir(im.db.fs, filepath.Join(im.db.dir, ledgersDir))
			im.tmp = ""
		}
		im.db.registerImport(im, false)
		return nil
	})
}

// importTargetFree checks that no ledger has the name or the ID.
func (db *DB) importTargetFree(name string, id eventid.LedgerID) error {
	db.creating.Lock()
	defer db.creating.Unlock()
	return db.importTargetFreeLocked(name, id)
}

// importTargetFreeLocked is importTargetFree with db.creating held.
func (db *DB) importTargetFreeLocked(name string, id eventid.LedgerID) error {
	db.mu.RLock()
	closed := db.closed
	_, exists := db.byName[name]
	_, broken := db.broken[name]
	db.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case db.ledgerIDTaken(id):
		return fmt.Errorf("%w: import: ledger %s exists (the input's genesis event gives that ID)", ErrLedgerExists, id)
	case exists || broken:
		return fmt.Errorf("%w: import: a ledger named %q exists", ErrLedgerExists, name)
	}
	return nil
}

// makeImportDir creates a new, empty temporary directory for an import of
// ledger id: importDirPrefix, the ID, "-" and 16 random hex digits.
func (db *DB) makeImportDir(id eventid.LedgerID) (string, error) {
	var b [8]byte
	for {
		rand.Read(b[:])
		dir := filepath.Join(db.dir, ledgersDir, importDirPrefix+id.String()+"-"+hex.EncodeToString(b[:]))
		if _, err := db.fs.Stat(dir); err == nil {
			continue
		}
		if err := db.fs.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("engine: import: create %s: %w", dir, err)
		}
		return dir, nil
	}
}

// importLeftoverLedgers returns the IDs of the ledgers whose imports left
// temporary directories among names (the listing of DIR/ledgers), except
// those that are ledgers there: the index may hold entries of their events
// (an import indexes what it writes), which Open deletes. A directory
// named as before issue 15 (no ID) holds none.
func importLeftoverLedgers(names []string) []eventid.LedgerID {
	var ids []eventid.LedgerID
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, importDirPrefix)
		hexID, _, ok2 := strings.Cut(rest, "-")
		if !ok || !ok2 {
			continue
		}
		id, err := eventid.ParseLedgerID(hexID)
		if err != nil || slices.Contains(names, id.String()) || slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// removeImportLeftovers removes the temporary directories of imports that
// a crash interrupted from ledgersPath (DIR/ledgers): they hold no ledger
// (an import's ledger exists only once its directory is renamed to the
// ledger's ID). Open may call it while it holds the directory's lock, when
// no import can be running.
// names is the listing of ledgersPath.
func removeImportLeftovers(fs vfs.FS, ledgersPath string, names []string) error {
	isImport := func(name string) bool { return strings.HasPrefix(name, importDirPrefix) }
	return removeLeftovers(fs, ledgersPath, names, isImport, "an interrupted import")
}

// removeLeftovers removes the entries among names (the listing of
// ledgersPath) that leftover says are what was left of an interrupted
// operation, what, and syncs ledgersPath if it removed any.
func removeLeftovers(fs vfs.FS, ledgersPath string, names []string, leftover func(string) bool, what string) error {
	removed := false
	for _, name := range names {
		if !leftover(name) {
			continue
		}
		if err := fs.RemoveAll(filepath.Join(ledgersPath, name)); err != nil {
			return fmt.Errorf("engine: remove the leftover of %s %s: %w", what, name, err)
		}
		removed = true
	}
	if removed {
		return segment.SyncDir(fs, ledgersPath)
	}
	return nil
}

// genesisName returns the name that metaFromGenesis gives a ledger with
// this genesis event: its data's "name", or else its key. It decodes the
// data the same way, so that both agree.
func genesisName(ev *ndjson.Event) string {
	var data struct{ Name, Description string }
	if json.Unmarshal(ev.Data, &data) == nil && data.Name != "" {
		return data.Name
	}
	// A copy: ev.Key points into the input's chunk, whose memory the
	// reader reuses.
	return strings.Clone(ev.Key)
}
