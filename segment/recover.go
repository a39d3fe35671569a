package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Recovery reports what Open found and did.
type Recovery struct {
	Segments      int   // segment files of the ledger
	Records       int64 // records verified (those after the progress marker)
	VerifiedBytes int64 // bytes of those records
	// TruncatedBytes is the size of the torn write cut from the end of the
	// last segment, and TornAt where it began; 0 and zero if none.
	TruncatedBytes int64
	TornAt         Location
	// Unwritten is the size of the zeros that followed the records of
	// the last segment, cut by Open: space that a writer wrote with zeros
	// ahead of its records (and had not cut yet, as it does when it seals
	// a segment or closes), not a torn write. 0 if none.
	Unwritten int64
	// RemovedSegment is the number of a last segment whose header was
	// never completely written (a crash while it was being created) and
	// that Open removed; 0 if none.
	RemovedSegment uint64
	Head           Head // the ledger's last record after recovery
	// VerifiedFrom is the sequence number of the first record Open
	// verified (Head.Seq+1 if none), VerifiedAt where it starts (for
	// Log.NewIterator).
	VerifiedFrom uint64
	VerifiedAt   Location
	// Stamps, with Options.VerifySealed, are the stamps of the sealed
	// segments: those given that still match, and one for each sealed
	// segment verified now (the active segment has none: it is written
	// again).
	Stamps []Stamp
}

