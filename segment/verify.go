package segment

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/annal-db/annal/eventid"
)

// Verify checks every committed record of the ledger: frame CRC, ledger,
// event checksum, chain link, increasing timestamps and consecutive
// sequence numbers, within and across segments, and that the last record
// is the committed head. Segments are verified in parallel on all cores.
// progress, if not nil, is called now and then with the records and bytes
// verified so far (never concurrently). It returns the verified head, or
// the first *CorruptionError (by position in the ledger) found.
func (l *Log) Verify(ctx context.Context, progress func(records, bytes int64)) (Head, error) {
	return l.VerifyVisit(ctx, progress, nil)
}

// Visitor sees the records that Log.VerifyVisit verifies, on the
// goroutines that verify them (no second read of the segments).
type Visitor struct {
	// Segment, if not nil, is called by the goroutine that verifies
	// segment n before it reads its records; the function it returns (nil:
	// none) is called with each record of n verified and its location, in
	// order, on that goroutine (segments are verified concurrently). The
	// record is valid only during the call.
	Segment func(n uint64) func(r *Record, loc Location)
	// Done, if not nil, is called by that goroutine once segment n's
	// verification ended: err nil if every record of it up to the
	// committed end was seen; else the corruption or read error found, or
	// ctx's error.
	Done func(n uint64, err error)
}

// VerifyVisit is Verify, also handing every record verified to v (nil:
// none), on the goroutines that verify the segments.
func (l *Log) VerifyVisit(ctx context.Context, progress func(records, bytes int64), v *Visitor) (Head, error) {
	pos := l.committed.Load()
	n := int(pos.segNum)
	type result struct {
		first chain // from the header
		last  chain
		head  Head
		err   error
	}
	results := make([]result, n)
	var records, bytes atomic.Int64
	var progressMu sync.Mutex
	report := func() {
		if progress != nil && progressMu.TryLock() {
			progress(records.Load(), bytes.Load())
			progressMu.Unlock()
		}
	}

	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := &results[i]
				r.first, r.last, r.head, r.err = l.verifySegment(ctx, uint64(i)+1, pos, &records, &bytes, report, v)
				if v != nil && v.Done != nil {
					v.Done(uint64(i)+1, r.err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()

	head := Head{ID: results[0].first.id}
	for i := range results {
		r := &results[i]
		if r.err != nil {
			return head, r.err
		}
		name := l.fs.PathJoin(l.dir, segmentName(uint64(i)+1))
		if i == 0 {
			if r.first.seq != 0 || r.first.id != eventid.Genesis(l.ledger) {
				return head, &CorruptionError{File: name, Offset: 24, Problem: "first segment does not start at the genesis", Expected: eventid.Genesis(l.ledger).String() + " #0", Found: fmt.Sprintf("%s #%d", r.first.id, r.first.seq)}
			}
		} else if prev := results[i-1].last; r.first != prev {
			return head, &CorruptionError{File: name, Offset: 24, Problem: "segment does not continue the chain of the segment before",
				Expected: fmt.Sprintf("%s #%d", prev.id, prev.seq), Found: fmt.Sprintf("%s #%d", r.first.id, r.first.seq)}
		}
		if r.head.Seq != 0 {
			head = r.head
		}
	}
	if head.ID != pos.head.ID || head.Seq != pos.head.Seq {
		return head, fmt.Errorf("%w: verified head %s #%d is not the committed head %s #%d", ErrCorruption, head.ID, head.Seq, pos.head.ID, pos.head.Seq)
	}
	if progress != nil {
		progressMu.Lock()
		progress(records.Load(), bytes.Load())
		progressMu.Unlock()
	}
	return head, nil
}

// verifySegment verifies segment n up to its committed end and returns
// the chain its header starts from, the chain at its last record, and the
// head there (zero if the segment has no record).
func (l *Log) verifySegment(ctx context.Context, n uint64, pos *position, records, bytes *atomic.Int64, report func(), v *Visitor) (first, last chain, head Head, err error) {
	s, err := readHeader(l.fs, l.dir, n, l.ledger)
	if err != nil {
		if err == errShortHeader {
			s.file.Close()
			err = &CorruptionError{File: s.name, Problem: "segment header missing"}
		}
		return first, last, head, err
	}
	defer s.file.Close()
	end := s.size
	if n == pos.segNum {
		end = pos.end
	}
	var visit func(*Record, Location)
	if v != nil && v.Segment != nil {
		visit = v.Segment(n)
	}
	first = chain{ledger: l.ledger, id: s.hdr.prevID, seq: s.hdr.prevSeq}
	sc := newScanner(s.file, s.name, headerSize, end, first)
	// The counts shared with the other segments' goroutines are added to
	// every 4096 records, not at each: an atomic add per record moved
	// their cache line between the cores twice a record.
	var nrec, nbytes int64
	defer func() {
		records.Add(nrec)
		bytes.Add(nbytes)
	}()
	for i := 0; ; i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return first, sc.chain, head, err
			}
			records.Add(nrec)
			bytes.Add(nbytes)
			nrec, nbytes = 0, 0
			report()
		}
		ok, bad, err := sc.next()
		if err != nil {
			return first, sc.chain, head, err
		}
		if bad != nil {
			return first, sc.chain, head, bad.corruption(s.name)
		}
		if !ok {
			return first, sc.chain, head, nil
		}
		loc := sc.location(n)
		if visit != nil {
			visit(&sc.rec, loc)
		}
		nrec++
		nbytes += loc.Size
		head = Head{ID: sc.chain.id, Seq: sc.chain.seq, Loc: loc}
	}
}
