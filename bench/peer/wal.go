package peer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/wal"
)

// tidwall/wal: a plain write-ahead log. Each event is one log entry: the
// 8-byte big-endian Unix-microsecond time at which it was appended, then
// the event's record (encodeRecord). The entry's log index is the
// sequence number of its ID, so Get reads it back directly.
//
//	Sync      NoSync false: WriteBatch writes the batch and fsyncs it
//	Interval  ErrUnsupported: the log has no background sync
//	None      NoSync true: left to the operating system
//
// Replay is ErrUnsupported: the log has no secondary index, so a stream
// could only be found by reading the whole log. Verify can only decode
// every entry: the log keeps no checksums.

func init() {
	Register(Info{
		Name:    "wal",
		Version: "v1.2.1",
		What:    "tidwall/wal v1.2.1: a plain log, one record per event, no checksums, no index",
		Open:    openWAL,
	})
}

// walSegmentSize is the size of a log segment: annal's default (the
// library's own is 20 MB), so both rotate equally often.
const walSegmentSize = 64 << 20

// walStore is a tidwall/wal log in a directory.
type walStore struct {
	log *wal.Log

	// mu serializes Append: every write must carry index LastIndex()+1,
	// and the timestamps stored must not decrease.
	mu    sync.Mutex
	clock recordClock // guarded by mu
	batch wal.Batch   // guarded by mu; reused
	buf   []byte      // guarded by mu; reused
}

var _ Store = (*walStore)(nil)

