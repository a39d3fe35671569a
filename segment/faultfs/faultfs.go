// Package faultfs wraps a Pebble [vfs.FS] so that a test can record every
// file-system operation of a workload and make chosen operations fail.
//
// Pebble's vfs/errorfs injects errors but cannot cut a write short and
// cannot say which operations ran; faultfs does both, and nothing more.
//
// # Operations
//
// Every call made through an [FS], or through a file it returned, is an
// operation ([Op]). Operations are numbered from 0 in the order they begin,
// across all goroutines. Before an operation runs it is recorded and offered
// to the [Injector], which answers with a [Fault]; an operation that fails,
// whether by injection or on its own, is still recorded, so the record is
// of attempts. Reads, syncs and closes are operations. PathBase, PathJoin,
// PathDir, GetDiskUsage, File.Prefetch, File.Fd and closing a lock are not:
// they pass straight through.
//
// # Faults
//
//	Fault       error matches                  effect
//	ENOSPC      ErrInjected, syscall.ENOSPC    the operation does not run
//	EIO         ErrInjected, syscall.EIO       the operation does not run
//	ShortWrite  ErrInjected, syscall.EIO       Write, WriteAt: the first len(p)/2
//	                                           bytes are written, then the error;
//	                                           any other operation: as EIO
//
// "Does not run" means the wrapped file system is not called: a failed
// Create creates nothing, a failed Rename leaves both names as they were, a
// failed Sync leaves the data unsynced. The one exception is Close, which
// always closes the wrapped file (close(2) releases the descriptor even when
// it reports an error) and then reports the injected error.
//
// # Crash simulation
//
// Syncs pass through to the wrapped file system, so wrapping
// [vfs.NewCrashableMem] keeps crash simulation working: keep the *vfs.MemFS
// and call its CrashClone to see what a crash at that moment would leave.
//
// # Example
//
// A test that fails the first fsync of a segment and checks what survives:
//
//	mem := vfs.NewCrashableMem()
//	fs := faultfs.Wrap(mem)
//	fs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
//		if op.Kind == faultfs.Sync && strings.HasSuffix(op.Path, ".seg") {
//			return faultfs.EIO
//		}
//		return faultfs.NoFault
//	}))
//	err := runWorkload(fs) // the code under test, given fs as its vfs.FS
//	if !errors.Is(err, faultfs.ErrInjected) { ... }
//	for _, op := range fs.Ops() {
//		t.Log(op) // #0 Create /l/00000000000000000001.seg, #1 Write ... off=0 len=64, ...
//	}
//	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // only synced data survives
//
// [AtIndex], [OnKind], [Always] and [First] build the common injectors.
package faultfs

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// OpKind is the kind of an operation. The zero value is no kind.
type OpKind int

// The kinds of operation. File-system methods and file methods of the same
// name share a kind (FS.Stat and File.Stat are both Stat).
const (
	Create        OpKind = iota + 1 // FS.Create
	OpenReadWrite                   // FS.OpenReadWrite
	Open                            // FS.Open
	OpenDir                         // FS.OpenDir
	Write                           // File.Write
	WriteAt                         // File.WriteAt
	Read                            // File.Read
	ReadAt                          // File.ReadAt
	Sync                            // File.Sync, File.SyncData and File.SyncTo
	Close                           // File.Close
	Remove                          // FS.Remove
	RemoveAll                       // FS.RemoveAll
	Rename                          // FS.Rename
	Link                            // FS.Link
	MkdirAll                        // FS.MkdirAll
	Truncate                        // Truncate on a file returned by FS
	List                            // FS.List
	Stat                            // FS.Stat and File.Stat
	Lock                            // FS.Lock
	ReuseForWrite                   // FS.ReuseForWrite
	Preallocate                     // File.Preallocate
)

var opKindNames = [...]string{
	Create:        "Create",
	OpenReadWrite: "OpenReadWrite",
	Open:          "Open",
	OpenDir:       "OpenDir",
	Write:         "Write",
	WriteAt:       "WriteAt",
	Read:          "Read",
	ReadAt:        "ReadAt",
	Sync:          "Sync",
	Close:         "Close",
	Remove:        "Remove",
	RemoveAll:     "RemoveAll",
	Rename:        "Rename",
	Link:          "Link",
	MkdirAll:      "MkdirAll",
	Truncate:      "Truncate",
	List:          "List",
	Stat:          "Stat",
	Lock:          "Lock",
	ReuseForWrite: "ReuseForWrite",
	Preallocate:   "Preallocate",
}

