//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package engine

import (
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockDataDir takes the data directory dir for this process where flock
// is not available: the lock of vfs.Default on DIR/LOCK, which a removed
// LOCK file defeats (see "One writer" in lock.go).
func lockDataDir(dir string) (io.Closer, *os.File, error) {
	c, err := vfs.Default.Lock(lockPath(dir))
	if err != nil {
		if lockHeld(err) {
			return nil, nil, lockedError(dir, 0, "", "")
		}
		return nil, nil, err
	}
	return c, nil, nil
}

// lockDir is not available without flock: the private directories of
// read-only DBs are not held, so none is ever taken for stale
// (removeStalePrivateDirs removes nothing).
func lockDir(dir string) (*os.File, error) {
	return nil, &os.PathError{Op: "flock", Path: dir, Err: errors.ErrUnsupported}
}
