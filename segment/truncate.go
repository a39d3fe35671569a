package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// truncate cuts the file at path, open for writing as *f, to size bytes and
// syncs it. vfs.File has no Truncate; files of vfs.Default have one (an
// embedded *os.File), and so do faultfs's. Where the file has none (a
// memory file system), the first size bytes are copied to a new file that
// replaces the old one, and *f is reopened.
func truncate(fs vfs.FS, path string, f *vfs.File, size int64) error {
	if t, ok := (*f).(interface{ Truncate(int64) error }); ok {
		err := t.Truncate(size)
		if err == nil {
			return (*f).Sync()
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("truncate %s to %d: %w", path, size, err)
		}
	}
	tmp := path + ".tmp"
	if err := copyPrefix(fs, path, tmp, size); err != nil {
		fs.Remove(tmp)
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		fs.Remove(tmp)
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	if err := SyncDir(fs, fs.PathDir(path)); err != nil {
		return err
	}
	nf, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", path, err)
	}
	(*f).Close()
	*f = nf
	return nil
}

// copyPrefix writes the first size bytes of src to a new file dst, synced.
func copyPrefix(fs vfs.FS, src, dst string, size int64) error {
	in, err := fs.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := fs.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, io.NewSectionReader(in, 0, size)); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("sync %s: %w", dst, err)
	}
	return out.Close()
}

// removeStaleTemp removes what an interrupted truncate left behind.
func removeStaleTemp(fs vfs.FS, dir string, names []string) error {
	for _, name := range names {
		if _, ok := parseSegmentName(strings.TrimSuffix(name, ".tmp")); ok && strings.HasSuffix(name, ".tmp") {
			if err := fs.Remove(fs.PathJoin(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("segment: remove %s: %w", name, err)
			}
		}
	}
	return nil
}