func openWAL(dir string, mode Mode) (Store, error) {
	if mode == Interval {
		return nil, ErrUnsupported
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := wal.Open(dir, &wal.Options{
		SegmentSize: walSegmentSize,
		NoSync:      mode == None,
		LogFormat:   wal.Binary,
		NoCopy:      false, // Read returns a copy: what a caller keeps
	})
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	s := &walStore{log: l}
	// Timestamps never go backwards, across a reopen too.
	last, err := l.LastIndex()
	if err == nil && last > 0 {
		var rec []byte
		if rec, err = l.Read(last); err == nil {
			if len(rec) < 8 {
				err = fmt.Errorf("entry %d: %w", last, errShortRecord)
			} else {
				s.clock.last = int64(binary.BigEndian.Uint64(rec))
			}
		}
	}
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	return s, nil
}

// Append writes the events as one WriteBatch at the next log indexes, all
// stamped with the same time.
func (s *walStore) Append(events []Event) ([]ID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last, err := s.log.LastIndex()
	if err != nil {
		return nil, err
	}
	us := s.clock.next()
	t := time.UnixMicro(us)
	ids := make([]ID, len(events))
	s.batch.Clear()
	for i := range events {
		index := last + 1 + uint64(i)
		s.buf = binary.BigEndian.AppendUint64(s.buf[:0], uint64(us))
		s.buf = encodeRecord(s.buf, &events[i])
		s.batch.Write(index, s.buf) // copies s.buf
		ids[i] = PeerID(t, index)
	}
	if err := s.log.WriteBatch(&s.batch); err != nil {
		s.batch.Clear()
		return nil, err
	}
	return ids, nil
}

// Get reads the entry at the ID's sequence number (its log index), and
// checks that it carries the ID's time.
func (s *walStore) Get(id ID) (int, error) {
	index := binary.BigEndian.Uint64(id[8:])
	rec, err := s.log.Read(index)
	if errors.Is(err, wal.ErrNotFound) {
		return 0, fmt.Errorf("%w: %x", errNoSuchEvent, id[:])
	}
	if err != nil {
		return 0, err
	}
	if len(rec) < 8 || !bytes.Equal(rec[:8], id[:8]) {
		return 0, fmt.Errorf("%w: %x", errNoSuchEvent, id[:])
	}
	e, err := decodeRecord(rec[8:])
	if err != nil {
		return 0, fmt.Errorf("wal: entry %d: %w", index, err)
	}
	return e.Size(), nil
}

// Scan finds the first entry at or after from by a binary search over the
// log indexes on the time stored in each entry (times do not decrease
// along the log), then reads on until an entry is past to.
func (s *walStore) Scan(from, to time.Time) (n int, size int64, err error) {
	lo, hi := microBounds(from, to)
	if hi < lo {
		return 0, 0, nil
	}
	first, err := s.log.FirstIndex()
	if err != nil {
		return 0, 0, err
	}
	last, err := s.log.LastIndex()
	if err != nil || last == 0 {
		return 0, 0, err
	}
	// The first index in [first, last+1) whose time is >= lo.
	i, j := first, last+1
	for i < j {
		h := i + (j-i)/2
		rec, err := s.read(h)
		if err != nil {
			return 0, 0, err
		}
		if int64(binary.BigEndian.Uint64(rec)) < lo {
			i = h + 1
		} else {
			j = h
		}
	}
	for index := i; index <= last; index++ {
		rec, err := s.read(index)
		if err != nil {
			return n, size, err
		}
		if int64(binary.BigEndian.Uint64(rec)) > hi {
			break
		}
		e, err := decodeRecord(rec[8:])
		if err != nil {
			return n, size, fmt.Errorf("wal: entry %d: %w", index, err)
		}
		n++
		size += int64(e.Size())
	}
	return n, size, nil
}

// read reads the entry at index, which must hold at least a timestamp.
func (s *walStore) read(index uint64) ([]byte, error) {
	rec, err := s.log.Read(index)
	if err != nil {
		return nil, fmt.Errorf("wal: entry %d: %w", index, err)
	}
	if len(rec) < 8 {
		return nil, fmt.Errorf("wal: entry %d: %w", index, errShortRecord)
	}
	return rec, nil
}

// Replay is not supported: the log has no index by (entity, key), and a
// full read of the log per stream is not what a store offers.
func (s *walStore) Replay(entity, key string) (int, int64, error) {
	return 0, 0, ErrUnsupported
}

// Verify reads and decodes every entry, and checks that the times do not
// decrease. The log keeps no checksums: this is all it can check.
func (s *walStore) Verify() (int, error) {
	first, err := s.log.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := s.log.LastIndex()
	if err != nil || last == 0 {
		return 0, err
	}
	n := 0
	prev := int64(0)
	for index := first; index <= last; index++ {
		rec, err := s.read(index)
		if err != nil {
			return n, err
		}
		us := int64(binary.BigEndian.Uint64(rec))
		if us < prev {
			return n, fmt.Errorf("wal: entry %d: time %d before the previous entry's %d", index, us, prev)
		}
		prev = us
		if _, err := decodeRecord(rec[8:]); err != nil {
			return n, fmt.Errorf("wal: entry %d: %w", index, err)
		}
		n++
	}
	return n, nil
}

// TimeOf returns the time in the ID: the time the event was appended.
func (s *walStore) TimeOf(id ID) time.Time { return PeerTime(id) }

// Close syncs and closes the log.
func (s *walStore) Close() error { return s.log.Close() }

// What follows is shared by the peer adapters (wal, pebble, bbolt,
// sqlite).

var (
	// errNoSuchEvent: Get of an ID the store does not hold.
	errNoSuchEvent = errors.New("peer: no event with this ID")
	// errShortRecord: a stored record shorter than its lengths say.
	errShortRecord = errors.New("peer: record truncated")
)

// encodeRecord appends the compact encoding of e to dst: the lengths of
// its entity, key, name, meta and data as uvarints, then those five
// fields. No checksum, no framing beyond the lengths.
func encodeRecord(dst []byte, e *Event) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(e.Entity)))
	dst = binary.AppendUvarint(dst, uint64(len(e.Key)))
	dst = binary.AppendUvarint(dst, uint64(len(e.Name)))
	dst = binary.AppendUvarint(dst, uint64(len(e.Meta)))
	dst = binary.AppendUvarint(dst, uint64(len(e.Data)))
	dst = append(dst, e.Entity...)
	dst = append(dst, e.Key...)
	dst = append(dst, e.Name...)
	dst = append(dst, e.Meta...)
	return append(dst, e.Data...)
}

