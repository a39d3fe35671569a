package segment

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FirstOffset is the offset of the first record of a segment.
const FirstOffset = headerSize

// segFile is the read handle of one segment: the file, and where the OS
// allows it (mmap_unix.go) a read-only shared memory map of it, from
// which reads copy their bytes instead of making a pread system call
// each. The Log keeps the active segment's open until it closes, and
// those of at most Options.MaxOpenSegments sealed segments, the least
// recently used closed when another is opened (readFile): a ledger of
// many segments holds a bounded number of descriptors and maps. A handle
// is used between readFile, which counts its holder, and release; an
// evicted handle is closed once its last holder releases it.
//
// The map changes where the bytes come from, not what is checked: every
// record read through it is verified as one read with pread is. Nothing
// hands out a slice of the map: ReadAt copies into the caller's buffer,
// so no byte outlives the map (Close unmaps). A file cut or replaced
// under the map (by hand, or by a writer's recovery beside a read-only
// Log) makes a read of the pages past its new end fault (SIGBUS); the
// fault is caught (debug.SetPanicOnFault) and the read is made again
// with pread, which sees the file as it now is: a short read (an error
// naming the file and offset, or the "look again" of Follow) or other
// bytes, which the checks then refuse.
type segFile struct {
	f    vfs.File
	path string // for errors
	// fi is the identity of the file f holds, for the watch of a
	// read-only Log (checkFilesRO); nil if not watched.
	fi os.FileInfo
	// mu is held for reading while the map is read, and for writing by
	// Close to unmap it.
	mu sync.RWMutex
	m  []byte // the map of the file's first len(m) bytes; nil if none
	// final is the size of the segment once it is sealed (its size is
	// then final), 0 before it is known: a read of a sealed segment asks
	// the file system nothing.
	final atomic.Int64
	// refs counts the holders (readFile to release); evicted says that
	// the Log's cache let go of it: the last holder closes it.
	refs      atomic.Int32
	evicted   atomic.Bool
	closeOnce sync.Once
	// used is the Log's use clock (Log.useClock) when it was last used:
	// the least recently used sealed segment is evicted first.
	used atomic.Uint64
	// dropped is the offset up to which a sequential reader has passed
	// the map when passed last gave its pages back.
	dropped atomic.Int64
}

// dropChunk is how far a sequential reader of a map (the scanner of a
// read-only Log's Follow) goes before the pages it passed are given back
// (segFile.passed).
const dropChunk = 8 << 20

// pageMask rounds an offset down to the start of its page.
var pageMask = ^int64(os.Getpagesize() - 1)

// passed tells the handle that a sequential reader has read everything
// before off. Every dropChunk bytes, the pages of the map before off
// leave the process's resident set (dontNeed): without it, a follower
// kept resident every page of the active segment it had read, up to the
// segment size (64 MiB by default), and of a sealed one until it passed
// its end. Pages that random reads brought in before off go too: they
// are file pages, still in the page cache, and a read maps them again.
func (s *segFile) passed(off int64) {
	d := s.dropped.Load()
	if off-d < dropChunk || !s.dropped.CompareAndSwap(d, off) {
		return
	}
	s.mu.RLock()
	if end := min(off, int64(len(s.m))) & pageMask; end > 0 {
		dontNeed(s.m[:end])
	}
	s.mu.RUnlock()
}

// release ends a use of the handle that readFile began.
func (s *segFile) release() {
	if s.refs.Add(-1) == 0 && s.evicted.Load() {
		s.closeOnce.Do(func() { s.close() })
	}
}

// evict marks the handle as let go by the cache, and closes it if nobody
// holds it (else its last holder does). Called with Log.readMu held.
func (s *segFile) evict() {
	s.evicted.Store(true)
	if s.refs.Load() == 0 {
		s.closeOnce.Do(func() { s.close() })
	}
}

// ReadAt reads len(b) bytes at off: from the map when it covers them,
// else (or if the map faults) with the file's ReadAt.
func (s *segFile) ReadAt(b []byte, off int64) (int, error) {
	s.mu.RLock()
	if off >= 0 && off <= int64(len(s.m))-int64(len(b)) {
		if n, ok := copyMapped(b, s.m, off); ok {
			s.mu.RUnlock()
			return n, nil
		}
	}
	s.mu.RUnlock()
	return s.f.ReadAt(b, off)
}

// copyMapped copies m[off:] into dst. It reports false if the copy
// faulted: a page of m past the end of its file (cut under the map).
func copyMapped(dst, m []byte, off int64) (n int, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			mapFaults.Add(1)
			n, ok = 0, false
		}
	}()
	return copy(dst, m[off:]), true
}

