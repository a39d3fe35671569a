package engine

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// ExportOptions are the options of Export. The zero value exports the
// whole ledger.
type ExportOptions struct {
	// After, if not zero, exports only the events after this one
	// (exclusive). It must be an event of the ledger.
	After eventid.ID
	// From, if not zero, exports only the events at or after this time.
	// With After, an event must satisfy both.
	From time.Time
	// Progress, if not nil, is called now and then (every few thousand
	// events, and once at the end) with the events and bytes written so
	// far. It is called from the goroutine that called Export.
	Progress func(events, bytes int64)
	// Checkpoint, if not nil, makes Export issue a signed checkpoint of
	// the ledger first (as DB.Checkpoint does), export exactly the events
	// it covers (1 to its size), and then write the signed note to
	// Checkpoint: with the export and the public key (DB.VerifierKey), an
	// auditor checks the whole file offline (docs/format.md, section
	// 9.5). With After or From it is ErrInvalid: a partial export cannot
	// be checked against a root. The checkpoint is written only if the
	// exported events are the ones it signs (the Merkle root of their
	// leaf hashes is its root): otherwise Export fails with ErrRewritten
	// and writes nothing to Checkpoint (what it wrote to w is not to be
	// kept). On a DB opened with OpenReadOnly, which signs nothing, the
	// checkpoint is the latest signed one (DB.LatestCheckpoint, checked at
	// the open; ErrNotFound if there is none), and the export covers
	// exactly its events.
	Checkpoint io.Writer
}

// Export writes the events of a ledger to w in the Evently NDJSON download
// format, one line an event in ledger order (see ndjson.AppendLine), and
// returns the number of events written. It exports the events committed
// when it starts; later appends are not included.
//
// A whole export begins with the genesis event and verifies with
// ndjson.VerifyAll; Import reads it back into the same ledger. An export
// with After or From begins elsewhere: it verifies only with
// ndjson.ResumeVerifier given the ledger ID, the ID of the event before its
// first line and that event's sequence number, and it cannot be imported
// on its own.
//
// Export streams: it reads the segments in order and writes through a
// buffer, in constant memory whatever the size of the ledger. On error the
// count says how many events were written before it (some of them may
// still have been in the buffer).
//
// It reads the segments in chunks of at most 64 events and looks at ctx
// and at Close before each: once ctx is cancelled or Close has begun, it
// reads at most 64 more events and returns ctx's error or ErrClosed,
// without writing what is left in its buffer. No read is in progress
// while w.Write or Progress runs: either may call Close.
func (db *DB) Export(ctx context.Context, ledgerName string, w io.Writer, opts ExportOptions) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return 0, err
	}
	if err := db.readOnlyIndex(l); err != nil {
		return 0, err
	}
	head := l.visible() // what every read sees: Get finds every exported event
	var ck Checkpoint
	if opts.Checkpoint != nil {
		if !opts.After.IsZero() || !opts.From.IsZero() {
			return 0, invalid("export of ledger %s: a checkpoint is only for a whole export (not with After or From): a partial export cannot be checked against a root", l.meta.Name)
		}
		if db.ro != nil {
			// The latest signed checkpoint, checked at the open: a
			// reader signs nothing (the writer's to sign).
			c := l.latest.Load()
			if c == nil {
				return 0, fmt.Errorf("%w: export of ledger %s with a checkpoint: the ledger has no signed checkpoint, and a read-only DB signs none", ErrNotFound, l.meta.Name)
			}
			ck = *c
		} else if ck, err = db.checkpoint(ctx, l); err != nil {
			return 0, err
		}
		head.Seq = ck.Size // at or before the visible head: exactly what it covers
	}
	if err := db.enterRead(); err != nil {
		return 0, err
	}
	seg, off, err := l.exportStart(ctx, head, &opts)
	db.exitRead()
	if err != nil || seg == 0 {
		return 0, err
	}
	var events, written, reported int64
	progress := func() {
		if opts.Progress != nil {
			opts.Progress(events, written)
		}
		reported = events
	}
	fail := func(err error) (int64, error) {
		return events, fmt.Errorf("engine: export of ledger %s, after %d events: %w", l.meta.Name, events, err)
	}
	// The lines are gathered in buf and written to w when it is full.
	// Records are read in chunks of at most checkEvery with enterRead
	// held, never while w.Write or Progress runs (either may call Close).
	const bufSize = 256 << 10
	buf := make([]byte, 0, bufSize+bufSize/4)
	// With a checkpoint, the exported events' leaf hashes (each line
	// hashed as lineLeafHash hashes it) give the root that the checkpoint
	// must sign: compared before the checkpoint is written.
	var (
		leaves tree.Builder
		hasher hash.Hash
		sum    tree.Hash
	)
	if opts.Checkpoint != nil {
		hasher = sha256.New()
	}
	it := l.log.NewIterator(seg, off)
	defer it.Close()
	for done := false; !done; {
		if err := db.stopped(ctx); err != nil {
			return events, err
		}
		if err := db.enterRead(); err != nil {
			return events, err
		}
		for range checkEvery {
			if !it.Next() {
				done = true
				break
			}
			r := it.Record()
			if r.Seq > head.Seq {
				done = true
				break
			}
			// The record's slices are valid until it.Next; AppendLine
			// only reads the names, so they need not be copied into
			// strings.
			n := len(buf)
			buf = ndjson.AppendLine(buf, r.ID, r.ID.Micros(),
				bytesString(r.Entity), bytesString(r.Key), bytesString(r.Event), r.Meta, r.Data)
			events++
			written += int64(len(buf) - n)
			if hasher != nil {
				hasher.Reset()
				hasher.Write([]byte{0})
				hasher.Write(buf[n : len(buf)-1])
				leaves.Add(tree.Hash(hasher.Sum(sum[:0])))
			}
			if r.Seq == head.Seq {
				done = true
				break
			}
		}
		db.exitRead()
		if err := it.Err(); err != nil {
			return fail(err)
		}
		if len(buf) >= bufSize || done {
			if _, err := w.Write(buf); err != nil {
				return fail(err)
			}
			buf = buf[:0]
		}
		if events-reported >= 4096 {
			progress()
		}
	}
	progress()
	if opts.Checkpoint != nil {
		if err := ck.matchExport(l.meta.Name, &leaves); err != nil {
			return events, err
		}
		if _, err := opts.Checkpoint.Write(ck.Note); err != nil {
			return events, fmt.Errorf("engine: export of ledger %s: write the checkpoint: %w", l.meta.Name, err)
		}
	}
	return events, nil
}

