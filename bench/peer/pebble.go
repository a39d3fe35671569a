package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble: an LSM key-value store (CockroachDB's). Two keys per event, in
// one batch per Append:
//
//	'e' + ID                          → the event's record (encodeRecord)
//	's' + entity 0x00 key 0x00 + ID   → empty: the stream index
//
// Durability, through Pebble's write-ahead log (which groups the syncs of
// concurrent commits):
//
//	Sync      each batch committed with pebble.Sync
//	Interval  committed with pebble.NoSync; a goroutine syncs the WAL every
//	          50 ms (annal's interval) by logging an empty record with
//	          pebble.Sync, if anything was appended since the last sync
//	None      committed with pebble.NoSync
//
// Verify reads every key and value: Pebble checks the checksum of each
// block it reads from a table; the memtables have none.

func init() {
	Register(Info{
		Name:    "pebble",
		Version: "v2.1.7",
		What:    "cockroachdb/pebble v2.1.7: LSM tree, one key per event by ID plus a stream index key, one batch per append; block checksums",
		Open:    openPebble,
	})
}

// Key families of the Pebble peer.
const (
	pebbleEvent  = 'e'
	pebbleStream = 's'
)

// pebbleSyncInterval is how often the Interval mode syncs the WAL: annal's
// interval.
const pebbleSyncInterval = 50 * time.Millisecond

// pebbleQuietLogger drops Pebble's informational messages.
type pebbleQuietLogger struct{ pebble.Logger }

// Infof drops the message.
func (pebbleQuietLogger) Infof(string, ...any) {}

// pebbleStore is a Pebble database in a directory.
type pebbleStore struct {
	db   *pebble.DB
	sync *pebble.WriteOptions

	// mu guards the making of IDs: the time and the sequence, taken
	// together, so that IDs sort in the order they are made (commits may
	// land in another order; Pebble does not mind).
	mu    sync.Mutex
	clock recordClock // guarded by mu
	seq   uint64      // guarded by mu: the next sequence number

	// Interval mode only.
	dirty   atomic.Bool           // appended since the last sync
	syncErr atomic.Pointer[error] // the failed sync, returned by Append and Close
	stop    chan struct{}
	done    chan struct{}
}

var _ Store = (*pebbleStore)(nil)

func openPebble(dir string, mode Mode) (Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(128 << 20)
	opts := &pebble.Options{
		Cache: cache,
		// The memory annal gives its own Pebble index by default: a
		// 128 MiB block cache, memtables of a quarter of it.
		MemTableSize: 32 << 20,
		// The format annal's index uses. Pebble's default is the oldest
		// format it can still read (row-oriented blocks), kept for
		// compatibility, not chosen for speed.
		FormatMajorVersion: pebble.FormatNewest,
		// Pebble logs what it finds at every Open (its WALs, the keys
		// it replays); errors still go to the standard logger.
		Logger: pebbleQuietLogger{pebble.DefaultLogger},
	}
	db, err := pebble.Open(dir, opts)
	cache.Unref() // the DB holds its own reference
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	s := &pebbleStore{db: db, sync: pebble.NoSync}
	if mode == Sync {
		s.sync = pebble.Sync
	}
	if err := s.loadLast(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	if mode == Interval {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.syncLoop()
	}
	return s, nil
}

// loadLast sets the clock and the sequence after the largest ID stored,
// so that IDs keep increasing across a reopen.
func (s *pebbleStore) loadLast() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pebbleEvent}, UpperBound: []byte{pebbleEvent + 1}})
	if err != nil {
		return err
	}
	if it.Last() {
		k := it.Key()
		if len(k) != 1+len(ID{}) {
			_ = it.Close()
			return fmt.Errorf("event key %x is not 17 bytes", k)
		}
		s.clock.last = int64(binary.BigEndian.Uint64(k[1:9]))
		s.seq = binary.BigEndian.Uint64(k[9:]) + 1
	}
	return it.Close()
}

// syncLoop syncs the WAL every pebbleSyncInterval until Close.
func (s *pebbleStore) syncLoop() {
	defer close(s.done)
	t := time.NewTicker(pebbleSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if !s.dirty.Swap(false) {
				continue
			}
			// An empty LogData record committed with Sync syncs the WAL,
			// and with it every commit written to it before.
			if err := s.db.LogData(nil, pebble.Sync); err != nil {
				s.syncErr.Store(&err)
				return
			}
		}
	}
}

