package segment

import (
	"errors"
	"fmt"
)

// Errors of package segment.
var (
	// ErrCorruption: stored data failed verification and is not a torn
	// write. Every such error is a *CorruptionError that says where.
	// Nothing is truncated or repaired when it is returned.
	ErrCorruption = errors.New("segment: corruption")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("segment: log closed")
	// ErrFailed: an earlier write or sync failed in a way that leaves the
	// state of the file unknown (a failed fsync, or a failed write that
	// could not be undone). The Log refuses further appends; reopen it,
	// which verifies and repairs the tail from what is on disk.
	ErrFailed = errors.New("segment: log failed")
	// ErrNoLog: Open found no segment in the directory.
	ErrNoLog = errors.New("segment: no segments")
	// ErrExists: Create found segments already in the directory.
	ErrExists = errors.New("segment: segments exist")
	// ErrFormatVersion: a segment was written by a newer format version.
	ErrFormatVersion = errors.New("segment: unsupported format version")
	// ErrTooLarge: an entry exceeds the limits of the format or of
	// Options.MaxRecordSize.
	ErrTooLarge = errors.New("segment: entry too large")
	// ErrNotGenesis: the first entry of a ledger does not hash to the
	// ledger's ID.
	ErrNotGenesis = errors.New("segment: first entry is not the ledger's genesis event")
	// ErrIDMismatch: an entry given with an ID (an import) does not have
	// the ID its content, time and chain position give.
	ErrIDMismatch = errors.New("segment: entry ID mismatch")
	// ErrTimeOrder: an entry given with a timestamp is not after the head.
	ErrTimeOrder = errors.New("segment: timestamp not after the ledger head")
	// ErrCheckpoint: the checkpoint given to Open does not match the
	// segments (it names a record that is not there). Open again without
	// one to verify from the start.
	ErrCheckpoint = errors.New("segment: checkpoint does not match the segments")
	// ErrClockExhausted: the ledger's clock reached the largest timestamp.
	ErrClockExhausted = errors.New("segment: no timestamp left after the ledger head")
)

// CorruptionError describes a verification failure. It matches
// ErrCorruption with errors.Is.
type CorruptionError struct {
	File     string // the segment file
	Offset   int64  // where in the file
	Problem  string // what is wrong
	Expected string // what verification expected, if it applies
	Found    string // what it found instead
	// Lost: a durable witness vouches for what is missing, so the
	// events were acknowledged (ErrAcknowledgedLost); the message then
	// names the cure (LostHint).
	Lost bool
}

func (e *CorruptionError) Error() string {
	msg := fmt.Sprintf("segment: corruption in %s at offset %d: %s", e.File, e.Offset, e.Problem)
	if e.Expected != "" || e.Found != "" {
		msg += fmt.Sprintf(" (expected %s, found %s)", e.Expected, e.Found)
	}
	if e.Lost {
		msg += "; " + LostHint
	}
	return msg
}

// ErrAcknowledgedLost: the segments lost events that a durable witness
// says were acknowledged (a lost tail: a segment missing, cut or replaced
// by an older copy). Nothing was cut. It is matched by the CorruptionError
// that says so (Lost), as well as ErrCorruption.
var ErrAcknowledgedLost = errors.New("segment: acknowledged events lost")

// Is reports whether target is ErrCorruption, or ErrAcknowledgedLost for
// the corruption of a lost tail.
func (e *CorruptionError) Is(target error) bool {
	return target == ErrCorruption || target == ErrAcknowledgedLost && e.Lost
}