// mapFaults counts the faults copyMapped caught (tests look at it).
var mapFaults atomic.Int64

// close unmaps the file and closes it.
func (s *segFile) close() error {
	s.mu.Lock()
	if s.m != nil {
		munmap(s.m)
		s.m = nil
	}
	s.mu.Unlock()
	return s.f.Close()
}

// mappable reports whether segments of fs may be mapped: files of the
// operating system's file system, reached as vfs.Default or through an
// FS that says so (the engine's). A wrapper such as faultfs, whose reads
// must go through it, is not.
func mappable(fs vfs.FS) bool {
	if !mapSupported {
		return false
	}
	if m, ok := fs.(interface{ MapSegments() bool }); ok {
		return m.MapSegments()
	}
	return fs == vfs.Default
}

// DefaultMaxOpenSegments is Options.MaxOpenSegments's default: how many
// sealed segments of a Log are kept open (a descriptor and a memory map
// each) for reads, besides the active one: 4 GiB of a ledger at the
// default segment size. A read of a segment that is not open opens (and
// maps) it, and closes another once the bound is reached: some 20 µs,
// against some 3 µs for a Get (BenchmarkReadSegments), so the bound is
// set above the segments that random reads usually span. Where the
// process may not open more files (EMFILE, ENFILE), the segments that no
// read holds are closed and the open is tried again: a ledger of more
// segments than the process may open files is read all the same.
const DefaultMaxOpenSegments = 64

// readFile returns the read handle of segment n, opened (and mapped) if
// it is not open, counting the caller as a holder: the caller calls
// release when done with it. Opening a sealed segment beyond
// Options.MaxOpenSegments evicts the least recently used other one.
func (l *Log) readFile(n uint64) (*segFile, error) {
	l.readMu.RLock()
	s, ok := l.readers[n]
	closed := l.readers == nil
	if ok {
		s.refs.Add(1)
		if c := l.useClock.Load(); s.used.Load() != c {
			s.used.Store(c)
		}
	}
	l.readMu.RUnlock()
	if ok {
		return s, nil
	}
	if closed {
		return nil, ErrClosed
	}
	l.readMu.Lock()
	defer l.readMu.Unlock()
	if s, ok := l.readers[n]; ok {
		s.refs.Add(1)
		return s, nil
	}
	if l.readers == nil {
		return nil, ErrClosed
	}
	path := l.fs.PathJoin(l.dir, segmentName(n))
	var before os.FileInfo
	if l.ro != nil && l.files != nil {
		before, _ = os.Lstat(path)
	}
	f, err := l.fs.Open(path)
	if err != nil && tooManyFiles(err) {
		// Fewer files than the bound may be open: the idle ones go.
		l.evictIdleLocked()
		f, err = l.fs.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", path, err)
	}
	s = &segFile{f: f, path: path}
	if before != nil {
		// The identity of the file the handle holds, for checkFilesRO:
		// the path's before and after the open, if they agree (a
		// vfs.File's Stat is not an os.FileInfo of the os package).
		if after, err := os.Lstat(path); err == nil && os.SameFile(before, after) {
			s.fi = after
		}
	}
	l.mapFile(n, s)
	s.refs.Add(1)
	s.used.Store(l.useClock.Add(1))
	l.readers[n] = s
	l.evictLocked(n)
	return s, nil
}

// evictLocked evicts the least recently used sealed segments' handles
// (other than keep's) while more than Options.MaxOpenSegments are open.
// Called with readMu held for writing.
func (l *Log) evictLocked(keep uint64) {
	active := l.committed.Load().segNum
	for {
		sealed := 0
		var victim uint64
		var oldest uint64 = math.MaxUint64
		for n, s := range l.readers {
			if n >= active {
				continue
			}
			sealed++
			if u := s.used.Load(); n != keep && u < oldest {
				victim, oldest = n, u
			}
		}
		if sealed <= l.opts.MaxOpenSegments || victim == 0 {
			return
		}
		l.readers[victim].evict()
		delete(l.readers, victim)
	}
}

// evictIdleLocked evicts the handles of the sealed segments that no read
// holds. Called with readMu held for writing.
func (l *Log) evictIdleLocked() {
	active := l.committed.Load().segNum
	for n, s := range l.readers {
		if n < active && s.refs.Load() == 0 {
			s.evict()
			delete(l.readers, n)
		}
	}
}

