package replica

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
)

// ErrNoReplica says that the bucket holds no manifest of the ledger: it
// was never replicated there.
var ErrNoReplica = errors.New("replica: the bucket holds no manifest of the ledger")

// ReaderConfig is what a Reader needs.
type ReaderConfig struct {
	Store  store.Store
	Ledger eventid.LedgerID
	// Leaf is the Merkle leaf hash of a record (the engine's), to check
	// the chunks' roots and the checkpoint's.
	Leaf func(r *segment.Record) tree.Hash
	// OpenCheckpoint checks the signed checkpoint stored under key (its
	// signature, that it is of the ledger) and returns its size and root.
	OpenCheckpoint func(key string, note []byte) (size uint64, root tree.Hash, err error)
	// Unsigned reads a ledger whose bucket holds no checkpoint object as
	// one of a checkpoint of size 0: nothing but what anyone with write
	// access to the bucket can recompute vouches for its events. Else
	// such a ledger is damage (ErrNoCheckpoint).
	Unsigned bool
}

// Reader reads what a bucket holds of one ledger and yields its records,
// each verified (docs/replication.md, "Restore").
type Reader struct{ cfg ReaderConfig }

// NewReader returns a Reader of cfg.Ledger in cfg.Store.
func NewReader(cfg ReaderConfig) *Reader { return &Reader{cfg: cfg} }

// SegmentObject is a sealed segment stored under seg/.
type SegmentObject struct {
	Key string
	// Number is the segment's number: the objects are numbered from 1 in
	// the order of their events.
	Number uint64
	// First and Last are its events, as its key says.
	First, Last uint64
}

// State is what the bucket holds of a ledger at one moment, and what a
// Read restores: the prefix that the newest manifest and the checkpoint
// vouch for, and the chunks listed after them. Objects written later are
// not read.
type State struct {
	ManifestKey string
	Manifest    Manifest
	// Segments are the sealed segments 1 to Manifest.Segments.
	Segments []SegmentObject
	// Chunks are the keys of the chunks from the manifest's GC boundary
	// on, numbered without a gap: up to the first gap, if any.
	Chunks []string
	// Gap is the key of the first chunk missing after Chunks when chunks
	// numbered after it are stored (an upload in flight stored before the
	// one in the gap, or damage: Read tells which by what the checkpoint
	// and the newest manifest vouch for), else "". The chunks after a gap
	// are not part of the history.
	Gap string
	// Checkpoint is the signed checkpoint (the checkpoint object), of
	// CheckpointSize events with root CheckpointRoot; nil, and size 0,
	// for a ledger without one read with ReaderConfig.Unsigned.
	Checkpoint     []byte
	CheckpointSize uint64
	CheckpointRoot tree.Hash
}

// State reads what the bucket holds of the ledger: the checkpoint first
// (so that the chunks listed after it hold every event it covers, a
// writer storing a checkpoint only once its events are stored), then
// the newest manifest, the seg/ objects it counts, and the chunks from
// its GC boundary. A ledger the bucket does not hold is ErrNoReplica.
func (r *Reader) State(ctx context.Context) (State, error) {
	var st State
	id := r.cfg.Ledger
	ckKey := CheckpointKey(id)
	obj, err := r.cfg.Store.Get(ctx, ckKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if _, merr := r.newestManifest(ctx); errors.Is(merr, ErrNoReplica) {
			return st, merr
		}
		if !r.cfg.Unsigned {
			return st, fmt.Errorf("%w: %s: missing: the bucket holds the ledger's manifests but no signed checkpoint, which vouches for its events: %w", corruption.Err, ckKey, ErrNoCheckpoint)
		}
	case err != nil:
		return st, fmt.Errorf("replica: read %s: %w", ckKey, err)
	default:
		st.Checkpoint = obj.Data
		if st.CheckpointSize, st.CheckpointRoot, err = r.cfg.OpenCheckpoint(ckKey, obj.Data); err != nil {
			return st, fmt.Errorf("%w: %s: %w", corruption.Err, ckKey, err)
		}
	}
	if st.Manifest, st.ManifestKey, err = r.Manifest(ctx); err != nil {
		return st, err
	}
	segs, err := r.listSegments(ctx)
	if err != nil {
		return st, err
	}
	m := st.Manifest
	if uint64(len(segs)) < m.Segments {
		return st, fmt.Errorf("%w: %s says %d sealed segments are stored under seg/, the bucket holds %d: the seg/ object of segment %d is missing",
			corruption.Err, st.ManifestKey, m.Segments, len(segs), len(segs)+1)
	}
	st.Segments = segs[:m.Segments]
	if m.Segments > 0 && st.Segments[m.Segments-1].Last != m.SealedSeq {
		s := st.Segments[m.Segments-1]
		return st, fmt.Errorf("%w: %s says segment %d ends at event %d, its seg/ object %s at %d", corruption.Err, st.ManifestKey, m.Segments, m.SealedSeq, s.Key, s.Last)
	}
	if st.Chunks, st.Gap, err = r.listChunks(ctx, m.GC); err != nil {
		return st, err
	}
	return st, nil
}

