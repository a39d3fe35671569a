package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"iter"
	"math"
	"slices"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Position is where an indexed event is: its ID, sequence number and the
// location of its record.
type Position struct {
	ID  eventid.ID
	Seq uint64
	Loc segment.Location
}

// ctxCheckEvery is how many keys a scan visits between checks of its
// context: often enough to stop promptly, rarely enough to cost nothing.
const ctxCheckEvery = 128

// timeRangePebble is TimeRange in Pebble.
func (x *Index) timeRangePebble(ctx context.Context, ledger eventid.LedgerID, lo, hi eventid.ID, reverse bool) iter.Seq2[Position, error] {
	return func(yield func(Position, error) bool) {
		if err := x.scanErr(ctx); err != nil {
			yield(Position{}, err)
			return
		}
		if lo.Compare(hi) > 0 {
			return
		}
		it, err := x.familyIter(ctx, famTime, ledger)
		if err != nil {
			yield(Position{}, err)
			return
		}
		endScan(walkBlocks(ctx, it, ledger, lo, hi, reverse, yield), yield, it.Error(), it.Close())
	}
}

// walkBlocks yields the events of the T blocks of it whose IDs are in
// [lo, hi]. The first block to read is the first whose last ID is at or
// after lo (forward) or hi (reverse; the last block if none).
func walkBlocks(ctx context.Context, it *pebble.Iterator, ledger eventid.LedgerID, lo, hi eventid.ID, reverse bool, yield func(Position, error) bool) error {
	from := lo
	if reverse {
		from = hi
	}
	ok := it.SeekGE(appendTimeKey(nil, ledger, from))
	if !ok && reverse {
		ok = it.Last()
	}
	var blk []Position
	steps := 0
	send := func(p Position) error {
		if steps++; steps%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !yield(p, nil) {
			return errStop
		}
		return nil
	}
	for ok {
		v, err := it.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		if blk, err = decodeBlock(blk[:0], it.Key(), v); err != nil {
			return err
		}
		if reverse {
			for i := len(blk) - 1; i >= 0; i-- {
				switch id := blk[i].ID; {
				case id.Compare(lo) < 0:
					return nil
				case id.Compare(hi) > 0:
				default:
					if err := send(blk[i]); err != nil {
						return err
					}
				}
			}
			ok = it.Prev()
			continue
		}
		for i := range blk {
			switch id := blk[i].ID; {
			case id.Compare(hi) > 0:
				return nil
			case id.Compare(lo) < 0:
			default:
				if err := send(blk[i]); err != nil {
					return err
				}
			}
		}
		ok = it.Next()
	}
	return nil
}

// SeqRange bounds a scan of a family ordered by sequence number (Stream,
// EntityEvents, EventName): the entries with sequence numbers above After
// and, if Before is not zero, below Before (both exclusive), ascending, or
// descending with Reverse.
type SeqRange struct {
	After, Before uint64
	Reverse       bool
}

// Stream returns the events of one (entity, key) stream of a ledger whose
// sequence numbers are above afterSeq, in sequence order. afterSeq 0 reads
// the whole stream.
func (x *Index) Stream(ctx context.Context, ledger eventid.LedgerID, entity, key []byte, afterSeq uint64) iter.Seq2[Position, error] {
	return x.StreamRange(ctx, ledger, entity, key, SeqRange{After: afterSeq})
}

// StreamRange returns the events of one (entity, key) stream of a ledger
// in a range of sequence numbers, in sequence order or reverse.
func (x *Index) StreamRange(ctx context.Context, ledger eventid.LedgerID, entity, key []byte, r SeqRange) iter.Seq2[Position, error] {
	return x.seqScan(ctx, appendStreamPrefix(nil, ledger, entity, key), r)
}

// EventName returns the events of a ledger named event whose sequence
// numbers are above afterSeq, in sequence order.
func (x *Index) EventName(ctx context.Context, ledger eventid.LedgerID, event []byte, afterSeq uint64) iter.Seq2[Position, error] {
	return x.EventNameRange(ctx, ledger, event, SeqRange{After: afterSeq})
}

// EventNameRange returns the events of a ledger named event in a range of
// sequence numbers, in sequence order or reverse.
func (x *Index) EventNameRange(ctx context.Context, ledger eventid.LedgerID, event []byte, r SeqRange) iter.Seq2[Position, error] {
	return x.seqScan(ctx, appendEventPrefix(nil, ledger, event), r)
}

// EntityEvents returns the events of every key of an entity of a ledger
// with a sequence number above afterSeq, in sequence (ledger) order.
func (x *Index) EntityEvents(ctx context.Context, ledger eventid.LedgerID, entity []byte, afterSeq uint64) iter.Seq2[Position, error] {
	return x.EntityEventsRange(ctx, ledger, entity, SeqRange{After: afterSeq})
}