// tooManyFiles reports whether err says that the process (EMFILE) or the
// system (ENFILE) may not open more files.
func tooManyFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// dropFile closes the read handle of segment n (once its holders release
// it), which unmaps it: its pages leave the process's memory. For a
// segment that readers have passed (sealed by the writer's rotation,
// read to its end by a read-only Log's Follow); a later read opens it
// again.
func (l *Log) dropFile(n uint64) {
	l.readMu.Lock()
	if s, ok := l.readers[n]; ok {
		s.evict()
		delete(l.readers, n)
	}
	l.readMu.Unlock()
}

// mapFile maps segment n into s if it can: a sealed segment at its size,
// the active one (where mapGrowing) at the larger of its size and the
// segment size limit, so that the map covers it as it grows. A failed
// map (out of address space, a file system that cannot) leaves reads to
// pread.
func (l *Log) mapFile(n uint64, s *segFile) {
	if !l.mapped {
		return
	}
	fd := s.f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	st, err := s.f.Stat()
	if err != nil {
		return
	}
	size := st.Size()
	if n >= l.committed.Load().segNum {
		if !mapGrowing {
			return
		}
		size = max(size, l.opts.SegmentSize)
	}
	if size <= 0 || size > maxMapSize {
		return
	}
	if m, err := mmap(fd, size); err == nil {
		s.m = m
	}
}

// maxMapSize bounds one map: a segment is at most 1 GiB plus one batch.
const maxMapSize = maxSegmentSize + maxBatchBytes

// Active returns the file name (in Dir) of the active segment and the
// end of its committed records, which readers may see. The file may be
// longer: a writer keeps it written with zeros ahead of its records
// (unwritten space, docs/format.md §6), so its size is not the records'.
func (l *Log) Active() (name string, end int64) {
	pos := l.committed.Load()
	return segmentName(pos.segNum), pos.end
}

// committedSize returns how many bytes of segment n readers may see: all
// of a sealed segment (sealed is then true: the size is final), the
// committed part of the active one.
func (l *Log) committedSize(n uint64, s *segFile) (size int64, sealed bool, err error) {
	pos := l.committed.Load()
	switch {
	case n == pos.segNum:
		return pos.end, false, nil
	case n > pos.segNum || n == 0:
		return 0, false, fmt.Errorf("segment: segment %d does not exist (the last is %d)", n, pos.segNum)
	}
	if size := s.final.Load(); size > 0 {
		return size, true, nil
	}
	st, err := s.f.Stat()
	if err != nil {
		return 0, false, err
	}
	s.final.Store(st.Size())
	return st.Size(), true, nil
}

// ReadAt reads the committed record at loc, checking its frame CRC. The
// returned Record owns its memory.
func (l *Log) ReadAt(loc Location) (*Record, error) {
	s, err := l.readFile(loc.Segment)
	if err != nil {
		return nil, err
	}
	defer s.release()
	size, _, err := l.committedSize(loc.Segment, s)
	if err != nil {
		return nil, err
	}
	return readRecord(s, s.path, loc, size)
}

// Iterator reads committed records forwards from a location, across
// segments, and checks each frame's CRC and chain link. It sees records as
// they are committed: Next returns false at the committed end, and may
// return true again after more appends. It is not safe for concurrent use.
type Iterator struct {
	l      *Log
	seg    uint64
	off    int64
	r      *blockReader
	rec    Record
	loc    Location
	err    error
	prevID [16]byte
	have   bool // prevID is known
	// f is the read handle of segment fSeg; sealed its size once it is
	// known to be final (-1 before), so that a walk of a sealed segment
	// asks the file system nothing per record.
	f      *segFile
	fSeg   uint64
	sealed int64
	// cleanup releases f if the Iterator is dropped without Close.
	cleanup    runtime.Cleanup
	hasCleanup bool
}

// blockReader is a small forward reader over a segment, refilled with ReadAt so
// that it can read past a committed end that moves.
type blockReader struct {
	f     io.ReaderAt
	buf   []byte
	start int64 // file offset of buf[0]
}

// NewIterator returns an Iterator that starts at offset off of segment seg:
// the start of a record, or the end of one to read what follows it (for
// the whole ledger: segment 1, offset FirstOffset).
func (l *Log) NewIterator(seg uint64, off int64) *Iterator {
	return &Iterator{l: l, seg: seg, off: off}
}

// Close lets go of the segment the Iterator is reading (its handle, which
// the Log may then close: see Options.MaxOpenSegments). The Iterator may
// be used again: Next opens it again. An Iterator that is dropped
// without Close lets go of it when it is garbage collected.
func (it *Iterator) Close() {
	if it.f != nil {
		it.f.release()
		it.f, it.r = nil, nil
		if it.hasCleanup {
			it.cleanup.Stop()
			it.hasCleanup = false
		}
	}
}

