package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
)

// maintainLoop stores sealed segments and the manifests naming them,
// the checkpoint and its tiles, and deletes what GC allows (chunks,
// manifests, partial tiles), whenever chunks are stored
// and at least every maintainEvery.
func (s *writerState) maintainLoop() {
	defer s.wg.Done()
	every := min(time.Second, max(s.cfg.GCGrace/4, 10*time.Millisecond))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.maint:
		case <-tick.C:
		case <-s.ctx.Done():
			return
		}
		if s.failed() {
			continue
		}
		s.maintain(s.ctx)
	}
}

// maintain does one round of the maintainer's work; an error is noted
// (Status.LastError) and the work tried again next round, unless it is
// fatal.
func (s *writerState) maintain(ctx context.Context) {
	for _, step := range []func(context.Context) error{s.storeSeals, s.storeCheckpoint, s.collect, s.collectTiles} {
		if err := step(ctx); err != nil {
			if isFatal(err) {
				s.fail(err)
				return
			}
			if ctx.Err() == nil {
				s.noteError(err)
			}
		}
	}
}

// storeSeals stores the queued sealed segments whose records are all
// stored, each followed by a manifest naming it.
func (s *writerState) storeSeals(ctx context.Context) error {
	for {
		s.mu.Lock()
		if len(s.seals) == 0 || s.fatal != nil {
			s.mu.Unlock()
			return nil
		}
		t, stored := s.seals[0], s.storedSeq
		s.mu.Unlock()
		if t.data == nil {
			data, first, last, err := s.cfg.Source.Sealed(t.seg)
			if err != nil {
				return fmt.Errorf("replica: reading sealed segment %d: %w", t.seg, err)
			}
			t.data, t.first, t.last = data, first, last
			s.mu.Lock()
			s.seals[0] = t
			s.mu.Unlock()
		}
		data, first, last := t.data, t.first, t.last
		if stored < last {
			return nil // its records are not all stored yet
		}
		key := SegmentKey(s.cfg.Ledger, first, last)
		if err := s.create(ctx, key, data, s.judgeSegment(t.seg, first, data)); err != nil {
			return err
		}
		s.mu.Lock()
		next := s.manifest
		s.mu.Unlock()
		next.Segments, next.SealedSeq, next.Fence = t.seg, last, s.fence
		if t.gc > next.GC {
			next.GC = t.gc
		}
		if err := s.writeManifest(ctx, next); err != nil {
			return err
		}
		s.mu.Lock()
		s.seals = s.seals[1:]
		s.broadcastLocked() // Close waits for the seals
		s.mu.Unlock()
	}
}

// writeManifest writes m as the next manifest, create-only. A 412 means
// another writer's manifest (fenced) unless it is this one's own.
func (s *writerState) writeManifest(ctx context.Context, m Manifest) error {
	s.mu.Lock()
	num := s.manifestNum + 1
	s.mu.Unlock()
	m.Written = s.cfg.Now().UTC()
	m.Writer = s.cfg.Identity
	key := ManifestKey(s.cfg.Ledger, num)
	data := m.Encode()
	err := s.create(ctx, key, data, func(key string, found []byte) error {
		other, err := DecodeManifest(key, s.cfg.Ledger, found)
		if err != nil {
			return fmt.Errorf("%w: %w", errDamage, err)
		}
		if other.Epoch > s.epoch {
			return fmt.Errorf("%w: manifest %s has epoch %d (%s), this writer's is %d", ErrFenced, key, other.Epoch, other.Writer, s.epoch)
		}
		return fmt.Errorf("%w: replica: manifest %s (epoch %d, %s) is not the one this writer (epoch %d) wrote", errDamage, key, other.Epoch, other.Writer, s.epoch)
	})
	if err != nil {
		return err
	}
	// The create succeeds in a slot GC emptied too: a writer paused
	// past the grace period writes below newer manifests. Only none
	// after it makes it the newest.
	now := s.cfg.Now()
	newest, n, err := s.newestManifest(ctx)
	if err != nil {
		return err
	}
	if n > num {
		if newest.Epoch > s.epoch {
			return fmt.Errorf("%w: manifest %s has epoch %d (%s), this writer's is %d", ErrFenced, ManifestKey(s.cfg.Ledger, n), newest.Epoch, newest.Writer, s.epoch)
		}
		return fmt.Errorf("%w: replica: manifest %s (epoch %d, %s) follows the one this writer (epoch %d) just wrote, %s", errDamage, ManifestKey(s.cfg.Ledger, n), newest.Epoch, newest.Writer, s.epoch, key)
	}
	s.mu.Lock()
	s.manifest, s.manifestNum, s.manifestAt, s.manifestChecked = m, num, now, now
	s.mu.Unlock()
	return nil
}