// Manifest returns the ledger's newest manifest and its key (a ledger
// the bucket does not hold is ErrNoReplica).
func (r *Reader) Manifest(ctx context.Context) (Manifest, string, error) {
	key, err := r.newestManifest(ctx)
	if err != nil {
		return Manifest{}, "", err
	}
	obj, err := r.cfg.Store.Get(ctx, key)
	if err != nil {
		return Manifest{}, "", fmt.Errorf("replica: read %s: %w", key, err)
	}
	m, err := DecodeManifest(key, r.cfg.Ledger, obj.Data)
	return m, key, err
}

// newestManifest returns the key of the manifest with the highest number.
func (r *Reader) newestManifest(ctx context.Context) (string, error) {
	prefix := LedgerPrefix(r.cfg.Ledger) + "manifest/"
	newest := ""
	err := r.list(ctx, prefix, "", func(o store.ObjectInfo) error {
		if _, ok := ParseNumber(o.Key); !ok {
			return fmt.Errorf("%w: %s: not a manifest's key (manifest/ and 20 digits)", corruption.Err, o.Key)
		}
		newest = o.Key // List gives keys in order: numbers of 20 digits sort as numbers
		return nil
	})
	if err != nil {
		return "", err
	}
	if newest == "" {
		return "", fmt.Errorf("%w: ledger %s (no object under %s)", ErrNoReplica, r.cfg.Ledger, prefix)
	}
	return newest, nil
}

// listSegments lists seg/: its objects must hold the events from 1 on,
// each following the one before.
func (r *Reader) listSegments(ctx context.Context) ([]SegmentObject, error) {
	var segs []SegmentObject
	err := r.list(ctx, LedgerPrefix(r.cfg.Ledger)+"seg/", "", func(o store.ObjectInfo) error {
		first, last, ok := ParseSegmentKey(o.Key)
		if !ok {
			return fmt.Errorf("%w: %s: not a sealed segment's key (seg/FIRST-LAST.seg)", corruption.Err, o.Key)
		}
		segs = append(segs, SegmentObject{Key: o.Key, First: first, Last: last})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].First < segs[j].First })
	next := uint64(1)
	for i := range segs {
		s := &segs[i]
		if s.First != next {
			if s.First < next {
				return nil, fmt.Errorf("%w: %s: holds events from %d, the seg/ object before ends at %d: two objects for the same events", corruption.Err, s.Key, s.First, next-1)
			}
			return nil, fmt.Errorf("%w: %s: holds events from %d, the seg/ objects before end at %d: events %d to %d are missing (a gap)", corruption.Err, s.Key, s.First, next-1, next, s.First-1)
		}
		s.Number = uint64(i) + 1
		next = s.Last + 1
	}
	return segs, nil
}

