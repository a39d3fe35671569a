package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// badRecord says why the record at offset failed verification.
type badRecord struct {
	offset          int64
	problem         string
	expected, found string
	// cut is set when the frame runs past the end of the file: the record
	// was only partly written (or its length field is damaged).
	cut bool
	// crcOK is set when the frame's CRC is good and the record fails a
	// later check: that is never a torn write.
	crcOK bool
	// zero is set when the frame's header is all zeros: no record was
	// ever written there, or the space was written with zeros ahead of
	// the records (Log.zeroFill).
	zero bool
}

func (b *badRecord) corruption(file string) *CorruptionError {
	return &CorruptionError{File: file, Offset: b.offset, Problem: b.problem, Expected: b.expected, Found: b.found}
}

// chain is the position a verifier has reached: the last verified record.
//
// Invariant: seq == 0 if and only if id is the ledger's genesis ID (no
// record verified yet); otherwise id is the ID of record seq.
type chain struct {
	ledger eventid.LedgerID
	id     eventid.ID
	seq    uint64
}

// check verifies a decoded record r (whose frame CRC is good) as the next
// one after c, at offset off. On success it advances c.
func (c *chain) check(r *Record, off int64) *badRecord {
	bad := func(problem, expected, found string) *badRecord {
		return &badRecord{offset: off, problem: problem, expected: expected, found: found}
	}
	if r.ID.Ledger() != c.ledger {
		return bad("record of another ledger", c.ledger.String(), r.ID.Ledger().String())
	}
	if r.Seq != c.seq+1 {
		return bad("sequence number out of order", fmt.Sprint(c.seq+1), fmt.Sprint(r.Seq))
	}
	if r.Prev != c.id {
		return bad("chain broken: previous ID differs from the record before", c.id.String(), r.Prev.String())
	}
	if r.ID.Micros() <= c.id.Micros() {
		return bad("timestamp not after the previous record's", fmt.Sprintf("> %d", c.id.Micros()), fmt.Sprint(r.ID.Micros()))
	}
	content := r.Content()
	if c.seq == 0 {
		if l := content.LedgerID(); l != c.ledger {
			return bad("genesis record does not hash to the ledger ID", c.ledger.String(), l.String())
		}
	}
	if want := content.ID(c.ledger, r.ID.Micros(), c.id); want != r.ID {
		return bad("event checksum mismatch", want.String(), r.ID.String())
	}
	c.id, c.seq = r.ID, r.Seq
	return nil
}

// scanner reads and verifies the records of one segment in order.
//
// It reads the file in large blocks (blockReader) and verifies each frame
// where it lies in its block: a record is never copied out of it (a
// verification of the whole ledger reads every byte once, and a second
// copy of each was a tenth of the scanner's time).
type scanner struct {
	name  string // file name, for errors
	r     blockReader
	off   int64 // offset of the next record
	end   int64 // bytes of the segment that may be read
	chain chain
	// synced is the largest synced offset vouched for by a verified
	// record: every byte before it was on stable storage.
	synced int64
	buf    []byte // the frame next() just returned, in r's block
	rec    Record
}

// scanChunk is the size of the reads of a scanner and of an Iterator
// (blockReader): a segment's remaining bytes if fewer, a frame if larger.
const scanChunk = 256 << 10

func newScanner(f io.ReaderAt, name string, start, end int64, c chain) *scanner {
	return &scanner{
		name:  name,
		r:     blockReader{f: f},
		off:   start,
		end:   end,
		chain: c,
	}
}

// read returns the n bytes of the segment at s.off.
func (s *scanner) read(n int64) ([]byte, error) {
	b, err := s.r.bytes(s.off, n, s.end)
	if err != nil {
		return nil, fmt.Errorf("segment: read %s at %d: %w", s.name, s.off, err)
	}
	return b, nil
}