// EntityEventsRange returns the events of every key of an entity of a
// ledger in a range of sequence numbers, in sequence (ledger) order or
// reverse.
func (x *Index) EntityEventsRange(ctx context.Context, ledger eventid.LedgerID, entity []byte, r SeqRange) iter.Seq2[Position, error] {
	return x.seqScan(ctx, appendEntitySeqPrefix(nil, ledger, entity), r)
}

// StreamHead returns the last event of an (entity, key) stream of a ledger,
// the one a conditional append on the stream's head compares with; found
// is false for a stream with no event.
// StreamHead returns the last event of an (entity, key) stream of a ledger,
// the one a conditional append on the stream's head compares with; found
// is false for a stream with no event.
func (x *Index) StreamHead(ledger eventid.LedgerID, entity, key []byte) (p Position, found bool, err error) {
	for q, err := range x.StreamRange(context.Background(), ledger, entity, key, SeqRange{Reverse: true}) {
		return q, err == nil, err
	}
	return Position{}, false, nil
}

// seqScanPebble reads the E, A or N postings of prefix in Pebble, the
// sequence numbers in r.
func (x *Index) seqScanPebble(ctx context.Context, prefix []byte, r SeqRange) iter.Seq2[Position, error] {
	if r.After == math.MaxUint64 || r.Before != 0 && r.Before <= r.After+1 {
		return x.postingScan(ctx, nil, nil, SeqRange{}, nil)
	}
	end := prefixSuccessor(prefix)
	if r.Before != 0 {
		// A posting that starts at Before or later holds nothing below it.
		end = binary.BigEndian.AppendUint64(slices.Clone(prefix), r.Before)
	}
	n := len(prefix)
	return x.postingScan(ctx, prefix, end, r, func([]byte) (int, error) { return n, nil })
}

// postingScan returns an iterator over the positions of the events in r
// of the postings in [lo, hi), of one family and ledger. group gives the
// length of the prefix of a key before its sequence number: the postings
// of one prefix are in sequence order, and a forward scan skips, in each,
// to the one that holds r.After+1. A nil group makes an empty scan. An
// error is yielded once, last.
func (x *Index) postingScan(ctx context.Context, lo, hi []byte, r SeqRange, group func(k []byte) (int, error)) iter.Seq2[Position, error] {
	return func(yield func(Position, error) bool) {
		if err := x.scanErr(ctx); err != nil {
			yield(Position{}, err)
			return
		}
		if group == nil {
			return
		}
		it, err := x.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			yield(Position{}, readErr(err))
			return
		}
		endScan(walkPostings(ctx, it, r, group, yield), yield, it.Error(), it.Close())
	}
}

// scanErr is the error a scan yields before it starts: the Index's
// (closed, failed) or ctx's.
func (x *Index) scanErr(ctx context.Context) error {
	if err := x.usable(); err != nil {
		return err
	}
	return ctx.Err()
}

// endScan yields, once, the error of a walk (none if its consumer
// stopped) joined with those of closing its iterators.
func endScan(err error, yield func(Position, error) bool, closing ...error) {
	if err == errStop {
		err = nil
	}
	if err = errors.Join(append([]error{err}, closing...)...); err != nil {
		if pebble.IsCorruptionError(err) {
			err = readErr(err)
		}
		yield(Position{}, err)
	}
}

// errStop ends a walk whose consumer stopped.
var errStop = errors.New("index: stop")

// walkPostings yields the positions in r of the postings of it (see
// postingScan), which each posting holds whole.
func walkPostings(ctx context.Context, it *pebble.Iterator, r SeqRange, group func(k []byte) (int, error),
	yield func(Position, error) bool) error {
	var (
		cur    []byte // the prefix of the postings being read
		sought bool   // whether the scan has moved to cur's posting of r.After+1
		ps     []Position
		steps  int
	)
	emit := func(p Position) error {
		if steps++; steps%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !yield(p, nil) {
			return errStop
		}
		return nil
	}
	ok := it.First()
	if r.Reverse {
		ok = it.Last()
	}
	for ok {
		if steps++; steps%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		n, err := group(k)
		if err != nil {
			return err
		}
		if len(k) != n+8 {
			return corruptf(k, "key is %d bytes, want %d", len(k), n+8)
		}
		if !bytes.Equal(k[:n], cur) {
			cur, sought = append(cur[:0], k[:n]...), false
		}
		if !r.Reverse && !sought && r.After > 0 && binary.BigEndian.Uint64(k[n:]) <= r.After {
			// The last posting of cur that starts at or before
			// r.After: at or after k, so never back.
			sought = true
			ok = it.SeekLT(binary.BigEndian.AppendUint64(slices.Clone(cur), r.After+1))
			continue
		}
		sought = true
		v, err := it.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		if ps, err = decodePosting(ps[:0], k, n, v); err != nil {
			return err
		}
		if r.Reverse {
			for i := len(ps) - 1; i >= 0; i-- {
				switch s := ps[i].Seq; {
				case s <= r.After:
					return nil
				case r.Before != 0 && s >= r.Before:
				default:
					if err := emit(ps[i]); err != nil {
						return err
					}
				}
			}
			ok = it.Prev()
			continue
		}
		for i := range ps {
			if s := ps[i].Seq; s > r.After && (r.Before == 0 || s < r.Before) {
				if err := emit(ps[i]); err != nil {
					return err
				}
			}
		}
		ok = it.Next()
	}
	return nil
}