// listChunks lists wal/ from chunk gc on (gc 0 or 1: from the first):
// numbered without a gap, up to the first gap, which gap names ("":
// none). The chunks after a gap are not part of the history: uploads
// of a writer that were stored before the one in the gap, none of them
// acknowledged (acknowledgements follow chunk order), as the writer's
// Open takes them (docs/replication.md, "Finding the tail"); the signed
// checkpoint's events must all be before it (Read). The first need not
// be gc: a manifest's boundary may be below the first chunk left (the
// newest manifests deleted by hand, and the next writer's copied an
// older boundary, or none); the records of the first chunk must then
// follow the seg/ objects', which Read checks (a missing chunk that held
// records is a gap in the records).
func (r *Reader) listChunks(ctx context.Context, gc uint64) (keys []string, gap string, err error) {
	keys, _, gap, err = r.chunkRun(ctx, ChunkKey(r.cfg.Ledger, max(gc, 1)-1))
	return keys, gap, err
}

// gapBefore judges the first chunk listed from chunk from (the GC
// boundary; for a Follow, the chunk after the last one read), data
// stored under key, when the events before it end at seq (the last seg/
// object's): if its records do not follow them (a fence: its place), the
// chunks between from and it are a gap, and gap is true: an upload in
// flight that a later one overtook, at the boundary the last seal moved,
// as a gap after the first chunk is (chunkRun), or damage, which the
// checkpoint and the newest manifest tell. A chunk whose records do
// follow them, after chunks deleted by GC (a boundary a writer copied
// from an older manifest), is no gap. A chunk at from itself is not
// judged here: whether it follows is the chain's and the records' check
// (read.linked), an error naming it. A chunk judged is returned, decoded.
func gapBefore(ledger eventid.LedgerID, key string, data []byte, from, seq uint64) (c Chunk, gap bool, err error) {
	if n, _ := ParseNumber(key); n <= max(from, 1) {
		return Chunk{}, false, nil
	}
	if c, err = DecodeChunk(key, ledger, data); err != nil {
		return Chunk{}, false, err
	}
	return c, c.FirstSeq > seq+1, nil
}

// chunkRun lists wal/ after the key startAfter: the keys numbered without
// a gap from the first listed (its number first), up to the first gap,
// which gap names ("": none).
func (r *Reader) chunkRun(ctx context.Context, startAfter string) (keys []string, first uint64, gap string, err error) {
	next := uint64(0)
	errEnd := errors.New("the chunks end at a gap")
	err = r.list(ctx, LedgerPrefix(r.cfg.Ledger)+"wal/", startAfter, func(o store.ObjectInfo) error {
		n, ok := ParseNumber(o.Key)
		if !ok {
			return fmt.Errorf("%w: %s: not a chunk's key (wal/ and 20 digits)", corruption.Err, o.Key)
		}
		if next == 0 {
			first, next = n, n
		}
		if n != next {
			gap = ChunkKey(r.cfg.Ledger, next)
			return errEnd
		}
		keys = append(keys, o.Key)
		next++
		return nil
	})
	if errors.Is(err, errEnd) {
		err = nil
	}
	return keys, first, gap, err
}

// list calls each with every object under prefix after startAfter, in
// order of their keys.
func (r *Reader) list(ctx context.Context, prefix, startAfter string, each func(store.ObjectInfo) error) error {
	for {
		p, err := r.cfg.Store.List(ctx, prefix, startAfter, 0)
		if err != nil {
			return fmt.Errorf("replica: list %s: %w", prefix, err)
		}
		for _, o := range p.Objects {
			if err := each(o); err != nil {
				return err
			}
			startAfter = o.Key
		}
		if !p.Truncated || len(p.Objects) == 0 {
			return nil
		}
	}
}

// Limit is where a Read stops yielding records: after record Seq (0: no
// limit), and before the first record later than Time (zero: no limit);
// a batch is all or nothing, so the records yielded end with the last
// whole batch within the limit. The records after it are read and
// verified all the same.
type Limit struct {
	Seq  uint64
	Time time.Time
}