// Open opens the segments of an existing ledger in dir, verifying and
// repairing its tail, and returns the Log ready for appends.
//
// Every record after the progress marker is verified: frame CRC, ledger,
// event checksum, chain link, increasing timestamps and sequence numbers,
// across segment boundaries. marker is a Head known to be verified before
// (Loc, ID and Seq of a record: the index's progress marker), or the zero
// Head to verify everything. A marker that does not match the record at
// its location gives ErrProgressMismatch.
//
// A record that fails verification at the end of the last segment and was
// never synced (it runs past the end of the file, or holds the zeros of
// unwritten blocks, and no later record vouches for it) is a torn write:
// Open cuts it and whatever follows it off, syncs, and says so in the
// Recovery. Anything else is corruption: Open returns a *CorruptionError
// and changes nothing.
//
// Options.Witness, if set, is a head that was durable: segments that do
// not hold it (a segment missing, a header zeroed or cut, its record
// absent or replaced, a cut that would remove it) are corruption, found
// before any file is changed, and a torn write is cut only after it. See
// docs/recovery.md.
func Open(dir string, opts Options, marker Head) (*Log, *Recovery, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	names, err := o.FS.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &Recovery{}, fmt.Errorf("%w: %s does not exist", ErrNoLog, dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	if err := removeStaleTemp(o.FS, dir, names); err != nil {
		return nil, nil, err
	}
	var nums []uint64
	for _, name := range names {
		if n, ok := parseSegmentName(name); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	rec := &Recovery{}
	if len(nums) == 0 {
		return nil, rec, fmt.Errorf("%w in %s", ErrNoLog, dir)
	}
	for i, n := range nums {
		if n != uint64(i)+1 {
			return nil, rec, &CorruptionError{File: o.FS.PathJoin(dir, segmentName(uint64(i)+1)), Problem: "segment missing", Expected: segmentName(uint64(i) + 1), Found: segmentName(n)}
		}
	}
	w := o.Witness
	if w.Seq != 0 && w.Loc.Segment > uint64(len(nums)) {
		return nil, rec, &CorruptionError{File: o.FS.PathJoin(dir, segmentName(w.Loc.Segment)), Problem: "segment missing: " + w.lost(), Lost: true,
			Expected: fmt.Sprintf("segments 1 to %d at least", w.Loc.Segment), Found: fmt.Sprintf("segments 1 to %d", len(nums))}
	}

	// Each segment's file is open while it is read, not all at once: a
	// ledger of more segments than the process may open files opens.
	var segs []*segmentFile
	defer func() {
		for _, s := range segs {
			s.close()
		}
	}()
	for i, n := range nums {
		s, err := readHeader(o.FS, dir, n, o.Ledger)
		if err == errShortHeader && i == len(nums)-1 && w.Seq != 0 && n <= w.Loc.Segment {
			// Its header was synced before the witness's record was
			// written in it or after it: not an unfinished creation.
			s.file.Close()
			return nil, rec, &CorruptionError{File: s.name, Problem: "segment header missing or zero: " + w.lost(), Lost: true,
				Expected: fmt.Sprintf("%d header bytes", headerSize), Found: fmt.Sprintf("a file of %d bytes whose header is zero or cut", s.size)}
		}
		if err == errShortHeader && i == len(nums)-1 {
			// A crash while the segment was being created: its header
			// was never synced, so no record can be in it.
			s.file.Close()
			if err := o.FS.Remove(s.name); err != nil {
				return nil, rec, fmt.Errorf("segment: remove unfinished %s: %w", s.name, err)
			}
			if err := SyncDir(o.FS, dir); err != nil {
				return nil, rec, fmt.Errorf("segment: %w", err)
			}
			rec.RemovedSegment = n
			break
		}
		if err == errShortHeader {
			s.file.Close()
			return nil, rec, &CorruptionError{File: s.name, Problem: "segment header missing in a sealed segment", Expected: fmt.Sprintf("%d header bytes", headerSize), Found: fmt.Sprintf("%d zero or missing", headerSize)}
		}
		if err != nil {
			return nil, rec, err
		}
		s.close()
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return nil, rec, fmt.Errorf("%w in %s (the first segment was never completely created)", ErrNoLog, dir)
	}
	rec.Segments = len(segs)
	if h := segs[0].hdr; h.prevSeq != 0 || h.prevID != eventid.Genesis(o.Ledger) {
		return nil, rec, &CorruptionError{File: segs[0].name, Offset: 24, Problem: "first segment does not start at the genesis", Expected: eventid.Genesis(o.Ledger).String() + " #0", Found: fmt.Sprintf("%s #%d", h.prevID, h.prevSeq)}
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].hdr.prevSeq <= segs[i-1].hdr.prevSeq {
			return nil, rec, &CorruptionError{File: segs[i].name, Offset: 40, Problem: "segment does not follow the one before",
				Expected: fmt.Sprintf("previous seq > %d", segs[i-1].hdr.prevSeq), Found: fmt.Sprint(segs[i].hdr.prevSeq)}
		}
	}

	// The witness's record must be where it was, whole, before anything
	// else is read: a tail cut at a record boundary, a zeroed tail, an
	// older copy of the last segment all fail here, and the marker's
	// own mismatch (ErrProgressMismatch, which the caller answers by verifying
	// from the start) would otherwise hide the loss.
	if w.Seq != 0 && w.Loc.Segment != 0 {
		s := segs[w.Loc.Segment-1]
		if err := s.reopen(o.FS); err != nil {
			return nil, rec, err
		}
		r, err := readRecord(s.file, s.name, w.Loc, s.size)
		s.close()
		if err != nil && !errors.Is(err, ErrCorruption) {
			return nil, rec, fmt.Errorf("segment: read the witness %s #%d: %w", w.ID, w.Seq, err)
		}
		if err != nil || r.ID != w.ID || r.Seq != w.Seq {
			found := fmt.Sprintf("the segment is %d bytes", s.size)
			switch {
			case r != nil:
				found = fmt.Sprintf("record %s #%d there", r.ID, r.Seq)
			case s.size > w.Loc.Offset:
				found += fmt.Sprintf(" and the record there is unreadable (%v)", err)
			}
			return nil, rec, &CorruptionError{File: s.name, Offset: w.Loc.Offset, Problem: w.lost(), Lost: true,
				Expected: fmt.Sprintf("record %s #%d of %d bytes at offset %d", w.ID, w.Seq, w.Loc.Size, w.Loc.Offset), Found: found}
		}
	}

	// Where verification starts.
	first, start := 0, int64(headerSize)
	c := chain{ledger: o.Ledger, id: eventid.Genesis(o.Ledger)}
	head := Head{ID: c.id}
	if marker.Seq != 0 {
		i := int(marker.Loc.Segment) - 1
		if i < 0 || i >= len(segs) {
			return nil, rec, fmt.Errorf("%w: segment %d of the progress marker does not exist", ErrProgressMismatch, marker.Loc.Segment)
		}
		if err := segs[i].reopen(o.FS); err != nil {
			return nil, rec, err
		}
		r, err := readRecord(segs[i].file, segs[i].name, marker.Loc, segs[i].size)
		segs[i].close()
		if err != nil && !errors.Is(err, ErrCorruption) {
			// An I/O error says nothing of the marker: report it.
			return nil, rec, fmt.Errorf("segment: read the progress marker's record %s #%d: %w", marker.ID, marker.Seq, err)
		}
		if err != nil || r.ID != marker.ID || r.Seq != marker.Seq {
			return nil, rec, fmt.Errorf("%w: no record %s #%d at %s offset %d (%v)", ErrProgressMismatch, marker.ID, marker.Seq, segs[i].name, marker.Loc.Offset, err)
		}
		first, start = i, marker.Loc.End()
		c.id, c.seq = marker.ID, marker.Seq
		head = marker
	}

	last := len(segs) - 1
	// With VerifySealed, verification starts at the first segment that
	// no stamp vouches for (the active one at the latest), if that is
	// before the marker.
	stamps := map[uint64]Stamp{}
	if o.VerifySealed {
		given := make(map[uint64]Stamp, len(o.Stamps))
		for _, st := range o.Stamps {
			given[st.Segment] = st
		}
		u := last
		for i := range last {
			st, ok := given[segs[i].number]
			if !ok || !st.matches(segs[i]) {
				u = i
				break
			}
			stamps[segs[i].number] = st
		}
		if u > 0 && u <= first {
			// Stamps that match the files but whose last head is not the
			// one the next segment continues from were not written by an
			// Open: they spare nothing, every segment is read (and a
			// segment that does not continue the one before is then
			// found by reading them).
			prev, s := stamps[segs[u-1].number].Last, segs[u]
			if prev.ID != s.hdr.prevID || prev.Seq != s.hdr.prevSeq {
				u = 0
				clear(stamps)
			}
		}
		if u <= first {
			first, start = u, headerSize
			s := segs[u]
			c.id, c.seq = s.hdr.prevID, s.hdr.prevSeq
			head = Head{ID: c.id, Seq: c.seq}
			if u > 0 {
				head = stamps[segs[u-1].number].Last
			}
		}
	}
	rec.VerifiedFrom = c.seq + 1
	rec.VerifiedAt = Location{Segment: segs[first].number, Offset: start}
	for i := first; i < len(segs); i++ {
		s := segs[i]
		if i > first {
			start = headerSize
			if s.hdr.prevID != c.id || s.hdr.prevSeq != c.seq {
				return nil, rec, &CorruptionError{File: s.name, Offset: 24, Problem: "segment does not continue the chain of the segment before",
					Expected: fmt.Sprintf("%s #%d", c.id, c.seq), Found: fmt.Sprintf("%s #%d", s.hdr.prevID, s.hdr.prevSeq)}
			}
		}
		if err := s.reopen(o.FS); err != nil {
			return nil, rec, err
		}
		sc := newScanner(s.file, s.name, start, s.size, c)
		// An open batch: its first record's offset, and the state before
		// it. A batch never spans segments, and a progress marker is at
		// the end of a batch or inside one that was whole when it was taken.
		open := batchStart{offset: -1}
		for {
			before, beforeHead, off := sc.chain, head, sc.off
			ok, bad, err := sc.next()
			if err != nil {
				return nil, rec, err
			}
			if ok {
				rec.Records++
				loc := sc.location(s.number)
				rec.VerifiedBytes += loc.Size
				head = Head{ID: sc.chain.id, Seq: sc.chain.seq, Loc: loc}
				if head.Seq == w.Seq && head.ID != w.ID {
					return nil, rec, &CorruptionError{File: s.name, Offset: loc.Offset, Problem: "the record of the durable witness was replaced: " + w.lost(), Lost: true,
						Expected: fmt.Sprintf("record %s #%d", w.ID, w.Seq), Found: fmt.Sprintf("record %s #%d", head.ID, head.Seq)}
				}
				switch {
				case sc.rec.more && open.offset < 0:
					open = batchStart{offset: off, chain: before, head: beforeHead, records: 1, bytes: loc.Size}
				case sc.rec.more:
					open.records++
					open.bytes += loc.Size
				default:
					open = batchStart{offset: -1}
				}
				continue
			}
			if bad != nil {
				if i != last {
					return nil, rec, bad.corruption(s.name)
				}
				zeros, err := zeroTail(s, bad, sc.synced)
				if err != nil {
					return nil, rec, err
				}
				if zeros {
					// Space written with zeros ahead of the records:
					// their end, not a torn write (docs/recovery.md).
					if cerr := w.forbidsCut(s, bad.offset); cerr != nil {
						return nil, rec, cerr
					}
					rec.Unwritten = s.size - bad.offset
					break
				}
				if cerr := classify(s, bad, sc.synced, sc.chain); cerr != nil {
					return nil, rec, cerr
				}
				if cerr := w.forbidsCut(s, bad.offset); cerr != nil {
					return nil, rec, cerr
				}
				rec.TornAt = Location{Segment: s.number, Offset: bad.offset}
				rec.TruncatedBytes = s.size - bad.offset
			}
			break
		}
		if open.offset >= 0 {
			// The segment ends inside a batch: its last record was never
			// written. In the last segment that is a torn write, cut with
			// the batch's first records, which were never acknowledged
			// (an append returns after its whole batch is written).
			if i != last {
				return nil, rec, &CorruptionError{File: s.name, Offset: open.offset, Problem: "sealed segment ends inside a batch",
					Expected: "a last record without the more flag", Found: fmt.Sprintf("%d records of an unfinished batch", open.records)}
			}
			if open.offset < sc.synced {
				return nil, rec, &CorruptionError{File: s.name, Offset: open.offset, Problem: fmt.Sprintf("unfinished batch of %d records at the end of the segment; a record vouches that the file was synced up to offset %d", open.records, sc.synced),
					Expected: "the batch's last record", Found: "the end of the segment"}
			}
			if cerr := w.forbidsCut(s, open.offset); cerr != nil {
				cerr.Problem = fmt.Sprintf("unfinished batch of %d records at the end of the segment; %s", open.records, cerr.Problem)
				return nil, rec, cerr
			}
			sc.chain, head = open.chain, open.head
			rec.Records -= open.records
			rec.VerifiedBytes -= open.bytes
			rec.TornAt = Location{Segment: s.number, Offset: open.offset}
			rec.TruncatedBytes = s.size - rec.Unwritten - open.offset
		}
		c = sc.chain
		s.close()
		if o.VerifySealed && i != last {
			stamps[s.number] = Stamp{Segment: s.number, File: s.ident, Prev: Head{ID: s.hdr.prevID, Seq: s.hdr.prevSeq}, Last: head}
		}
	}
	rec.Head = head
	if o.VerifySealed {
		for i := range last {
			if st, ok := stamps[segs[i].number]; ok && st.File.valid() && st.Last.Seq > st.Prev.Seq {
				rec.Stamps = append(rec.Stamps, st)
			}
		}
	}
	if w.Seq != 0 && head.Seq < w.Seq {
		// Reached only by a witness without a location (the checks above
		// catch the others): the ledger ends before it.
		return nil, rec, &CorruptionError{File: segs[last].name, Offset: head.Loc.End(), Problem: w.lost(), Lost: true,
			Expected: fmt.Sprintf("events up to #%d (%s)", w.Seq, w.ID), Found: fmt.Sprintf("the ledger ends at #%d (%s)", head.Seq, head.ID)}
	}

	// Open the last segment for writing, cut the torn write, and sync, so
	// that everything in it now is durable (a process crash leaves its
	// writes in the OS's cache, not on disk).
	ls := segs[last]
	l := newLog(dir, o)
	f, err := o.FS.OpenReadWrite(ls.name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, rec, fmt.Errorf("segment: open %s: %w", ls.name, err)
	}
	size := ls.size - rec.Unwritten
	if rec.TruncatedBytes > 0 {
		size = rec.TornAt.Offset
	}
	if size < ls.size {
		if err := truncate(o.FS, ls.name, &f, size); err != nil {
			f.Close()
			what := "the torn write"
			if rec.TruncatedBytes == 0 {
				what = "the zeros after the records"
			}
			return nil, rec, fmt.Errorf("segment: cutting %s: %w", what, err)
		}
	} else if err := f.Sync(); err != nil {
		f.Close()
		return nil, rec, fmt.Errorf("segment: sync %s: %w", ls.name, err)
	}
	l.file, l.segNum, l.size, l.synced = f, ls.number, size, size
	l.head, l.openSeq = head, head.Seq
	if o.Watch {
		l.watchOpened(segs, f, size)
	}
	l.publish()
	l.markDurable(head)
	l.start()
	return l, rec, nil
}

// LostHint is the cure that a refusal for acknowledged events lost names
// (CorruptionError.Lost): nothing was cut; the usual cause of a directory whose files
// disagree (a segment missing or shorter than meta.db's witness says) is
// a copy of a live directory made file by file (cp -a, rsync), which
// copies meta.db after segments that grew and rotated meanwhile.
const LostHint = "nothing was cut or changed: restore the ledger's segment files (*.seg) from a backup (annal backup) or from the copy they came from, then open again; if this directory is a copy of one that a writer had open (cp -a, rsync, a copy file by file), the copy is inconsistent: copy the live directory again with `annal backup DIR` (DB.Backup), which makes a consistent copy beside the running writer"

// lost describes what a witness says was lost, for a CorruptionError.
func (w Head) lost() string {
	if w.Loc.Segment == 0 {
		return fmt.Sprintf("acknowledged events lost: events up to #%d (%s) were durable", w.Seq, w.ID)
	}
	return fmt.Sprintf("acknowledged events lost: events up to #%d (%s) were durable, the last ending in %s at offset %d",
		w.Seq, w.ID, segmentName(w.Loc.Segment), w.Loc.End())
}

// forbidsCut returns the corruption error for cutting segment s at off
// when the witness w says that bytes beyond off were durable, or nil if
// the cut is allowed (a torn write that was never acknowledged as synced).
func (w Head) forbidsCut(s *segmentFile, off int64) *CorruptionError {
	if w.Seq == 0 || w.Loc.Segment == 0 || s.number > w.Loc.Segment || s.number == w.Loc.Segment && off >= w.Loc.End() {
		return nil
	}
	return &CorruptionError{File: s.name, Offset: off, Problem: "a damaged or missing tail that looks like a torn write, but " + w.lost(), Lost: true,
		Expected: fmt.Sprintf("records up to offset %d", w.Loc.End()), Found: fmt.Sprintf("no valid record from offset %d (the file is %d bytes)", off, s.size)}
}

// zeroTail reports whether the bad record at the end of the last segment
// s is the start of unwritten space: its frame header and every byte
// after it to the end of the file are zeros, and no record verified
// before it vouches that it was synced (synced), which would make zeros
// there lost data (classify then says so). Zeros written ahead of the
// records by a writer (Log.zeroFill) end a segment so, and so does a
// crash that lost a whole group's blocks after they were allocated.
func zeroTail(s *segmentFile, bad *badRecord, synced int64) (bool, error) {
	if !bad.zero || bad.offset < synced {
		return false, nil
	}
	buf := make([]byte, min(s.size-bad.offset, scanChunk))
	for off := bad.offset; off < s.size; {
		b := buf[:min(int64(len(buf)), s.size-off)]
		if n, err := s.file.ReadAt(b, off); n < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return false, fmt.Errorf("segment: read %s at %d: %w", s.name, off, err)
		}
		if !allZero(b) {
			return false, nil
		}
		off += int64(len(b))
	}
	return true, nil
}

