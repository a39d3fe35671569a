package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Hidden describes the tail of the last segment that a read-only Log does
// not show: records not yet completely written, or that do not verify.
type Hidden struct {
	At    Location // where the hidden tail begins (Size 0); zero if none
	Bytes int64    // its size when it was last looked at
	Why   string   // what is there: a record cut short, an unfinished batch, …
}

// roState is the state of a read-only Log, guarded by Log.roMu.
type roState struct {
	chain  chain  // the last record shown
	hidden Hidden // the hidden tail of the last segment, if any
	failed error  // ErrDiverged or corruption: Follow returns it from then on
	// opening is set during OpenReadOnly: a bad tail of the last segment
	// is then judged as recovery judges it (classify).
	opening bool
	// limit, limited: Options.Limit's answer at the start of this look.
	limit   Head
	limited bool
	// stamps: the sealed segments verified whole at the open, or spared
	// by a stamp given in Options.Stamps (Stamps); from, at: the first
	// record read and verified at the open, and where (VerifiedFrom).
	stamps []Stamp
	from   uint64
	at     Location
}

// OpenReadOnly opens the segments of a ledger in dir to read them while a
// writer may have them open, in this process or another. It takes no lock
// and writes nothing: no recovery, no cut, no file created or removed.
//
// It verifies every record, as Open does (frame CRC, ledger, event
// checksum, chain link, timestamps, sequence numbers), and shows the
// longest prefix that recovery would keep, whether or not a writer is
// running: the tail of the last segment from the first record that is
// not complete and valid, and an unfinished batch (a last record with the
// more flag) there, are hidden as not yet written (Hidden), never cut and
// never reported as corruption; a last segment whose header is not yet
// complete is not shown. A bad record in a sealed segment (one that has a
// successor), a sealed segment that ends inside a batch, a missing
// segment or a header that does not continue the chain is corruption
// (*CorruptionError). Recovery never cuts a record before the first bad
// one, nor a batch completely written, so what is shown is never cut by a
// later Open of a writer.
//
// Appends and Sync return ErrReadOnly. Follow shows what the writer
// commits after the open.
func OpenReadOnly(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := newLog(dir, o)
	l.ro = &roState{chain: chain{ledger: o.Ledger, id: eventid.Genesis(o.Ledger)}}
	l.head = Head{ID: l.ro.chain.id}
	if o.Watch {
		// The directory's identity before its segments are listed: one
		// removed or replaced from now on is seen (checkFilesRO).
		l.files = newFileWatch(dir)
	}
	names, err := o.FS.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoLog, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	var nums []uint64
	for _, name := range names {
		if n, ok := parseSegmentName(name); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for i, n := range nums {
		if n != uint64(i)+1 {
			return nil, &CorruptionError{File: o.FS.PathJoin(dir, segmentName(uint64(i)+1)), Problem: "segment missing", Expected: segmentName(uint64(i) + 1), Found: segmentName(n)}
		}
	}
	// Segment 1 is the position before anything is shown; a ledger whose
	// first header is not yet written shows nothing, as recovery would
	// find no log.
	l.segNum, l.size = 1, headerSize
	l.ro.from, l.ro.at = 1, Location{Segment: 1, Offset: headerSize}
	if o.VerifySealed && len(nums) > 0 {
		l.skipStamped(nums, o.Stamps)
	}
	l.publish()
	if len(nums) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoLog, dir)
	}
	l.ro.opening = true
	_, err = l.follow(len(nums))
	l.ro.opening = false
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// skipStamped starts the open of a read-only Log (OpenReadOnly, with
// Options.VerifySealed) at the end of the longest run of segments, from
// the first, that the stamps vouch for, as Open does: each one's file is
// as it was stamped (segment numbers nums) and continues the chain of the
// one before, and the segment after the run, if any, continues from the
// run's last record, which must be where its stamp says (stamps that
// match the files but do not chain, or do not say where that record is,
// were not written by an open: they spare nothing). A stamp is of a file's
// identity, which any write changes (FileIdentity): the last segment may
// have one too (a reader's, of a segment no writer was writing), and what
// a writer appended to it since is read after the stamped records.
// Stamps may hold several of one segment (from several sources): the
// first that matches is taken. Nothing is an error here: what is not
// skipped is read and verified.
func (l *Log) skipStamped(nums []uint64, stamps []Stamp) {
	given := make(map[uint64][]Stamp, len(stamps))
	for _, st := range stamps {
		given[st.Segment] = append(given[st.Segment], st)
	}
	prev := Head{ID: l.ro.chain.id}
	var run []Stamp
	for _, n := range nums {
		if len(given[n]) == 0 {
			break
		}
		s, err := readHeader(l.fs, l.dir, n, l.ledger)
		if s != nil && s.file != nil {
			s.file.Close()
		}
		if err != nil {
			break
		}
		i := slices.IndexFunc(given[n], func(st Stamp) bool {
			return st.matches(s) && st.Prev.ID == prev.ID && st.Prev.Seq == prev.Seq
		})
		if i < 0 {
			break
		}
		run = append(run, given[n][i])
		prev = given[n][i].Last
	}
	if len(run) == 0 {
		return
	}
	last := run[len(run)-1]
	at := Location{Segment: last.Segment, Offset: last.Last.Loc.End()}
	if int(last.Segment) < len(nums) {
		s, err := readHeader(l.fs, l.dir, last.Segment+1, l.ledger)
		if s != nil && s.file != nil {
			s.file.Close()
		}
		if err != nil || s.hdr.prevID != last.Last.ID || s.hdr.prevSeq != last.Last.Seq {
			return
		}
		at = Location{Segment: last.Segment + 1, Offset: headerSize}
	}
	// The record the run ends with must be where its stamp says: the
	// position the Log starts from, and looks at again at each Follow.
	l.segNum, l.size, l.head = last.Segment, last.Last.Loc.End(), last.Last
	l.publish() // what the reads of checkHead go by
	if l.checkHead() != nil {
		l.segNum, l.size, l.head = 1, headerSize, Head{ID: l.ro.chain.id}
		return
	}
	l.ro.stamps = run
	l.ro.chain.id, l.ro.chain.seq = last.Last.ID, last.Last.Seq
	l.ro.from, l.ro.at = l.head.Seq+1, at
	l.markDurable(l.head)
}

