package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
)

// Follow reads a ledger's bucket again and again, each time from where
// the read before ended (a follower, docs/replication.md "Followers"):
// the first Poll reads every object as Read does, the next ones the
// chunks stored since, checked as Read checks them (each record's frame
// and chain, the chunks' hash chain from the last chunk read, epochs,
// places and Merkle roots), and every new signed checkpoint against the
// records read: its root at its size, computed from the leaves read (a
// Follow keeps the tree's frontier at the last checkpoint it verified
// and the leaves after it), which also proves that it extends that
// checkpoint. A checkpoint that covers fewer events than the last one
// verified, or another root, is refused: the bucket's history is not an
// extension of what was read.
//
// A Follow is not safe for concurrent use. After an error it is spent:
// what it yielded before stands (verified), and nothing after.
type Follow struct {
	r  *Reader
	rd *read
	// The last checkpoint verified: its size and root, the tree of its
	// leaves, and the leaves read after it.
	ckSize uint64
	ckRoot tree.Hash
	ckB    tree.Builder
	ckNote []byte
	leaves []tree.Hash
	err    error
}

// Follow returns a Follow of the reader's ledger, which reads nothing
// before its first Poll.
func (r *Reader) Follow() *Follow { return &Follow{r: r} }

// verifiedAt records that the checkpoint msg, of b's size and root, was
// verified.
func (f *Follow) verifiedAt(b tree.Builder, root tree.Hash, msg []byte) {
	f.ckB, f.ckSize, f.ckRoot, f.ckNote, f.leaves = b, b.Size(), root, msg, nil
}

// Manifest returns the newest manifest the first Poll read.
func (f *Follow) Manifest() Manifest {
	if f.rd == nil {
		return Manifest{}
	}
	return f.rd.st.Manifest
}

// Checkpoint returns the last signed checkpoint verified (the object's
// bytes) and its size.
func (f *Follow) Checkpoint() ([]byte, uint64) { return f.ckNote, f.ckSize }

// Poll reads what the bucket holds after what the Follow read before and
// yields its records, verified, in order (yield's Piece is valid only
// during the call). The first Poll reads the State and every object, as
// Read; a State whose checkpoint is missing is an error (a follower has
// no other evidence). The Result's Verified and Yielded are the head
// after the records read so far; Ignored says why the history read ends
// before the last chunk listed (a gap, a chunk that does not link),
// which the next Poll looks at again; Signed is Checkpoint.
//
// Each later Poll costs one GET of the checkpoint and one GET per chunk
// stored since, and one of the next chunk's key, not found; a chunk
// deleted by GC since, or a gap, also a LIST of wal/ and one of seg/,
// and the GET of the segments that hold its events.
//
// The records of a Poll are yielded before its last checks (the new
// checkpoint's root, if it covers records of this Poll): on an error,
// the caller discards what this Poll yielded.
//
// An error that matches corruption.Err (the bucket's data is at fault)
// spends the Follow: every later Poll returns it, and the records this
// Poll yielded must be discarded. After any other (the store unreachable,
// ctx done), the Result says what this Poll read and verified whole
// before it (the records yielded up to the last whole object: keep them),
// and the next Poll goes on from there; a first Poll that fails so is
// done again in full.
func (f *Follow) Poll(ctx context.Context, yield func(Piece) error) (Result, error) {
	if f.err != nil {
		return Result{}, f.err
	}
	res, err := f.poll(ctx, yield)
	switch {
	case err == nil:
	case errors.Is(err, corruption.Err) && !(f.rd == nil && errors.Is(err, ErrNoCheckpoint)):
		// (A ledger's first checkpoint may not be stored yet: a Shipped
		// ledger just created.)
		f.err = err
	case f.rd != nil:
		res = f.result()
	}
	return res, err
}

