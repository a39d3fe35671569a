package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
)

// upload stores chunk c, retrying until it is stored, the Writer fails
// (fenced, damage) or stops, then acknowledges it in chunk order and
// frees its upload slot.
func (s *writerState) upload(c cut) {
	stored := false
	defer func() {
		if !stored {
			s.mu.Lock()
			s.inflight--
			s.mu.Unlock()
		}
		s.slots <- struct{}{}
	}()
	start := time.Now()
	for try := 0; ; try++ {
		if s.ctx.Err() != nil || s.failed() {
			return
		}
		attempt := time.Now()
		err := s.syncFor(c)
		if err == nil {
			// The store signs the hash the chain needed anyway, and
			// checks the object against it, rather than hash it again.
			err = s.create(store.WithSHA256(s.ctx, c.sum), c.key, c.object, s.judgeChunk)
		}
		if err == nil {
			s.stored(c, time.Since(start), time.Since(attempt))
			stored = true
			return
		}
		if isFatal(err) {
			s.fail(err)
			return
		}
		if errors.Is(err, errRetry) {
			continue
		}
		s.noteError(err)
		select {
		case <-time.After(min(backoff(try), s.cfg.StoreTimeout/4)):
		case <-s.ctx.Done():
			return
		}
	}
}

// syncFor makes c's records durable locally before they are uploaded:
// the bucket never holds records that a local crash could lose.
func (s *writerState) syncFor(c cut) error {
	if c.durable || s.cfg.Source.Durable().Seq >= c.lastSeq {
		return nil
	}
	if err := s.cfg.Source.Sync(); err != nil {
		return fmt.Errorf("replica: syncing the local log before chunk %s: %w", c.key, err)
	}
	return nil
}

func (s *writerState) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal != nil
}

// stored acknowledges chunk c, whose upload took took (the attempt that
// stored it: attempt), once every chunk before it is stored.
func (s *writerState) stored(c cut, took, attempt time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	// A cut held for the appenders this releases, or while this upload
	// was in flight, is due again.
	notify(s.wake)
	s.uploads++
	s.uploadTime += took
	// The hold's mean: the attempts that stored, not the retries
	// through an outage, which would hold cuts long after it.
	if s.meanUpload == 0 {
		s.meanUpload = attempt
	} else {
		s.meanUpload += (attempt - s.meanUpload) / 8
	}
	s.done[c.number] = c.lastSeq
	moved := false
	for {
		last, ok := s.done[s.storedChunk+1]
		if !ok {
			break
		}
		delete(s.done, s.storedChunk+1)
		s.storedChunk++
		s.owed += last - s.storedSeq
		s.storedSeq = last
		moved = true
	}
	if !moved {
		return
	}
	s.storedAt = time.Now()
	s.lastErr, s.lastErrAt = nil, time.Time{}
	i := 0
	for i < len(s.ages) && s.ages[i].last <= s.storedSeq {
		i++
	}
	clear(s.ages[:i])
	s.ages = s.ages[i:]
	s.releaseLocked()
	if s.closing {
		s.broadcastLocked() // Close waits for the last records
	}
	notify(s.maint)
}

// create writes data under key create-only. It returns nil once the
// key holds data (its own write, or an earlier attempt's whose answer
// was lost), the error judge gives for other bytes found there (fatal:
// fenced, damage), or the store's error to retry.
func (s *writerState) create(ctx context.Context, key string, data []byte, judge func(key string, found []byte) error) error {
	_, err := s.cfg.Store.Put(ctx, key, data, store.CreateOnly())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrPreconditionFailed),
		errors.Is(err, store.ErrConflict) && errors.Is(err, store.ErrMaybeApplied):
		o, gerr := s.cfg.Store.Get(ctx, key)
		if errors.Is(gerr, store.ErrNotFound) {
			return fmt.Errorf("replica: put %s at %s: %w, then the key holds nothing", key, s.cfg.Endpoint, err)
		}
		if gerr != nil {
			return fmt.Errorf("replica: read back %s at %s after %v: %w", key, s.cfg.Endpoint, err, gerr)
		}
		if bytes.Equal(o.Data, data) {
			return nil
		}
		if errors.Is(err, store.ErrPreconditionFailed) {
			return judge(key, o.Data)
		}
		return fmt.Errorf("replica: put %s at %s: %w", key, s.cfg.Endpoint, err)
	default:
		return fmt.Errorf("replica: put %s at %s: %w", key, s.cfg.Endpoint, err)
	}
}

// judgeChunk says what another chunk found under this writer's slot
// means: a newer epoch's is a fence, anything else damage.
func (s *writerState) judgeChunk(key string, found []byte) error {
	c, err := DecodeChunk(key, s.cfg.Ledger, found)
	if err != nil {
		return fmt.Errorf("%w: %w", errDamage, err)
	}
	if c.Epoch > s.epoch {
		return fmt.Errorf("%w: chunk %s holds epoch %d, this writer's is %d", ErrFenced, key, c.Epoch, s.epoch)
	}
	if c.Epoch < s.epoch {
		// A fenced writer's upload that landed after this writer's
		// fence: the chain cannot pass through it (epochs never go
		// down), nobody acknowledged it, and the slot is this
		// writer's. Delete it; the retry creates the chunk.
		if err := s.cfg.Store.Delete(s.ctx, key); err != nil {
			return fmt.Errorf("replica: delete a fenced writer's chunk %s at %s: %w", key, s.cfg.Endpoint, err)
		}
		return fmt.Errorf("replica: chunk %s held a fenced writer's chunk (epoch %d), deleted: %w", key, c.Epoch, errRetry)
	}
	return fmt.Errorf("%w: replica: chunk %s holds other bytes (epoch %d, records %d to %d) than this writer (epoch %d) wrote there",
		errDamage, key, c.Epoch, c.FirstSeq, c.LastSeq, s.epoch)
}

// judgeSegment says that other bytes under a sealed segment's key are
// damage: a segment, once sealed, is the same file in every directory
// that holds the ledger.
func (s *writerState) judgeSegment(seg, first uint64, data []byte) func(key string, found []byte) error {
	return func(key string, found []byte) error {
		// The same records under another header that verifies for the
		// segment: a writer that stored the segment before its disk was
		// lost had the header this directory's restore made anew (only
		// its creation time differs, docs/replication.md "Restore").
		if len(found) == len(data) && len(data) > segment.RecordsStart &&
			bytes.Equal(found[segment.RecordsStart:], data[segment.RecordsStart:]) {
			prev, err := segment.SpanPrev(data[segment.RecordsStart:])
			if err == nil {
				_, err = segment.VerifyFile(s.cfg.Ledger, seg, segment.Head{ID: prev, Seq: first - 1}, key, found, nil)
			}
			if err == nil {
				return nil
			}
			return fmt.Errorf("%w: replica: %s holds the sealed segment's records under a header that does not verify: %w", errDamage, key, err)
		}
		return fmt.Errorf("%w: replica: %s holds %d bytes, not the sealed segment's this writer stores there", errDamage, key, len(found))
	}
}

// errRetry marks an upload to try again at once.
var errRetry = errors.New("retry")

// isFatal says whether err stops the Writer: a fence, or damage.
func isFatal(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, errDamage) || errors.Is(err, corruption.Err)
}