// batchStart is where an unfinished batch begins, during recovery.
type batchStart struct {
	offset         int64 // -1 if no batch is open
	chain          chain // the chain before it
	head           Head  // the head before it
	records, bytes int64 // of the batch so far
}

// classify decides whether the bad record at the end of the last segment s
// is a torn write (nil) or corruption. synced is the largest offset that a
// record verified before it vouches was on stable storage; c is the chain
// up to it.
func classify(s *segmentFile, bad *badRecord, synced int64, c chain) *CorruptionError {
	cerr := bad.corruption(s.name)
	if bad.crcOK {
		// A torn write does not produce a frame with a good CRC.
		return cerr
	}
	if bad.offset < synced {
		cerr.Problem += fmt.Sprintf("; an earlier record vouches that the file was synced up to offset %d", synced)
		return cerr
	}
	tail := make([]byte, s.size-bad.offset)
	if _, err := s.file.ReadAt(tail, bad.offset); err != nil {
		cerr.Problem += fmt.Sprintf("; reading the rest of the file failed: %v", err)
		return cerr
	}
	later, vouched := laterRecords(tail, bad.offset, c)
	if vouched >= 0 {
		cerr.Problem += fmt.Sprintf("; a later record at offset %d vouches that this offset was synced", vouched)
		return cerr
	}
	extent := int64(len(tail))
	if len(tail) >= frameSize {
		if n := int64(frameSize) + int64(binary.BigEndian.Uint32(tail)); n < extent {
			extent = n
		}
	}
	switch {
	case bitFlipped(tail):
		cerr.Problem += "; a single changed bit explains it (damage after the write, not a torn write)"
		return cerr
	case bad.cut && lengthDamaged(tail):
		cerr.Problem += "; the length field of the last record is damaged (its bytes up to the end of the file have a good CRC)"
		return cerr
	case bad.cut && later < 0:
		return nil
	case unwritten(tail, bad.offset, int(extent)):
		return nil
	}
	if later >= 0 {
		cerr.Problem += fmt.Sprintf("; a good record follows at offset %d", later)
	}
	return cerr
}

