package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
)

// take fences the ledger (docs/replication.md, "Fencing"): the next
// manifest at epoch + 1, then a fence chunk at the first free slot; then
// it starts the cutter and the maintainer, which ship the local backlog.
func (s *writerState) take(ctx context.Context) error {
	if s.cfg.Source == nil {
		return errors.New("replica: Take: Config.Source is nil")
	}
	s.mu.Lock()
	taken, closed := s.taken, s.closed
	s.mu.Unlock()
	if taken || closed {
		return errors.New("replica: Take on a Writer that took the ledger already, or is closed")
	}
	m, num, err := s.writeTakeManifest(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock() // Status reads it
	s.epoch = m.Epoch
	s.mu.Unlock()

	// The tree at the tail: the fence chunk's root, and the builder the
	// cutter feeds.
	b, err := s.cfg.Source.Frontier(s.tail.Seq)
	if err != nil {
		return fmt.Errorf("replica: Take: the local Merkle tree at %d: %w", s.tail.Seq, err)
	}
	root := Hash(b.Root())
	if s.tailChunk != 0 && root != s.tailRoot {
		return fmt.Errorf("%w: the local Merkle root at size %d is not chunk %s's", ErrDiverged, s.tail.Seq, ChunkKey(s.cfg.Ledger, s.tailChunk))
	}
	if err := s.checkTailPlace(); err != nil {
		return err
	}
	fenceNo, fenceSum, err := s.writeFence(ctx, root, false)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	s.fence = fenceNo
	s.nextSeq = s.tail.Seq + 1
	s.nextChunk = fenceNo + 1
	s.prevSum = fenceSum
	s.builder = b
	s.lastSeg = s.tail.Segment
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.wake = make(chan struct{}, 1)
	s.maint = make(chan struct{}, 1)
	s.slots = make(chan struct{}, s.cfg.Uploads)
	s.cuts = make(chan cut)
	for range s.cfg.Uploads {
		s.slots <- struct{}{}
	}

	s.mu.Lock()
	s.taken = true
	s.manifest, s.manifestNum, s.manifestAt, s.manifestChecked = m, num, now, now
	s.storedChunk, s.storedSeq, s.storedAt = fenceNo, s.tail.Seq, time.Now()
	s.gcDone = 1 // chunks below m.GC may be left: collect lists them
	s.manifestsGCd = s.manifestLow
	head := s.cfg.Source.Head().Seq
	s.backlogTo = head
	s.lastAdded = max(s.lastAdded, head)
	if head > s.tail.Seq {
		s.ages = append([]ageMark{{last: head, at: now}}, s.ages...)
	}
	// Segments sealed before the tail's that the bucket lacks: their
	// records are stored, the chunks holding them are not known here (the
	// GC boundary stays).
	for n := m.Segments + 1; n < s.tail.Segment; n++ {
		s.seals = append(s.seals, sealTask{seg: n})
	}
	s.sealQueued = max(m.Segments, s.tail.Segment-1)
	s.broadcastLocked()
	s.mu.Unlock()

	s.wg.Add(2 + s.cfg.Uploads)
	go s.cutLoop()
	go s.maintainLoop()
	for range s.cfg.Uploads {
		go s.uploader()
	}
	notify(s.wake)
	notify(s.maint)
	return nil
}

// checkTailPlace checks that the bucket's tail puts the next record where
// the local log does: after the local record tail.Seq, in its segment or
// at the start of the next. The fence chunk says so to every reader; a
// bucket whose last chunk says otherwise (its header rewritten) is not
// built on.
func (s *writerState) checkTailPlace() error {
	if s.tail.Seq == 0 {
		return nil
	}
	sp, _, err := s.cfg.Source.Read(s.tail.Seq, 1)
	if err != nil {
		return fmt.Errorf("replica: Take: the local record %d: %w", s.tail.Seq, err)
	}
	prev, err := segment.SpanPrev(sp.Bytes)
	if err != nil {
		return fmt.Errorf("replica: Take: the local record %d: %w", s.tail.Seq, err)
	}
	seg, end := sp.Segment, int64(-1)
	_, err = segment.VerifySpan(s.cfg.Ledger, segment.Head{ID: prev, Seq: sp.FirstSeq - 1}, "the local log", sp.Segment, sp.Offset, sp.Bytes, func(r *segment.Record, loc segment.Location) error {
		if r.Seq == s.tail.Seq {
			end = loc.End()
		}
		return nil
	})
	if err == nil && end < 0 {
		err = fmt.Errorf("records %d to %d read", sp.FirstSeq, sp.Last.Seq)
	}
	if err != nil {
		return fmt.Errorf("replica: Take: the local record %d: %w", s.tail.Seq, err)
	}
	if s.tail.Segment == seg && s.tail.Offset == end || s.tail.Segment == seg+1 && s.tail.Offset == segment.RecordsStart {
		return nil
	}
	what := "the last seg/ object"
	if s.tailChunk != 0 {
		what = "chunk " + ChunkKey(s.cfg.Ledger, s.tailChunk)
	}
	return fmt.Errorf("%w: replica: %s puts the records after %d at segment %d offset %d; the local record %d ends at segment %d offset %d",
		errDamage, what, s.tail.Seq, s.tail.Segment, s.tail.Offset, s.tail.Seq, seg, end)
}

// writeTakeManifest writes the next manifest with the next epoch,
// create-only, re-reading the newest after a 412.
func (s *writerState) writeTakeManifest(ctx context.Context) (Manifest, uint64, error) {
	m, num := s.tail.Manifest, s.manifestNo
	for try := 0; ; try++ {
		// The next epoch is above the chunks' too: a newest manifest
		// deleted from the bucket must not give this writer the epoch of
		// the writer that wrote it (two writers of one epoch, and a fence
		// chunk that a restore refuses).
		epoch := max(m.Epoch, s.tailEpoch)
		if epoch == math.MaxUint64 {
			return Manifest{}, 0, fmt.Errorf("%w: replica: Take: manifest %s or the chunks at %s hold epoch %d, which has no next epoch",
				errDamage, ManifestKey(s.cfg.Ledger, num), s.cfg.Endpoint, epoch)
		}
		next := Manifest{
			V:         ManifestVersion,
			Ledger:    fmt.Sprintf("%08x", uint32(s.cfg.Ledger)),
			Name:      s.cfg.Name,
			Epoch:     epoch + 1,
			Writer:    s.cfg.Identity,
			Segments:  m.Segments,
			SealedSeq: m.SealedSeq,
			GC:        m.GC,
			Written:   s.cfg.Now().UTC(),
		}
		key := ManifestKey(s.cfg.Ledger, num+1)
		data := next.Encode()
		_, err := s.cfg.Store.Put(ctx, key, data, store.CreateOnly())
		if err == nil {
			return next, num + 1, nil
		}
		if errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrConflict) {
			if o, gerr := s.cfg.Store.Get(ctx, key); gerr == nil && bytes.Equal(o.Data, data) {
				return next, num + 1, nil // an earlier attempt's
			}
		} else if ctx.Err() != nil {
			return Manifest{}, 0, fmt.Errorf("replica: Take: write manifest %s at %s: %w", key, s.cfg.Endpoint, err)
		}
		if try+1 == takeTries {
			return Manifest{}, 0, fmt.Errorf("replica: Take: manifest %s at %s: other writers took the ledger %d times in a row (epoch %d, %s); last error: %w",
				key, s.cfg.Endpoint, takeTries, m.Epoch, m.Writer, err)
		}
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) {
			time.Sleep(backoff(try))
		}
		nm, nnum, rerr := s.newestManifest(ctx)
		if rerr != nil {
			return Manifest{}, 0, fmt.Errorf("replica: Take: %w", rerr)
		}
		if nnum >= num {
			m, num = nm, nnum
		}
	}
}

