//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package engine

import (
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