// laterRecords looks for good frames after the bad one at the start of
// tail (which begins at file offset base). It returns the offset of the
// first good frame (or -1), and the offset of the first that vouches that
// base was synced (or -1).
func laterRecords(tail []byte, base int64, c chain) (first, vouched int64) {
	first, vouched = -1, -1
	// A good frame is not all zeros (its length is not 0): none starts in
	// the zeros that end the tail (unwritten space, Log.zeroFill), which
	// are not searched byte by byte.
	nz := len(tail)
	for nz > 0 && tail[nz-1] == 0 {
		nz--
	}
	var r Record
	for p := 1; p < nz && p+minFrame <= len(tail); p++ {
		b := tail[p:]
		fi := readFrameInfo(b)
		size := frameSize + int(fi.length)
		if fi.length < payloadFixed || size > len(b) || int64(fi.synced) > base+int64(p) {
			continue
		}
		pl := b[frameSize:size]
		if pl[0] != recordKind || pl[1]&^knownFlags != 0 || binary.BigEndian.Uint32(pl[36:40]) != uint32(c.ledger) {
			continue
		}
		if binary.BigEndian.Uint64(pl[16:]) <= c.seq || frameCRC(b[:size]) != fi.crc || decodePayload(pl, &r) != nil {
			continue
		}
		if first < 0 {
			first = base + int64(p)
		}
		if int64(fi.synced) > base {
			return first, base + int64(p)
		}
		p += size - 1
	}
	return first, vouched
}

