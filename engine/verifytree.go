package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// Verifying the Merkle tree (docs/format.md, section 9) against the
// segments: Verify computes every event's leaf hash on the goroutines
// that verify the segments (segment.Log.VerifyVisit), and one goroutine
// feeds them, in ledger order, through the tree file's Checker. Then the
// latest signed checkpoint: its signature, and the root of the events at
// its size against the signed root.

// leafWindow bounds how many segments' leaf hashes may wait for the
// checker: a segment's verification starts only when the checker has
// consumed every segment up to leafWindow before it, so the memory of a
// verification stays a few segments' worth of hashes (32 bytes an event)
// however long the ledger.
func leafWindow() uint64 { return uint64(runtime.GOMAXPROCS(0)) + 2 }

// leafChunk is how many leaf hashes a verifying goroutine hands to the
// checker at once.
const leafChunk = 4096

var leafChunks = sync.Pool{New: func() any { c := make([]tree.Hash, 0, leafChunk); return &c }}

// segLeaves are the leaf hashes of one segment's events, computed by the
// goroutine verifying it, in chunks the checker takes as they fill.
type segLeaves struct {
	chunks []*[]tree.Hash // filled, under leafFeed.mu
	done   bool
	err    error
	cur    *[]tree.Hash // being filled, by the verifying goroutine only
	// The digest of the index entries of the segment's records (see
	// index.Digest: sums, so those of the segments add up), computed by
	// the verifying goroutine, and the first problem of its batches.
	digest *index.Digest
	rx     reindexer
	rxErr  error
}

// leafFeed carries leaf hashes from the verifying goroutines to the
// checker, in ledger order, one segment after the other.
type leafFeed struct {
	events uint64 // records wanted: events #1 to #events
	n      uint64 // leaves wanted: events #1 to #n (n <= events)
	ledger eventid.LedgerID
	leaves bool // compute the leaf hashes (there is a tree to check)
	// want is the digest of the index entries of events #1 to #events, the
	// segments' digests added as each is done; rxErr the first problem
	// of a batch, by position, and the segment it is in.
	want     *index.Digest
	rxErr    error
	rxSeg    uint64
	ctx      context.Context
	mu       sync.Mutex
	cond     sync.Cond
	segs     map[uint64]*segLeaves
	consumed uint64 // segments the checker is done with
	closed   bool   // the verification of the segments ended
	stop     func() bool
}

func newLeafFeed(ctx context.Context, ledger eventid.LedgerID, events, n uint64, leaves bool) *leafFeed {
	f := &leafFeed{events: events, n: n, ledger: ledger, leaves: leaves, want: index.NewDigest(ledger), ctx: ctx, segs: map[uint64]*segLeaves{}}
	f.cond.L = &f.mu
	// Wake the waiters when ctx ends.
	f.stop = context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	return f
}

// bucket returns segment n's leaves, created on first use; with f.mu held.
func (f *leafFeed) bucket(n uint64) *segLeaves {
	b := f.segs[n]
	if b == nil {
		b = &segLeaves{}
		f.segs[n] = b
	}
	return b
}

// visitor returns the segment.Visitor that computes the leaf hashes.
func (f *leafFeed) visitor() *segment.Visitor {
	return &segment.Visitor{
		Segment: func(seg uint64) func(*segment.Record, segment.Location) {
			// Room in the window first.
			f.mu.Lock()
			for f.leaves && seg > f.consumed+leafWindow() && f.ctx.Err() == nil && !f.closed {
				f.cond.Wait()
			}
			b := f.bucket(seg)
			f.mu.Unlock()
			b.digest = index.NewDigest(f.ledger)
			var buf []byte
			return func(r *segment.Record, loc segment.Location) {
				if r.Seq > f.events {
					return
				}
				if b.rxErr == nil {
					b.rxErr = b.rx.add(r, loc, b.digest.Add)
				}
				if !f.leaves || r.Seq > f.n {
					return
				}
				if b.cur == nil {
					b.cur = leafChunks.Get().(*[]tree.Hash)
					*b.cur = (*b.cur)[:0]
				}
				var h tree.Hash
				h, buf = leafHash(buf, r)
				*b.cur = append(*b.cur, h)
				if len(*b.cur) == leafChunk {
					f.mu.Lock()
					b.chunks = append(b.chunks, b.cur)
					f.cond.Broadcast()
					f.mu.Unlock()
					b.cur = nil
				}
			}
		},
		Done: func(seg uint64, err error) {
			f.mu.Lock()
			b := f.bucket(seg)
			if b.cur != nil {
				b.chunks = append(b.chunks, b.cur)
				b.cur = nil
			}
			b.done, b.err = true, err
			if err == nil && b.digest != nil {
				// A batch never spans segments: each ends whole.
				if b.rxErr == nil {
					b.rxErr = b.rx.end()
				}
				if b.rxErr != nil {
					if f.rxErr == nil || seg < f.rxSeg {
						f.rxErr, f.rxSeg = b.rxErr, seg
					}
				} else {
					mergeDigest(f.want, b.digest)
				}
				b.digest = nil
			}
			if !f.leaves {
				delete(f.segs, seg)
			}
			f.cond.Broadcast()
			f.mu.Unlock()
		},
	}
}

