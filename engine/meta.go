package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/annal-db/annal/eventid"
	bolt "go.etcd.io/bbolt"
)

// The metadata file (bbolt) holds one record per ledger in bucket
// "ledgers", keyed by the ledger ID's hex, as JSON. Everything in it can be
// rebuilt from the segments (the genesis event names and describes the
// ledger); the head fields are a checkpoint, written on Close and on
// CreateLedger, never on an append's path.
var bucketLedgers = []byte("ledgers")

// ledgerMeta is what the metadata file keeps of a ledger.
type ledgerMeta struct {
	Name        string           `json:"name"`
	ID          eventid.LedgerID `json:"id"`
	Genesis     eventid.ID       `json:"genesis"`
	Description string           `json:"description"`
	Actor       string           `json:"actor"`
	Created     time.Time        `json:"created"`
	// Checkpoint: the head when the metadata was last written.
	Head       eventid.ID `json:"head"`
	Count      uint64     `json:"count"`
	LastMicros uint64     `json:"lastMicros"`
}

func openMeta(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("engine: open metadata %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketLedgers)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("engine: metadata %s: %w", path, err)
	}
	return db, nil
}

func loadMeta(db *bolt.DB) ([]ledgerMeta, error) {
	var out []ledgerMeta
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedgers).ForEach(func(k, v []byte) error {
			var m ledgerMeta
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("engine: metadata of ledger %s is unreadable: %w", k, err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

func putMeta(db *bolt.DB, ms ...ledgerMeta) error {
	return db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLedgers)
		for _, m := range ms {
			v, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(m.ID.String()), v); err != nil {
				return err
			}
		}
		return nil
	})
}