// Stamps returns, for a Log opened with OpenReadOnly, the stamps of the
// segments that its open verified whole or that a stamp given in
// Options.Stamps spared (with Options.VerifySealed), in segment order:
// what a later OpenReadOnly may be given (Open takes those of the sealed
// ones). The last segment has one only if it ended with its last record
// (nothing hidden, no zeros after it). Nil for a Log opened with Open
// (see Recovery.Stamps).
func (l *Log) Stamps() []Stamp {
	if l.ro == nil {
		return nil
	}
	l.roMu.Lock()
	defer l.roMu.Unlock()
	return slices.Clone(l.ro.stamps)
}

// VerifiedFrom returns, for a Log opened with OpenReadOnly, the sequence
// number of the first record its open read and verified (Head.Seq+1 if
// none) and where that record is (for NewIterator; if none was read, the
// end of the records): those before it are in segments that stamps
// vouched for (Options.Stamps). 1 if every record was read.
func (l *Log) VerifiedFrom() (uint64, Location) {
	if l.ro == nil {
		return 0, Location{}
	}
	l.roMu.Lock()
	defer l.roMu.Unlock()
	return l.ro.from, l.ro.at
}

// ReadOnly reports whether the Log was opened with OpenReadOnly.
func (l *Log) ReadOnly() bool { return l.ro != nil }

// HiddenTail returns the tail of the last segment that a read-only Log
// does not show (not yet completely written, or not valid), as of its
// last look (OpenReadOnly, Follow); the zero Hidden if none, or if the
// Log is not read-only.
func (l *Log) HiddenTail() Hidden {
	if l.ro == nil {
		return Hidden{}
	}
	l.roMu.Lock()
	defer l.roMu.Unlock()
	return l.ro.hidden
}