// String returns the kind's name, as spelled in Go ("WriteAt").
func (k OpKind) String() string {
	if k > 0 && int(k) < len(opKindNames) {
		return opKindNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op describes one operation, as it was requested.
type Op struct {
	// Index is the 0-based position of the operation among all operations
	// of the FS, in the order they began.
	Index int64
	Kind  OpKind
	// Path is the file or directory the operation names; for an operation
	// on an open file, the name the file was opened with (for a file from
	// ReuseForWrite, the new name). For Rename and Link, the old name.
	Path string
	// NewPath is the new name for Rename, Link and ReuseForWrite; empty for
	// the other kinds.
	NewPath string
	// Offset is where the operation acts: for Write and Read, the file
	// handle's position (the bytes read and written through it so far); for
	// WriteAt, ReadAt and Preallocate, the offset argument; for Truncate,
	// the new size. Zero for the other kinds.
	Offset int64
	// Len is the number of bytes requested (len(p)) for Write, WriteAt,
	// Read and ReadAt, and the length for Preallocate. Zero for the other
	// kinds. A short write writes fewer.
	Len int
}

// String formats the operation for a test log:
// "#3 Write /l/1.seg off=64 len=100", "#7 Rename /a -> /b".
func (o Op) String() string {
	switch o.Kind {
	case Write, WriteAt, Read, ReadAt, Preallocate:
		return fmt.Sprintf("#%d %s %s off=%d len=%d", o.Index, o.Kind, o.Path, o.Offset, o.Len)
	case Truncate:
		return fmt.Sprintf("#%d %s %s size=%d", o.Index, o.Kind, o.Path, o.Offset)
	case Rename, Link, ReuseForWrite:
		return fmt.Sprintf("#%d %s %s -> %s", o.Index, o.Kind, o.Path, o.NewPath)
	default:
		return fmt.Sprintf("#%d %s %s", o.Index, o.Kind, o.Path)
	}
}

// Fault is a kind of injected failure. The package doc has the table of
// what each does.
type Fault int

const (
	// NoFault lets the operation run.
	NoFault Fault = iota
	// ENOSPC fails the operation, without running it, with an error
	// matching syscall.ENOSPC: the disk is full.
	ENOSPC
	// EIO fails the operation, without running it, with an error matching
	// syscall.EIO.
	EIO
	// ShortWrite makes Write and WriteAt write only the first len(p)/2
	// bytes (rounded down: a 1-byte write writes nothing) and return that
	// count with an error matching syscall.EIO, as a write that fails part
	// way does; io.Writer's contract (n < len(p) means err != nil) holds.
	// The error does not match io.ErrShortWrite, which means a short count
	// without an error. On any other operation ShortWrite acts as EIO.
	ShortWrite
)

// String returns the fault's name ("ENOSPC").
func (f Fault) String() string {
	switch f {
	case NoFault:
		return "NoFault"
	case ENOSPC:
		return "ENOSPC"
	case EIO:
		return "EIO"
	case ShortWrite:
		return "ShortWrite"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// errno is the error number a fault reports. Faults this package does not
// define report EIO rather than being ignored: an injector that asked for a
// failure gets one.
func (f Fault) errno() syscall.Errno {
	if f == ENOSPC {
		return syscall.ENOSPC
	}
	return syscall.EIO
}

// injectedError is the error of an injected fault. It matches ErrInjected
// and its errno.
type injectedError struct {
	op    Op
	fault Fault
}

func (e *injectedError) Error() string {
	return fmt.Sprintf("faultfs: injected %s at %s: %v", e.fault, e.op, e.fault.errno())
}

func (e *injectedError) Unwrap() []error {
	return []error{ErrInjected, e.fault.errno()}
}

// Injector decides, for each operation before it runs, whether it fails.
//
// The FS calls Inject for one operation at a time, in Index order, while
// holding its lock: an Injector needs no locking of its own when it serves
// a single FS, and it must not call methods of that FS.
type Injector interface {
	Inject(op Op) Fault
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(op Op) Fault

// Inject returns f(op).
func (f InjectorFunc) Inject(op Op) Fault { return f(op) }

// AtIndex fails exactly the operation whose Index is i, with fault f.
// Indexes count from Wrap, not from when the injector was installed.
func AtIndex(i int64, f Fault) Injector {
	return InjectorFunc(func(op Op) Fault {
		if op.Index == i {
			return f
		}
		return NoFault
	})
}

// OnKind fails the nth (0-based) operation of the given kind that the
// injector sees, with fault f, and no other. It counts from when it is
// installed with SetInjector, and keeps its count if reinstalled.
func OnKind(kind OpKind, nth int, f Fault) Injector {
	var seen atomic.Int64
	return InjectorFunc(func(op Op) Fault {
		if op.Kind == kind && seen.Add(1)-1 == int64(nth) {
			return f
		}
		return NoFault
	})
}

// Always fails every operation of the given kind with fault f: for a disk
// that stays full, Always(Write, ENOSPC). Write and WriteAt are different
// kinds; combine both with [First].
func Always(kind OpKind, f Fault) Injector {
	return InjectorFunc(func(op Op) Fault {
		if op.Kind == kind {
			return f
		}
		return NoFault
	})
}

// First combines injectors: the operation gets the fault of the first
// injector, in argument order, that returns one. Every injector is asked
// about every operation, so the counts of stateful ones such as [OnKind]
// do not depend on the others.
func First(injectors ...Injector) Injector {
	return InjectorFunc(func(op Op) Fault {
		fault := NoFault
		for _, inj := range injectors {
			if f := inj.Inject(op); fault == NoFault {
				fault = f
			}
		}
		return fault
	})
}

// FS is a vfs.FS that records the operations made through it and fails
// those its Injector chooses, passing the rest to the FS it wraps. It is
// safe for concurrent use.
type FS struct {
	inner vfs.FS

	mu sync.Mutex
	// count is the number of operations begun; the next one gets Index
	// count. Invariant: every op in ops and injected has Index < count,
	// and both slices are in increasing Index order.
	count     int64
	recording bool
	injector  Injector
	ops       []Op
	injected  []Op
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns an FS that passes operations to inner, with recording on
// and no injector.
func Wrap(inner vfs.FS) *FS {
	return &FS{inner: inner, recording: true}
}

// SetInjector installs inj to decide the fate of the operations that begin
// from now on; nil means no faults. It may be called while operations are
// running on other goroutines.
func (fs *FS) SetInjector(inj Injector) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.injector = inj
}

// SetRecording turns the record returned by Ops on or off (it starts on).
// Operations are still counted, indexed and offered to the injector while
// it is off, and injected ones are still kept for Injected: switching it
// off only saves memory in long workloads.
func (fs *FS) SetRecording(on bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.recording = on
}

// Ops returns a copy of the recorded operations, in Index order.
func (fs *FS) Ops() []Op {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]Op(nil), fs.ops...)
}

// Count returns the number of operations begun so far, recorded or not.
func (fs *FS) Count() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.count
}

// Injected returns a copy of the operations that were failed by injection,
// in Index order.
func (fs *FS) Injected() []Op {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]Op(nil), fs.injected...)
}

