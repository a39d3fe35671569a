package ndjson

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// DefaultChunkBytes is the size of the chunks a [ChunkReader] parses at a
// time unless told otherwise.
const DefaultChunkBytes = 4 << 20

// Chunk is a run of consecutive lines of the input, parsed.
type Chunk struct {
	// Events are the lines' events, in input order. Their names, Meta
	// and Data stay valid until the chunk is released (see
	// [ChunkReader.Release]), for good if it never is: they point into
	// a buffer of the chunk's own, or are copies.
	Events []Event
	// FirstLine is the number of the line of Events[0], counting from 1.
	FirstLine int
	// End is the offset in the input just after the chunk's last line.
	End int64
	// Sums, when the ChunkReader has a Sum function (see
	// [NewChunkReaderSum]), holds Sum of each of Events, in the same
	// order, computed by the workers that parsed them.
	Sums [][32]byte

	buf []byte // the buffer the events point into, its whole capacity
}

// spare is the memory of a released chunk, for a later one.
type spare struct {
	buf    []byte
	events []Event
	sums   [][32]byte
}

// ChunkReader reads the lines of an input as a [Reader] does, with the
// same errors at the same lines, but in parallel: one goroutine reads the
// input in chunks of about DefaultChunkBytes cut at line boundaries,
// workers parse the chunks, and Next returns them in input order.
//
// When a line is bad, Next returns the lines before it (in one or more
// chunks) and then the error (a *LineError naming the line); lines after
// it are not returned. An input that cannot be read is an error at the
// line after the last whole line read, as with a Reader.
//
// Close must be called once the ChunkReader is no longer needed; it stops
// the goroutines (waiting for a read of the input in progress to return).
type ChunkReader struct {
	out  chan *chunkJob
	done chan struct{}
	sum  func(*Event) [32]byte
	free chan spare // the memory of released chunks (with a limit: the tokens)
	// limit, if not 0, is the most chunks read and not yet released:
	// free then holds a token (a spare, maybe without memory) for each
	// chunk that may be read.
	limit int
	wg    sync.WaitGroup
	err   error // the error or io.EOF, once Next has returned it

	closeOnce sync.Once
}

// chunkJob is one chunk of input, parsed by a worker: the events of its
// lines up to the first bad one, and that line's error.
type chunkJob struct {
	buf       []byte // the chunk's whole lines, newlines included
	whole     []byte // buf's buffer, its whole capacity
	firstLine int
	end       int64
	readErr   error // after the chunk's lines: *LineError, or io.EOF
	reuse     spare // a released chunk's Events and Sums, for this one's
	parsed    chan struct{}
	chunk     Chunk
	err       error // the first bad line's *LineError
}

// NewChunkReader returns a ChunkReader of r that parses with workers
// goroutines (at least 1), in chunks of about chunkBytes (0 means
// DefaultChunkBytes), refusing lines longer than [DefaultMaxLineBytes].
//
// stop, if not nil, is called (from another goroutine) before each read of
// r: once it returns an error, no more of r is read, and Next returns that
// error, as it is, after the lines read before it.
func NewChunkReader(r io.Reader, workers, chunkBytes int, stop func() error) *ChunkReader {
	return newChunkReader(r, workers, chunkBytes, DefaultMaxLineBytes, stop, nil, 0)
}

// NewChunkReaderSum is NewChunkReader whose workers also call sum for each
// event they parse (from several goroutines at once), giving each chunk's
// Sums: work done per line, such as a hash of it, that then runs in
// parallel with the parsing rather than after it.
func NewChunkReaderSum(r io.Reader, workers, chunkBytes int, stop func() error, sum func(*Event) [32]byte) *ChunkReader {
	return newChunkReader(r, workers, chunkBytes, DefaultMaxLineBytes, stop, sum, 0)
}

// NewChunkReaderLimit is NewChunkReaderSum (sum may be nil) that holds at
// most limit chunks (at least workers+1) in memory at a time: those read
// ahead, being parsed, returned by Next and not yet released. The caller
// must Release every chunk Next returns once it is done with it, and call
// Next only while it holds fewer than limit chunks (else Next waits for
// ever): the memory of the input in flight is then bounded, and reused.
func NewChunkReaderLimit(r io.Reader, workers, chunkBytes int, stop func() error, sum func(*Event) [32]byte, limit int) *ChunkReader {
	return newChunkReader(r, workers, chunkBytes, DefaultMaxLineBytes, stop, sum, max(limit, max(workers, 1)+1))
}

