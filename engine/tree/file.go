package tree

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/tlog"
)

// magic opens every tree file; version is the format version written.
const (
	magic   = "ANNLTREE"
	version = 1
)

// File is a ledger's tree file (see the package doc). It is safe for one
// writer (Append, Truncate, Sync) and concurrent readers (Root, Leaf,
// proofs), which see the leaves appended before they were called.
type File struct {
	fs     vfs.FS
	path   string
	ledger uint32

	// size is the number of leaves whose stored hashes are all in the
	// file, published after their write: a reader that loads it can read
	// every hash of those leaves.
	size atomic.Uint64

	// mu guards the file handle, which Truncate may replace (on a file
	// system whose files cannot be truncated in place): readers and
	// Append hold it shared, Truncate and Close exclusively.
	mu     sync.RWMutex
	file   vfs.File
	closed bool

	// The writer's state, under wmu.
	wmu sync.Mutex
	// end is the file's length in bytes. Invariant: end >=
	// HeaderSize + 32*StoredHashCount(size); more is a torn tail that the
	// next Append or Truncate cuts.
	end   int64
	front frontier
	next  frontier // Append's copy of front
	buf   []byte   // Append's write buffer, reused
}

// offset returns the byte offset of stored hash x.
func offset(x int64) int64 { return HeaderSize + 32*x }

// storedLen returns the length of a tree file of n leaves.
func storedLen(n uint64) int64 { return offset(tlog.StoredHashCount(int64(n))) }

// FileLen returns the length in bytes of a tree file of n leaves: its
// header and every stored hash of those leaves. The first FileLen(n)
// bytes of a tree file of n leaves or more are a tree file of n leaves
// (a backup copies that prefix).
func FileLen(n uint64) int64 { return storedLen(n) }

func header(ledger uint32) []byte {
	h := make([]byte, HeaderSize)
	copy(h, magic)
	binary.BigEndian.PutUint32(h[8:], version)
	binary.BigEndian.PutUint32(h[12:], ledger)
	return h
}

// Create creates an empty tree file at path for the ledger (its header
// written and synced) and returns it open. A file already at path is
// replaced.
func Create(fs vfs.FS, path string, ledger uint32) (*File, error) {
	file, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("tree: create %s: %w", path, err)
	}
	if _, err := file.WriteAt(header(ledger), 0); err != nil {
		file.Close()
		return nil, fmt.Errorf("tree: write header of %s: %w", path, err)
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return nil, fmt.Errorf("tree: sync %s: %w", path, err)
	}
	if err := syncDir(fs, fs.PathDir(path)); err != nil {
		file.Close()
		return nil, err
	}
	f := &File{fs: fs, path: path, ledger: ledger, file: file, end: HeaderSize}
	f.front.reset(0, f)
	return f, nil
}

// OpenFile opens the tree file at path, checking its header (ErrCorrupt
// if it is not a tree file of this ledger). Size is the count of leaves
// whose stored hashes are all in the file; bytes after them (a torn
// write) are ignored, and cut by the next Truncate or Append.
func OpenFile(fs vfs.FS, path string, ledger uint32) (*File, error) {
	// OpenReadWrite creates a missing file: a missing tree must be
	// rebuilt, not taken for an empty one.
	if _, err := fs.Stat(path); err != nil {
		return nil, fmt.Errorf("tree: open %s: %w", path, err)
	}
	file, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("tree: open %s: %w", path, err)
	}
	return open(fs, path, ledger, file)
}

// OpenFileReadOnly opens the tree file at path as OpenFile does, but for
// reading only: nothing is created, cut or written (Append, Truncate and
// Sync fail), so that a reader (verify) changes no byte.
func OpenFileReadOnly(fs vfs.FS, path string, ledger uint32) (*File, error) {
	file, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tree: open %s: %w", path, err)
	}
	return open(fs, path, ledger, file)
}