func (f *Follow) poll(ctx context.Context, yield func(Piece) error) (Result, error) {
	if f.rd == nil {
		st, err := f.r.State(ctx)
		if err != nil {
			return Result{}, err
		}
		rd := &read{r: f.r, st: st, yield: yield, stopped: -1, f: f, head: segment.Head{ID: eventid.Genesis(f.r.cfg.Ledger)}}
		rd.yielded = rd.head
		if err := rd.run(ctx); err != nil {
			return Result{}, err
		}
		f.rd = rd
		return f.result(), nil
	}
	ckKey := CheckpointKey(f.r.cfg.Ledger)
	obj, err := f.r.cfg.Store.Get(ctx, ckKey)
	if errors.Is(err, store.ErrNotFound) {
		return Result{}, fmt.Errorf("%w: %s: missing: a checkpoint of %d events was verified before (deleted since)", corruption.Err, ckKey, f.ckSize)
	}
	if err != nil {
		return Result{}, fmt.Errorf("replica: read %s: %w", ckKey, err)
	}
	size, root, err := f.r.cfg.OpenCheckpoint(ckKey, obj.Data)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %s: %w", corruption.Err, ckKey, err)
	}
	if err := f.checkpoint(ckKey, size, root, obj.Data); err != nil {
		return Result{}, err
	}
	r := f.rd
	r.yield, r.ended = yield, ""
	r.st.Checkpoint, r.st.CheckpointSize, r.st.CheckpointRoot = nil, 0, tree.Hash{}
	if size > r.head.Seq {
		r.st.Checkpoint, r.st.CheckpointSize, r.st.CheckpointRoot = obj.Data, size, root
	}
	// The next chunks, each read by its key until one is not found: a
	// GET, where a List costs 12 times as much (S3's prices).
	for r.ended == "" {
		key := ChunkKey(f.r.cfg.Ledger, r.last+1)
		obj, err := f.r.cfg.Store.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return Result{}, fmt.Errorf("replica: read %s: %w", key, err)
		}
		if _, err := r.linked(key, obj.Data, ""); err != nil {
			return Result{}, err
		}
	}
	if r.ended == "" && r.head.Seq < size {
		// The checkpoint covers events after the chunks found: the next
		// chunk was deleted by GC (its records are in a seg/ object
		// now), or is missing (a gap: damage, the checkpoint says).
		if err := f.afterGap(ctx); err != nil {
			return Result{}, err
		}
	}
	if err := r.covers(); err != nil {
		return Result{}, err
	}
	return f.result(), nil
}

// checkpoint checks the signed checkpoint of size events and root, read
// under key, against the records read: a checkpoint of no more events
// than they hold must have their root at its size; one of more is
// checked as the records reach its size (read.record), and the Poll
// fails if they do not.
func (f *Follow) checkpoint(key string, size uint64, root tree.Hash, msg []byte) error {
	head := f.rd.head.Seq
	switch {
	case size < f.ckSize:
		return fmt.Errorf("%w: %s: signed for %d events, a checkpoint of %d events was verified before: the bucket's history is not an extension of the one read", corruption.Err, key, size, f.ckSize)
	case size == f.ckSize:
		if root != f.ckRoot {
			return fmt.Errorf("%w: %s: the root of %d events is %x, the checkpoint of that size verified before had %x: the bucket's history is not an extension of the one read", corruption.Err, key, size, root[:], f.ckRoot[:])
		}
		f.ckNote = msg
	case size <= head:
		b := f.ckB
		for _, l := range f.leaves[:size-f.ckSize] {
			b.Add(l)
		}
		if got := b.Root(); got != root {
			return fmt.Errorf("%w: %s: the root of the first %d events is %x, the events read give %x: the bucket's history is not an extension of the one read", corruption.Err, key, size, root[:], got[:])
		}
		f.leaves = slices.Clone(f.leaves[size-f.ckSize:])
		f.ckB, f.ckSize, f.ckRoot, f.ckNote = b, size, root, msg
	}
	return nil
}

// afterGap reads, when the chunk after the last read is not found, the
// seg/ objects that hold its records (GC deleted it) and the chunks
// listed after it, or records the gap (ended).
func (f *Follow) afterGap(ctx context.Context) error {
	r := f.rd
	keys, gap, err := f.newChunks(ctx)
	if err != nil {
		return err
	}
	if gap == "" && len(keys) > 0 {
		return r.chunks(ctx, keys) // stored since the GET
	}
	before := r.head.Seq
	if err := r.sealedSince(ctx); err != nil {
		return err
	}
	if r.head.Seq == before {
		r.ended = ChunkKey(f.r.cfg.Ledger, r.last+1) + ", missing"
		if gap != "" {
			r.ended += " (a gap): later chunks are stored"
		}
		return nil
	}
	r.prev = nil // the chain goes on from the next chunk
	return r.chunks(ctx, keys)
}

// newChunks lists the chunks stored after the last chunk of the history
// read, numbered without a gap from the first listed: gap names the next
// chunk if the first listed is not it.
func (f *Follow) newChunks(ctx context.Context) (keys []string, gap string, err error) {
	next := f.rd.last + 1
	keys, first, _, err := f.r.chunkRun(ctx, ChunkKey(f.r.cfg.Ledger, next-1))
	if len(keys) > 0 && first != next {
		gap = ChunkKey(f.r.cfg.Ledger, next)
	}
	return keys, gap, err
}

// result is what the Follow read so far.
func (f *Follow) result() Result {
	rd := f.rd
	return Result{Yielded: rd.yielded, Verified: rd.head, Signed: f.ckSize, Ignored: rd.ended}
}