// Follow looks again at the segments of a read-only Log and shows the
// records that were completed since its last look: the rest of the last
// segment, and the segments the writer started after it. It reports
// whether the head moved. It returns ErrDiverged if the record at the
// head, which was shown, is no longer there (see ErrDiverged), and a
// *CorruptionError for a bad record in a segment that is now sealed, and
// (with Options.Watch) ErrFileChanged once the Log's directory, or the
// segment it follows, was removed, moved or replaced (checkFilesRO); from
// then on every call returns that error. A segment whose size changes
// while it is read (the writer appends, or its recovery cuts a torn
// write) is read again at the next call, not reported. It is safe to call
// from several goroutines, and with reads running. ErrReadOnly if the
// Log is not read-only.
func (l *Log) Follow() (bool, error) {
	if l.ro == nil {
		return false, ErrReadOnly
	}
	return l.follow(0)
}

// follow is Follow; known, if not 0, is the number of segments the caller
// listed (OpenReadOnly), the last of which may still be unfinished.
func (l *Log) follow(known int) (bool, error) {
	l.roMu.Lock()
	defer l.roMu.Unlock()
	if l.ro.failed != nil {
		return false, l.ro.failed
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	before := l.head.Seq
	if err := l.checkFilesRO(); err != nil {
		// The files it follows are no longer the ledger's: what is
		// written in their place is not what it was following.
		l.ro.failed = err
		return false, err
	}
	err := l.followLocked(known)
	if err != nil && (errors.Is(err, ErrDiverged) || errors.Is(err, ErrCorruption)) {
		l.ro.failed = err
	}
	return l.head.Seq != before, err
}

// followLocked advances the shown position as far as the segments allow.
// Called with roMu held.
func (l *Log) followLocked(known int) (err error) {
	if err := l.checkHead(); err != nil {
		return err
	}
	l.ro.limited = false
	if l.opts.Limit != nil {
		l.ro.limit, l.ro.limited = l.opts.Limit()
	}
	if l.ro.limited && l.head.Seq >= l.ro.limit.Seq {
		return l.checkLimit(l.head)
	}
	defer func() {
		if errors.Is(err, ErrCorruption) {
			err = l.recheckHead(err)
		}
	}()
	for {
		next := l.segNum + 1
		// Whether the segment has a successor is asked before its size:
		// a segment is synced, whole, before the next one is created, so
		// if the next one exists, the size read after is final.
		sealed, err := l.segmentExists(next)
		if err != nil {
			return err
		}
		done, err := l.scanActive(sealed)
		if err != nil || !sealed || !done {
			return err
		}
		// The successor must have a whole header that continues the
		// chain. One not yet completely written (the writer is creating
		// it) is looked at again next time.
		s, err := readHeader(l.fs, l.dir, next, l.ledger)
		if errors.Is(err, errShortHeader) {
			s.file.Close()
			if known > 0 && int(next) < known {
				return &CorruptionError{File: s.name, Problem: "segment header missing in a sealed segment", Expected: fmt.Sprintf("%d header bytes", headerSize), Found: fmt.Sprintf("a file of %d bytes", s.size)}
			}
			return nil
		}
		if err != nil {
			return err
		}
		s.file.Close()
		if s.hdr.prevID != l.ro.chain.id || s.hdr.prevSeq != l.ro.chain.seq {
			return &CorruptionError{File: s.name, Offset: 24, Problem: "segment does not continue the chain of the segment before",
				Expected: fmt.Sprintf("%s #%d", l.ro.chain.id, l.ro.chain.seq), Found: fmt.Sprintf("%s #%d", s.hdr.prevID, s.hdr.prevSeq)}
		}
		// The segment is read to its end: its handle (and the pages of
		// its map that the reads brought in) goes; a read of it opens
		// it again.
		passed := l.segNum
		l.segNum, l.size = next, headerSize
		l.ro.hidden = Hidden{}
		l.publish()
		l.dropFile(passed)
	}
}

// segmentExists reports whether segment n of the Log's directory exists.
func (l *Log) segmentExists(n uint64) (bool, error) {
	_, err := l.fs.Stat(l.fs.PathJoin(l.dir, segmentName(n)))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("segment: stat %s: %w", segmentName(n), err)
	}
	return true, nil
}

