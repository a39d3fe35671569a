package segment

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FirstOffset is the offset of the first record of a segment.
const FirstOffset = headerSize

// readFile returns a read handle of segment n, opened once and kept.
func (l *Log) readFile(n uint64) (vfs.File, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	if f, ok := l.readers[n]; ok {
		return f, nil
	}
	if l.readers == nil {
		return nil, ErrClosed
	}
	path := l.fs.PathJoin(l.dir, segmentName(n))
	f, err := l.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", path, err)
	}
	l.readers[n] = f
	return f, nil
}

// committedSize returns how many bytes of segment n readers may see: all
// of a sealed segment (sealed is then true: the size is final), the
// committed part of the active one.
func (l *Log) committedSize(n uint64, f vfs.File) (size int64, sealed bool, err error) {
	pos := l.committed.Load()
	switch {
	case n == pos.segNum:
		return pos.end, false, nil
	case n > pos.segNum || n == 0:
		return 0, false, fmt.Errorf("segment: segment %d does not exist (the last is %d)", n, pos.segNum)
	}
	st, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	return st.Size(), true, nil
}

// ReadAt reads the committed record at loc, checking its frame CRC. The
// returned Record owns its memory.
func (l *Log) ReadAt(loc Location) (*Record, error) {
	f, err := l.readFile(loc.Segment)
	if err != nil {
		return nil, err
	}
	size, _, err := l.committedSize(loc.Segment, f)
	if err != nil {
		return nil, err
	}
	return readRecord(f, l.fs.PathJoin(l.dir, segmentName(loc.Segment)), loc, size)
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
	f      vfs.File
	fSeg   uint64
	sealed int64
}

// blockReader is a small forward reader over a segment, refilled with ReadAt so
// that it can read past a committed end that moves.
type blockReader struct {
	f     vfs.File
	buf   []byte
	start int64 // file offset of buf[0]
}

// NewIterator returns an Iterator that starts at offset off of segment seg:
// the start of a record, or the end of one to read what follows it (for
// the whole ledger: segment 1, offset FirstOffset).
func (l *Log) NewIterator(seg uint64, off int64) *Iterator {
	return &Iterator{l: l, seg: seg, off: off}
}

// Next advances to the next committed record. It returns false at the
// committed end or on error (see Err).
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	for {
		if it.f == nil || it.fSeg != it.seg {
			f, err := it.l.readFile(it.seg)
			if err != nil {
				it.err = err
				return false
			}
			it.f, it.fSeg, it.sealed = f, it.seg, -1
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

func (it *Iterator) read(f vfs.File, size int64) bool {
	if it.r == nil || it.r.f != f {
		it.r = &blockReader{f: f}
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
	want := max(n, 256<<10)
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
	return b.buf[:n], nil
}

// Record returns the current record. Its slices are valid until Next.
func (it *Iterator) Record() *Record { return &it.rec }

// Location returns where the current record is.
func (it *Iterator) Location() Location { return it.loc }

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.err }