// open reads the header and size of the tree file at path, open as file,
// which it closes if it fails.
func open(fs vfs.FS, path string, ledger uint32, file vfs.File) (f *File, err error) {
	defer func() {
		if err != nil {
			file.Close()
		}
	}()
	info, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("tree: stat %s: %w", path, err)
	}
	end := info.Size()
	if end < HeaderSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the %d-byte header", ErrCorrupt, path, end, HeaderSize)
	}
	h := make([]byte, HeaderSize)
	if n, err := file.ReadAt(h, 0); n < HeaderSize {
		return nil, fmt.Errorf("tree: read header of %s: %w", path, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	switch want := header(ledger); {
	case string(h[:8]) != magic:
		return nil, fmt.Errorf("%w: %s: magic %q, want %q", ErrCorrupt, path, h[:8], magic)
	case binary.BigEndian.Uint32(h[8:]) != version:
		return nil, fmt.Errorf("%w: %s: format version %d, want %d", ErrCorrupt, path, binary.BigEndian.Uint32(h[8:]), version)
	case binary.BigEndian.Uint32(h[12:]) != ledger:
		return nil, fmt.Errorf("%w: %s: ledger %08x in the header, want %08x", ErrCorrupt, path, binary.BigEndian.Uint32(h[12:]), ledger)
	case !bytes.Equal(h[16:], want[16:]):
		return nil, fmt.Errorf("%w: %s: header bytes 16-31 are %x, want zeros", ErrCorrupt, path, h[16:])
	}
	f = &File{fs: fs, path: path, ledger: ledger, file: file, end: end}
	n := leavesIn((end - HeaderSize) / 32)
	if err := f.load(n); err != nil {
		return nil, err
	}
	f.size.Store(n)
	return f, nil
}

// CheckFile reports, as an error saying what it found, whether the file
// this File has open was written over in place (the same file, as `cp`
// over it leaves it) since it was opened: its header is no longer this
// ledger's, or it is shorter than what was written to it (the header
// and every stored hash of Size leaves). It costs a read of the header
// and a stat: the cheap checks a writer's watch makes at an interval. A
// file replaced by another (renamed over it, removed) is not seen here:
// the handle holds the one that was opened. Nil once the File is closed.
func (f *File) CheckFile() error {
	// The size before the file's length: a leaf's hashes are written
	// before Size counts it, and Truncate lowers Size before it cuts.
	n := f.size.Load()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return nil
	}
	h := make([]byte, HeaderSize)
	if k, _ := f.file.ReadAt(h, 0); k < HeaderSize || !bytes.Equal(h, header(f.ledger)) {
		return fmt.Errorf("%s no longer holds the header of this ledger's tree file (another file, or other bytes, written over it in place)", f.path)
	}
	info, err := f.file.Stat()
	if err != nil {
		return fmt.Errorf("%s cannot be checked (%v)", f.path, err)
	}
	if want := storedLen(n); info.Size() < want {
		return fmt.Errorf("%s is %d bytes; %d were written to it, %d leaves (cut, or an older copy written over it in place)", f.path, info.Size(), want, n)
	}
	return nil
}

// leavesIn returns the largest n with StoredHashCount(n) <= hashes.
func leavesIn(hashes int64) uint64 {
	// StoredHashCount is increasing, and StoredHashCount(n) >= n.
	lo, hi := uint64(0), uint64(hashes+1) // StoredHashCount(lo) <= hashes < StoredHashCount(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if tlog.StoredHashCount(int64(mid)) <= hashes {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// load makes the writer's frontier that of the first n leaves, reading
// it from the file. f.end must cover them.
func (f *File) load(n uint64) error {
	f.front.reset(n, f)
	return f.front.load(f)
}

// ReadHashes implements tlog.HashReader by reading the file: one ReadAt
// per hash, and the adjacent ones together.
func (f *File) ReadHashes(indexes []int64) ([]Hash, error) {
	out := make([]Hash, len(indexes))
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return nil, fmt.Errorf("tree: %s: %w", f.path, errClosed)
	}
	var buf [32 * 16]byte
	for i := 0; i < len(indexes); {
		j := i + 1
		for j < len(indexes) && j-i < 16 && indexes[j] == indexes[j-1]+1 {
			j++
		}
		b := buf[:32*(j-i)]
		// (A ReadAt that fills b may still say io.EOF at the end.)
		if n, err := f.file.ReadAt(b, offset(indexes[i])); n < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: %s: stored hashes %d-%d (bytes %d-%d) past the end of the file", ErrCorrupt, f.path, indexes[i], indexes[j-1], offset(indexes[i]), offset(indexes[j-1])+32)
			}
			return nil, fmt.Errorf("tree: read %s at %d: %w", f.path, offset(indexes[i]), err)
		}
		for k := i; k < j; k++ {
			copy(out[k][:], b[32*(k-i):])
		}
		i = j
	}
	return out, nil
}

