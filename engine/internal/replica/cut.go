package replica

import (
	"fmt"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
)

// cut is a chunk ready to upload.
type cut struct {
	number  uint64
	lastSeq uint64
	key     string
	object  []byte
	sum     Hash // Sum(object), which the next chunk names
	// durable: its records were synced locally before it was cut.
	durable bool
}

// cutLoop cuts chunks and hands each to an uploader, one upload slot
// each, until the Writer stops or fails.
func (s *writerState) cutLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.slots:
		case <-s.ctx.Done():
			return
		}
		s.slotAt = time.Now()
		c, ok := s.nextCut()
		if !ok {
			return
		}
		s.mu.Lock()
		s.inflight++
		s.mu.Unlock()
		select {
		case s.cuts <- c:
		case <-s.ctx.Done():
			s.mu.Lock()
			s.inflight--
			s.mu.Unlock()
			return
		}
	}
}

// uploader uploads the chunks cutLoop hands it, one at a time, until the
// Writer stops. The uploaders live as long as the Writer: a goroutine
// started for each chunk grew its stack again through the S3 client's
// deep calls at every upload (3.4% of a 64-appender Replicated run's CPU
// in runtime.newstack).
func (s *writerState) uploader() {
	defer s.wg.Done()
	for {
		select {
		case c := <-s.cuts:
			s.upload(c)
		case <-s.ctx.Done():
			return
		}
	}
}

// nextCut waits until a chunk is due (see due), then cuts it.
func (s *writerState) nextCut() (cut, bool) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		if s.fatal != nil {
			s.mu.Unlock()
			<-s.ctx.Done()
			return cut{}, false
		}
		wait, spans, read := s.dueLocked(time.Now())
		s.mu.Unlock()
		if wait == 0 {
			c, err := s.cutChunk(spans, read)
			if err != nil {
				s.noteError(err)
				if isFatal(err) {
					s.fail(err)
					continue
				}
				wait = backoff(3)
			} else if c.object != nil {
				return c, true
			} else {
				continue
			}
		}
		var tc <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-s.ctx.Done():
			return cut{}, false
		}
	}
}

// dueLocked says how long to wait before the next chunk is due (0: now,
// < 0: until woken), and what it holds: the pending spans it takes, or
// (read) that the records after nextSeq are read from the Source (the
// backlog, or records the spans skip). Called with mu held.
func (s *writerState) dueLocked(now time.Time) (wait time.Duration, spans []pendingSpan, read bool) {
	// Drop what the backlog's reads covered already.
	for len(s.pending) > 0 && s.pending[0].span.Last.Seq < s.nextSeq {
		s.pendingBytes -= len(s.pending[0].span.Bytes)
		s.pending[0] = pendingSpan{}
		s.pending = s.pending[1:]
	}
	fromSpans := len(s.pending) > 0 && s.pending[0].span.FirstSeq == s.nextSeq
	if !fromSpans && len(s.pending) == 0 && s.nextSeq > s.backlogTo {
		return -1, nil, false
	}
	switch {
	case s.closing || !fromSpans:
	case s.cfg.Mode == Replicated:
		if d := s.cfg.MinFlushInterval - now.Sub(s.lastCut); d > 0 {
			return d, nil, false
		}
		if d := s.holdLocked(now); d > 0 {
			return d, nil, false
		}
	default: // Shipped
		if s.urgent == 0 && s.pendingBytes < s.cfg.MaxChunkBytes {
			if d := s.cfg.ShipInterval/2 - now.Sub(s.pending[0].added); d > 0 {
				return d, nil, false
			}
		}
	}
	s.lastCut = now
	if !fromSpans {
		return 0, nil, true
	}
	// Take the spans that follow one another in one segment, up to
	// MaxChunkBytes (the first whatever its size).
	n, size := 0, 0
	for i, p := range s.pending {
		if i > 0 {
			prev := s.pending[i-1].span
			if p.span.Segment != prev.Segment || p.span.Offset != prev.Offset+int64(len(prev.Bytes)) ||
				p.span.FirstSeq != prev.Last.Seq+1 || size+len(p.span.Bytes) > s.cfg.MaxChunkBytes {
				break
			}
		}
		n, size = i+1, size+len(p.span.Bytes)
	}
	spans = append([]pendingSpan(nil), s.pending[:n]...)
	clear(s.pending[:n])
	s.pending = s.pending[n:]
	s.pendingBytes -= size
	return 0, spans, false
}