// matchExport checks that the events an export with a checkpoint wrote
// (their leaf hashes in leaves) are the events the checkpoint signs: as
// many, with its root. The checkpoint is signed from the tree file, which
// the append path wrote; the export reads the segments. An event changed
// in place (its CRCs recomputed or kept) or a segment swapped for another
// copy gives other leaves: ErrRewritten, and the checkpoint is not
// written, so that no export of events the ledger never held goes out with
// a signature that vouches for it.
func (ck *Checkpoint) matchExport(ledger string, leaves *tree.Builder) error {
	if leaves.Size() != ck.Size {
		return fmt.Errorf("%w: export of ledger %s: the checkpoint covers %d events, the segments gave %d: the checkpoint is not written (annal verify --full %s says what is wrong)",
			ErrRewritten, ledger, ck.Size, leaves.Size(), ledger)
	}
	if root := leaves.Root(); root != ck.Root {
		return fmt.Errorf("%w: export of ledger %s: the Merkle root of the %d exported events is %s, but the tree the checkpoint signs (origin %s, size %d) has root %s: the segments do not hold the events the tree committed to; the checkpoint is not written (annal verify --full %s names the event)",
			ErrRewritten, ledger, leaves.Size(), base64.StdEncoding.EncodeToString(root[:]), ck.Origin, ck.Size, base64.StdEncoding.EncodeToString(ck.Root[:]), ledger)
	}
	return nil
}

// exportStart returns where an export with these options begins: the
// segment and offset of its first record, or segment 0 if no event is to
// be exported.
func (l *ledger) exportStart(ctx context.Context, head segment.Head, o *ExportOptions) (uint64, int64, error) {
	if o.After.IsZero() && o.From.IsZero() {
		return 1, segment.FirstOffset, nil
	}
	if err := l.readable(); err != nil {
		return 0, 0, err
	}
	lo := l.meta.ID.MinForTime(o.From)
	if !o.After.IsZero() {
		if o.After.Ledger() != l.meta.ID {
			return 0, 0, invalid("export: after %s: an ID of ledger %s, not of %s", o.After, o.After.Ledger(), l.meta.ID)
		}
		seq, _, found, err := l.db.idx.Lookup(o.After)
		if err != nil {
			return 0, 0, l.indexErr("export", err)
		}
		if !found || seq > head.Seq {
			return 0, 0, fmt.Errorf("%w: export: after %s: no such event in ledger %s", ErrNotFound, o.After, l.meta.Name)
		}
		if next := nextID(o.After); next.Compare(lo) > 0 {
			lo = next
		}
	}
	hi := eventid.MaxForLedger(l.meta.ID)
	pos, found, err := l.firstInRange(ctx, lo, hi, false)
	if err != nil || !found || pos.Seq > head.Seq {
		return 0, 0, err
	}
	return pos.Loc.Segment, pos.Loc.Offset, nil
}
