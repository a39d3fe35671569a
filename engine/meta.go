package engine

import (
	"errors"
	"fmt"
	"os"

	"github.com/annal-db/annal/engine/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// The metadata file, DIR/meta.db, is package meta's: its records, bbolt
// and the guards against a damaged file. When it is read and written is
// the DB's (Open, Close, CreateLedger, Import, the witness writer, the
// consumers); here is what opens it and what a lost file means
// (MetaRebuilt).

// ledgerMeta is what the metadata file keeps of a ledger.
type ledgerMeta = meta.Ledger

// openMeta opens the metadata file at path (meta.Open), which must be a
// regular file if it exists: a named pipe would block the open for ever.
func openMeta(path, lost string) (*bolt.DB, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("engine: the metadata file %s is not a regular file (%s)", path, fileKind(fi.Mode()))
	}
	return meta.Open(path, lost)
}

// MetaRebuilt returns why the metadata file was rebuilt from the
// segments (it was missing or empty while ledgers were present), matching
// ErrPositionsLost, or nil. The segments hold every ledger's name,
// description and events, so no event is lost; the positions of named
// consumers (DB.Consumer) were only in it. The rebuilt file records the
// loss, so every later Open, in any process, reports it too, and every
// consumer call fails with the same error, until AcceptLostPositions
// accepts it: a service is never left to take a lost position for a new
// consumer. The error is also for the operator, who may want to know who
// removed the file.
func (db *DB) MetaRebuilt() error { return db.positionsErr() }

// metaMissing reports whether the metadata file at path is "missing" or
// "empty" (bbolt makes an empty file a new one: it holds nothing either),
// or "" if neither.
func metaMissing(path string) string {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "missing"
	case err == nil && fi.Mode().IsRegular() && fi.Size() == 0:
		return "empty"
	}
	return ""
}
