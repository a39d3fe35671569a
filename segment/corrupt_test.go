package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/crc32"
)

// files reads every file of dir on fs.
func files(t testing.TB, fs vfs.FS, dir string) map[string][]byte {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, name := range names {
		f, err := fs.Open(fs.PathJoin(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// memDir returns a new memory file system holding files in dir.
func memDir(t testing.TB, dir string, contents map[string][]byte) vfs.FS {
	t.Helper()
	fs := vfs.NewMem()
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range contents {
		f, err := fs.Create(fs.PathJoin(dir, name), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		// vfs.File.Write may scribble on its argument (Pebble's memory
		// file system does under the race detector): give it a copy.
		if _, err := f.Write(bytes.Clone(b)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return fs
}

func cloneFiles(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = bytes.Clone(v)
	}
	return out
}

// smallLedger writes a ledger of n records (plus the genesis) with the
// given segment size and returns its files and record locations.
func smallLedger(t testing.TB, n int, segSize int64) (map[string][]byte, []Location) {
	t.Helper()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: segSize})
	locs := []Location{l.Head().Loc}
	for i := 0; i < n; i++ {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, b.Locations[0])
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return files(t, fs, "led"), locs
}

// openFiles opens a ledger made of contents and reports the result; it
// also says whether the open changed any file.
func openFiles(t *testing.T, contents map[string][]byte) (*Recovery, error, bool) {
	t.Helper()
	fs := memDir(t, "led", contents)
	l, rec, err := openTestLog(t, fs, "led", Options{})
	if err == nil {
		l.Close()
	}
	after := files(t, fs, "led")
	changed := len(after) != len(contents)
	for name, b := range contents {
		if !bytes.Equal(after[name], b) {
			changed = true
		}
	}
	return rec, err, changed
}

func corruptionAt(err error) (*CorruptionError, bool) {
	var ce *CorruptionError
	ok := errors.As(err, &ce) && errors.Is(err, ErrCorruption)
	return ce, ok
}

// TestBitFlipEveryByte flips one bit at every byte of a small sealed
// segment (the last one, after a clean close). Every flip must be reported
// as corruption at the offset of the record (or header) that holds the
// byte, and nothing may be cut: each record was synced, so none of them is
// a torn write.
func TestBitFlipEveryByte(t *testing.T) {
	t.Parallel()
	orig, locs := smallLedger(t, 8, 0)
	name := segmentName(1)
	seg := orig[name]
	recordAt := func(p int64) int64 {
		for _, loc := range locs {
			if p >= loc.Offset && p < loc.End() {
				return loc.Offset
			}
		}
		return 0
	}
	for p := range int64(len(seg)) {
		contents := cloneFiles(orig)
		contents[name][p] ^= 1 << (p % 8)
		_, err, changed := openFiles(t, contents)
		if changed {
			t.Fatalf("byte %d: Open changed the files (err %v)", p, err)
		}
		ce, ok := corruptionAt(err)
		if !ok {
			t.Fatalf("byte %d: got %v, want corruption", p, err)
		}
		if want := recordAt(p); ce.Offset != want && !(p < headerSize && ce.Offset < headerSize) {
			t.Fatalf("byte %d: corruption reported at offset %d, want %d: %v", p, ce.Offset, want, err)
		}
	}
}

// TestTornTailEveryCut cuts the last segment at every byte inside its last
// record: each is a torn write, cut back to the record before.
func TestTornTailEveryCut(t *testing.T) {
	t.Parallel()
	orig, locs := smallLedger(t, 8, 0)
	name := segmentName(1)
	last := locs[len(locs)-1]
	for size := last.Offset; size <= last.End(); size++ {
		contents := cloneFiles(orig)
		contents[name] = contents[name][:size]
		rec, err, _ := openFiles(t, contents)
		if err != nil {
			t.Fatalf("cut at %d: %v", size, err)
		}
		switch {
		case size == last.End() || size == last.Offset:
			if rec.TruncatedBytes != 0 {
				t.Fatalf("cut at a record end: %d bytes truncated", rec.TruncatedBytes)
			}
		case (rec.TruncatedBytes != size-last.Offset || rec.TornAt.Offset != last.Offset):
			t.Fatalf("cut at %d: truncated %d bytes at %d, want %d at %d", size, rec.TruncatedBytes, rec.TornAt.Offset, size-last.Offset, last.Offset)
		case rec.Head.Seq != uint64(len(locs)-1):
			t.Fatalf("cut at %d: head #%d, want #%d", size, rec.Head.Seq, len(locs)-1)
		}
	}
}

// TestUnwrittenBlocks zeroes the end of the file from each sector
// boundary inside the last records, as a crash that lost unsynced blocks
// leaves it: a torn write. The same zeros before a record that a later
// record vouches was synced are corruption.
func TestUnwrittenBlocks(t *testing.T) {
	t.Parallel()
	orig, locs := smallLedger(t, 30, 0)
	name := segmentName(1)
	seg := orig[name]
	for a := int64(sector); a < int64(len(seg)); a += sector {
		contents := cloneFiles(orig)
		clear(contents[name][a:])
		rec, err, _ := openFiles(t, contents)
		if err != nil {
			t.Fatalf("zeros from %d: %v", a, err)
		}
		var want Location
		for _, loc := range locs {
			if a > loc.Offset && a < loc.End() || a == loc.Offset {
				want = loc
			}
		}
		if rec.TornAt.Offset != want.Offset {
			t.Fatalf("zeros from %d: torn at %d, want %d", a, rec.TornAt.Offset, want.Offset)
		}
	}

	// A crash that kept some unsynced blocks but not others: zeros from
	// inside a record (the file's old end) to the next sector boundary,
	// then intact records that no sync ever covered. A torn write.
	fsNone := vfs.NewMem()
	ln := newTestLog(t, fsNone, "led", Options{Durability: None})
	var noneLocs []Location
	for i := 0; i < 30; i++ {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := ln.Append(b); err != nil {
			t.Fatal(err)
		}
		noneLocs = append(noneLocs, b.Locations[0])
	}
	ln.Close()
	for _, r := range noneLocs[:25] {
		boundary := (r.Offset/sector + 1) * sector
		if boundary >= r.End() || boundary-(r.Offset+20) < 16 {
			continue
		}
		contents := files(t, fsNone, "led")
		clear(contents[name][r.Offset+20 : boundary])
		rec, err, _ := openFiles(t, contents)
		if err != nil || rec.TornAt.Offset != r.Offset {
			t.Fatalf("zeros from inside the record at %d to the sector boundary %d, good records after: torn at %d, err %v; want torn at %d", r.Offset, boundary, rec.TornAt.Offset, err, r.Offset)
		}
	}

	// A single zeroed sector in the middle, with good records after it
	// that were written after a sync that covered it: corruption.
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{})
	for i := 0; i < 30; i++ {
		if err := l.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	contents := files(t, fs, "led")
	clear(contents[name][2*sector : 3*sector])
	if _, err, changed := openFiles(t, contents); changed || !errors.Is(err, ErrCorruption) {
		t.Fatalf("zeroed synced sector: %v (changed %v), want corruption", err, changed)
	}
}

func TestDamagedSegmentSet(t *testing.T) {
	t.Parallel()
	orig, _ := smallLedger(t, 60, 4<<10)
	if len(orig) < 4 {
		t.Fatalf("only %d segments", len(orig))
	}
	s1, s2, s3 := segmentName(1), segmentName(2), segmentName(3)
	other, _ := func() (map[string][]byte, []Location) {
		fs := vfs.NewMem()
		g := genesisEntry
		g.Key = "another"
		c := eventid.Content{Entity: g.Entity, Key: g.Key, Event: g.Event, Meta: g.Meta, Data: g.Data}
		l, err := Create("led", Options{FS: fs, Ledger: c.LedgerID()})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(&Batch{Entries: []Entry{g, entry(1)}}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		return files(t, fs, "led"), nil
	}()

	for _, tc := range []struct {
		name   string
		damage func(m map[string][]byte)
		want   string
	}{
		{"sealed segment cut at a record boundary", func(m map[string][]byte) {
			_, locs := smallLedger(t, 60, 4<<10)
			var lastOf1 Location
			for _, loc := range locs {
				if loc.Segment == 1 {
					lastOf1 = loc
				}
			}
			m[s1] = m[s1][:lastOf1.Offset]
		}, "does not continue the chain"},
		{"sealed segment cut inside a record", func(m map[string][]byte) { m[s1] = m[s1][:len(m[s1])-7] }, "past the end"},
		{"sealed segment zeroed", func(m map[string][]byte) { clear(m[s2][headerSize:]) }, ""},
		{"missing segment", func(m map[string][]byte) { delete(m, s2) }, "segment missing"},
		{"segment of another ledger", func(m map[string][]byte) { m[s2] = other[s1] }, "another ledger"},
		{"swapped segments", func(m map[string][]byte) { m[s2], m[s3] = m[s3], m[s2] }, "differs from the file name"},
		{"header zeroed in a sealed segment", func(m map[string][]byte) { clear(m[s2][:headerSize]) }, "header missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contents := cloneFiles(orig)
			tc.damage(contents)
			_, err, changed := openFiles(t, contents)
			if changed {
				t.Fatalf("Open changed the files: %v", err)
			}
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want corruption saying %q", err, tc.want)
			}
		})
	}
}

func TestNewerFormatVersion(t *testing.T) {
	t.Parallel()
	orig, _ := smallLedger(t, 3, 0)
	contents := cloneFiles(orig)
	b := contents[segmentName(1)]
	binary.BigEndian.PutUint16(b[8:], formatVersion+1)
	// Seal the header CRC, as a newer annal would have written it.
	binary.BigEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	_, err, changed := openFiles(t, contents)
	if changed || !errors.Is(err, ErrFormatVersion) {
		t.Fatalf("got %v (changed %v), want ErrFormatVersion", err, changed)
	}
}

func TestHeaderlessLastSegmentRemoved(t *testing.T) {
	t.Parallel()
	orig, _ := smallLedger(t, 20, 4<<10)
	n := uint64(len(orig))
	for _, size := range []int{0, 10, headerSize} {
		contents := cloneFiles(orig)
		contents[segmentName(n+1)] = make([]byte, size)
		rec, err, _ := openFiles(t, contents)
		if err != nil || rec.RemovedSegment != n+1 {
			t.Fatalf("header-less segment of %d bytes: removed %d, err %v", size, rec.RemovedSegment, err)
		}
	}
}

// TestTornBatchEveryCut cuts the last segment at every byte of a last
// batch of five records, record boundaries included: whatever part of the
// batch is left, Open cuts all of it, so that a batch is all or nothing
// after a crash. Only the whole batch stays.
func TestTornBatchEveryCut(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{})
	for i := range 3 {
		if err := l.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := l.Head()
	b := &Batch{Entries: []Entry{entry(3), entry(4), entry(5), entry(6), entry(7)}}
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	orig := files(t, fs, "led")
	name := segmentName(1)
	start, end := b.Locations[0].Offset, b.Locations[4].End()
	for size := start; size <= end; size++ {
		contents := cloneFiles(orig)
		contents[name] = contents[name][:size]
		rec, err, _ := openFiles(t, contents)
		if err != nil {
			t.Fatalf("cut at %d: %v", size, err)
		}
		switch size {
		case start:
			if rec.TruncatedBytes != 0 || rec.Head.ID != before.ID {
				t.Fatalf("no batch: %d bytes truncated, head %s, want %s", rec.TruncatedBytes, rec.Head.ID, before.ID)
			}
		case end:
			if rec.TruncatedBytes != 0 || rec.Head.ID != b.IDs[4] {
				t.Fatalf("whole batch: %d bytes truncated, head %s, want %s", rec.TruncatedBytes, rec.Head.ID, b.IDs[4])
			}
		default:
			if rec.Head.ID != before.ID || rec.TornAt.Offset != start || rec.TruncatedBytes != size-start {
				t.Fatalf("cut at %d: head %s #%d, truncated %d bytes at %d; want head %s #%d, %d bytes at %d",
					size, rec.Head.ID, rec.Head.Seq, rec.TruncatedBytes, rec.TornAt.Offset, before.ID, before.Seq, size-start, start)
			}
		}
	}
}