// Piece is records of the ledger as a Read yields them, to be laid out in
// segment Segment at Offset, byte for byte.
type Piece struct {
	// Key is the object the records came from.
	Key     string
	Segment uint64
	Offset  int64
	// Header is set when the piece begins its segment (Offset is
	// segment.HeaderSize): the segment file's header, the seg/ object's
	// own, or one made for the chunks' records (segment.FileHeader,
	// created at the time of the segment's first record).
	Header []byte
	// Bytes are the records' frames.
	Bytes []byte
	// Prev is the head before the piece's first record, Last the head at
	// its last.
	Prev, Last segment.Head
	// Sealed says that the piece ends its segment: a seg/ object's last
	// record.
	Sealed bool
}

// Result is what a Read verified and yielded.
type Result struct {
	// Yielded is the head after the last record yielded (within Limit).
	Yielded segment.Head
	// Verified is the head after the last record read and verified: the
	// State's last.
	Verified segment.Head
	// Signed is the number of events yielded that the signed checkpoint
	// vouches for (its root checked): the events after them were checked
	// only for what anyone with write access to the bucket can recompute.
	Signed uint64
	// Ignored, if not "", says which chunk ends the history before the
	// last chunk in the bucket, and why (a gap, or a chunk that does not
	// continue the history): it and those after it were not read.
	Ignored string
}

// Read reads every object of st in order, the seg/ objects and then the
// chunks, verifies each and calls yield with its records up to lim, in
// order (yield's Piece is valid only during the call). It reads from
// the first event on whatever the caller holds, as every record's leaf
// is needed to check the chunks' roots and the checkpoint's.
//
// It checks every record (segment.VerifyFile for a seg/ object, with its
// header, segment.VerifySpan for a chunk), that each object holds the
// events its key or header says, the chunks' hash chain (each names the
// SHA-256 of the one before), that epochs never go down and that a new
// epoch begins with its fence chunk, that each fence follows the record
// before it, that each chunk's records go where the record before ended
// (or at the start of the next segment), each chunk's Merkle root, and
// the checkpoint's root at its size; and that the objects hold every
// event the checkpoint covers. Any failure is an error naming the object,
// matching corruption.Err where the bucket's data is at fault; records
// yielded before it must be discarded (they are whole and chained, but
// the objects after them did not verify).
//
// A chunk that a garbage collector deleted while Read ran (Get finds no
// object) is looked for under seg/ again: its segment, sealed since, is
// read instead.
func (r *Reader) Read(ctx context.Context, st State, lim Limit, yield func(Piece) error) (Result, error) {
	rd := &read{r: r, st: st, lim: lim, yield: yield, head: segment.Head{ID: eventid.Genesis(r.cfg.Ledger)}, stopped: -1}
	rd.yielded = rd.head
	if err := rd.run(ctx); err != nil {
		return Result{}, err
	}
	return Result{Yielded: rd.yielded, Verified: rd.head, Signed: min(st.CheckpointSize, rd.yielded.Seq), Ignored: rd.ended}, nil
}

// read is the state of one Read.
type read struct {
	r     *Reader
	st    State
	lim   Limit
	yield func(Piece) error

	head    segment.Head // the last record verified
	b       tree.Builder
	yielded segment.Head // the last record yielded
	cut     bool         // a record past lim was met: nothing more is yielded
	stopped int64        // the offset of that record's batch in the piece being verified; -1: none
	batch   int64        // the offset where the batch of the next record begins

	// The segment the records reach: its number, where its records end,
	// whether it is sealed (a seg/ object), the head before it and the
	// leaves of its records (to check a seg/ object read in place of
	// deleted chunks against the records already read).
	seg       uint64
	end       int64
	sealed    bool
	segPrev   segment.Head
	segLeaves []tree.Hash
	segObjs   int // the seg/ objects read
	// ended says why the chunks read end before the last listed: the
	// first that does not continue the history ("": none).
	ended string
	// The chunks' hash chain: the SHA-256 of the last chunk read (nil
	// at the start, or after a chunk deleted by GC), the epoch of the
	// chunks read, and the number of the last chunk of the history read.
	prev  *Hash
	epoch uint64
	last  uint64
	// f, for a Follow, keeps the leaves after its last checkpoint.
	f *Follow
}