var errClosed = errors.New("file closed")

// Size returns the number of leaves.
func (f *File) Size() uint64 { return f.size.Load() }

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Append adds leaves (leaf hashes, in order) after the last one, writing
// their stored hashes with one write, not synced (64 bytes a leaf, about:
// give it the leaves of one append batch, not of a whole import). If the
// write fails, Size is unchanged and what it wrote is cut by the next
// Append or Truncate.
func (f *File) Append(leaves []Hash) error {
	if len(leaves) == 0 {
		return nil
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	n := f.size.Load()
	if n+uint64(len(leaves)) > maxSize {
		return fmt.Errorf("%w: %s: %d leaves after %d", ErrRange, f.path, len(leaves), n)
	}
	at := storedLen(n)
	if f.end > at {
		if err := f.cut(at, false); err != nil {
			return err
		}
	}
	// Work on a copy of the frontier, kept only if the write succeeds.
	// (f.next is a field so that the copy is not allocated: it is
	// passed to tlog as a HashReader.)
	f.next = f.front
	front := &f.next
	// Each leaf adds itself and, on average, one interior node: grown
	// once here, not doubled over and over by append for a large batch.
	buf := slices.Grow(f.buf[:0], 2*len(leaves)*len(Hash{}))
	for _, leaf := range leaves {
		hashes, err := front.add(leaf)
		if err != nil {
			return fmt.Errorf("tree: append to %s: %w", f.path, err)
		}
		for _, h := range hashes {
			buf = append(buf, h[:]...)
		}
	}
	f.buf = buf
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return fmt.Errorf("tree: append to %s: %w", f.path, errClosed)
	}
	_, err := f.file.WriteAt(buf, at)
	f.mu.RUnlock()
	if err != nil {
		// What was written is past size: a torn tail, cut by the next
		// Append or Truncate.
		f.end = max(f.end, at+int64(len(buf)))
		return fmt.Errorf("tree: write %d bytes to %s at %d: %w", len(buf), f.path, at, err)
	}
	if cap(f.buf) > 1<<20 && len(buf) < cap(f.buf)/4 {
		// Large, and mostly unused by this append: not kept for
		// small ones. Appends of large batches (an import's) keep it.
		f.buf = nil
	}
	f.front = *front
	f.end = at + int64(len(buf))
	f.size.Store(front.n)
	return nil
}

// Sync makes every leaf appended so far durable.
func (f *File) Sync() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return fmt.Errorf("tree: sync %s: %w", f.path, errClosed)
	}
	if err := f.file.Sync(); err != nil {
		return fmt.Errorf("tree: sync %s: %w", f.path, err)
	}
	return nil
}

// Truncate cuts the tree back to n leaves (n <= Size), and syncs the
// file. It is for recovery: a reader of leaves past n running meanwhile
// may fail (ErrCorrupt, reading past the end of the file).
func (f *File) Truncate(n uint64) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if size := f.size.Load(); n > size {
		return fmt.Errorf("%w: %s: truncate to %d leaves, the tree has %d", ErrRange, f.path, n, size)
	}
	f.size.Store(n)
	err := f.cut(storedLen(n), true)
	// Whether or not the cut failed, the frontier must be that of n
	// leaves (a failed cut leaves a tail that the next Append cuts).
	if lerr := f.load(n); err == nil {
		err = lerr
	}
	return err
}

