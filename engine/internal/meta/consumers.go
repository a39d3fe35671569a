package meta

import (
	"fmt"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// Named consumers' positions (the engine's consumer.go) live in bucket
// "consumers": a bucket per ledger, named by the ledger ID's hex, holding
// one record per consumer, keyed by its name. A record is a msgpack map
// (Consumer) ending with a CRC32C as a ledger's record does. Unlike the
// rest of the file they cannot be rebuilt from the segments: a meta.db
// lost loses them (see the engine's DB.MetaRebuilt). An annal that
// predates them ignores the bucket.
var bucketConsumers = []byte("consumers")

// consumerVersion is the version of the consumer records this annal
// writes; it reads every version up to it.
const consumerVersion = 1

// Consumer is a consumer's stored position: the last event it
// acknowledged (ID empty and Seq 0: none), and the selector it was last
// opened with, for the engine's DB.Consumers.
type Consumer struct {
	Version int       `msgpack:"v"`
	Ledger  uint32    `msgpack:"ledger"`
	Name    string    `msgpack:"name"`
	Seq     uint64    `msgpack:"seq"`
	ID      []byte    `msgpack:"id"`
	Entity  string    `msgpack:"entity"`
	Keys    []string  `msgpack:"keys"`
	Events  []string  `msgpack:"events"`
	Updated time.Time `msgpack:"updated"`
	// CRC: as Record's, the CRC32C of every byte before its own four.
	CRC uint32 `msgpack:"crc"`
}

// encodeConsumer returns the msgpack record of r, with its version and CRC.
func encodeConsumer(r Consumer) ([]byte, error) {
	r.Version, r.CRC = consumerVersion, 0
	b, err := msgpack.Marshal(&r)
	if err != nil {
		return nil, err
	}
	if !sealCRC(b) {
		return nil, fmt.Errorf("engine: position record of consumer %q: the encoding does not end with the CRC field", r.Name)
	}
	return b, nil
}

// decodeConsumer decodes and checks a consumer record stored under name in
// the bucket of ledger.
func decodeConsumer(v []byte, ledger eventid.LedgerID, name string) (Consumer, error) {
	var r Consumer
	if err := msgpack.Unmarshal(v, &r); err != nil {
		return r, err
	}
	crcErr := checkCRC(v, r.CRC)
	switch {
	case r.Version > consumerVersion:
		return r, fmt.Errorf("record version %d, written by a newer annal (this one reads up to version %d)", r.Version, consumerVersion)
	case r.Version < 1:
		return r, fmt.Errorf("record version %d is not a version", r.Version)
	case crcErr != nil:
		return r, crcErr
	case r.Ledger != uint32(ledger) || r.Name != name:
		return r, fmt.Errorf("the record names consumer %q of ledger %s, but is stored as %q of ledger %s", r.Name, eventid.LedgerID(r.Ledger), name, ledger)
	case len(r.ID) == 0 && r.Seq != 0, len(r.ID) != 0 && len(r.ID) != eventid.Size, len(r.ID) != 0 && r.Seq == 0:
		return r, fmt.Errorf("position #%d with an ID of %d bytes", r.Seq, len(r.ID))
	case len(r.ID) != 0 && eventid.ID(r.ID).Ledger() != ledger:
		return r, fmt.Errorf("position %s is an event of ledger %s", eventid.ID(r.ID), eventid.ID(r.ID).Ledger())
	}
	if len(r.ID) == 0 {
		r.ID = make([]byte, eventid.Size)
	}
	r.Updated = r.Updated.UTC()
	return r, nil
}

// GetConsumer reads the stored position of consumer name of ledger.
func GetConsumer(db *bolt.DB, ledger eventid.LedgerID, name string) (r Consumer, found bool, err error) {
	err = Tx(db, false, func(tx *bolt.Tx) error {
		b := consumersBucket(tx, ledger)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(name))
		if v == nil {
			return nil
		}
		var derr error
		if r, derr = decodeConsumer(v, ledger, name); derr != nil {
			return fmt.Errorf("metadata %s: the position record is unreadable: %w", db.Path(), derr)
		}
		found = true
		return nil
	})
	return r, found, err
}

// ListConsumers reads the stored positions of the consumers of ledger, by
// name.
func ListConsumers(db *bolt.DB, ledger eventid.LedgerID) (out []Consumer, err error) {
	err = Tx(db, false, func(tx *bolt.Tx) error {
		b := consumersBucket(tx, ledger)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			r, err := decodeConsumer(v, ledger, string(k))
			if err != nil {
				return fmt.Errorf("metadata %s: the position record of consumer %q is unreadable: %w", db.Path(), k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// PutConsumers writes consumer positions in one transaction (a bbolt
// commit: synced before it returns).
func PutConsumers(db *bolt.DB, rs ...Consumer) (err error) {
	return Tx(db, true, func(tx *bolt.Tx) error {
		top, err := tx.CreateBucketIfNotExists(bucketConsumers)
		if err != nil {
			return err
		}
		for _, r := range rs {
			b, err := top.CreateBucketIfNotExists([]byte(eventid.LedgerID(r.Ledger).String()))
			if err != nil {
				return err
			}
			v, err := encodeConsumer(r)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(r.Name), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteConsumer removes the stored position of consumer name of ledger.
func DeleteConsumer(db *bolt.DB, ledger eventid.LedgerID, name string) (found bool, err error) {
	err = Tx(db, true, func(tx *bolt.Tx) error {
		b := consumersBucket(tx, ledger)
		if b == nil || b.Get([]byte(name)) == nil {
			return nil
		}
		found = true
		return b.Delete([]byte(name))
	})
	return found, err
}

// consumersBucket returns the bucket of ledger's consumers, or nil.
func consumersBucket(tx *bolt.Tx, ledger eventid.LedgerID) *bolt.Bucket {
	top := tx.Bucket(bucketConsumers)
	if top == nil {
		return nil
	}
	return top.Bucket([]byte(ledger.String()))
}