func (rd *read) run(ctx context.Context) error {
	for _, s := range rd.st.Segments {
		if err := rd.segmentObject(ctx, s); err != nil {
			return err
		}
	}
	if rd.st.Gap != "" {
		rd.ended = rd.st.Gap + ", missing (a gap): later chunks are stored"
	}
	rd.last = max(rd.st.Manifest.GC, 1) - 1
	if err := rd.chunks(ctx, rd.st.Chunks); err != nil {
		return err
	}
	// The history may end early (uploads in flight, a fenced writer's
	// late ones), but not before what the bucket vouches for: the
	// checkpoint's events and the newest manifest's fence chunk.
	if err := rd.covers(); err != nil {
		return err
	}
	if m := rd.st.Manifest; m.Fence > rd.last {
		why := "the chunks listed end there"
		if rd.ended != "" {
			why = "it ends before " + rd.ended
		}
		return fmt.Errorf("%w: %s: says epoch %d's fence chunk is %s; the history ends at chunk %d: %s",
			corruption.Err, rd.st.ManifestKey, m.Epoch, ChunkKey(rd.r.cfg.Ledger, m.Fence), rd.last, why)
	}
	return nil
}

// covers checks that the records read hold every event the signed
// checkpoint covers.
func (rd *read) covers() error {
	if rd.head.Seq < rd.st.CheckpointSize {
		why := ""
		if rd.ended != "" {
			why = "; the history ends before " + rd.ended
		}
		return fmt.Errorf("%w: %s: signed for %d events, the bucket's objects hold %d%s", corruption.Err, CheckpointKey(rd.r.cfg.Ledger), rd.st.CheckpointSize, rd.head.Seq, why)
	}
	return nil
}

// chunks reads the chunks keys, numbered without a gap, in order: it
// checks each and yields its records, up to the first that does not
// continue the history (ended says which).
func (rd *read) chunks(ctx context.Context, keys []string) error {
	missing := ""
	for i, key := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		obj, err := rd.r.cfg.Store.Get(ctx, key)
		if i == 0 && err == nil {
			if c, gap, err := gapBefore(rd.r.cfg.Ledger, key, obj.Data, rd.last+1, rd.head.Seq); err != nil || gap {
				if gap {
					rd.ended = ChunkKey(rd.r.cfg.Ledger, c.Number-1) + ", missing (a gap): later chunks are stored"
				}
				return err
			}
		}
		if errors.Is(err, store.ErrNotFound) {
			// Deleted by GC since the List: its records are in a seg/
			// object now, or in no object at all (a gap, found at the
			// next chunk or at the end).
			before := rd.head.Seq
			if err := rd.sealedSince(ctx); err != nil {
				return err
			}
			if rd.head.Seq == before {
				if i == len(keys)-1 {
					return fmt.Errorf("%w: %s: missing: listed, then not found, and no seg/ object holds the events after %d", corruption.Err, key, rd.head.Seq)
				}
				missing = key
			}
			rd.prev = nil // the chain goes on from the next chunk
			continue
		}
		if err != nil {
			return fmt.Errorf("replica: read %s: %w", key, err)
		}
		if ok, err := rd.linked(key, obj.Data, missing); err != nil || !ok {
			return err
		}
		missing = ""
	}
	return nil
}

