package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
)

// markLen is how many bytes of the last record's frame (or of the
// header, in a segment without records) the Log keeps, to look at them
// again in the file (CheckFiles): its length, CRC, sequence number and
// the start of its ID, never all zeros (the kind byte is 1).
const markLen = 48

// mark is the first markLen bytes of the last record written to a
// segment (of its header while it has no record), and where they are.
type mark struct {
	seg uint64
	off int64
	b   [markLen]byte
}

// fileWatch holds the identity (device and inode) of the files of a Log
// opened or created with Options.Watch, as the Log made or found them,
// for CheckFiles. Guarded by mu; the committing leader registers a new
// active segment (rotation) under ioMu, then mu.
type fileWatch struct {
	mu     sync.Mutex
	dir    os.FileInfo
	sealed []watchedSegment // in number order
	active watchedSegment
	// last is the mark CheckFiles saw last: looked at again, so that an
	// older copy of the segment written over it is seen even once new
	// records were written after it.
	last mark
}

// watchedSegment is a segment's identity and, once sealed, its size.
type watchedSegment struct {
	num  uint64
	path string
	fi   os.FileInfo // nil if it could not be taken: not watched
	size int64
}

// newFileWatch records the identity of dir (nil if it cannot: not
// watched).
func newFileWatch(dir string) *fileWatch {
	w := &fileWatch{}
	w.dir, _ = os.Lstat(dir)
	return w
}

// setActive records the active segment (created or opened for writing
// as f), sealing the one before at size: called under ioMu, with the
// file's first stat.
func (w *fileWatch) setActive(num uint64, path string, fi os.FileInfo, sealedSize int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active.num != 0 {
		s := w.active
		s.size = sealedSize
		w.sealed = append(w.sealed, s)
	}
	w.active = watchedSegment{num: num, path: path, fi: fi}
}

// setMark records in m the first markLen bytes of the record (or header)
// at off of segment seg, from b. Called under ioMu.
func (m *mark) set(seg uint64, off int64, b []byte) {
	m.seg, m.off = seg, off
	copy(m.b[:], b)
}

// CheckFiles reports (ErrFileChanged, wrapped, saying which file and how)
// whether a file of the Log was changed under it since Create or Open:
// its directory removed, moved or replaced; a segment removed, moved or
// replaced by another file; a sealed segment whose size changed; the
// active segment shorter than what was written to it, or whose last
// record (or header) is no longer there, as when an older copy of it
// was written over it in place. It needs Options.Watch (else it reports
// nothing), and costs a stat of the directory and of each segment, and a
// read of a record's first bytes (from the memory map where there is
// one): callers call it at an interval, not on every append. It changes
// nothing; the caller decides (Fail stops the Log).
//
// What it cannot see: an older copy of the active segment taken after
// the previous CheckFiles and written back over it before the next, with
// records appended to it in between (they land past the copy's end, and
// the record at the mark of each check is there). The next Open finds
// it: the durable witness (Options.Witness) is missing.
func (l *Log) CheckFiles() error {
	w := l.files
	if w == nil || l.ro != nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir != nil {
		if _, what := changed(l.dir, w.dir); what != "" {
			return fmt.Errorf("%w: the ledger's directory %s %s", ErrFileChanged, l.dir, what)
		}
	}
	pos := l.committed.Load()
	for _, s := range append(w.sealed, w.active) {
		if s.fi == nil {
			continue
		}
		fi, what := changed(s.path, s.fi)
		if what == "" {
			switch {
			case s.num != w.active.num && fi.Size() != s.size:
				what = fmt.Sprintf("is %d bytes; it was sealed at %d (cut, or overwritten in place)", fi.Size(), s.size)
			case s.num == w.active.num && s.num == pos.segNum && fi.Size() < pos.end:
				what = fmt.Sprintf("is %d bytes; %d were written to it (cut, or an older copy written over it)", fi.Size(), pos.end)
			}
		}
		if what != "" {
			return fmt.Errorf("%w: segment %s %s", ErrFileChanged, s.path, what)
		}
	}
	for _, m := range []*mark{&pos.mark, &w.last} {
		if m.seg == 0 {
			continue
		}
		if err := l.checkMark(m); err != nil {
			return err
		}
	}
	w.last = pos.mark
	return nil
}

// checkFilesRO is the watch of a read-only Log opened with
// Options.Watch, at each Follow: it reports (ErrFileChanged, wrapped,
// saying which file and how) whether the Log's directory, or the segment
// it reads its new records from (the last shown, and the one it shows
// the head from), was removed, moved or replaced since the Log opened it.
// A read-only Log reads through the handles it opened: without it, a
// follower of a directory removed (rm -rf) would wait for ever on the
// deleted files, and one restored from an older copy would never see
// what is appended there. It costs a stat of the directory and of one or
// two segments. Called with roMu held.
func (l *Log) checkFilesRO() error {
	w := l.files
	if w == nil {
		return nil
	}
	if w.dir != nil {
		if _, what := changed(l.dir, w.dir); what != "" {
			return fmt.Errorf("%w: the ledger's directory %s %s while a read-only log followed it", ErrFileChanged, l.dir, what)
		}
	}
	nums := []uint64{l.segNum}
	if h := l.head.Loc.Segment; h != 0 && h != l.segNum {
		nums = append(nums, h)
	}
	for _, n := range nums {
		l.readMu.RLock()
		s, ok := l.readers[n]
		var fi os.FileInfo
		if ok {
			fi = s.fi
		}
		l.readMu.RUnlock()
		if fi == nil {
			continue
		}
		if _, what := changed(s.path, fi); what != "" {
			return fmt.Errorf("%w: segment %s %s while a read-only log followed it", ErrFileChanged, s.path, what)
		}
	}
	return nil
}

// checkMark reads the bytes at m again and compares them with it.
func (l *Log) checkMark(m *mark) error {
	s, err := l.readFile(m.seg)
	if errors.Is(err, ErrClosed) {
		return nil
	}
	path := l.fs.PathJoin(l.dir, segmentName(m.seg))
	if err != nil {
		return fmt.Errorf("%w: segment %s cannot be read (%v)", ErrFileChanged, path, err)
	}
	defer s.release()
	var b [markLen]byte
	n, err := s.ReadAt(b[:], m.off)
	if n == markLen && bytes.Equal(b[:], m.b[:]) {
		return nil
	}
	what := "the record"
	if m.off == 0 {
		what = "the header"
	}
	if n < markLen {
		return fmt.Errorf("%w: segment %s ends before %s written at offset %d (cut, or an older copy written over it: %v)", ErrFileChanged, path, what, m.off, err)
	}
	return fmt.Errorf("%w: segment %s no longer holds %s written at offset %d (an older copy, or another file, written over it)", ErrFileChanged, path, what, m.off)
}

// changed says how the file at path differs from fi ("was removed", "was
// replaced by another file"), or "" if it is the same file, whose stat it
// returns then.
func changed(path string, fi os.FileInfo) (os.FileInfo, string) {
	now, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, "was removed or moved"
	case err != nil:
		return nil, fmt.Sprintf("cannot be checked (%v)", err)
	case !os.SameFile(now, fi):
		return nil, "was replaced by another file"
	}
	return now, ""
}

// Fail stops the Log: every later Append and Sync fails with err, and
// Close closes the files without writing to them (no sync, no cut of the
// zeros ahead of the records) and returns err. For a caller that found
// the Log's files changed under it (CheckFiles): what it would write
// would go to files that are no longer the ledger's, or into another's.
func (l *Log) Fail(err error) { l.setFailed(err) }