// newChunkReader is NewChunkReaderLimit with a line limit of maxLine
// bytes; a limit of 0 means none.
func newChunkReader(r io.Reader, workers, chunkBytes, maxLine int, stop func() error, sum func(*Event) [32]byte, limit int) *ChunkReader {
	if workers < 1 {
		workers = 1
	}
	if chunkBytes <= 0 {
		chunkBytes = DefaultChunkBytes
	}
	c := &ChunkReader{
		out:   make(chan *chunkJob, workers+1),
		done:  make(chan struct{}),
		sum:   sum,
		free:  make(chan spare, max(limit, workers+2)),
		limit: limit,
	}
	for range limit {
		c.free <- spare{}
	}
	jobs := make(chan *chunkJob, workers)
	c.wg.Add(1 + workers)
	go c.read(r, chunkBytes, maxLine, stop, jobs)
	for range workers {
		go c.work(jobs, maxLine)
	}
	return c
}

// Next returns the next chunk of parsed lines, then io.EOF after the last
// line, or the error of the first bad line (a *LineError) once every line
// before it was returned. After an error it returns the same error.
func (c *ChunkReader) Next() (*Chunk, error) {
	if c.err != nil {
		return nil, c.err
	}
	j, ok := <-c.out
	if !ok {
		c.err = io.EOF
		return nil, c.err
	}
	<-j.parsed
	if len(j.chunk.Events) > 0 {
		if j.err != nil || j.readErr != nil {
			// The lines before the error first; the error next time.
			c.pend(j)
		}
		return &j.chunk, nil
	}
	// Not returned: its token back.
	c.put(spare{buf: j.whole})
	switch {
	case j.err != nil:
		c.err = j.err
	case j.readErr != nil:
		c.err = j.readErr
	default:
		return c.Next() // an empty chunk
	}
	return nil, c.err
}

// pend makes the error of j the result of the next call of Next.
func (c *ChunkReader) pend(j *chunkJob) {
	if j.err != nil {
		c.err = j.err
	} else {
		c.err = j.readErr
	}
}

// Release tells the ChunkReader that nothing uses ch (returned by Next)
// any longer: neither its Events and Sums nor the names, Meta and Data of
// its events. It may reuse their memory for a chunk it reads later, which
// saves allocating (and clearing, and collecting) the input's size again.
// ch must not be used after Release.
func (c *ChunkReader) Release(ch *Chunk) {
	if ch == nil || ch.buf == nil {
		return
	}
	sp := spare{buf: ch.buf[:0], events: ch.Events[:0], sums: ch.Sums[:0]}
	*ch = Chunk{}
	c.put(sp)
}

// put keeps sp for a later chunk. With a limit there is always room: it
// is one of the tokens.
func (c *ChunkReader) put(sp spare) {
	select {
	case c.free <- sp:
	default: // enough kept already: for the garbage collector
	}
}

// take returns the memory of a released chunk, if there is one (with a
// limit, a token, waiting for one; its memory may be nil). It reports
// false once Close has begun.
func (c *ChunkReader) take() (spare, bool) {
	if c.limit == 0 {
		select {
		case sp := <-c.free:
			return sp, true
		default:
			return spare{}, true
		}
	}
	select {
	case sp := <-c.free:
		return sp, true
	case <-c.done:
		return spare{}, false
	}
}

// Close stops the ChunkReader's goroutines and waits for them.
func (c *ChunkReader) Close() {
	c.closeOnce.Do(func() {
		close(c.done)
		// Let the reader see done: it may be blocked sending to out.
		for range c.out {
		}
		c.wg.Wait()
	})
}

