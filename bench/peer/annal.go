package peer

import (
	"context"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
)

// AnnalLedger is the one ledger the harness appends to in annal (a reader
// process beside the writer follows it by this name).
const AnnalLedger = "bench"

func init() {
	Register(Info{
		Name:    "annal",
		Version: "this tree",
		What:    "annal's engine: segment files (CRC32C, chained checksums, content IDs), a Pebble index (format 4: one entry per block of up to 64 events by ID, one by sequence, postings with each event's ID and location for stream, entity and event name, written in bulk from an in-memory tail), bbolt metadata",
		Open:    openAnnal,
	})
}

type annalStore struct {
	db *engine.DB
}

func openAnnal(dir string, mode Mode) (Store, error) {
	if mode != Sync && mode != Interval && mode != None {
		return nil, fmt.Errorf("annal: %v: %w", mode, ErrUnsupported)
	}
	db, err := engine.Open(dir, &engine.Options{Durability: mode})
	if err != nil {
		return nil, err
	}
	if _, err := db.Ledger(AnnalLedger); err != nil {
		if _, err := db.CreateLedger(context.Background(), engine.LedgerSpec{Name: AnnalLedger}); err != nil {
			db.Close()
			return nil, err
		}
	}
	return &annalStore{db: db}, nil
}

func (s *annalStore) Append(events []Event) ([]ID, error) {
	in := make([]engine.EventInput, len(events))
	for i, e := range events {
		in[i] = engine.EventInput{Entity: e.Entity, Key: e.Key, Event: e.Name, Meta: e.Meta, Data: e.Data}
	}
	res, err := s.db.Append(context.Background(), AnnalLedger, in, nil)
	if err != nil {
		return nil, err
	}
	out := make([]ID, len(res.IDs))
	for i, id := range res.IDs {
		out[i] = ID(id)
	}
	return out, nil
}

func size(e *engine.Event) int {
	return len(e.Entity) + len(e.Key) + len(e.Event) + len(e.Meta) + len(e.Data)
}

func (s *annalStore) Get(id ID) (int, error) {
	e, err := s.db.Get(context.Background(), eventid.ID(id))
	if err != nil {
		return 0, err
	}
	return size(&e), nil
}

func (s *annalStore) Scan(from, to time.Time) (n int, bytes int64, err error) {
	for e, err := range s.db.Scan(context.Background(), AnnalLedger, engine.ScanOptions{From: from, To: to}) {
		if err != nil {
			return n, bytes, err
		}
		n++
		bytes += int64(size(&e))
	}
	return n, bytes, nil
}

func (s *annalStore) Replay(entity, key string) (n int, bytes int64, err error) {
	for e, err := range s.db.Replay(context.Background(), AnnalLedger, engine.ReplayOptions{Entity: entity, Keys: []string{key}}) {
		if err != nil {
			return n, bytes, err
		}
		n++
		bytes += int64(size(&e))
	}
	return n, bytes, nil
}

func (s *annalStore) Verify() (int, error) {
	r, err := s.db.Verify(context.Background(), AnnalLedger, nil)
	return int(r.Events), err
}

func (s *annalStore) TimeOf(id ID) time.Time { return eventid.ID(id).Time() }

func (s *annalStore) Close() error { return s.db.Close() }
