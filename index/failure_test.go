package index

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// denyFS fails the creation of files whose base name matches deny with
// errno, as a directory without write permission or a read-only file
// system does.
type denyFS struct {
	vfs.FS
	deny  func(name string) bool
	errno syscall.Errno
}

func (fs denyFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.deny(filepath.Base(name)) {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.errno}
	}
	return fs.FS.Create(name, cat)
}

// TestOpenNotWritable: an index directory in which no file can be created
// (mode 0500 for its owner, a read-only file system) is ErrNotWritable,
// matching the errno, from Open, which returns: Pebble, which writes a new
// MANIFEST on every Open, used to end in "panic: MANIFEST create failed".
// Read-only, the index still opens.
func TestOpenNotWritable(t *testing.T) {
	t.Parallel()
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EROFS, syscall.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			dir := t.TempDir()
			x := openAt(t, dir, Options{})
			add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "v"})
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			fs := denyFS{FS: vfs.Default, deny: func(string) bool { return true }, errno: errno}
			_, err := openWithin(t, dir, Options{FS: fs})
			if !errors.Is(err, ErrNotWritable) || !errors.Is(err, errno) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open of a directory that cannot be written: %v, want ErrNotWritable and %v naming %s", err, errno, dir)
			}
			y, err := openWithin(t, dir, Options{FS: fs, ReadOnly: true})
			if err != nil {
				t.Fatalf("read-only Open: %v", err)
			}
			checkPositions(t, "Stream", collect(t, y.Stream(t.Context(), ledgerA, []byte("e"), []byte("k"), 0)), positions(ledgerA, 1))
			if err := y.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenManifestFails: the directory is writable but Pebble cannot
// create its MANIFEST (EIO): Open returns an error matching ErrFailed
// and the errno; no panic reaches the caller, and Open does not wait for
// ever.
func TestOpenManifestFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	x := openAt(t, dir, Options{})
	add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "v"})
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	fs := denyFS{FS: vfs.Default, deny: func(name string) bool { return strings.HasPrefix(name, "MANIFEST-") }, errno: syscall.EIO}
	_, err := openWithin(t, dir, Options{FS: fs, Logger: testLogger{t}})
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with MANIFEST creation failing: %v, want ErrFailed and EIO", err)
	}
	t.Logf("Open: %v", err)
}

// openWithin opens an index, failing the test if Open takes a minute.
func openWithin(t *testing.T, dir string, opts Options) (*Index, error) {
	t.Helper()
	type result struct {
		x   *Index
		err error
	}
	done := make(chan result, 1)
	go func() {
		x, err := Open(dir, opts)
		done <- result{x, err}
	}()
	select {
	case r := <-done:
		return r.x, r.err
	case <-time.After(time.Minute):
		t.Fatal("Open did not return in a minute")
		return nil, nil
	}
}

// testLogger logs Pebble's messages to the test; Fatalf is fatalLogger's.
type testLogger struct{ t *testing.T }

func (l testLogger) Infof(format string, args ...any)  {}
func (l testLogger) Errorf(format string, args ...any) { l.t.Logf("pebble: "+format, args...) }
func (l testLogger) Fatalf(format string, args ...any) { l.t.Logf("pebble (fatal): "+format, args...) }