// holdLocked says how much longer a Replicated cut waits for the
// appenders that the last acknowledgements released (owed): each comes
// back within a local commit, and a chunk cut before they do holds a few
// records and leaves theirs to the next upload slot, one more PUT on a
// store that may share this machine's CPU. A cut is held only while
// other uploads are in flight (a lone appender is never delayed), and
// at most Config.Hold times the mean upload time from when the slot was
// free and records pending. A hold that runs out forgets what is owed.
// Called with mu held, records pending.
func (s *writerState) holdLocked(now time.Time) time.Duration {
	if s.owed == 0 || s.inflight == 0 || s.cfg.Hold < 0 || s.pendingBytes >= s.cfg.MaxChunkBytes {
		return 0
	}
	from := s.slotAt
	if added := s.pending[0].added; added.After(from) {
		from = added
	}
	if d := time.Duration(s.cfg.Hold*float64(s.meanUpload)) - now.Sub(from); d > 0 {
		return d
	}
	s.owed = 0
	return 0
}

// cutChunk encodes the next chunk from spans, or from the Source (read).
// Only the cutter calls it. A cut with a nil object is nothing to cut.
func (s *writerState) cutChunk(spans []pendingSpan, read bool) (cut, error) {
	var (
		obj     []byte // the chunk object: its header's room, then the records
		leaves  []tree.Hash
		seg     uint64
		off     int64
		first   segment.Span
		last    segment.Head
		durable = true
	)
	if read {
		sp, lv, err := s.cfg.Source.Read(s.nextSeq, s.cfg.MaxChunkBytes)
		if err != nil {
			return cut{}, fmt.Errorf("replica: reading local records from %d: %w", s.nextSeq, err)
		}
		if sp.FirstSeq != s.nextSeq || sp.Last.Seq < sp.FirstSeq {
			return cut{}, fmt.Errorf("%w: replica: the local log's read from %d gave records %d to %d", errDamage, s.nextSeq, sp.FirstSeq, sp.Last.Seq)
		}
		spans = []pendingSpan{{span: sp, leaves: lv}}
	}
	if len(spans) == 0 {
		return cut{}, nil
	}
	first = spans[0].span
	seg, off = first.Segment, first.Offset
	size, nLeaves := 0, 0
	for _, p := range spans {
		size += len(p.span.Bytes)
		nLeaves += len(p.leaves)
	}
	// The records are copied once, into the object, sized up front: a
	// Shipped chunk gathers thousands of spans into up to 8 MiB.
	obj = make([]byte, ChunkHeaderSize, ChunkHeaderSize+size)
	leaves = make([]tree.Hash, 0, nLeaves)
	for _, p := range spans {
		obj = append(obj, p.span.Bytes...)
		leaves = append(leaves, p.leaves...)
		last = p.span.Last
		durable = durable && p.span.Durable
	}
	if want := last.Seq - first.FirstSeq + 1; uint64(len(leaves)) != want {
		return cut{}, fmt.Errorf("%w: replica: records %d to %d came with %d Merkle leaves", errDamage, first.FirstSeq, last.Seq, len(leaves))
	}
	for _, l := range leaves {
		s.builder.Add(l)
	}
	if s.builder.Size() != last.Seq {
		return cut{}, fmt.Errorf("%w: replica: the Merkle tree holds %d leaves after record %d", errDamage, s.builder.Size(), last.Seq)
	}
	c := Chunk{
		Ledger: s.cfg.Ledger, Number: s.nextChunk, Epoch: s.epoch,
		FirstSeq: first.FirstSeq, LastSeq: last.Seq,
		FirstMicros: first.FirstID.Micros(), LastMicros: last.ID.Micros(),
		Prev: s.prevSum, TreeSize: last.Seq, Root: Hash(s.builder.Root()),
		Segment: uint32(seg), Offset: uint32(off),
		Records: obj[ChunkHeaderSize:],
	}
	c.putHeader(obj)
	s.prevSum = Sum(obj)
	s.nextChunk++
	s.nextSeq = last.Seq + 1
	if seg > s.lastSeg {
		// The segments before seg are sealed: store them once their
		// records are; the chunks below this one hold only theirs.
		s.mu.Lock()
		for n := max(s.sealQueued+1, s.lastSeg); n < seg; n++ {
			s.seals = append(s.seals, sealTask{seg: n, gc: c.Number})
		}
		s.sealQueued = max(s.sealQueued, seg-1)
		s.mu.Unlock()
		s.lastSeg = seg
	}
	return cut{number: c.Number, lastSeq: c.LastSeq, key: ChunkKey(s.cfg.Ledger, c.Number), object: obj, sum: s.prevSum, durable: durable}, nil
}
