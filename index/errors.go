package index

import (
	"errors"
	"fmt"

	"github.com/annal-db/annal/segment/corruption"
	"github.com/cockroachdb/pebble/v2"
)

// Errors of package index, by subject.

// Damaged data. It also matches corruption.Err, which is
// engine.ErrCorruption.
var (
	// ErrCorruption: a stored key or value could not be decoded (wrong
	// size, out-of-range field) or the format version key is missing from
	// an index that holds data. The error names the key, the expected and
	// the found values. The index can be rebuilt from the segments.
	ErrCorruption = corruption.New("index: corruption")
)

// Errors of opening an Index.
var (
	// ErrFormatVersion: Open found an index written with a format version
	// this package does not know (a newer one, or 0). The error says which.
	// Rebuild the index from the segments, or use a newer annal.
	ErrFormatVersion = errors.New("index: unsupported format version")
	// ErrOldFormat: Open found an index written with an older format
	// version than this package writes (1: idempotency entries without
	// the digest of their events). Nothing in it is lost data: rebuild
	// it from the segments (the engine does so on Open).
	ErrOldFormat = errors.New("index: older format version")
	// ErrNotWritable: Open (not ReadOnly) cannot create a file in the
	// index directory: no permission (EACCES, EPERM) or a read-only file
	// system (EROFS). The error names the directory; nothing was changed.
	ErrNotWritable = errors.New("index: the index directory is not writable")
)

// Errors of an Index that refuses calls.
var (
	// ErrClosed: the Index was used after Close.
	ErrClosed = errors.New("index: closed")
	// ErrFailed: Pebble met an error it treats as fatal (it panicked, or
	// called Logger.Fatalf: a failed write or sync of its MANIFEST, say). The
	// Index then refuses every call; reopening the engine rebuilds it from the
	// segments.
	ErrFailed = errors.New("index: failed")
)

// Errors of an argument.
var (
	// ErrInvalid: an argument cannot be indexed: a location with a negative
	// offset or a size above 2^32-1, a record added under a ledger other
	// than its ID's, an idempotency key with a batch length of 0 or a
	// digest of other than DigestSize bytes, a nibble
	// outside 0-15. Batch.Commit returns it for the first bad Add or
	// SetProgress and commits nothing.
	ErrInvalid = errors.New("index: invalid argument")
)

// errBatchClosed is returned for a Batch used after its Close.
var errBatchClosed = fmt.Errorf("%w: batch used after Close", ErrClosed)

// corruptf returns an ErrCorruption error that names key.
func corruptf(key []byte, format string, args ...any) error {
	return fmt.Errorf("%w: key %s: %s", ErrCorruption, describeKey(key), fmt.Sprintf(format, args...))
}

// describeKey renders a key as its family tag and the rest in hex, e.g.
// "T 00000001 0000018f...".
func describeKey(key []byte) string {
	switch {
	case len(key) == 0:
		return "(empty)"
	case len(key) == 1:
		return fmt.Sprintf("%q", key[0])
	case len(key) <= ledgerPrefixLen:
		return fmt.Sprintf("%q %x", key[0], key[1:])
	}
	return fmt.Sprintf("%q %x %x", key[0], key[1:ledgerPrefixLen], key[ledgerPrefixLen:])
}

// readErr wraps the error of a read of Pebble. Damage that Pebble found (a
// block whose checksum does not match) becomes a one-line error matching
// ErrCorruption and Pebble's error, that says the index can be rebuilt:
// Pebble's own message may run over several lines.
func readErr(err error) error {
	if pebble.IsCorruptionError(err) {
		return &damageError{cause: err}
	}
	return fmt.Errorf("index: %w", err)
}

type damageError struct{ cause error }

func (e *damageError) Error() string {
	return fmt.Sprintf("%s: %s (the index is derived from the segments and can be rebuilt)", ErrCorruption, firstLine(e.cause))
}

func (e *damageError) Unwrap() []error { return []error{ErrCorruption, e.cause} }