// mergeDigest adds the entries of d to into: the counts and sums of each
// family add up (index.Digest is order-free).
func mergeDigest(into, d *index.Digest) {
	for i := range into.Count {
		into.Count[i] += d.Count[i]
		into.Sum[i] += d.Sum[i]
	}
}

// close says that the verification of the segments ended: no segment
// not done yet will be.
func (f *leafFeed) close() {
	f.stop()
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
}

// next returns the next chunk of leaves of segment seg, waiting for it;
// more is false once the segment has none left (ok: its verification
// passed), or will never have (the verification failed or ended).
func (f *leafFeed) next(seg uint64) (chunk *[]tree.Hash, more, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		b := f.segs[seg]
		if b != nil && len(b.chunks) > 0 {
			chunk = b.chunks[0]
			b.chunks = b.chunks[1:]
			return chunk, true, true
		}
		if b != nil && b.done {
			delete(f.segs, seg)
			f.consumed = seg
			f.cond.Broadcast()
			return nil, false, b.err == nil
		}
		if f.closed || f.ctx.Err() != nil {
			return nil, false, false
		}
		f.cond.Wait()
	}
}

// treeCheck is what the checker found: the first place where the tree
// file and the events differ, and the root of the events at the
// checkpoint's size.
type treeCheck struct {
	fed      uint64              // leaves fed
	mismatch *tree.MismatchError // the first difference, nil if none
	cpRoot   tree.Hash           // the events' root at cpSize, if rootOK
	rootOK   bool                // cpRoot is known (no mismatch before cpSize)
	cut      bool                // the leaves stopped coming (the segments' check failed or ended)
	err      error               // a read error of the tree file
}

// check feeds the leaves of segments 1, 2, ... through a Checker of the
// first f.n leaves of the tree file, and takes the root at cpSize (0:
// none).
func (f *leafFeed) check(t *tree.File, cpSize uint64) treeCheck {
	var res treeCheck
	c := t.NewChecker(f.n)
	for seg := uint64(1); res.fed < f.n; seg++ {
		for {
			chunk, more, ok := f.next(seg)
			if !more {
				if !ok {
					res.cut = true
				}
				break
			}
			for _, h := range *chunk {
				if res.fed == f.n {
					break
				}
				if res.mismatch == nil && res.err == nil {
					if err := c.Add(h); err != nil {
						var m *tree.MismatchError
						if errors.As(err, &m) {
							res.mismatch = m
						} else {
							res.err = err
						}
					}
				}
				res.fed++
				if res.fed == cpSize && res.mismatch == nil && res.err == nil {
					res.cpRoot, res.rootOK = c.Root(), true
				}
			}
			leafChunks.Put(chunk)
		}
		if res.cut {
			break
		}
	}
	// Let the verifying goroutines go on (they stop at the end of the
	// segments' check anyway): nothing more is consumed.
	f.mu.Lock()
	f.consumed = ^uint64(0) >> 1
	f.cond.Broadcast()
	f.mu.Unlock()
	return res
}