// writeFence writes the fence chunk at the first free slot after the
// tail's chunk, taking in old-epoch fence chunks found there. With chase
// (a fence from the bucket alone, Fence), old-epoch chunks that continue
// the history there are taken in too: the tail moves to them. It
// returns its number and Sum.
func (s *writerState) writeFence(ctx context.Context, root Hash, chase bool) (uint64, Hash, error) {
	n, prev := s.tailChunk+1, s.tailSum
	if s.tailChunk == 0 {
		// No chunk at or above the GC boundary (all deleted, by hand):
		// the history's chunks go on from the boundary, where readers
		// look and GC does not delete, not from chunk 1.
		n = max(s.tail.Manifest.GC, 1)
	}
	micros := s.tail.ID.Micros()
	if s.tail.Seq == 0 {
		micros = 0
	}
	for try := 0; ; try++ {
		c := Chunk{
			Ledger: s.cfg.Ledger, Number: n, Epoch: s.epoch,
			FirstSeq: s.tail.Seq + 1, LastSeq: s.tail.Seq,
			FirstMicros: micros, LastMicros: micros,
			Prev: prev, TreeSize: s.tail.Seq, Root: root,
			Segment: uint32(s.tail.Segment), Offset: uint32(s.tail.Offset),
		}
		key := ChunkKey(s.cfg.Ledger, n)
		data := c.Encode()
		_, err := s.cfg.Store.Put(ctx, key, data, store.CreateOnly())
		if err == nil {
			return n, Sum(data), nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) {
			if ctx.Err() != nil || try > 20 {
				return 0, Hash{}, fmt.Errorf("replica: Take: write fence chunk %s at %s: %w", key, s.cfg.Endpoint, err)
			}
			time.Sleep(backoff(try))
			continue
		}
		o, gerr := s.cfg.Store.Get(ctx, key)
		if errors.Is(gerr, store.ErrNotFound) {
			continue // a conflict that wrote nothing
		}
		if gerr != nil {
			return 0, Hash{}, fmt.Errorf("replica: Take: read back chunk %s at %s: %w", key, s.cfg.Endpoint, gerr)
		}
		if bytes.Equal(o.Data, data) {
			return n, Sum(data), nil // an earlier attempt's
		}
		got, derr := DecodeChunk(key, s.cfg.Ledger, o.Data)
		switch {
		case derr != nil:
			return 0, Hash{}, derr
		case got.Epoch >= s.epoch:
			return 0, Hash{}, fmt.Errorf("%w: chunk %s holds epoch %d, this writer's is %d", ErrFenced, key, got.Epoch, s.epoch)
		case got.Prev != prev && !(s.tailChunk == 0 && got.FirstSeq == s.tail.Seq+1):
			// Not the history's next chunk: a fenced writer's upload
			// that landed after a fence. It is nobody's acknowledged
			// record; the slot is this writer's. With no chunk at the
			// tail (the chunk before the boundary deleted by GC, whose
			// Sum this writer cannot know), a chunk whose records
			// follow the tail's is the history's next, as every reader
			// takes it: the writer's upload in flight at the boundary,
			// landed now, which it acknowledged with the chunks after.
			if try > 20 {
				return 0, Hash{}, fmt.Errorf("replica: Take: chunk %s (epoch %d) keeps coming back after being deleted", key, got.Epoch)
			}
			if err := s.cfg.Store.Delete(ctx, key); err != nil {
				return 0, Hash{}, fmt.Errorf("replica: Take: delete a fenced writer's chunk %s at %s: %w", key, s.cfg.Endpoint, err)
			}
		case got.Fence() && got.LastSeq == s.tail.Seq:
			// An old epoch's fence after the tail: take it in.
			n, prev = n+1, Sum(o.Data)
		case chase && !got.Fence() && got.FirstSeq == s.tail.Seq+1:
			// The writer being fenced stored its next chunk first: the
			// history's tail is now that chunk, and the fence goes after.
			id, err := s.lastID(got)
			if err != nil {
				return 0, Hash{}, err
			}
			s.tail.Seq, s.tail.ID = got.LastSeq, id
			s.tail.Segment, s.tail.Offset = uint64(got.Segment), int64(got.Offset)+int64(len(got.Records))
			s.tailChunk, s.tailSum, s.tailRoot = n, Sum(o.Data), got.Root
			micros, root = id.Micros(), got.Root
			n, prev = n+1, Sum(o.Data)
		default:
			return 0, Hash{}, fmt.Errorf("%w: chunk %s (epoch %d) holds records %d to %d after the tail this writer read (record %d)",
				ErrBehind, key, got.Epoch, got.FirstSeq, got.LastSeq, s.tail.Seq)
		}
	}
}