// decodeRecord decodes a record of encodeRecord. b must be the caller's
// own copy of the stored bytes: the event's Meta and Data point into it
// (its entity, key and name are strings, copied). The lengths must add up
// to exactly the bytes that follow them.
func decodeRecord(b []byte) (Event, error) {
	var n [5]uint64
	for i := range n {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return Event{}, errShortRecord
		}
		n[i], b = v, b[k:]
	}
	total := uint64(0)
	for _, v := range n {
		if v > uint64(len(b)) {
			return Event{}, errShortRecord
		}
		total += v
	}
	if total != uint64(len(b)) {
		return Event{}, fmt.Errorf("peer: record holds %d bytes, its lengths say %d", len(b), total)
	}
	field := func(i int) []byte {
		f := b[:n[i]:n[i]]
		b = b[n[i]:]
		return f
	}
	var e Event
	e.Entity = string(field(0))
	e.Key = string(field(1))
	e.Name = string(field(2))
	e.Meta = field(3)
	e.Data = field(4)
	return e, nil
}

// recordClock hands out Unix-microsecond timestamps that never decrease,
// even if the wall clock steps back, so that IDs made of (time, sequence)
// sort in the order they were made. Its user serializes the calls.
type recordClock struct{ last int64 }

// next returns the current time in microseconds, or the last one handed
// out if the clock has gone back since.
func (c *recordClock) next() int64 {
	us := time.Now().UnixMicro()
	if us < c.last {
		us = c.last
	}
	c.last = us
	return us
}

// microBounds returns the inclusive range of Unix microseconds [lo, hi]
// of a scan of [from, to], bounded as annal's Scan bounds it, so that every
// store returns the same events for the same bounds: both bounds truncated
// to the microsecond (eventid.MinForTime, MaxForTime), a zero from or to
// meaning no bound, times before 1970 clamped to it. hi stays below
// math.MaxInt64, so that hi+1 does not overflow.
func microBounds(from, to time.Time) (lo, hi int64) {
	hi = math.MaxInt64 - 1
	if !from.IsZero() {
		lo = max(from.UnixMicro(), 0)
	}
	if !to.IsZero() {
		hi = min(to.UnixMicro(), hi)
	}
	return lo, hi
}

// idBounds returns the IDs [lo, hi) of a scan of [from, to] (see
// microBounds), and false if there are none.
func idBounds(from, to time.Time) (lo, hi ID, ok bool) {
	l, h := microBounds(from, to)
	if h < l {
		return lo, hi, false
	}
	return PeerID(time.UnixMicro(l), 0), PeerID(time.UnixMicro(h+1), 0), true
}

// checkStream refuses an event whose entity or key holds a NUL byte: the
// stream index keys of pebble and bbolt separate them with NULs (annal
// refuses control characters in names anyway).
func checkStream(e *Event) error {
	if strings.IndexByte(e.Entity, 0) >= 0 || strings.IndexByte(e.Key, 0) >= 0 {
		return fmt.Errorf("peer: entity or key holds a NUL byte: %q/%q", e.Entity, e.Key)
	}
	return nil
}

// streamPrefix appends to dst the prefix of the stream index keys of
// (entity, key): entity, 0x00, key, 0x00. Each index key is the prefix
// then the event's 16-byte ID.
func streamPrefix(dst []byte, entity, key string) []byte {
	dst = append(dst, entity...)
	dst = append(dst, 0)
	dst = append(dst, key...)
	return append(dst, 0)
}

// prefixEnd returns the smallest key after every key that starts with
// prefix, which must end with a byte below 0xff (streamPrefix's do).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	return end
}