// Inner returns the wrapped FS.
func (fs *FS) Inner() vfs.FS { return fs.inner }

// Unwrap returns the wrapped FS, as vfs.FS requires of wrappers.
func (fs *FS) Unwrap() vfs.FS { return fs.inner }

// begin numbers op, records it and asks the injector about it. It returns
// the numbered op and the fault to apply.
func (fs *FS) begin(op Op) (Op, Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	op.Index = fs.count
	fs.count++
	if fs.recording {
		fs.ops = append(fs.ops, op)
	}
	fault := NoFault
	if fs.injector != nil {
		fault = fs.injector.Inject(op)
	}
	if fault != NoFault {
		fs.injected = append(fs.injected, op)
	}
	return op, fault
}

// check begins op and returns the injected error, or nil if the operation
// should run. It is for every operation but Write and WriteAt, where
// ShortWrite means something else.
func (fs *FS) check(op Op) error {
	op, fault := fs.begin(op)
	if fault == NoFault {
		return nil
	}
	return &injectedError{op: op, fault: fault}
}

// open finishes an operation that returns a file: it wraps the file, or
// returns the error. Some inner file systems (vfs.Default's Create) return
// a non-nil file with an error; that file is not wrapped.
func (fs *FS) open(f vfs.File, err error, path string) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{fs: fs, inner: f, path: path}, nil
}