// ErrFenceNeedsRecords: Fence cannot fence the ledger from the bucket
// alone, whose chunks above the GC boundary were all deleted while its
// sealed segments hold records (the Merkle root at the tail is in no
// chunk header): pull the records, then Open and Take.
var ErrFenceNeedsRecords = errors.New("replica: the bucket's chunks do not give the Merkle root at its tail")

// fenceBucket is Fence.
func (s *writerState) fenceBucket(ctx context.Context) (Tail, error) {
	if s.tailChunk == 0 && s.tail.Seq > 0 {
		return Tail{}, fmt.Errorf("%w: no chunk from %s on at %s, the segments hold records to %d", ErrFenceNeedsRecords,
			ChunkKey(s.cfg.Ledger, max(s.tail.Manifest.GC, 1)), s.cfg.Endpoint, s.tail.Seq)
	}
	m, _, err := s.writeTakeManifest(ctx)
	if err != nil {
		return Tail{}, err
	}
	s.epoch = m.Epoch
	root := s.tailRoot // the zero Hash of the empty tree if no chunk
	if _, _, err := s.writeFence(ctx, root, true); err != nil {
		return Tail{}, err
	}
	t := s.tail
	t.Manifest = m
	return t, nil
}

// backoff is the pause before retry try (from 0) of a failed store
// request: 20 ms doubling, at most 2 s.
func backoff(try int) time.Duration {
	d := 20 * time.Millisecond << min(try, 7)
	return min(d, 2*time.Second)
}
