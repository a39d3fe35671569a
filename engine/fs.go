package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// privateFS is vfs.Default with files created for the owner only (0600)
// and directories 0700, whatever the umask: a ledger is nobody else's to
// read. vfs.Default creates files 0666 less the umask.
type privateFS struct{ vfs.FS }

func (fs privateFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err == nil {
		err = os.Chmod(name, 0o600)
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, err
}

func (fs privateFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	if err == nil {
		if err = os.Chmod(name, 0o600); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, err
}

func (fs privateFS) MkdirAll(dir string, _ os.FileMode) error { return fs.FS.MkdirAll(dir, 0o700) }

// MapSegments says that the segment log may read the segment files from
// memory maps: they are the operating system's files.
func (fs privateFS) MapSegments() bool { return true }

// Unwrap returns vfs.Default.
func (fs privateFS) Unwrap() vfs.FS { return fs.FS }

func (fs privateFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	if err == nil {
		if err = os.Chmod(name, 0o600); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// mkdirSynced creates dir and any missing parents, syncing the parent of
// each directory it creates, so that a crash cannot take back a directory
// (and all the synced files in it) that Open went on to use: a new
// directory's entry is data of its parent, durable only once the parent
// is synced.
func mkdirSynced(fs vfs.FS, dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := fs.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirSynced(fs, parent); err != nil {
			return err
		}
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return segment.SyncDir(fs, parent)
}
