//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package dirlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Lock takes the data directory dir for this process where flock
// is not available: the lock of vfs.Default on DIR/LOCK, which a removed
// LOCK file defeats (see the package comment).
func Lock(dir string) (io.Closer, *os.File, error) {
	c, err := vfs.Default.Lock(Path(dir))
	if err != nil {
		if Held(err) {
			return nil, nil, held(dir, 0, "", "")
		}
		return nil, nil, err
	}
	return c, nil, nil
}

// Hold is not available without flock: the private directories of
// read-only DBs are not held, so none is ever taken for stale
// (removeStalePrivateDirs removes nothing).
func Hold(dir string) (*os.File, error) {
	return nil, &os.PathError{Op: "flock", Path: dir, Err: errors.ErrUnsupported}
}

// LockFile takes the lock of vfs.Default on the file at path (Windows:
// the file opened for no one else to share), waiting up to wait while
// another holds it. Where the file system has no lock (neither flock nor
// Windows'), it returns a lock that excludes no other process: the
// signer's state is then locked within the process only.
func LockFile(path string, wait time.Duration) (io.Closer, error) {
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		c, err := vfs.Default.Lock(path)
		if err == nil {
			return c, nil
		}
		if runtime.GOOS != "windows" {
			return io.NopCloser(nil), nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is locked by another signer for more than %v: %w", path, wait, err)
		}
		time.Sleep(pause)
	}
}