// treeSource is what the tree check of a verification compares the
// events with: the tree file's first n leaves, and the latest checkpoint.
type treeSource struct {
	t *tree.File
	// n is the number of leaves checked: the events indexed when the
	// verification began (events of them), or fewer when the tree could
	// not be extended (a write failed, the disk full: the tree lags until
	// a reopen recovers it from the segments; the leaves it has are
	// checked).
	n, events uint64
	cp        *Checkpoint // nil: none issued yet
	// why, on a read-only DB, says why t is nil: the tree file is not
	// checked (see VerifyReport.TreeNotChecked).
	why string
}

// treeSourceFor returns the tree size to check (the events committed now,
// once indexed: the tree file holds every indexed event) and the latest
// checkpoint, its signature verified with the DB's key.
func (db *DB) treeSourceFor(ctx context.Context, l *ledger) (treeSource, error) {
	var src treeSource
	if cp := l.latest.Load(); cp != nil {
		if _, err := db.openCheckpoint(l, cp.Note, ""); err != nil {
			return src, fmt.Errorf("%w: ledger %s: its latest checkpoint (file %s) %w", ErrRewritten, l.meta.Name, db.checkpointPath(l), err)
		}
		src.cp = cp
	}
	n := l.log.Head().Seq
	if db.ro != nil {
		return db.roTreeSource(l, src, n)
	}
	if err := db.waitIndexed(ctx, l, n); err != nil {
		return src, err
	}
	l.idxMu.Lock()
	l.flushTreeLocked() // the leaves waiting in memory, to the file
	t, terr := l.tree, l.treeErr
	l.idxMu.Unlock()
	switch {
	case terr != nil && errors.Is(terr, ErrClosed):
		return src, terr
	case t == nil:
		return src, fmt.Errorf("%w: ledger %s has no tree file open", ErrTreeDamaged, l.meta.Name)
	case terr == nil && t.Size() < n:
		return src, fmt.Errorf("%w: ledger %s: the tree file %s has %d leaves, %d events are indexed", ErrTreeDamaged, l.meta.Name, db.treePath(l), t.Size(), n)
	}
	src.t, src.n, src.events = t, min(n, t.Size()), n
	if src.cp != nil && src.cp.Size > src.n {
		return src, truncated(l, src.cp.Size, src.n)
	}
	return src, nil
}

// checkpointPath returns the path of the ledger's checkpoint file, for
// messages.
func (db *DB) checkpointPath(l *ledger) string {
	return db.fs.PathJoin(db.ledgerDir(l.meta.ID), "checkpoint")
}

// treePath returns the path of the ledger's tree file, for messages.
func (db *DB) treePath(l *ledger) string {
	return db.fs.PathJoin(db.ledgerDir(l.meta.ID), "tree")
}

func truncated(l *ledger, cpSize, events uint64) error {
	return fmt.Errorf("%w: ledger %s: truncated or rolled back: the checkpoint covers %d events, the ledger has %d", ErrRewritten, l.meta.Name, cpSize, events)
}

// openCheckpoint verifies a signed checkpoint of l with the key vkey
// ("": the DB's): its signature, and its origin, which must name l. The
// error wraps tree.ErrCheckpoint and names the key.
func (db *DB) openCheckpoint(l *ledger, msg []byte, vkey string) (Checkpoint, error) {
	v := db.verifier
	if vkey != "" {
		var err error
		if v, err = tree.NewVerifier(vkey); err != nil {
			return Checkpoint{}, fmt.Errorf("%w: the verifier key %q: %v", tree.ErrCheckpoint, vkey, err)
		}
	} else {
		vkey = db.VerifierKey()
	}
	c, err := openCheckpoint(msg, v, l.meta.ID)
	if err != nil {
		return c, fmt.Errorf("does not verify with the key %s: %w", vkey, err)
	}
	return c, nil
}

// idOf returns the ID of l's event #seq for a message ("?" if the index
// cannot say).
func (l *ledger) idOf(seq uint64) string {
	id, found, err := l.db.idx.BySeq(l.meta.ID, seq)
	if err != nil || !found {
		return "?"
	}
	return id.String()
}

func b64(h tree.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }

// crcNote says why the CRCs did not see a rewrite.
const crcNote = "its CRC32C and Event ID may still verify: CRC32C is not cryptographic, a change made on purpose can keep it, the SHA-256 tree cannot be fooled that way"