// next reads and verifies the next record. It returns false at the end of
// the segment (bad == nil, err == nil), at a record that fails verification
// (bad != nil), or on a read error. The record (s.rec, s.buf) is valid
// until the next call.
func (s *scanner) next() (ok bool, bad *badRecord, err error) {
	if s.off == s.end {
		return false, nil, nil
	}
	if s.end-s.off < frameSize {
		return false, &badRecord{offset: s.off, problem: fmt.Sprintf("frame header cut short: %d bytes left", s.end-s.off), cut: true}, nil
	}
	hdr, err := s.read(frameSize)
	if err != nil {
		return false, nil, err
	}
	fi := readFrameInfo(hdr)
	size := int64(frameSize) + int64(fi.length)
	if fi.length < payloadFixed {
		if allZero(hdr) {
			return false, &badRecord{offset: s.off, problem: "unwritten space (zeros)", expected: "a frame header", found: fmt.Sprintf("%d zero bytes", frameSize), zero: true}, nil
		}
		return false, &badRecord{offset: s.off, problem: "frame length too small", expected: fmt.Sprintf(">= %d", payloadFixed), found: fmt.Sprint(fi.length)}, nil
	}
	if s.off+size > s.end {
		return false, &badRecord{offset: s.off, problem: fmt.Sprintf("frame of %d bytes runs past the end of the file at %d", size, s.end), cut: true}, nil
	}
	if s.buf, err = s.read(size); err != nil {
		return false, nil, err
	}
	s.buf = s.buf[:size:size]
	if got := frameCRC(s.buf); got != fi.crc {
		return false, &badRecord{offset: s.off, problem: "frame CRC mismatch", expected: fmt.Sprintf("%08x", got), found: fmt.Sprintf("%08x", fi.crc)}, nil
	}
	if int64(fi.synced) > s.off {
		return false, &badRecord{offset: s.off, problem: "frame claims bytes after its own start were synced", expected: fmt.Sprintf("<= %d", s.off), found: fmt.Sprint(fi.synced), crcOK: true}, nil
	}
	if err := decodePayload(s.buf[frameSize:], &s.rec); err != nil {
		return false, &badRecord{offset: s.off, problem: err.Error(), crcOK: true}, nil
	}
	if b := s.chain.check(&s.rec, s.off); b != nil {
		b.crcOK = true
		return false, b, nil
	}
	s.synced = max(s.synced, int64(fi.synced))
	s.off += size
	return true, nil, nil
}

// location of the record next() just returned.
func (s *scanner) location(segment uint64) Location {
	size := int64(len(s.buf))
	return Location{Segment: segment, Offset: s.off - size, Size: size}
}

// segmentFile is an open segment with its verified header.
type segmentFile struct {
	number uint64
	name   string // path
	file   vfs.File
	size   int64
	hdr    header
	ident  FileIdentity // as the file was when its header was read
}

// reopen opens the segment's file again if close closed it.
func (s *segmentFile) reopen(fs vfs.FS) error {
	if s.file != nil {
		return nil
	}
	f, err := fs.Open(s.name)
	if err != nil {
		return fmt.Errorf("segment: open %s: %w", s.name, err)
	}
	s.file = f
	return nil
}

// close closes the segment's file, if open.
func (s *segmentFile) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// readHeader opens segment n of dir and checks its header against ledger.
func readHeader(fs vfs.FS, dir string, n uint64, ledger eventid.LedgerID) (*segmentFile, error) {
	path := fs.PathJoin(dir, segmentName(n))
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("segment: stat %s: %w", path, err)
	}
	sf := &segmentFile{number: n, name: path, file: f, size: st.Size(), ident: fileIdentity(st)}
	var b [headerSize]byte
	if sf.size < headerSize {
		return sf, errShortHeader
	}
	if _, err := f.ReadAt(b[:], 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("segment: read header of %s: %w", path, err)
	}
	h, err := decodeHeader(b[:])
	if err != nil {
		if errors.Is(err, ErrFormatVersion) {
			f.Close()
			return nil, fmt.Errorf("segment: %s: %w", path, err)
		}
		if allZero(b[:]) {
			if sf.size == headerSize {
				return sf, errShortHeader
			}
			// A header is synced before any record is written: one
			// that reads as zeros with bytes after it was damaged,
			// not left unfinished by a crash.
			f.Close()
			return nil, &CorruptionError{File: path, Offset: 0, Problem: fmt.Sprintf("segment header missing: its %d bytes are zeros, but %d bytes follow it (a header is synced before any record is written)", headerSize, sf.size-headerSize),
				Expected: "a segment header", Found: fmt.Sprintf("%d zero bytes", headerSize)}
		}
		f.Close()
		return nil, &CorruptionError{File: path, Offset: 0, Problem: "bad segment header: " + err.Error()}
	}
	sf.hdr = h
	if h.ledger != ledger {
		f.Close()
		return nil, &CorruptionError{File: path, Offset: 12, Problem: "segment of another ledger", Expected: ledger.String(), Found: h.ledger.String()}
	}
	if h.number != n {
		f.Close()
		return nil, &CorruptionError{File: path, Offset: 16, Problem: "segment number differs from the file name", Expected: fmt.Sprint(n), Found: fmt.Sprint(h.number)}
	}
	return sf, nil
}

// errShortHeader: a segment's header is missing or all zeros, as after a
// crash while the segment was being created.
var errShortHeader = errors.New("segment header not written")

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