// checkHead returns ErrDiverged if the record at the head that the Log
// showed is no longer in its segment as it was.
func (l *Log) checkHead() error {
	h := l.head
	if h.Seq == 0 {
		return nil
	}
	f, err := l.readFile(h.Loc.Segment)
	if err != nil {
		return err
	}
	defer f.release()
	st, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("segment: stat %s: %w", segmentName(h.Loc.Segment), err)
	}
	r, err := readRecord(f, segmentName(h.Loc.Segment), h.Loc, st.Size())
	if err != nil && !errors.Is(err, ErrCorruption) {
		return err
	}
	if err != nil || r.ID != h.ID || r.Seq != h.Seq {
		found := fmt.Sprintf("the segment is %d bytes", st.Size())
		if r != nil {
			found = fmt.Sprintf("record %s #%d there", r.ID, r.Seq)
		}
		return fmt.Errorf("%w: %s: record %s #%d at offset %d was shown, %s", ErrDiverged, segmentName(h.Loc.Segment), h.ID, h.Seq, h.Loc.Offset, found)
	}
	return nil
}

// recheckHead returns ErrDiverged instead of corrupt, a corruption that
// followLocked found past the head, if the record at the head is no
// longer there: a writer's recovery cut what the Log showed, and wrote
// other records in its place, after checkHead looked and before the
// reads past the head, which then read the writer's new records as they
// would a bad one (in a segment that had a successor when the Log looked,
// corruption). The segments no longer hold what was shown: that is the
// error, as when the cut comes before checkHead.
func (l *Log) recheckHead(corrupt error) error {
	if err := l.checkHead(); errors.Is(err, ErrDiverged) {
		return fmt.Errorf("%w (what followed it was read as: %v)", err, corrupt)
	}
	return corrupt
}