// Append commits the events' keys as one batch.
func (s *pebbleStore) Append(events []Event) ([]ID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if err := s.syncErr.Load(); err != nil {
		return nil, fmt.Errorf("pebble: interval sync: %w", *err)
	}
	for i := range events {
		if err := checkStream(&events[i]); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	t := time.UnixMicro(s.clock.next())
	seq := s.seq
	s.seq += uint64(len(events))
	s.mu.Unlock()

	ids := make([]ID, len(events))
	b := s.db.NewBatch()
	defer b.Close()
	var key, val []byte
	for i := range events {
		e := &events[i]
		ids[i] = PeerID(t, seq+uint64(i))
		key = append(append(key[:0], pebbleEvent), ids[i][:]...)
		val = encodeRecord(val[:0], e)
		if err := b.Set(key, val, nil); err != nil { // Set copies
			return nil, err
		}
		key = append(streamPrefix(append(key[:0], pebbleStream), e.Entity, e.Key), ids[i][:]...)
		if err := b.Set(key, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := b.Commit(s.sync); err != nil {
		return nil, err
	}
	if s.stop != nil {
		s.dirty.Store(true)
	}
	return ids, nil
}

// Get reads the event's value and copies it out.
func (s *pebbleStore) Get(id ID) (int, error) {
	e, err := s.get(id)
	if err != nil {
		return 0, err
	}
	return e.Size(), nil
}

// get reads and decodes the event with the given ID, from a copy of
// Pebble's bytes.
func (s *pebbleStore) get(id ID) (Event, error) {
	var key [1 + len(ID{})]byte
	key[0] = pebbleEvent
	copy(key[1:], id[:])
	v, closer, err := s.db.Get(key[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return Event{}, fmt.Errorf("%w: %x", errNoSuchEvent, id[:])
	}
	if err != nil {
		return Event{}, err
	}
	own := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return Event{}, err
	}
	e, err := decodeRecord(own)
	if err != nil {
		return Event{}, fmt.Errorf("pebble: event %x: %w", id[:], err)
	}
	return e, nil
}

// Scan iterates the event keys of the IDs of [from, to].
func (s *pebbleStore) Scan(from, to time.Time) (n int, size int64, err error) {
	lo, hi, ok := idBounds(from, to)
	if !ok {
		return 0, 0, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: append([]byte{pebbleEvent}, lo[:]...),
		UpperBound: append([]byte{pebbleEvent}, hi[:]...),
	})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return n, size, err
		}
		e, err := decodeRecord(append([]byte(nil), v...))
		if err != nil {
			return n, size, fmt.Errorf("pebble: event %x: %w", it.Key(), err)
		}
		n++
		size += int64(e.Size())
	}
	return n, size, nil
}

// Replay iterates the stream's index keys and reads each event by its ID:
// what a secondary index on the ID costs.
func (s *pebbleStore) Replay(entity, key string) (n int, size int64, err error) {
	prefix := streamPrefix([]byte{pebbleStream}, entity, key)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+len(ID{}) {
			// The key of a stream whose entity or key holds a NUL;
			// Append refuses them.
			continue
		}
		e, err := s.get(ID(k[len(prefix):]))
		if err != nil {
			return n, size, err
		}
		n++
		size += int64(e.Size())
	}
	return n, size, it.Error()
}

// Verify reads and decodes every event, and counts the stream index keys,
// which must be as many. Pebble checks each table block's checksum as it
// reads it; that, the decoding and the counts are what it can check.
func (s *pebbleStore) Verify() (int, error) {
	n, err := s.count(pebbleEvent, func(k, v []byte) error {
		if len(k) != 1+len(ID{}) {
			return fmt.Errorf("event key %x is not 17 bytes", k)
		}
		if _, err := decodeRecord(append([]byte(nil), v...)); err != nil {
			return fmt.Errorf("event %x: %w", k[1:], err)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("pebble: verify: %w", err)
	}
	streams, err := s.count(pebbleStream, func(k, v []byte) error {
		if len(k) < 1+2+len(ID{}) || len(v) != 0 {
			return fmt.Errorf("bad stream key %x", k)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("pebble: verify: %w", err)
	}
	if streams != n {
		return n, fmt.Errorf("pebble: verify: %d events but %d stream index keys", n, streams)
	}
	return n, nil
}

// count calls check on every key of a family and its value, and returns
// how many there are.
func (s *pebbleStore) count(family byte, check func(k, v []byte) error) (n int, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{family}, UpperBound: []byte{family + 1}})
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return n, err
		}
		if err := check(it.Key(), v); err != nil {
			return n, err
		}
		n++
	}
	return n, it.Error()
}

// TimeOf returns the time in the ID: the time the event was appended.
func (s *pebbleStore) TimeOf(id ID) time.Time { return PeerTime(id) }

// Close stops the interval sync, if any, and closes the database (which
// syncs and closes its WAL; the next Open replays it into a memtable, as
// Pebble always does).
func (s *pebbleStore) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	err := s.db.Close()
	if serr := s.syncErr.Load(); serr != nil && err == nil {
		err = fmt.Errorf("pebble: interval sync: %w", *serr)
	}
	return err
}