// linked checks the chunk data, stored under key, and yields its records
// if it continues the history; ok is false, and ended says why, if it
// does not. missing is the key of a chunk before it that was not found,
// if any.
func (rd *read) linked(key string, data []byte, missing string) (ok bool, err error) {
	c, err := DecodeChunk(key, rd.r.cfg.Ledger, data)
	if err != nil {
		return false, err
	}
	// A chunk that does not name the chunk before it, or of a lower
	// epoch, ends the history: a fenced writer's upload that landed
	// after the fence, and what follows it, none of it acknowledged
	// (docs/replication.md, "A fenced writer's late uploads"). The
	// signed checkpoint's events must all be before it.
	if rd.prev != nil && c.Prev != *rd.prev {
		rd.ended = fmt.Sprintf("chunk %s: names %x as the previous chunk's SHA-256, the previous chunk's is %x", key, c.Prev[:], rd.prev[:])
		return false, nil
	}
	if rd.epoch != 0 && c.Epoch < rd.epoch {
		rd.ended = fmt.Sprintf("chunk %s: of epoch %d, after a chunk of epoch %d (a fenced writer's chunk after the fence)", key, c.Epoch, rd.epoch)
		return false, nil
	}
	switch {
	case rd.epoch == 0:
	case c.Fence() && c.Epoch == rd.epoch:
		return false, fmt.Errorf("%w: chunk %s: a fence chunk of epoch %d, the epoch of the chunk before", corruption.Err, key, c.Epoch)
	case !c.Fence() && c.Epoch > rd.epoch:
		return false, fmt.Errorf("%w: chunk %s: of epoch %d without its fence chunk, after a chunk of epoch %d", corruption.Err, key, c.Epoch, rd.epoch)
	}
	if err := rd.chunk(key, &c, missing); err != nil {
		return false, err
	}
	sum := Sum(data)
	rd.prev, rd.epoch, rd.last = &sum, c.Epoch, c.Number
	return true, nil
}

// record is called with every record verified, in order: its leaf, the
// checkpoint's root at its size, and the limit.
func (rd *read) record(key string, rec *segment.Record, loc segment.Location) error {
	leaf := rd.r.cfg.Leaf(rec)
	rd.b.Add(leaf)
	rd.segLeaves = append(rd.segLeaves, leaf)
	if rd.b.Size() == rd.st.CheckpointSize {
		if root := rd.b.Root(); root != rd.st.CheckpointRoot {
			return fmt.Errorf("%w: %s: the root of the first %d events is %x, the signed checkpoint's %x (the events were read from %s)",
				corruption.Err, CheckpointKey(rd.r.cfg.Ledger), rd.b.Size(), root[:], rd.st.CheckpointRoot[:], key)
		}
		if rd.f != nil {
			rd.f.verifiedAt(rd.b, rd.st.CheckpointRoot, rd.st.Checkpoint)
		}
	} else if rd.f != nil && rd.b.Size() > rd.st.CheckpointSize {
		rd.f.leaves = append(rd.f.leaves, leaf)
	}
	if !rd.cut && (rd.lim.Seq != 0 && rec.Seq > rd.lim.Seq || !rd.lim.Time.IsZero() && rec.ID.Micros() > uint64(rd.lim.Time.UnixMicro())) {
		// A batch is all or nothing: the cut is before the batch of the
		// first record past the limit. Batches never span pieces.
		rd.cut, rd.stopped = true, rd.batch
	}
	if !rec.More() {
		rd.batch = loc.End()
	}
	return nil
}

// newSegment starts segment n after the head.
func (rd *read) newSegment(n uint64) {
	rd.seg, rd.end, rd.sealed = n, segment.HeaderSize, false
	rd.segPrev = rd.head
	rd.segLeaves = rd.segLeaves[:0]
}

// segmentObject reads and verifies the seg/ object s, the next segment.
func (rd *read) segmentObject(ctx context.Context, s SegmentObject) error {
	obj, err := rd.r.cfg.Store.Get(ctx, s.Key)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s: missing: listed, then not found (a sealed segment is never deleted)", corruption.Err, s.Key)
	}
	if err != nil {
		return fmt.Errorf("replica: read %s: %w", s.Key, err)
	}
	if s.First != rd.head.Seq+1 {
		return fmt.Errorf("%w: %s: holds events from %d, the events before end at %d", corruption.Err, s.Key, s.First, rd.head.Seq)
	}
	rd.newSegment(s.Number)
	return rd.verified(s.Key, obj.Data, s, 0)
}