// judgeTree turns the tree check of a verification into its outcome:
// nil, ErrRewritten (the events are not those the tree or the signed
// checkpoint committed to) or ErrTreeDamaged (the tree file, derived,
// differs while the events give the signed root).
func (l *ledger) judgeTree(ctx context.Context, src treeSource, res treeCheck) error {
	name := l.meta.Name
	if res.err != nil {
		return fmt.Errorf("%w: ledger %s: the tree file %s cannot be read: %w (annal reindex, Options.RebuildIndex, rebuilds it from the segments)", ErrTreeDamaged, name, l.db.treePath(l), res.err)
	}
	m := res.mismatch
	if src.cp != nil {
		cp := src.cp
		root, ok := res.cpRoot, res.rootOK
		if !ok {
			// A difference before the checkpoint's size: the root of
			// the events there, from a second read of the segments (only
			// on this path).
			var err error
			root, _, err = l.segmentsRoot(ctx, nil, cp.Size)
			if err != nil {
				return err
			}
		}
		if root != cp.Root {
			if m != nil && m.Level == 0 && m.Leaf < cp.Size {
				seq := m.Leaf + 1
				return fmt.Errorf("%w: ledger %s: event #%d (%s) is not the event the tree committed to when it was appended: its leaf hash is %x, the tree holds %x; the checkpoint of size %d signed root %s, the events give %s; %s",
					ErrRewritten, name, seq, l.idOf(seq), m.Computed[:], m.Stored[:], cp.Size, b64(cp.Root), b64(root), crcNote)
			}
			return fmt.Errorf("%w: ledger %s: the events are not those the checkpoint committed to: the checkpoint of size %d signed root %s, the events give %s; %s (recomputed from changed events, or damaged too); %s",
				ErrRewritten, name, cp.Size, b64(cp.Root), b64(root), mismatchText(m), crcNote)
		}
		if m == nil {
			return nil
		}
		if m.Level == 0 && m.Leaf >= cp.Size {
			seq := m.Leaf + 1
			return fmt.Errorf("%w: ledger %s: event #%d (%s) is not the event the tree committed to when it was appended: its leaf hash is %x, the tree holds %x; the latest signed checkpoint covers events #1 to #%d only, so it cannot tell a damaged tree file from a changed event; %s",
				ErrRewritten, name, seq, l.idOf(seq), m.Computed[:], m.Stored[:], cp.Size, crcNote)
		}
		return fmt.Errorf("%w: ledger %s: %s; the events give the root the checkpoint of size %d signed: no event is changed; annal reindex (Options.RebuildIndex) rebuilds the tree from the segments",
			ErrTreeDamaged, name, mismatchText(m), cp.Size)
	}
	if m == nil {
		return nil
	}
	if m.Level > 0 {
		// Every leaf under that hash agreed with the events.
		return fmt.Errorf("%w: ledger %s: %s, while every leaf agrees with the events: annal reindex (Options.RebuildIndex) rebuilds the tree from the segments", ErrTreeDamaged, name, mismatchText(m))
	}
	seq := m.Leaf + 1
	return fmt.Errorf("%w: ledger %s: event #%d (%s) is not the event the tree committed to when it was appended: its leaf hash is %x, the tree holds %x; no checkpoint was signed yet, so none can tell a damaged tree file from a changed event; %s",
		ErrRewritten, name, seq, l.idOf(seq), m.Computed[:], m.Stored[:], crcNote)
}

// mismatchText says where the tree file differs from the events.
func mismatchText(m *tree.MismatchError) string {
	if m == nil {
		return "the tree file agrees with the events"
	}
	if m.Level == 0 {
		return fmt.Sprintf("the tree file's leaf %d (event #%d) is %x, the event gives %x", m.Leaf, m.Leaf+1, m.Stored[:], m.Computed[:])
	}
	return fmt.Sprintf("the tree file's hash at level %d completed by leaf %d (event #%d) is %x, the leaves give %x", m.Level, m.Leaf, m.Leaf+1, m.Stored[:], m.Computed[:])
}