// read cuts the input into chunks of whole lines, hands them to the
// workers and queues them, in order, for Next.
func (c *ChunkReader) read(r io.Reader, chunkBytes, maxLine int, stop func() error, jobs chan<- *chunkJob) {
	defer c.wg.Done()
	defer close(c.out)
	defer close(jobs)
	var carry []byte // the start of a line the last chunk did not hold
	line := 1        // the number of the next line
	var off int64    // the input offset of carry
	send := func(j *chunkJob) bool {
		j.parsed = make(chan struct{})
		select {
		case c.out <- j:
		case <-c.done:
			return false
		}
		if j.buf == nil {
			close(j.parsed)
			return true
		}
		select {
		case jobs <- j:
		case <-c.done:
			close(j.parsed)
			return false
		}
		return true
	}
	for {
		size := max(chunkBytes, 2*len(carry))
		sp, ok := c.take()
		if !ok {
			return
		}
		var buf []byte
		if cap(sp.buf) >= size {
			// carry may lie in sp.buf itself (the chunk just sent,
			// already released): copy handles the overlap.
			buf = sp.buf[:len(carry)]
		} else {
			buf = make([]byte, len(carry), size)
		}
		copy(buf, carry)
		var rerr error
		zero := 0
		var stopped error
		for len(buf) < cap(buf) && rerr == nil {
			if stop != nil {
				if stopped = stop(); stopped != nil {
					break
				}
			}
			n, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			rerr = err
			if n == 0 && err == nil {
				if zero++; zero >= 100 {
					rerr = io.ErrNoProgress
				}
			}
		}
		cut := bytes.LastIndexByte(buf, '\n') + 1
		if rerr == io.EOF && cut < len(buf) {
			cut = len(buf) // the last line needs no newline
		}
		j := &chunkJob{buf: buf[:cut:cut], firstLine: line, end: off + int64(cut), whole: buf[:0], reuse: sp}
		if cut == 0 {
			j.buf = nil
		}
		line += bytes.Count(j.buf, []byte{'\n'})
		if rerr == io.EOF && cut > 0 && buf[cut-1] != '\n' {
			line++
		}
		off += int64(cut)
		carry = buf[cut:]
		switch {
		case stopped != nil:
			j.readErr = stopped
		case rerr == io.EOF:
			j.readErr = io.EOF
		case rerr != nil:
			j.readErr = &LineError{Line: line, Err: fmt.Errorf("%w: %w", ErrRead, rerr)}
		case len(carry) > maxLine+2:
			// No newline within the limit: the next line is too long.
			j.readErr = &LineError{Line: line, Err: fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, maxLine)}
		}
		if !send(j) || j.readErr != nil {
			return
		}
	}
}

// work parses the chunks it receives.
func (c *ChunkReader) work(jobs <-chan *chunkJob, maxLine int) {
	defer c.wg.Done()
	var p lineParser
	for j := range jobs {
		select {
		case <-c.done:
			close(j.parsed)
			continue
		default:
		}
		j.parse(&p, maxLine)
		if c.sum != nil {
			evs := j.chunk.Events
			if cap(j.reuse.sums) >= len(evs) {
				j.chunk.Sums = j.reuse.sums[:len(evs)]
			} else {
				j.chunk.Sums = make([][32]byte, len(evs))
			}
			for i := range evs {
				j.chunk.Sums[i] = c.sum(&evs[i])
			}
		}
		close(j.parsed)
	}
}

// parse parses the lines of j.buf into j.chunk, up to the first bad one.
func (j *chunkJob) parse(p *lineParser, maxLine int) {
	n := bytes.Count(j.buf, []byte{'\n'}) + 1
	evs := j.reuse.events
	if cap(evs) < n {
		evs = make([]Event, 0, n)
	}
	j.chunk = Chunk{Events: evs, FirstLine: j.firstLine, End: j.end, buf: j.whole}
	rest := j.buf
	for lineNo := j.firstLine; len(rest) > 0; lineNo++ {
		k := bytes.IndexByte(rest, '\n')
		var line []byte
		if k < 0 {
			line, rest = rest, nil
		} else {
			line, rest = rest[:k+1], rest[k+1:]
		}
		if len(line) > maxLine+2 {
			j.err = &LineError{Line: lineNo, Err: fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, maxLine)}
			return
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		j.chunk.Events = append(j.chunk.Events, Event{})
		ev := &j.chunk.Events[len(j.chunk.Events)-1]
		if p.parseFast(line, ev, true) {
			continue
		}
		if err := p.parseSlow(line, ev); err != nil {
			j.chunk.Events = j.chunk.Events[:len(j.chunk.Events)-1]
			j.err = &LineError{Line: lineNo, Err: err}
			return
		}
		// The slow path's Meta and Data are its scratch space.
		ev.Meta, ev.Data = bytes.Clone(ev.Meta), bytes.Clone(ev.Data)
	}
}