// cut cuts the file to size bytes (synced if sync). vfs.File has no
// Truncate; files of vfs.Default have one (an embedded *os.File). Where
// the file has none (a memory file system), the first size bytes are
// copied to a new file that replaces the old one (synced: a rename is
// durable only so).
func (f *File) cut(size int64, sync bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("tree: truncate %s: %w", f.path, errClosed)
	}
	if t, ok := f.file.(interface{ Truncate(int64) error }); ok {
		err := t.Truncate(size)
		if err == nil {
			f.end = size
			if sync {
				if err := f.file.Sync(); err != nil {
					return fmt.Errorf("tree: sync %s: %w", f.path, err)
				}
			}
			return nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("tree: truncate %s to %d bytes: %w", f.path, size, err)
		}
	}
	tmp := f.path + ".tmp"
	if err := copyPrefix(f.fs, f.file, tmp, size); err != nil {
		f.fs.Remove(tmp)
		return fmt.Errorf("tree: truncate %s to %d bytes: %w", f.path, size, err)
	}
	if err := f.fs.Rename(tmp, f.path); err != nil {
		f.fs.Remove(tmp)
		return fmt.Errorf("tree: truncate %s: rename %s: %w", f.path, tmp, err)
	}
	if err := syncDir(f.fs, f.fs.PathDir(f.path)); err != nil {
		return err
	}
	file, err := f.fs.OpenReadWrite(f.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("tree: reopen %s: %w", f.path, err)
	}
	f.file.Close()
	f.file = file
	f.end = size
	return nil
}

// copyPrefix writes the first size bytes of src to a new file dst, synced.
func copyPrefix(fs vfs.FS, src vfs.File, dst string, size int64) error {
	out, err := fs.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(src, 0, size)); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncDir syncs a directory, making the entries created or renamed in it
// durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("tree: open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("tree: sync directory %s: %w", dir, err)
	}
	return d.Close()
}

// Root returns the root hash of the tree of the first n leaves
// (1 <= n <= Size).
func (f *File) Root(n uint64) (Hash, error) {
	if n < 1 || n > f.Size() {
		return Hash{}, fmt.Errorf("%w: %s: root of size %d, the tree has %d leaves", ErrRange, f.path, n, f.Size())
	}
	return tlog.TreeHash(int64(n), f)
}

// Leaf returns the leaf hash of leaf i (i < Size).
func (f *File) Leaf(i uint64) (Hash, error) {
	if i >= f.Size() {
		return Hash{}, fmt.Errorf("%w: %s: leaf %d, the tree has %d leaves", ErrRange, f.path, i, f.Size())
	}
	h, err := f.ReadHashes([]int64{tlog.StoredHashIndex(0, int64(i))})
	if err != nil {
		return Hash{}, err
	}
	return h[0], nil
}

// InclusionProof returns the RFC 9162 inclusion proof of leaf i in the
// tree of size n (i < n <= Size).
func (f *File) InclusionProof(i, n uint64) ([]Hash, error) {
	if i >= n || n > f.Size() {
		return nil, fmt.Errorf("%w: %s: inclusion proof of leaf %d in the tree of size %d, the tree has %d leaves", ErrRange, f.path, i, n, f.Size())
	}
	p, err := tlog.ProveRecord(int64(n), int64(i), f)
	if err != nil {
		return nil, err
	}
	return []Hash(p), nil
}

// ConsistencyProof returns the RFC 9162 consistency proof between the
// trees of sizes m and n (1 <= m <= n <= Size).
func (f *File) ConsistencyProof(m, n uint64) ([]Hash, error) {
	if m < 1 || m > n || n > f.Size() {
		return nil, fmt.Errorf("%w: %s: consistency proof from size %d to %d, the tree has %d leaves", ErrRange, f.path, m, n, f.Size())
	}
	p, err := tlog.ProveTree(int64(n), int64(m), f)
	if err != nil {
		return nil, err
	}
	return []Hash(p), nil
}

// Close closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if err := f.file.Close(); err != nil {
		return fmt.Errorf("tree: close %s: %w", f.path, err)
	}
	return nil
}