// Next advances to the next committed record. It returns false at the
// committed end or on error (see Err).
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	for {
		if it.f == nil || it.fSeg != it.seg {
			it.Close()
			f, err := it.l.readFile(it.seg)
			if err != nil {
				it.err = err
				return false
			}
			it.f, it.fSeg, it.sealed = f, it.seg, -1
			it.cleanup, it.hasCleanup = runtime.AddCleanup(it, (*segFile).release, f), true
		}
		size := it.sealed
		if size < 0 {
			var sealed bool
			var err error
			if size, sealed, err = it.l.committedSize(it.seg, it.f); err != nil {
				it.err = err
				return false
			}
			if sealed {
				it.sealed = size
			}
		}
		if it.off < size {
			return it.read(it.f, size)
		}
		if it.seg >= it.l.committed.Load().segNum {
			return false
		}
		it.seg, it.off, it.r = it.seg+1, headerSize, nil
	}
}

func (it *Iterator) read(f *segFile, size int64) bool {
	if it.r == nil || it.r.f != f.f {
		// Sequential reads go through pread in 256 KiB blocks, not the
		// map: a block read costs one system call for ~800 records
		// already, and reading a whole ledger through the map faulted in
		// every page (a rebuild of 10^7 events: 22.3 s and 2.6 GB of
		// RSS, against 14.9 s and ~100 MB).
		it.r = &blockReader{f: f.f}
	}
	hdr, err := it.r.bytes(it.off, frameSize, size)
	if err != nil {
		it.err = it.readError(err, frameSize, size)
		return false
	}
	fi := readFrameInfo(hdr)
	n := int64(frameSize) + int64(fi.length)
	frame, err := it.r.bytes(it.off, n, size)
	if err != nil {
		it.err = it.readError(err, n, size)
		return false
	}
	if got := frameCRC(frame); got != fi.crc {
		it.err = &CorruptionError{File: segmentName(it.seg), Offset: it.off, Problem: "frame CRC mismatch", Expected: fmt.Sprintf("%08x", got), Found: fmt.Sprintf("%08x", fi.crc)}
		return false
	}
	if err := decodePayload(frame[frameSize:], &it.rec); err != nil {
		it.err = &CorruptionError{File: segmentName(it.seg), Offset: it.off, Problem: err.Error()}
		return false
	}
	if it.have && it.rec.Prev != it.prevID {
		it.err = &CorruptionError{File: segmentName(it.seg), Offset: it.off, Problem: "chain broken: previous ID differs from the record before", Expected: fmt.Sprintf("%x", it.prevID), Found: it.rec.Prev.String()}
		return false
	}
	it.prevID, it.have = it.rec.ID, true
	it.loc = Location{Segment: it.seg, Offset: it.off, Size: n}
	it.off += n
	return true
}

// readError is the error of a failed read of n bytes at it.off, in a
// segment whose records end at size. The committed records of a segment
// end exactly at size, so a frame that runs past it (or a file shorter
// than it) is corruption; other errors are the file system's.
func (it *Iterator) readError(err error, n, size int64) error {
	if err == io.ErrUnexpectedEOF {
		return &CorruptionError{File: segmentName(it.seg), Offset: it.off, Problem: "frame runs past the end of the segment's records",
			Expected: fmt.Sprintf("%d bytes", n), Found: fmt.Sprintf("%d before the end at %d", max(size-it.off, 0), size)}
	}
	return fmt.Errorf("segment: %s at %d: frame of %d bytes: %w", segmentName(it.seg), it.off, n, err)
}

// bytes returns n bytes at off, reading ahead in large blocks.
func (b *blockReader) bytes(off, n, limit int64) ([]byte, error) {
	if off+n > limit {
		return nil, io.ErrUnexpectedEOF
	}
	if off >= b.start && off+n <= b.start+int64(len(b.buf)) {
		return b.buf[off-b.start : off-b.start+n], nil
	}
	want := max(n, scanChunk)
	want = min(want, limit-off)
	if int64(cap(b.buf)) < want {
		b.buf = make([]byte, want)
	}
	b.buf = b.buf[:want]
	if m, err := b.f.ReadAt(b.buf, off); int64(m) < want {
		b.buf = b.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	b.start = off
	if s, ok := b.f.(*segFile); ok {
		// What is before off was read.
		s.passed(off)
	}
	return b.buf[:n], nil
}

// Record returns the current record. Its slices are valid until Next.
func (it *Iterator) Record() *Record { return &it.rec }

// Location returns where the current record is.
func (it *Iterator) Location() Location { return it.loc }

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.err }
