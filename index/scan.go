package index

import (
	"context"
	"encoding/binary"
	"errors"
	"iter"
	"math"

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

// TimeRange returns the events of a ledger whose IDs are in [lo, hi], both
// inclusive, in ID order (time order), ascending or, with reverse,
// descending. It is empty if lo > hi.
func (x *Index) TimeRange(ctx context.Context, ledger eventid.LedgerID, lo, hi eventid.ID, reverse bool) iter.Seq2[Position, error] {
	if lo.Compare(hi) > 0 {
		return x.scan(ctx, nil, nil, false, nil)
	}
	start := appendTimeKey(nil, ledger, lo)
	end := append(appendTimeKey(nil, ledger, hi), 0) // just after hi
	return x.scan(ctx, start, end, reverse, func(k, v []byte) (Position, []byte, error) {
		if len(k) != timeKeyLen {
			return Position{}, nil, corruptf(k, "key is %d bytes, want %d", len(k), timeKeyLen)
		}
		seq, loc, err := decodeTimeValue(k, v)
		return Position{ID: eventid.ID(k[ledgerPrefixLen:]), Seq: seq, Loc: loc}, nil, err
	})
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
func (x *Index) StreamHead(ledger eventid.LedgerID, entity, key []byte) (p Position, found bool, err error) {
	if err := x.usable(); err != nil {
		return Position{}, false, err
	}
	prefix := appendStreamPrefix(nil, ledger, entity, key)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixSuccessor(prefix)})
	if err != nil {
		return Position{}, false, readErr(err)
	}
	if it.Last() {
		var v []byte
		if v, err = it.ValueAndErr(); err == nil {
			p, _, err = seqDecoder(len(prefix))(it.Key(), v)
			found = err == nil
		}
	}
	if err2 := errors.Join(it.Error(), it.Close()); err == nil && err2 != nil {
		err = readErr(err2)
	}
	return p, found, err
}

// Entity returns the events of every key of an entity of a ledger whose
// sequence numbers are above afterSeq: one key's events after another, each
// key's in sequence order. Keys come in the order of their encoding (see
// the package documentation, "Order"), which for keys shorter than 128
// bytes is by length, then bytewise; it is not sequence order across keys.
func (x *Index) Entity(ctx context.Context, ledger eventid.LedgerID, entity []byte, afterSeq uint64) iter.Seq2[Position, error] {
	if afterSeq == math.MaxUint64 {
		return x.scan(ctx, nil, nil, false, nil)
	}
	prefix := appendEntityPrefix(nil, ledger, entity)
	return x.scan(ctx, prefix, prefixSuccessor(prefix), false, func(k, v []byte) (Position, []byte, error) {
		rest := k[len(prefix):]
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) != n+8 {
			return Position{}, nil, corruptf(k, "key does not hold a length-prefixed key and a sequence number after the entity (%d bytes)", len(rest))
		}
		end := len(prefix) + w + int(n) // the end of the (entity, key) prefix
		seq := binary.BigEndian.Uint64(k[end:])
		if seq <= afterSeq {
			// Skip the rest of this key's entries up to afterSeq.
			seek := binary.BigEndian.AppendUint64(append(make([]byte, 0, end+8), k[:end]...), afterSeq+1)
			return Position{}, seek, nil
		}
		id, loc, err := decodePosValue(k, v)
		return Position{ID: id, Seq: seq, Loc: loc}, nil, err
	})
}

// seqScan reads the E, A or N keys that start with prefix and end with a
// sequence number in r.
func (x *Index) seqScan(ctx context.Context, prefix []byte, r SeqRange) iter.Seq2[Position, error] {
	if r.After == math.MaxUint64 || r.Before != 0 && r.Before <= r.After+1 {
		return x.scan(ctx, nil, nil, false, nil)
	}
	start := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), r.After+1)
	end := prefixSuccessor(prefix)
	if r.Before != 0 {
		end = binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), r.Before)
	}
	return x.scan(ctx, start, end, r.Reverse, seqDecoder(len(prefix)))
}

// seqDecoder decodes keys of a prefix of n bytes followed by a sequence
// number, with id | location values.
func seqDecoder(n int) decodeFunc {
	return func(k, v []byte) (Position, []byte, error) {
		if len(k) != n+8 {
			return Position{}, nil, corruptf(k, "key is %d bytes, want %d", len(k), n+8)
		}
		id, loc, err := decodePosValue(k, v)
		return Position{ID: id, Seq: binary.BigEndian.Uint64(k[n:]), Loc: loc}, nil, err
	}
}

// decodeFunc decodes the key and value at an iterator's position. If seek
// is not nil, the scan yields nothing for this key and moves to the first
// key at or after seek (forward scans only; seek must be after k).
type decodeFunc func(k, v []byte) (p Position, seek []byte, err error)

// scan returns an iterator over the keys in [lo, hi), decoded by decode.
// A nil decode makes an empty scan. An error is yielded once, last.
func (x *Index) scan(ctx context.Context, lo, hi []byte, reverse bool, decode decodeFunc) iter.Seq2[Position, error] {
	return func(yield func(Position, error) bool) {
		if err := x.usable(); err != nil {
			yield(Position{}, err)
			return
		}
		if err := ctx.Err(); err != nil {
			yield(Position{}, err)
			return
		}
		if decode == nil {
			return
		}
		it, err := x.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			yield(Position{}, readErr(err))
			return
		}
		fail := func(err error) {
			_ = it.Close()
			yield(Position{}, err)
		}
		var ok bool
		if reverse {
			ok = it.Last()
		} else {
			ok = it.First()
		}
		for n := 1; ok; n++ {
			if n%ctxCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
			}
			v, err := it.ValueAndErr()
			if err != nil {
				fail(readErr(err))
				return
			}
			p, seek, err := decode(it.Key(), v)
			if err != nil {
				fail(err)
				return
			}
			switch {
			case seek != nil:
				ok = it.SeekGE(seek)
				continue
			case !yield(p, nil):
				_ = it.Close()
				return
			case reverse:
				ok = it.Prev()
			default:
				ok = it.Next()
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			yield(Position{}, readErr(err))
		}
	}
}