// storeCheckpoint stores the newest checkpoint given once every record
// in it is stored, replacing the bucket's only with a larger one, or
// one this writer cannot build on (judgeCheckpoint).
func (s *writerState) storeCheckpoint(ctx context.Context) error {
	s.mu.Lock()
	msg, size, stored := s.checkpointMsg, s.checkpointSize, s.storedSeq
	s.mu.Unlock()
	if msg == nil || stored < size {
		return nil
	}
	key := CheckpointKey(s.cfg.Ledger)
	for try := 0; ; try++ {
		cond := store.CreateOnly()
		have := uint64(0)
		o, err := s.cfg.Store.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return fmt.Errorf("replica: read %s at %s: %w", key, s.cfg.Endpoint, err)
		default:
			cond = store.ReplaceIf(o.ETag)
			if bytes.Equal(o.Data, msg) {
				have = size // the one this writer would store
			} else if have, err = s.judgeCheckpoint(ctx, key, o.Data); err != nil {
				return err
			}
		}
		if have < size {
			if done, err := s.storeCheckpointTiles(ctx, size, have); err != nil || !done {
				return err
			}
			_, err = s.cfg.Store.Put(ctx, key, msg, cond)
		}
		switch {
		case err == nil:
			s.mu.Lock()
			s.checkpointDone = max(s.checkpointDone, size, have)
			if have < size {
				s.checkpointKnown, s.checkpointKnownSize = msg, size
			}
			if s.checkpointSize <= s.checkpointDone {
				s.checkpointMsg = nil
			}
			s.broadcastLocked() // Close waits for it
			s.mu.Unlock()
			s.tiles.gc.noteCheckpoint(max(size, have), s.cfg.Now())
			return nil
		case (errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)) && try < 5:
			continue // replaced meanwhile: read it again
		default:
			return fmt.Errorf("replica: put %s at %s: %w", key, s.cfg.Endpoint, err)
		}
	}
}

// judgeCheckpoint says how many events the bucket's checkpoint object
// data (under key) vouches for, as this writer may build on it: its size
// if it is a checkpoint of the ledger signed by its key
// (Config.OpenCheckpoint) whose root is the ledger's at that size, and
// that no larger than the records stored. Otherwise (not signed by the
// key, damaged, another history, more events than the bucket holds) it
// returns 0, so that the writer's checkpoint replaces it (with If-Match:
// not a newer one written meanwhile), once it checked that it still
// holds the ledger (another writer's checkpoint is not replaced: that
// writer fenced this one, ErrFenced); what it found is reported
// (Status.LastError and Status.Damage). A valid checkpoint smaller than
// one this writer stored before (the bucket restored from an old copy,
// or the object replaced by an older one) is reported too, and replaced
// as any smaller one is.
func (s *writerState) judgeCheckpoint(ctx context.Context, key string, data []byte) (uint64, error) {
	s.mu.Lock()
	known, knownSize, stored, done := s.checkpointKnown, s.checkpointKnownSize, s.storedSeq, s.checkpointDone
	s.mu.Unlock()
	if known != nil && bytes.Equal(data, known) {
		return knownSize, nil // what this writer stored or judged before
	}
	var bad error
	size, root, err := s.openCheckpoint(data)
	switch {
	case err != nil:
		bad = fmt.Errorf("not a checkpoint of the ledger signed by its key: %w", err)
	case size > stored:
		bad = fmt.Errorf("it claims %d events, the bucket holds %d: no writer stored it", size, stored)
	default:
		b, err := s.cfg.Source.Frontier(size)
		if err != nil {
			return 0, fmt.Errorf("replica: %s: the ledger's Merkle tree at its size %d: %w", key, size, err)
		}
		if mine := b.Root(); mine != root {
			bad = fmt.Errorf("its root at size %d is %x, the ledger's is %x: a checkpoint of another history", size, root[:], mine[:])
		}
	}
	if bad == nil {
		if size < done {
			s.noteDamage(fmt.Errorf("%w: replica: %s is a checkpoint of %d events, this writer stored one of %d before: the object was replaced by an older one (an old copy of the bucket restored?); replaced by this writer's next checkpoint", errDamage, key, size, done))
		}
		s.mu.Lock()
		s.checkpointKnown, s.checkpointKnownSize = bytes.Clone(data), size
		s.mu.Unlock()
		return size, nil
	}
	if err := s.checkNotFenced(ctx); err != nil {
		return 0, err
	}
	s.noteDamage(fmt.Errorf("%w: replica: %s: %w; replaced by this writer's checkpoint", errDamage, key, bad))
	return 0, nil
}

