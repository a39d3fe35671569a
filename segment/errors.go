package segment

import (
	"errors"
	"fmt"

	"github.com/annal-db/annal/segment/corruption"
)

// Errors of package segment, by subject.

// Damaged or lost data. Each also matches corruption.Err, which is
// engine.ErrCorruption.
var (
	// ErrCorruption: stored data failed verification and is not a torn
	// write. Every such error is a *CorruptionError that says where.
	// Nothing is truncated or repaired when it is returned.
	ErrCorruption = corruption.New("segment: corruption")
	// ErrAcknowledgedLost: the segments lost events that a durable witness
	// says were acknowledged (a lost tail: a segment missing, cut or replaced
	// by an older copy). Nothing was cut. It is matched by the CorruptionError
	// that says so (Lost), as well as ErrCorruption.
	ErrAcknowledgedLost = corruption.New("segment: acknowledged events lost")
)

// Errors of opening a Log.
var (
	// ErrNoLog: Open found no segment in the directory.
	ErrNoLog = errors.New("segment: no segments")
	// ErrExists: Create found segments already in the directory.
	ErrExists = errors.New("segment: segments exist")
	// ErrFormatVersion: a segment was written by a newer format version.
	ErrFormatVersion = errors.New("segment: unsupported format version")
	// ErrProgressMismatch: the progress marker given to Open (the index's
	// record of how far it has indexed) does not match the segments: it
	// names a record that is not there. Open again without one to verify
	// from the start.
	ErrProgressMismatch = errors.New("segment: progress marker does not match the segments")
	// ErrCheckpoint is ErrProgressMismatch, under its former name.
	//
	// Deprecated: use ErrProgressMismatch.
	ErrCheckpoint = ErrProgressMismatch
)

// Errors of a Log that refuses writes.
var (
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("segment: log closed")
	// ErrFailed: an earlier write or sync failed in a way that leaves the
	// state of the file unknown (a failed fsync, or a failed write that
	// could not be undone). The Log refuses further appends; reopen it,
	// which verifies and repairs the tail from what is on disk.
	ErrFailed = errors.New("segment: log failed")
	// ErrFileChanged: a file of the Log (its directory, a sealed segment, the
	// active segment) was removed, moved, replaced, cut or overwritten since
	// the Log created or opened it (CheckFiles). The Log's appends would go
	// to a file that is no longer the ledger's.
	ErrFileChanged = errors.New("segment: a file of the log was removed or replaced")
	// ErrReadOnly: a write (Append, Sync) to a Log opened with
	// OpenReadOnly.
	ErrReadOnly = errors.New("segment: log opened read-only")
	// ErrDiverged: a read-only Log found that the segments no longer hold
	// what it had already shown: the record at its head was replaced, or
	// the file was cut before it (the writer's recovery cut records the
	// reader had seen, or the files were changed by hand). What was shown
	// stays valid for what it was; the Log shows nothing more.
	ErrDiverged = errors.New("segment: the segments no longer hold what a read-only log showed")
)

// Errors of an entry that an append refuses.
var (
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

// Is reports whether target is ErrCorruption (or what it matches,
// corruption.Err), or ErrAcknowledgedLost for the corruption of a lost
// tail.
func (e *CorruptionError) Is(target error) bool {
	return errors.Is(ErrCorruption, target) || target == ErrAcknowledgedLost && e.Lost
}