// seqResolver finds the positions of sequence numbers of a ledger
// (Index.BySeq): the S entry of the block (the first whose last sequence
// number is at or after it) names the T block, which it keeps for the
// next: walked to the one event wanted the first time, decoded whole when
// asked again.
type seqResolver struct {
	x      *Index
	ctx    context.Context
	ledger eventid.LedgerID
	s, t   *pebble.Iterator
	// The last block read: its key and value, its sequence numbers, and
	// its events once decoded.
	bkey, bval  []byte
	first, last uint64
	blk         []Position
	// The keys of the last seeks: Pebble may keep the one it was given
	// until the next.
	skey, tkey []byte
}

// find returns the position of seq; found is false if no S entry covers
// it or its block does not hold it.
func (r *seqResolver) find(seq uint64) (p Position, found bool, err error) {
	if r.bkey != nil && seq >= r.first && seq <= r.last {
		if len(r.blk) == 0 {
			if r.blk, err = decodeBlock(r.blk[:0], r.bkey, r.bval); err != nil {
				return p, false, err
			}
		}
		return r.blk[seq-r.first], true, nil
	}
	if r.s == nil {
		if r.s, err = r.x.familyIter(r.ctx, famSeq, r.ledger); err != nil {
			return p, false, err
		}
		if r.t, err = r.x.familyIter(r.ctx, famTime, r.ledger); err != nil {
			return p, false, err
		}
	}
	r.skey = appendSeqKey(r.skey[:0], r.ledger, seq)
	if !r.s.SeekGE(r.skey) {
		return p, false, nil
	}
	sk := r.s.Key()
	if len(sk) != seqKeyLen {
		return p, false, corruptf(sk, "key is %d bytes, want %d", len(sk), seqKeyLen)
	}
	v, err := r.s.ValueAndErr()
	if err != nil {
		return p, false, readErr(err)
	}
	if len(v) != seqValueLen {
		return p, false, corruptf(sk, "value is %d bytes, want %d", len(v), seqValueLen)
	}
	last := binary.BigEndian.Uint64(sk[ledgerPrefixLen:])
	r.tkey = appendTimeKey(r.tkey[:0], r.ledger, eventid.ID(v))
	if !r.t.SeekGE(r.tkey) || !bytes.Equal(r.t.Key(), r.tkey) {
		return p, false, corruptf(sk, "no T block of its ID %v", eventid.ID(v))
	}
	if v, err = r.t.ValueAndErr(); err != nil {
		return p, false, readErr(err)
	}
	r.bkey, r.bval, r.blk = append(r.bkey[:0], r.t.Key()...), append(r.bval[:0], v...), r.blk[:0]
	var b blockReader
	for ok := b.init(r.bkey, r.bval); ok && b.next(); {
		if b.n == 1 {
			r.first = b.seq
		}
		if b.seq == seq {
			p, found = b.position(), true
		}
	}
	if b.err == nil && b.seq != last {
		b.err = corruptf(sk, "its T block %v ends at sequence number %d", eventid.ID(v), b.seq)
	}
	if b.err != nil {
		r.bkey = nil
		return Position{}, false, b.err
	}
	r.last = last
	return p, found, nil
}

func (r *seqResolver) close() error {
	var err error
	for _, it := range []*pebble.Iterator{r.s, r.t} {
		if it != nil {
			err = errors.Join(err, it.Error(), it.Close())
		}
	}
	r.s, r.t = nil, nil
	return err
}

// familyIter returns an iterator over the keys of one family of a ledger.
func (x *Index) familyIter(ctx context.Context, fam byte, ledger eventid.LedgerID) (*pebble.Iterator, error) {
	lo := appendLedgerPrefix(nil, fam, ledger)
	it, err := x.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: prefixSuccessor(lo)})
	if err != nil {
		return nil, readErr(err)
	}
	return it, nil
}