// lengthDamaged reports whether the frame at the start of tail, which runs
// past the end of the file, would have a good CRC if its length reached
// exactly to the end: then its bytes are all there and its length field
// was altered.
func lengthDamaged(tail []byte) bool {
	if len(tail) < frameSize+payloadFixed {
		return false
	}
	f := slices.Clone(tail)
	binary.BigEndian.PutUint32(f, uint32(len(f)-frameSize))
	return frameCRC(f) == binary.BigEndian.Uint32(tail[4:])
}

// sector is the unit in which a disk loses unsynced writes, for unwritten.
const sector = 512

// unwritten reports whether the frame at the start of tail (at file offset
// base, extent bytes long) shows the mark of a write that never reached
// the disk. After a crash, a block of unsynced data that was lost reads
// back as zeros: the whole block, or its part after the file's old end.
// Either way the zeros run up to a block boundary (a multiple of the
// sector size), where data that did reach the disk resumes, or to the end
// of the file: a run of zeros that reaches a sector boundary.
func unwritten(tail []byte, base int64, extent int) bool {
	for i := 0; i < extent; {
		if tail[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(tail) && tail[j] == 0 {
			j++
		}
		// The lost block ends at a boundary inside the run (the data that
		// resumes there may itself begin with zeros), or at the end.
		if end := base + int64(j); end/sector*sector > base+int64(i) || j == len(tail) {
			return true
		}
		i = j
	}
	return false
}

// maxBitFixFrame bounds the frames whose single-bit errors bitFlipped
// looks for.
const maxBitFixFrame = 1 << 20

// bitFlipped reports whether the frame at the start of tail would be good
// with one bit changed (in its length field, or anywhere in the frame as
// its length field gives it): then it was written whole and damaged later,
// which is corruption, whatever zeros it may also hold.
func bitFlipped(tail []byte) bool {
	if len(tail) < frameSize+payloadFixed {
		return false
	}
	stored := binary.BigEndian.Uint32(tail[4:])
	length := binary.BigEndian.Uint32(tail)
	for b := range 32 {
		n := int64(frameSize) + int64(length^1<<b)
		if n <= int64(len(tail)) && n >= frameSize+payloadFixed {
			f := slices.Clone(tail[:n])
			binary.BigEndian.PutUint32(f, length^1<<b)
			if frameCRC(f) == stored {
				return true
			}
		}
	}
	n := int64(frameSize) + int64(length)
	if n > int64(len(tail)) || n > maxBitFixFrame {
		return false
	}
	f := tail[:n]
	diff := frameCRC(f) ^ stored
	if diff&(diff-1) == 0 {
		return true // one bit of the stored CRC itself
	}
	// The CRC is linear: flipping bit b of message byte i changes it by
	// the CRC (with zero initial and final values) of that bit followed by
	// the message's remaining bytes as zeros. Walk the message from its
	// end, advancing the eight syndromes by one zero byte per step.
	msgLen := len(f) - 4 // the CRC field is not part of the message
	var syn [8]uint32
	for b := range 8 {
		syn[b] = castagnoli[1<<b]
	}
	for k := msgLen - 1; k >= 0; k-- {
		for b := range 8 {
			if syn[b] == diff {
				return true
			}
			syn[b] = castagnoli[syn[b]&0xff] ^ syn[b]>>8
		}
	}
	return false
}

// readRecord reads and decodes the record at loc of a segment whose size
// is size, checking its frame CRC.
func readRecord(f io.ReaderAt, name string, loc Location, size int64) (*Record, error) {
	if loc.Offset < headerSize || loc.Size < frameSize+payloadFixed || loc.End() > size {
		return nil, &CorruptionError{File: name, Offset: loc.Offset, Problem: "record location outside the segment's records",
			Expected: fmt.Sprintf("a frame of at least %d bytes from offset %d to at most %d", frameSize+payloadFixed, headerSize, size), Found: fmt.Sprintf("%d bytes", loc.Size)}
	}
	b := make([]byte, loc.Size)
	if n, err := f.ReadAt(b, loc.Offset); n < len(b) {
		if err == nil || err == io.EOF {
			// The file is shorter than its records: cut since its size
			// was taken (a sealed segment's is taken once).
			return nil, &CorruptionError{File: name, Offset: loc.Offset, Problem: "segment file ends inside the record (cut after it was written)",
				Expected: fmt.Sprintf("%d bytes", len(b)), Found: fmt.Sprintf("%d bytes", n)}
		}
		return nil, fmt.Errorf("segment: read %s at %d: %w", name, loc.Offset, err)
	}
	fi := readFrameInfo(b)
	if int64(fi.length)+frameSize != loc.Size {
		return nil, &CorruptionError{File: name, Offset: loc.Offset, Problem: "frame length differs from the location's", Expected: fmt.Sprint(loc.Size - frameSize), Found: fmt.Sprint(fi.length)}
	}
	if got := frameCRC(b); got != fi.crc {
		return nil, &CorruptionError{File: name, Offset: loc.Offset, Problem: "frame CRC mismatch", Expected: fmt.Sprintf("%08x", got), Found: fmt.Sprintf("%08x", fi.crc)}
	}
	r := &Record{}
	if err := decodePayload(b[frameSize:], r); err != nil {
		return nil, &CorruptionError{File: name, Offset: loc.Offset, Problem: err.Error()}
	}
	return r, nil
}

// watchOpened records, for CheckFiles (Options.Watch), the identity of
// the Log's directory and segments as Open found them (segs, the last
// open for writing as f, size bytes long), and the mark of its last
// record. A file whose identity cannot be taken is not watched.
func (l *Log) watchOpened(segs []*segmentFile, f vfs.File, size int64) {
	w := newFileWatch(l.dir)
	last := segs[len(segs)-1]
	// By path: the identity os.SameFile compares (a vfs.File's Stat is
	// not an os.FileInfo of the os package).
	for _, s := range segs[:len(segs)-1] {
		fi, _ := os.Lstat(s.name)
		w.sealed = append(w.sealed, watchedSegment{num: s.number, path: s.name, fi: fi, size: s.size})
	}
	fi, _ := os.Lstat(last.name)
	w.active = watchedSegment{num: last.number, path: last.name, fi: fi}
	var off int64
	if l.head.Loc.Segment == last.number {
		off = l.head.Loc.Offset
	}
	var b [markLen]byte
	if n, _ := f.ReadAt(b[:], off); n == markLen && off+markLen <= size {
		l.last.set(last.number, off, b[:])
	}
	l.files = w
}