// scanActive verifies the records of the active segment after the shown
// end and shows those that recovery would keep. sealed says that the
// segment has a successor: then a bad record or an unfinished batch is
// corruption, and done reports that the segment was read to its end.
// Called with roMu held.
func (l *Log) scanActive(sealed bool) (done bool, err error) {
	f, err := l.readFile(l.segNum)
	if err != nil {
		return false, err
	}
	defer f.release()
	name := l.fs.PathJoin(l.dir, segmentName(l.segNum))
	st, err := f.f.Stat()
	if err != nil {
		return false, fmt.Errorf("segment: stat %s: %w", name, err)
	}
	size := st.Size()
	// A segment read whole at the open, from one look at its file (its
	// identity taken before the read), gets a stamp (Stamps): the last
	// one too if it ends with its last record (nothing hidden, no zeros
	// after it), as a closed ledger's does.
	stampable := l.ro.opening && l.size == headerSize
	ident, before := fileIdentity(st), l.ro.chain
	if sealed {
		// Sealed, the segment was cut to its records' end, which a
		// handle opened before may not show: on a file system without
		// ftruncate (truncate) the cut file replaced the one it holds,
		// with the zeros that were ahead of the records.
		if pst, err := l.fs.Stat(name); err == nil {
			size = min(size, pst.Size())
			stampable = stampable && fileIdentity(pst) == ident
		} else {
			stampable = false
		}
	}
	if h := l.opts.test.afterSize; h != nil {
		h(l.segNum)
	}
	if size < l.size {
		// Cut before what was shown: checkHead said the head is there,
		// so this is a cut that came after it; look again next time.
		return false, nil
	}
	if !sealed && !l.ro.opening && l.size > headerSize && size-l.size >= frameSize {
		// The zeros a writer keeps ahead of its records, right after
		// the shown end: nothing new. One small read, not a block of
		// zeros scanned at every look.
		var hdr [frameSize]byte
		if n, _ := f.ReadAt(hdr[:], l.size); n == frameSize && allZero(hdr[:]) {
			l.ro.hidden = Hidden{}
			return false, nil
		}
	}
	if l.size == headerSize {
		// The header of a segment not yet shown (a ledger's first
		// segment at open): it must be whole and of this ledger.
		if size < headerSize {
			l.ro.hidden = Hidden{At: Location{Segment: l.segNum, Offset: 0}, Bytes: size, Why: "segment header not yet written"}
			return false, nil
		}
		s, err := readHeader(l.fs, l.dir, l.segNum, l.ledger)
		if errors.Is(err, errShortHeader) {
			s.file.Close()
			l.ro.hidden = Hidden{At: Location{Segment: l.segNum, Offset: 0}, Bytes: size, Why: "segment header not yet written"}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		s.file.Close()
		if s.hdr.prevID != l.ro.chain.id || s.hdr.prevSeq != l.ro.chain.seq {
			return false, &CorruptionError{File: name, Offset: 24, Problem: "segment does not continue the chain",
				Expected: fmt.Sprintf("%s #%d", l.ro.chain.id, l.ro.chain.seq), Found: fmt.Sprintf("%s #%d", s.hdr.prevID, s.hdr.prevSeq)}
		}
	}
	sc := newScanner(f, name, l.size, size, l.ro.chain)
	// The last record shown and the end of the last whole batch.
	c, head, end := l.ro.chain, l.head, l.size
	var open int64 = -1 // the first record of an unfinished batch
	for {
		ok, bad, err := sc.next()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				// The file was cut while it was read: look again.
				break
			}
			return false, err
		}
		if !ok {
			if bad != nil {
				if sealed {
					return false, bad.corruption(name)
				}
				unwritten, cerr := l.judgeTail(f.f, name, size, bad, sc)
				if cerr != nil {
					return false, cerr
				}
				switch {
				case unwritten && open < 0:
					// The zeros a writer keeps ahead of its records:
					// the end of what is written, not a hidden tail.
					l.ro.hidden = Hidden{}
				case open >= 0:
					// The batch it belongs to is hidden with it.
					l.setHidden(open, size, "a batch not yet completely written: "+bad.problem)
				default:
					l.setHidden(bad.offset, size, bad.problem)
				}
			} else if open >= 0 {
				if sealed {
					return false, &CorruptionError{File: name, Offset: open, Problem: "sealed segment ends inside a batch", Expected: "a last record without the more flag", Found: "the end of the segment"}
				}
				l.setHidden(open, size, "a batch not yet completely written")
			} else {
				l.ro.hidden = Hidden{}
				done = true
				if sealed {
					f.final.Store(sc.off) // see above: not the handle's size
				}
				if stampable && sc.off == size && ident.valid() && head.Seq > before.seq {
					l.ro.stamps = append(l.ro.stamps, Stamp{Segment: l.segNum, File: ident,
						Prev: Head{ID: before.id, Seq: before.seq}, Last: head})
				}
			}
			break
		}
		if sc.rec.more {
			if l.ro.limited && sc.chain.seq >= l.ro.limit.Seq {
				// The record at the bound begins a batch here: not the
				// one vouched for, which ends one.
				return false, l.checkLimit(Head{ID: sc.chain.id, Seq: sc.chain.seq, Loc: sc.location(l.segNum)})
			}
			if open < 0 {
				open = sc.location(l.segNum).Offset
			}
			continue
		}
		open = -1
		c, end = sc.chain, sc.off
		head = Head{ID: c.id, Seq: c.seq, Loc: sc.location(l.segNum)}
		if l.ro.limited && head.Seq >= l.ro.limit.Seq {
			// Shown up to the bound and no further: what follows it is
			// not vouched for (not hidden either: not a torn write).
			if err := l.checkLimit(head); err != nil {
				return false, err
			}
			l.ro.hidden = Hidden{}
			break
		}
	}
	if end != l.size {
		l.ro.chain, l.head, l.size = c, head, end
		l.markDurable(head)
		l.publish()
	}
	return done, nil
}

// checkLimit returns ErrDiverged if h, the record the Log reached at its
// bound (Options.Limit), is not the one its caller vouched for.
func (l *Log) checkLimit(h Head) error {
	if h == l.ro.limit {
		return nil
	}
	return fmt.Errorf("%w: %s: record %s #%d at offset %d, where the bound it may show is record %s #%d at offset %d of %s",
		ErrDiverged, segmentName(h.Loc.Segment), h.ID, h.Seq, h.Loc.Offset, l.ro.limit.ID, l.ro.limit.Seq, l.ro.limit.Loc.Offset, segmentName(l.ro.limit.Loc.Segment))
}

// setHidden records the hidden tail of the active segment, from offset
// off of a segment of size bytes.
func (l *Log) setHidden(off, size int64, why string) {
	l.ro.hidden = Hidden{At: Location{Segment: l.segNum, Offset: off}, Bytes: size - off, Why: why}
}