// openCheckpoint checks a signed checkpoint with Config.OpenCheckpoint,
// or, without one, only parses its body.
func (s *writerState) openCheckpoint(note []byte) (uint64, tree.Hash, error) {
	if s.cfg.OpenCheckpoint != nil {
		return s.cfg.OpenCheckpoint(note)
	}
	end := bytes.Index(note, []byte("\n\n"))
	if end < 0 {
		return 0, tree.Hash{}, errors.New("not a signed note: no empty line")
	}
	c, err := tree.ParseCheckpoint(note[:end+1])
	if err != nil {
		return 0, tree.Hash{}, err
	}
	return c.Size, c.Root, nil
}

// checkNotFenced reads the newest manifest: one of a higher epoch than
// this writer's means another writer took the ledger (ErrFenced).
func (s *writerState) checkNotFenced(ctx context.Context) error {
	m, n, err := s.newestManifest(ctx)
	if err != nil {
		return err
	}
	if m.Epoch > s.epoch {
		return fmt.Errorf("%w: manifest %s has epoch %d (%s), this writer's is %d", ErrFenced, ManifestKey(s.cfg.Ledger, n), m.Epoch, m.Writer, s.epoch)
	}
	return nil
}

// collect deletes the chunks below the newest manifest's GC boundary
// once GCGrace has passed since this writer wrote or read that
// manifest, and the manifests below the newest two. It never deletes
// seg/ objects.
func (s *writerState) collect(ctx context.Context) error {
	s.mu.Lock()
	m, num, at, from, mfrom := s.manifest, s.manifestNum, s.manifestAt, s.gcDone, s.manifestsGCd
	s.mu.Unlock()
	if m.GC > from && s.cfg.Now().Sub(at) >= s.cfg.GCGrace {
		prefix := LedgerPrefix(s.cfg.Ledger) + "wal/"
		after := ""
		if from > 1 {
			after = ChunkKey(s.cfg.Ledger, from-1)
		}
		bound := ChunkKey(s.cfg.Ledger, m.GC)
	list:
		for {
			page, err := s.cfg.Store.List(ctx, prefix, after, 0)
			if err != nil {
				return fmt.Errorf("replica: list %s at %s: %w", prefix, s.cfg.Endpoint, err)
			}
			for _, o := range page.Objects {
				if o.Key >= bound {
					break list
				}
				if err := s.cfg.Store.Delete(ctx, o.Key); err != nil {
					return fmt.Errorf("replica: delete %s at %s: %w", o.Key, s.cfg.Endpoint, err)
				}
			}
			if !page.Truncated || len(page.Objects) == 0 {
				break
			}
			after = page.Objects[len(page.Objects)-1].Key
		}
		s.mu.Lock()
		s.gcDone = max(s.gcDone, m.GC)
		s.mu.Unlock()
	}
	if num > 2 && num-1 > mfrom {
		for n := max(mfrom, 1); n < num-1; n++ {
			key := ManifestKey(s.cfg.Ledger, n)
			if err := s.cfg.Store.Delete(ctx, key); err != nil {
				return fmt.Errorf("replica: delete %s at %s: %w", key, s.cfg.Endpoint, err)
			}
			s.mu.Lock()
			s.manifestsGCd = n + 1
			s.mu.Unlock()
		}
	}
	return nil
}
