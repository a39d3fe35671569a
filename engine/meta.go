package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
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

// damagedMeta is the error for a metadata file that bbolt cannot read.
func damagedMeta(path string, why any) error {
	return fmt.Errorf("engine: metadata %s is damaged: %v", path, why)
}

func openMeta(path string) (db *bolt.DB, err error) {
	// bbolt panics on some damaged pages (a freelist page that is not
	// one, a page that names another page): a damaged metadata file
	// must fail Open, not crash the process. A panic inside bolt.Open
	// leaves the file mapped, and so locked, until the process ends:
	// checkMetaOpen makes it happen on a copy instead.
	if err := checkMetaOpen(path); err != nil {
		return nil, err
	}
	var file *os.File
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				file.Close()
			}
			db, err = nil, damagedMeta(path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}})
	if err != nil {
		return nil, fmt.Errorf("engine: open metadata %s: %w", path, err)
	}
	// Written only when missing: an Open that then fails on a damaged
	// record leaves the file as it was.
	var exists bool
	if err := db.View(func(tx *bolt.Tx) error { exists = tx.Bucket(bucketLedgers) != nil; return nil }); err != nil || !exists {
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucketLedgers)
			return err
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("engine: metadata %s: %w", path, err)
		}
	}
	return db, nil
}

// checkMetaOpen opens a temporary copy of the metadata file at path, as
// bolt.Open opens a file for writing (reading its freelist), and returns
// the error naming path if that panics. Any other failure is left for the
// real open to report.
func checkMetaOpen(path string) (err error) {
	b, rerr := os.ReadFile(path)
	if rerr != nil || len(b) == 0 {
		return nil
	}
	f, cerr := os.CreateTemp("", "annal-meta-check-*")
	if cerr != nil {
		return nil
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil {
		os.Remove(tmp)
		return nil
	}
	defer os.Remove(tmp)
	defer func() {
		if r := recover(); r != nil {
			err = damagedMeta(path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if db, oerr := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second}); oerr == nil {
		db.Close()
	}
	return nil
}

func loadMeta(db *bolt.DB) (out []ledgerMeta, err error) {
	defer recoverMeta(db, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedgers).ForEach(func(k, v []byte) error {
			var m ledgerMeta
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("engine: metadata %s: the record of ledger %q is unreadable: %w", db.Path(), k, err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

func putMeta(db *bolt.DB, ms ...ledgerMeta) (err error) {
	defer recoverMeta(db, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
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

// recoverMeta, deferred in a function that reads or writes the metadata
// file, turns a panic of bbolt into an error naming the file: bbolt
// panics on some damaged pages, when it reads them and when a write
// meets them (a page number out of range in the freelist), and its
// Update rolls the transaction back as the panic passes. The functions
// that call into bbolt also set debug.SetPanicOnFault meanwhile: bbolt
// reads its pages through a memory mapping, and a page beyond the end of
// a file cut short faults (SIGBUS), which would otherwise end the process.
func recoverMeta(db *bolt.DB, err *error) {
	if r := recover(); r != nil {
		*err = damagedMeta(db.Path(), r)
	}
}