// verified verifies data, the seg/ object s, from the head before its
// segment and yields its records after from (0: all, with its header).
// Records up to from were read from chunks: the object's must be the
// same (their leaves and where the last one ends).
func (rd *read) verified(key string, data []byte, s SegmentObject, from int64) error {
	id := rd.r.cfg.Ledger
	prev, known := rd.segPrev, rd.segLeaves
	rd.segLeaves = nil
	knownSeq := prev.Seq + uint64(len(known))
	rd.stopped, rd.batch = -1, max(from, segment.HeaderSize)
	startHead := rd.head
	h, err := segment.VerifyFile(id, s.Number, prev, key, data, func(rec *segment.Record, loc segment.Location) error {
		if rec.Seq <= knownSeq {
			if leaf := rd.r.cfg.Leaf(rec); leaf != known[rec.Seq-prev.Seq-1] {
				return fmt.Errorf("%w: %s: event %d differs from the one chunks held before (read before the chunks were deleted)", corruption.Err, key, rec.Seq)
			}
			rd.segLeaves = append(rd.segLeaves, known[rec.Seq-prev.Seq-1])
			if rec.Seq == knownSeq && loc.End() != from {
				return fmt.Errorf("%w: %s: event %d ends at offset %d, the chunks that held it ended at %d", corruption.Err, key, rec.Seq, loc.End(), from)
			}
			return nil
		}
		return rd.record(key, rec, loc)
	})
	if err != nil {
		return err
	}
	if h.Seq != s.Last {
		return fmt.Errorf("%w: %s: holds events %d to %d, its key says %d to %d", corruption.Err, key, prev.Seq+1, h.Seq, s.First, s.Last)
	}
	rd.head = h
	rd.seg, rd.end, rd.sealed = s.Number, int64(len(data)), true
	rd.segObjs = int(s.Number)
	p := Piece{Key: key, Segment: s.Number, Offset: segment.HeaderSize, Bytes: data[segment.HeaderSize:], Prev: startHead, Last: h, Sealed: true}
	if from == 0 {
		p.Header = data[:segment.HeaderSize]
	} else {
		p.Offset, p.Bytes = from, data[from:]
	}
	return rd.emit(p)
}

// emit yields p, or its part before the record past the limit.
func (rd *read) emit(p Piece) error {
	if rd.yielded.Seq != p.Prev.Seq {
		return nil // cut before p
	}
	if rd.stopped >= 0 {
		if rd.stopped == p.Offset {
			rd.stopped = -1
			return nil
		}
		p.Bytes, p.Sealed = p.Bytes[:rd.stopped-p.Offset], false
		rd.stopped = -1
		// The head at the cut: the last record before it.
		h, err := segment.VerifySpan(rd.r.cfg.Ledger, p.Prev, p.Key, p.Segment, p.Offset, p.Bytes, nil)
		if err != nil {
			return err
		}
		p.Last = h
	}
	rd.yielded = p.Last
	return rd.yield(p)
}