// segmentsRoot reads the first n events of l from its segments and
// returns the root of their leaves; with t, also the first place where
// the tree file t differs from them (nil if none; if t has fewer than n
// leaves, it compares those it has).
func (l *ledger) segmentsRoot(ctx context.Context, t *tree.File, n uint64) (tree.Hash, *tree.MismatchError, error) {
	var b tree.Builder
	var c *tree.Checker
	var size uint64
	if t != nil {
		size = t.Size()
		c = t.NewChecker(min(n, size))
	}
	var mismatch *tree.MismatchError
	checked := uint64(0)
	var buf []byte
	it := l.log.NewIterator(1, segment.FirstOffset)
	defer it.Close()
	for b.Size() < n && it.Next() {
		r := it.Record()
		if r.Seq%4096 == 0 && ctx.Err() != nil {
			return tree.Hash{}, nil, ctx.Err()
		}
		var h tree.Hash
		h, buf = leafHash(buf, r)
		b.Add(h)
		if c != nil && mismatch == nil && checked < min(n, size) {
			if err := c.Add(h); err != nil {
				if !errors.As(err, &mismatch) {
					c = nil // unreadable: nothing to name
				}
			}
			checked++
		}
	}
	if err := it.Err(); err != nil {
		return tree.Hash{}, nil, fmt.Errorf("engine: ledger %s: read the events: %w", l.meta.Name, err)
	}
	if b.Size() < n {
		return tree.Hash{}, nil, truncated(l, n, b.Size())
	}
	return b.Root(), mismatch, nil
}

// VerifyCheckpoint proves that the ledger still extends a checkpoint
// issued earlier (note: a signed checkpoint; verifierKey: the key to check
// it with, "" for the DB's own): the signature and the origin (it must
// end with "/" and the ledger's ID; tree.ErrCheckpoint if not), then the
// root of the tree recomputed from the segments (not the tree file) at
// the checkpoint's size, then the consistency of the checkpoint with the
// ledger's current tree (a proof from the tree file, checked as an
// auditor would). A ledger with fewer events (truncated, rolled back) or
// another root (rewritten) fails with ErrRewritten, naming the first event
// where the tree file and the segments differ when they do; a tree file
// that is not consistent with a checkpoint the events agree with fails
// with ErrTreeDamaged.
func (db *DB) VerifyCheckpoint(ctx context.Context, ledgerName string, note []byte, verifierKey string) error {
	l, err := db.ledger(ledgerName)
	if err != nil {
		return err
	}
	c, err := db.openCheckpoint(l, note, verifierKey)
	if err != nil {
		return fmt.Errorf("engine: verify checkpoint of ledger %s: the checkpoint %w", l.meta.Name, err)
	}
	// The read stops when Close begins, and the call returns ErrClosed.
	vctx, cancel := db.untilClosing(ctx)
	defer cancel()
	if err := db.enterRead(); err != nil {
		return err
	}
	err = db.verifyCheckpoint(vctx, l, c)
	db.exitRead()
	if err != nil && vctx.Err() != nil && ctx.Err() == nil {
		return ErrClosed
	}
	return err
}

