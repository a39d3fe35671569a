package faultfs

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// file wraps a file opened through an FS so that its operations are
// recorded and can be failed.
type file struct {
	fs    *FS
	inner vfs.File
	path  string
	// pos is the handle's position: the bytes moved by Read and Write so
	// far. vfs.File has no Seek, so every call that moves the inner file's
	// position goes through here, and pos equals that position as long as
	// the wrapped FS opens files at 0 (vfs.Default and MemFS do).
	pos atomic.Int64
}

var _ vfs.File = (*file)(nil)

// truncater is the method *os.File has and vfs.File lacks; vfs.Default's
// files have it through embedding, MemFS files do not.
type truncater interface {
	Truncate(size int64) error
}

// shortLen is how many of n bytes a ShortWrite writes.
func shortLen(n int) int { return n / 2 }

// write runs a Write or WriteAt, applying ShortWrite by writing a prefix
// with do.
func (f *file) write(op Op, p []byte, do func([]byte) (int, error)) (int, error) {
	op, fault := f.fs.begin(op)
	switch fault {
	case NoFault:
		return do(p)
	case ShortWrite:
		injected := &injectedError{op: op, fault: fault}
		n, err := do(p[:shortLen(len(p))])
		if err != nil {
			return n, errors.Join(injected, err)
		}
		return n, injected
	default:
		return 0, &injectedError{op: op, fault: fault}
	}
}

// Write implements vfs.File.
func (f *file) Write(p []byte) (int, error) {
	op := Op{Kind: Write, Path: f.path, Offset: f.pos.Load(), Len: len(p)}
	return f.write(op, p, func(b []byte) (int, error) {
		n, err := f.inner.Write(b)
		f.pos.Add(int64(n))
		return n, err
	})
}

// WriteAt implements vfs.File.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	op := Op{Kind: WriteAt, Path: f.path, Offset: off, Len: len(p)}
	return f.write(op, p, func(b []byte) (int, error) {
		return f.inner.WriteAt(b, off)
	})
}

// Read implements vfs.File.
func (f *file) Read(p []byte) (int, error) {
	if err := f.fs.check(Op{Kind: Read, Path: f.path, Offset: f.pos.Load(), Len: len(p)}); err != nil {
		return 0, err
	}
	n, err := f.inner.Read(p)
	f.pos.Add(int64(n))
	return n, err
}

// ReadAt implements vfs.File.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(Op{Kind: ReadAt, Path: f.path, Offset: off, Len: len(p)}); err != nil {
		return 0, err
	}
	return f.inner.ReadAt(p, off)
}

// Close implements vfs.File. An injected fault is reported after the
// wrapped file is closed anyway, as close(2) releases the descriptor even
// when it fails.
func (f *file) Close() error {
	injected := f.fs.check(Op{Kind: Close, Path: f.path})
	err := f.inner.Close()
	if injected != nil {
		return injected
	}
	return err
}

// Sync implements vfs.File.
func (f *file) Sync() error {
	if err := f.fs.check(Op{Kind: Sync, Path: f.path}); err != nil {
		return err
	}
	return f.inner.Sync()
}

// SyncData implements vfs.File; it is a Sync operation.
func (f *file) SyncData() error {
	if err := f.fs.check(Op{Kind: Sync, Path: f.path}); err != nil {
		return err
	}
	return f.inner.SyncData()
}

// SyncTo implements vfs.File; it is a Sync operation.
func (f *file) SyncTo(length int64) (fullSync bool, err error) {
	if err := f.fs.check(Op{Kind: Sync, Path: f.path}); err != nil {
		return false, err
	}
	return f.inner.SyncTo(length)
}

// Preallocate implements vfs.File.
func (f *file) Preallocate(offset, length int64) error {
	if err := f.fs.check(Op{Kind: Preallocate, Path: f.path, Offset: offset, Len: int(length)}); err != nil {
		return err
	}
	return f.inner.Preallocate(offset, length)
}

// Stat implements vfs.File.
func (f *file) Stat() (vfs.FileInfo, error) {
	if err := f.fs.check(Op{Kind: Stat, Path: f.path}); err != nil {
		return nil, err
	}
	return f.inner.Stat()
}

// Truncate changes the file's size, if the wrapped file can (an *os.File
// can, a MemFS file cannot); otherwise it returns an error matching
// errors.ErrUnsupported. It is an operation either way. It does not move
// the position of Write.
func (f *file) Truncate(size int64) error {
	if err := f.fs.check(Op{Kind: Truncate, Path: f.path, Offset: size}); err != nil {
		return err
	}
	t, ok := f.inner.(truncater)
	if !ok {
		return fmt.Errorf("faultfs: truncate %s: %T: %w", f.path, f.inner, errors.ErrUnsupported)
	}
	return t.Truncate(size)
}

// Prefetch implements vfs.File; it is a hint, not an operation.
func (f *file) Prefetch(offset, length int64) error { return f.inner.Prefetch(offset, length) }

// Fd implements vfs.File; it is not an operation.
func (f *file) Fd() uintptr { return f.inner.Fd() }