// chunk verifies the chunk c, stored under key, and yields its records.
// missing is the key of a chunk before it that was not found, if any.
func (rd *read) chunk(key string, c *Chunk, missing string) error {
	gap := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if missing != "" {
			msg += fmt.Sprintf(" (%s, listed before it, was not found)", missing)
		}
		return fmt.Errorf("%w: chunk %s: %s", corruption.Err, key, msg)
	}
	if c.Fence() {
		switch {
		case c.LastSeq > rd.head.Seq:
			return gap("a fence after event %d, the events before end at %d: events %d to %d are missing", c.LastSeq, rd.head.Seq, rd.head.Seq+1, c.LastSeq)
		case c.LastSeq < rd.head.Seq:
			return nil // before the end of the seg/ objects
		}
		if !(c.Segment == uint32(rd.seg) && int64(c.Offset) == rd.end && !rd.sealed) && !(c.Segment == uint32(rd.seg+1) && c.Offset == segment.HeaderSize) {
			return gap("a fence at segment %d offset %d, the records before end at segment %d offset %d", c.Segment, c.Offset, rd.seg, rd.end)
		}
		if c.LastSeq > 0 && tree.Hash(c.Root) != rd.b.Root() {
			return gap("Merkle root after %d events is %x, the records give %x", c.TreeSize, c.Root[:], rd.b.Root())
		}
		return nil
	}
	if c.LastSeq <= rd.head.Seq {
		// Covered by the seg/ objects read (a chunk above the GC
		// boundary whose segment was sealed since).
		if uint64(c.Segment) > uint64(rd.segObjs) {
			return gap("events %d to %d in segment %d, whose events were read from chunks before it", c.FirstSeq, c.LastSeq, c.Segment)
		}
		return nil
	}
	if c.FirstSeq != rd.head.Seq+1 {
		if c.FirstSeq > rd.head.Seq+1 {
			return gap("holds events from %d, the events before end at %d: events %d to %d are missing", c.FirstSeq, rd.head.Seq, rd.head.Seq+1, c.FirstSeq-1)
		}
		return gap("holds events %d to %d, the events before end at %d: overlaps them", c.FirstSeq, c.LastSeq, rd.head.Seq)
	}
	switch {
	case uint64(c.Segment) == rd.seg && int64(c.Offset) == rd.end && !rd.sealed:
	case uint64(c.Segment) == rd.seg+1 && c.Offset == segment.HeaderSize:
		rd.newSegment(rd.seg + 1)
	default:
		return gap("records at segment %d offset %d, the records before end at segment %d offset %d%s", c.Segment, c.Offset, rd.seg, rd.end, map[bool]string{true: " (sealed)", false: ""}[rd.sealed])
	}
	prev := rd.head
	rd.stopped, rd.batch = -1, int64(c.Offset)
	h, err := segment.VerifySpan(rd.r.cfg.Ledger, prev, key, rd.seg, int64(c.Offset), c.Records, func(rec *segment.Record, loc segment.Location) error {
		if rec.Seq == c.FirstSeq && rec.ID.Micros() != c.FirstMicros || rec.Seq == c.LastSeq && rec.ID.Micros() != c.LastMicros {
			return gap("event %d's time is %d µs, the header says %d and %d for its first and last", rec.Seq, rec.ID.Micros(), c.FirstMicros, c.LastMicros)
		}
		return rd.record(key, rec, loc)
	})
	if err != nil {
		return err
	}
	if h.Seq != c.LastSeq {
		return gap("holds events %d to %d, its header says %d to %d", c.FirstSeq, h.Seq, c.FirstSeq, c.LastSeq)
	}
	if root := rd.b.Root(); tree.Hash(c.Root) != root {
		return gap("Merkle root after %d events is %x, the records give %x", c.TreeSize, c.Root[:], root[:])
	}
	rd.head, rd.end = h, h.Loc.End()
	p := Piece{Key: key, Segment: rd.seg, Offset: int64(c.Offset), Bytes: c.Records, Prev: prev, Last: h}
	if p.Offset == segment.HeaderSize {
		p.Header = segment.FileHeader(rd.r.cfg.Ledger, rd.seg, prev, c.FirstMicros)
	}
	return rd.emit(p)
}

// sealedSince reads, after a chunk was not found, the seg/ objects stored
// since the State was read that hold the events after the head: the
// segment the chunks were filling, if it was sealed since, and those
// after it.
func (rd *read) sealedSince(ctx context.Context) error {
	segs, err := rd.r.listSegments(ctx)
	if err != nil {
		return err
	}
	for _, s := range segs {
		switch {
		case s.Number < rd.seg || s.Number == rd.seg && rd.sealed:
		case s.Number == rd.seg:
			// The segment the chunks were filling, sealed since.
			obj, err := rd.r.cfg.Store.Get(ctx, s.Key)
			if err != nil {
				return fmt.Errorf("replica: read %s: %w", s.Key, err)
			}
			if err := rd.verified(s.Key, obj.Data, s, rd.end); err != nil {
				return err
			}
		case s.Number == rd.seg+1 && (rd.sealed || rd.seg == 0):
			if err := rd.segmentObject(ctx, s); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}
