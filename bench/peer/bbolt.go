package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bbolt: a copy-on-write B+tree in one memory-mapped file (etcd's fork of
// BoltDB). Two buckets:
//
//	events    ID → the event's record (encodeRecord)
//	streams   entity 0x00 key 0x00 ID → empty: the stream index
//
// One write transaction per Append, through bbolt's own group commit
// (DB.Batch) when appends overlap:
//
//	Sync      bbolt's default: each commit writes its pages, fdatasyncs,
//	          writes its meta page, fdatasyncs again
//	Interval  ErrUnsupported: bbolt has no background sync
//	None      DB.NoSync: no fsync at commit
//
// Verify runs bbolt's consistency check (Tx.Check: page structure,
// freelist, key order) and reads every value; bbolt keeps no checksums of
// its data pages.

func init() {
	Register(Info{
		Name:    "bbolt",
		Version: "v1.5.0",
		What:    "etcd-io/bbolt v1.5.0: copy-on-write B+tree, events by ID plus a stream index bucket, one transaction per append (Batch group commit); no checksums",
		Open:    openBolt,
	})
}

var (
	boltEvents  = []byte("events")
	boltStreams = []byte("streams")
)

// boltStore is a bbolt database file in a directory.
type boltStore struct {
	db *bolt.DB

	// inflight counts the Appends under way: one alone commits at once,
	// overlapping ones go through DB.Batch.
	inflight atomic.Int32

	// mu guards the making of IDs. They are made inside the write
	// transaction, which bbolt runs one at a time, so that IDs increase in
	// commit order and every event key lands at the end of the events
	// B+tree (mu only makes that independent of bbolt's lock).
	mu    sync.Mutex
	clock recordClock // guarded by mu
	seq   uint64      // guarded by mu: the next sequence number
}

var _ Store = (*boltStore)(nil)

func openBolt(dir string, mode Mode) (Store, error) {
	if mode == Interval {
		return nil, ErrUnsupported
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "events.db")
	// The defaults, but for a timeout on the file lock: a second Open of
	// the same file fails instead of waiting forever.
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("bbolt: open %s: %w", path, err)
	}
	db.NoSync = mode == None
	s := &boltStore{db: db}
	err = db.Update(func(tx *bolt.Tx) error {
		events, err := tx.CreateBucketIfNotExists(boltEvents)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(boltStreams); err != nil {
			return err
		}
		// IDs keep increasing across a reopen.
		if k, _ := events.Cursor().Last(); k != nil {
			if len(k) != len(ID{}) {
				return fmt.Errorf("event key %x is not 16 bytes", k)
			}
			s.clock.last = int64(binary.BigEndian.Uint64(k[:8]))
			s.seq = binary.BigEndian.Uint64(k[8:]) + 1
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("bbolt: open %s: %w", path, err)
	}
	return s, nil
}

// Append puts the events in one write transaction. An Append that
// overlaps others goes through DB.Batch, which runs the functions of
// concurrent callers in one transaction and one commit. Batch waits up to
// DB.MaxBatchDelay (10 ms by default) for company, so an Append with none
// under way commits on its own at once (db.Update), as the Batch
// documentation advises ("only useful when there are multiple
// goroutines").
//
// Batch may run a function more than once (when another function of the
// batch fails, the batch is rolled back and run again without it), so the
// function is idempotent as far as what is committed goes: each run makes
// fresh IDs and writes them, and only the last run, the one committed, is
// what Append returns. A failed run leaves a gap in the sequence numbers,
// which is harmless.
func (s *boltStore) Append(events []Event) ([]ID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	for i := range events {
		if err := checkStream(&events[i]); err != nil {
			return nil, err
		}
	}
	ids := make([]ID, len(events))
	put := func(tx *bolt.Tx) error {
		eb, sb := tx.Bucket(boltEvents), tx.Bucket(boltStreams)
		// Event keys only ever go at the end of the tree: fill its pages
		// (the default, half, suits random inserts, as in streams).
		eb.FillPercent = 1.0

		s.mu.Lock()
		t := time.UnixMicro(s.clock.next())
		seq := s.seq
		s.seq += uint64(len(events))
		s.mu.Unlock()

		for i := range events {
			e := &events[i]
			ids[i] = PeerID(t, seq+uint64(i))
			// Put keeps the key and value slices until the commit: each
			// needs its own.
			if err := eb.Put(append([]byte(nil), ids[i][:]...), encodeRecord(nil, e)); err != nil {
				return err
			}
			key := append(streamPrefix(nil, e.Entity, e.Key), ids[i][:]...)
			if err := sb.Put(key, nil); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if s.inflight.Add(1) == 1 {
		err = s.db.Update(put)
	} else {
		err = s.db.Batch(put)
	}
	s.inflight.Add(-1)
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Get reads the event's value in a read transaction and copies it out.
func (s *boltStore) Get(id ID) (n int, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		e, err := boltGet(tx.Bucket(boltEvents), id[:])
		n = e.Size()
		return err
	})
	return n, err
}

// boltGet reads and decodes the event with the given ID from a copy of
// its value (bbolt's values point into its memory map, valid only during
// the transaction).
func boltGet(b *bolt.Bucket, id []byte) (Event, error) {
	v := b.Get(id)
	if v == nil {
		return Event{}, fmt.Errorf("%w: %x", errNoSuchEvent, id)
	}
	e, err := decodeRecord(append([]byte(nil), v...))
	if err != nil {
		return Event{}, fmt.Errorf("bbolt: event %x: %w", id, err)
	}
	return e, nil
}

// Scan seeks a cursor to the first ID of from and reads on until the IDs
// pass to.
func (s *boltStore) Scan(from, to time.Time) (n int, size int64, err error) {
	lo, hi, ok := idBounds(from, to)
	if !ok {
		return 0, 0, nil
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltEvents).Cursor()
		for k, v := c.Seek(lo[:]); k != nil && string(k) < string(hi[:]); k, v = c.Next() {
			e, err := decodeRecord(append([]byte(nil), v...))
			if err != nil {
				return fmt.Errorf("bbolt: event %x: %w", k, err)
			}
			n++
			size += int64(e.Size())
		}
		return nil
	})
	return n, size, err
}

// Replay walks the stream's keys in the streams bucket and reads each
// event by its ID, in the same read transaction.
func (s *boltStore) Replay(entity, key string) (n int, size int64, err error) {
	prefix := streamPrefix(nil, entity, key)
	end := prefixEnd(prefix)
	err = s.db.View(func(tx *bolt.Tx) error {
		events := tx.Bucket(boltEvents)
		c := tx.Bucket(boltStreams).Cursor()
		for k, _ := c.Seek(prefix); k != nil && string(k) < string(end); k, _ = c.Next() {
			if len(k) != len(prefix)+len(ID{}) {
				continue // a stream whose entity or key holds a NUL; Append refuses them
			}
			e, err := boltGet(events, k[len(prefix):])
			if err != nil {
				return err
			}
			n++
			size += int64(e.Size())
		}
		return nil
	})
	return n, size, err
}

// Verify runs Tx.Check and reads and decodes every event, and counts the
// stream index keys, which must be as many.
//
// It runs in a write transaction, rolled back: Tx.Check is not safe in a
// read transaction while others write (it reads the freelist), so Verify
// holds appends off while it runs.
func (s *boltStore) Verify() (n int, err error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var errs []error
	for err := range tx.Check() {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("bbolt: verify: %w", errors.Join(errs...))
	}
	err = tx.Bucket(boltEvents).ForEach(func(k, v []byte) error {
		if len(k) != len(ID{}) {
			return fmt.Errorf("event key %x is not 16 bytes", k)
		}
		if _, err := decodeRecord(append([]byte(nil), v...)); err != nil {
			return fmt.Errorf("event %x: %w", k, err)
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("bbolt: verify: %w", err)
	}
	streams := tx.Bucket(boltStreams).Stats().KeyN
	if streams != n {
		return n, fmt.Errorf("bbolt: verify: %d events but %d stream index keys", n, streams)
	}
	return n, nil
}

// TimeOf returns the time in the ID: the time the event was appended.
func (s *boltStore) TimeOf(id ID) time.Time { return PeerTime(id) }

// Close closes the database file.
func (s *boltStore) Close() error { return s.db.Close() }
