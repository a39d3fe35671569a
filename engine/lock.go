package engine

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/annal-db/annal/engine/internal/dirlock"
)

// One writer: a DB holds its data directory with dirlock.Lock (a flock on
// the directory, DIR/LOCK naming the holder); see package dirlock. What
// stays here is the engine's face of it, LockedError.

// lockDataDir takes the data directory dir for this process
// (dirlock.Lock), turning a directory held by another into a
// *LockedError.
func lockDataDir(dir string) (io.Closer, *os.File, error) {
	c, d, err := dirlock.Lock(dir)
	if h := (*dirlock.HeldError)(nil); errors.As(err, &h) {
		return nil, nil, &LockedError{Dir: h.Dir, PID: h.PID, Command: h.Command, source: h.Source}
	}
	return c, d, err
}

// LockedError says that a data directory is held by another DB, and by
// which process if that can be found. It matches ErrLocked.
type LockedError struct {
	Dir     string
	PID     int    // the holder's process ID; 0 if unknown
	Command string // its command line, if known
	source  string // where PID comes from, when not the kernel's lock table
}

// Holder describes the process holding the directory: "process 1234
// (annal append acct)", "this process", or "another process".
func (e *LockedError) Holder() string { return dirlock.Holder(e.PID, e.Command, e.source) }

func (e *LockedError) Error() string {
	return fmt.Sprintf("%v: %s is held by %s", ErrLocked, e.Dir, e.Holder())
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