// Create implements vfs.FS.
func (fs *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(Op{Kind: Create, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.inner.Create(name, category)
	return fs.open(f, err, name)
}

// Link implements vfs.FS.
func (fs *FS) Link(oldname, newname string) error {
	if err := fs.check(Op{Kind: Link, Path: oldname, NewPath: newname}); err != nil {
		return err
	}
	return fs.inner.Link(oldname, newname)
}

// Open implements vfs.FS. The options are applied by the wrapped FS to its
// own file.
func (fs *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.check(Op{Kind: Open, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.inner.Open(name, opts...)
	return fs.open(f, err, name)
}

// OpenReadWrite implements vfs.FS.
func (fs *FS) OpenReadWrite(
	name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption,
) (vfs.File, error) {
	if err := fs.check(Op{Kind: OpenReadWrite, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.inner.OpenReadWrite(name, category, opts...)
	return fs.open(f, err, name)
}

// OpenDir implements vfs.FS.
func (fs *FS) OpenDir(name string) (vfs.File, error) {
	if err := fs.check(Op{Kind: OpenDir, Path: name}); err != nil {
		return nil, err
	}
	f, err := fs.inner.OpenDir(name)
	return fs.open(f, err, name)
}

// Remove implements vfs.FS.
func (fs *FS) Remove(name string) error {
	if err := fs.check(Op{Kind: Remove, Path: name}); err != nil {
		return err
	}
	return fs.inner.Remove(name)
}

// RemoveAll implements vfs.FS.
func (fs *FS) RemoveAll(name string) error {
	if err := fs.check(Op{Kind: RemoveAll, Path: name}); err != nil {
		return err
	}
	return fs.inner.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *FS) Rename(oldname, newname string) error {
	if err := fs.check(Op{Kind: Rename, Path: oldname, NewPath: newname}); err != nil {
		return err
	}
	return fs.inner.Rename(oldname, newname)
}

// ReuseForWrite implements vfs.FS. The returned file is named newname in
// the operations made on it.
func (fs *FS) ReuseForWrite(
	oldname, newname string, category vfs.DiskWriteCategory,
) (vfs.File, error) {
	if err := fs.check(Op{Kind: ReuseForWrite, Path: oldname, NewPath: newname}); err != nil {
		return nil, err
	}
	f, err := fs.inner.ReuseForWrite(oldname, newname, category)
	return fs.open(f, err, newname)
}

// MkdirAll implements vfs.FS.
func (fs *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.check(Op{Kind: MkdirAll, Path: dir}); err != nil {
		return err
	}
	return fs.inner.MkdirAll(dir, perm)
}

// Lock implements vfs.FS. Closing the returned lock is not an operation.
func (fs *FS) Lock(name string) (io.Closer, error) {
	if err := fs.check(Op{Kind: Lock, Path: name}); err != nil {
		return nil, err
	}
	return fs.inner.Lock(name)
}

// List implements vfs.FS.
func (fs *FS) List(dir string) ([]string, error) {
	if err := fs.check(Op{Kind: List, Path: dir}); err != nil {
		return nil, err
	}
	return fs.inner.List(dir)
}

// Stat implements vfs.FS.
func (fs *FS) Stat(name string) (vfs.FileInfo, error) {
	if err := fs.check(Op{Kind: Stat, Path: name}); err != nil {
		return nil, err
	}
	return fs.inner.Stat(name)
}

// PathBase implements vfs.FS; it is not an operation.
func (fs *FS) PathBase(path string) string { return fs.inner.PathBase(path) }

// PathJoin implements vfs.FS; it is not an operation.
func (fs *FS) PathJoin(elem ...string) string { return fs.inner.PathJoin(elem...) }

// PathDir implements vfs.FS; it is not an operation.
func (fs *FS) PathDir(path string) string { return fs.inner.PathDir(path) }

// GetDiskUsage implements vfs.FS; it is not an operation.
func (fs *FS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	return fs.inner.GetDiskUsage(path)
}