// judgeTail judges the bad record that ends what the last segment shows.
// It reports whether it is the start of unwritten space (zeros that a
// writer keeps ahead of its records, Log.zeroFill): while following, a
// frame header of zeros is taken for it; during OpenReadOnly, only zeros
// from there to the end of the file are (zeroTail), as recovery takes
// them. During OpenReadOnly it also returns the corruption error that
// recovery would give for the bad record (a good record after it, a
// single changed bit, a record that a later one vouches was synced: see
// classify), or nil if recovery would take it for a torn write, which the
// Log hides. A segment whose size changed since it was read (a writer at
// work) is not judged: its tail is hidden, as after the open.
func (l *Log) judgeTail(f vfs.File, name string, size int64, bad *badRecord, sc *scanner) (unwritten bool, _ *CorruptionError) {
	if !l.ro.opening {
		return bad.zero, nil
	}
	if resized(f, size) {
		return bad.zero, nil
	}
	if h := l.opts.test.judge; h != nil {
		h()
	}
	s := &segmentFile{number: l.segNum, name: name, file: f, size: size}
	if zeros, err := zeroTail(s, bad, sc.synced); err == nil && zeros {
		return true, nil
	}
	cerr := classify(s, bad, sc.synced, sc.chain)
	if cerr != nil && (resized(f, size) || rewritten(f, name, size, bad, sc.chain)) {
		// A writer at work since the scan: it cut the zeros ahead of
		// its records (it sealed or closed the segment: the file is
		// shorter than the bytes judged), or wrote there, inside the
		// file, in those zeros, so the size did not change. Not
		// judged; hidden, as after the open.
		return bad.zero, nil
	}
	return false, cerr
}

// resized reports whether f's size is no longer size (or cannot be read).
func resized(f vfs.File, size int64) bool {
	st, err := f.Stat()
	return err != nil || st.Size() != size
}

// rewritten reports whether the record at bad.offset (after chain c)
// no longer fails as the scan found it failing: a writer wrote there.
func rewritten(f vfs.File, name string, size int64, bad *badRecord, c chain) bool {
	ok, again, err := newScanner(f, name, bad.offset, size, c).next()
	return err == nil && (ok || again == nil || again.problem != bad.problem || again.zero != bad.zero)
}

// CheckWitness reports whether what a read-only Log shows holds the
// durable witness w (see Options.Witness), as Open checks it: nil if it
// does (or w is the zero Head), otherwise a *CorruptionError saying, in
// Open's words, which acknowledged events were lost. A writer's witness
// is never ahead of what it has durably written, and a read-only Log
// shows every complete record, so a live ledger always holds it.
func (l *Log) CheckWitness(w Head) error {
	if w.Seq == 0 {
		return nil
	}
	h := l.Head()
	name := l.opts.FS.PathJoin(l.dir, segmentName(max(w.Loc.Segment, 1)))
	if h.Seq < w.Seq {
		if w.Loc.Segment == 0 {
			name = l.opts.FS.PathJoin(l.dir, segmentName(max(h.Loc.Segment, 1)))
		}
		return &CorruptionError{File: name, Offset: w.Loc.Offset, Problem: w.lost(), Lost: true,
			Expected: fmt.Sprintf("events up to #%d (%s)", w.Seq, w.ID), Found: fmt.Sprintf("the ledger ends at #%d (%s)", h.Seq, h.ID)}
	}
	if w.Loc.Segment == 0 {
		return nil
	}
	r, err := l.ReadAt(w.Loc)
	if err == nil && r.ID == w.ID && r.Seq == w.Seq {
		return nil
	}
	found := fmt.Sprintf("the record there is unreadable (%v)", err)
	if err == nil {
		found = fmt.Sprintf("record %s #%d there", r.ID, r.Seq)
	}
	return &CorruptionError{File: name, Offset: w.Loc.Offset, Problem: w.lost(), Lost: true,
		Expected: fmt.Sprintf("record %s #%d of %d bytes at offset %d", w.ID, w.Seq, w.Loc.Size, w.Loc.Offset), Found: found}
}