// verifyCheckpoint is VerifyCheckpoint's checks of the signed checkpoint
// c, run with enterRead held.
func (db *DB) verifyCheckpoint(ctx context.Context, l *ledger, c Checkpoint) error {
	events := l.visible().Seq
	if db.ro != nil {
		events = l.log.Head().Seq
	}
	if c.Size > events {
		return truncated(l, c.Size, events)
	}
	var t *tree.File
	var terr error
	if db.ro != nil {
		var why string
		if t, why = db.roTree(l); t == nil {
			terr = errors.New(why)
		}
	} else {
		l.idxMu.Lock()
		l.flushTreeLocked() // the leaves waiting in memory, to the file
		t, terr = l.tree, l.treeErr
		l.idxMu.Unlock()
	}
	if terr != nil && errors.Is(terr, ErrClosed) {
		return terr
	}
	if terr != nil {
		t = nil // the events are checked all the same
	}
	root, m, err := l.segmentsRoot(ctx, t, c.Size)
	if err != nil {
		return err
	}
	if root != c.Root {
		if m != nil && m.Level == 0 {
			seq := m.Leaf + 1
			return fmt.Errorf("%w: ledger %s: the checkpoint of size %d signed root %s, the events give %s: event #%d (%s) is not the event the tree committed to when it was appended (its leaf hash is %x, the tree holds %x); %s",
				ErrRewritten, l.meta.Name, c.Size, b64(c.Root), b64(root), seq, l.idOf(seq), m.Computed[:], m.Stored[:], crcNote)
		}
		return fmt.Errorf("%w: ledger %s: the checkpoint of size %d signed root %s, the events give %s (%s); %s",
			ErrRewritten, l.meta.Name, c.Size, b64(c.Root), b64(root), mismatchText(m), crcNote)
	}
	// The events extend the checkpoint. The tree file, proofs' source,
	// must agree: a consistency proof from it to its current size.
	if t == nil {
		return fmt.Errorf("%w: ledger %s: the events extend the checkpoint, but the tree file cannot be used: %w (annal reindex, Options.RebuildIndex, rebuilds it from the segments)", ErrTreeDamaged, l.meta.Name, terr)
	}
	n := t.Size()
	if n < c.Size {
		return fmt.Errorf("%w: ledger %s: the tree file %s has %d leaves, the checkpoint covers %d events (annal reindex, Options.RebuildIndex, rebuilds it from the segments)", ErrTreeDamaged, l.meta.Name, db.treePath(l), n, c.Size)
	}
	newRoot, err := t.Root(n)
	if err == nil {
		var proof []tree.Hash
		if proof, err = t.ConsistencyProof(c.Size, n); err == nil {
			err = tree.VerifyConsistency(c.Size, n, c.Root, newRoot, proof)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: ledger %s: the tree file %s is not consistent with the checkpoint of size %d, which the events agree with: %w (annal reindex, Options.RebuildIndex, rebuilds it from the segments)", ErrTreeDamaged, l.meta.Name, db.treePath(l), c.Size, err)
	}
	return nil
}

// roTreeSource is treeSourceFor on a read-only DB: the writer's tree file,
// opened read-only, holding n events or fewer (its unsynced tail lost
// in a crash: the leaves it has are checked), or none, src.why saying why.
func (db *DB) roTreeSource(l *ledger, src treeSource, n uint64) (treeSource, error) {
	src.events = n
	t, why := db.roTree(l)
	if t == nil {
		src.why = why
		return src, nil
	}
	src.t, src.n = t, min(n, t.Size())
	return src, nil
}

// roTree returns the tree file of ledger l, opened read-only (once; Close
// closes it), or nil and why it cannot be checked: a missing or damaged
// tree file, which the next writer's Open rebuilds from the segments.
func (db *DB) roTree(l *ledger) (*tree.File, string) {
	db.ro.mu.Lock()
	defer db.ro.mu.Unlock()
	if t := db.ro.trees[l.meta.ID]; t != nil {
		return t, ""
	}
	path := db.treePath(l)
	t, err := tree.OpenFileReadOnly(db.fs, path, uint32(l.meta.ID))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, "the tree file " + path + " is missing: the next writer's open rebuilds it from the segments"
	case errors.Is(err, tree.ErrCorrupt):
		return nil, fmt.Sprintf("the tree file is damaged (%v): the next writer's open rebuilds it from the segments", err)
	case err != nil:
		return nil, fmt.Sprintf("the tree file cannot be read: %v", err)
	}
	if db.ro.trees == nil {
		db.ro.trees = map[eventid.LedgerID]*tree.File{}
	}
	db.ro.trees[l.meta.ID] = t
	return t, ""
}

// verifyIndex returns the index Verify compares with ledger l's first
// events: the DB's, or on a read-only DB the writer's (Options.VerifyIndex)
// if it covers them; nil and why not otherwise.
func (db *DB) verifyIndex(l *ledger, events uint64) (*index.Index, string) {
	if db.ro == nil {
		return db.idx, ""
	}
	x := db.ro.wIdx
	if x == nil {
		why := db.ro.wIdxWhy
		if why == "" {
			why = "a read-only open without Options.VerifyIndex"
		}
		return nil, why
	}
	p, ok, err := x.Progress(l.meta.ID)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("the index's progress of ledger %s cannot be read (%v): the next writer's open rebuilds the index", l.meta.Name, err)
	case !ok || p.Seq < events:
		return nil, fmt.Sprintf("the index covers events up to #%d of %d: the next writer's open indexes the rest", p.Seq, events)
	}
	return x, ""
}
