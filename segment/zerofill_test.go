package segment

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// zeroFS is a file system for the zero-fill tests: a memory one (files
// without ftruncate: truncate copies and renames) or the disk's.
func zeroFS(t *testing.T, kind string) (vfs.FS, string) {
	if kind == "disk" {
		return vfs.Default, vfs.Default.PathJoin(t.TempDir(), "led")
	}
	return vfs.NewMem(), "led"
}

func fileBytes(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// appendN appends n Sync batches of k entries from entry(from) on and
// returns their IDs and the locations of their last records.
func appendN(t *testing.T, l *Log, from, n, k int) ([]eventid.ID, []Location) {
	t.Helper()
	var ids []eventid.ID
	var locs []Location
	for i := range n {
		b := &Batch{}
		for j := range k {
			b.Entries = append(b.Entries, entry(from+i*k+j))
		}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.IDs...)
		locs = append(locs, b.Locations[len(b.Locations)-1])
	}
	return ids, locs
}

// TestZeroFillAhead: Sync appends keep the active segment written with
// zeros ahead of its records (the file is longer than the records, and
// the rest is zeros); a rotation cuts the sealed segment to its last
// record, and so does Close to the active one; a reopen finds nothing to
// cut.
func TestZeroFillAhead(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mem", "disk"} {
		t.Run(kind, func(t *testing.T) {
			fs, dir := zeroFS(t, kind)
			o := Options{SegmentSize: 64 << 10}
			l := newTestLog(t, fs, dir, o)
			appendN(t, l, 0, 10, 2)
			name, end := l.Active()
			b := fileBytes(t, fs, fs.PathJoin(dir, name))
			if int64(len(b)) <= end {
				t.Fatalf("active segment of %d bytes, records end at %d: no zeros ahead", len(b), end)
			}
			if !allZero(b[end:]) {
				t.Fatalf("bytes after the records at %d are not all zeros", end)
			}
			// Rotations: each sealed segment ends at its last record.
			lastIn := map[uint64]Location{}
			for l.Head().Loc.Segment < 3 {
				_, locs := appendN(t, l, 1000, 5, 3)
				for _, loc := range locs {
					lastIn[loc.Segment] = loc
				}
			}
			for seg := uint64(1); seg < l.Head().Loc.Segment; seg++ {
				if size := int64(len(fileBytes(t, fs, fs.PathJoin(dir, segmentName(seg))))); size != lastIn[seg].End() {
					t.Fatalf("sealed segment %d is %d bytes, its last record ends at %d", seg, size, lastIn[seg].End())
				}
			}
			name, end = l.Active()
			if size := int64(len(fileBytes(t, fs, fs.PathJoin(dir, name)))); size <= end {
				t.Fatalf("active segment %s of %d bytes, records end at %d: no zeros ahead", name, size, end)
			}
			head := l.Head()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if size := int64(len(fileBytes(t, fs, fs.PathJoin(dir, name)))); size != end {
				t.Fatalf("closed: last segment of %d bytes, its records end at %d", size, end)
			}
			o.FS, o.Ledger = fs, testLedger()
			l2, rec, err := Open(dir, o, Head{})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if rec.TruncatedBytes != 0 || rec.Unwritten != 0 || rec.Head != head {
				t.Fatalf("reopen after Close: %+v; want nothing cut, head %+v", rec, head)
			}
		})
	}
}

// TestZeroTailAfterCrash: a crash leaves the active segment with zeros
// after its records (synced with them). Open keeps every acknowledged
// record, cuts the zeros silently (no torn write), and a read-only open
// before it shows every record and hides nothing. The same after a crash
// between the writing of zeros and the cut of a rotation (testHooks.seal).
func TestZeroTailAfterCrash(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, fs vfs.FS, acked []eventid.ID, want Head) {
		t.Helper()
		r, err := openReadOnlyTest(t, fs, "led")
		if err != nil {
			t.Fatal(err)
		}
		if h := r.HiddenTail(); h != (Hidden{}) || r.Head() != want {
			t.Fatalf("read-only open: head %+v hidden %+v; want head %+v, nothing hidden", r.Head(), h, want)
		}
		r.Close()
		l, rec, err := Open("led", Options{FS: fs, Ledger: testLedger(), Witness: want}, Head{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.TruncatedBytes != 0 || rec.TornAt != (Location{}) || rec.Unwritten == 0 || rec.Head != want {
			t.Fatalf("recovery %+v; want the zeros cut as unwritten, no torn write, head %+v", rec, want)
		}
		name, end := l.Active()
		if size := int64(len(fileBytes(t, fs, fs.PathJoin("led", name)))); size != end {
			t.Fatalf("after recovery the last segment is %d bytes, its records end at %d", size, end)
		}
		l.Close()
		checkExactly(t, "after the crash", fs, acked)
	}

	t.Run("active", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		l := newTestLog(t, mem, "led", Options{SegmentSize: 64 << 10})
		acked := []eventid.ID{l.Head().ID}
		ids, _ := appendN(t, l, 0, 20, 3)
		acked = append(acked, ids...)
		crashed := mem.CrashClone(vfs.CrashCloneCfg{})
		check(t, crashed, acked, l.Head())
		l.Close()
	})

	t.Run("before the rotation's cut", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		l := newTestLog(t, mem, "led", Options{SegmentSize: 4 << 10})
		acked := []eventid.ID{l.Head().ID}
		var crashed *vfs.MemFS
		var at Head
		l.opts.test.seal = func() {
			if crashed == nil {
				crashed, at = mem.CrashClone(vfs.CrashCloneCfg{}), l.head
			}
		}
		for i := 0; crashed == nil; i++ {
			if i == 1000 {
				t.Fatal("no rotation cut zeros after the records")
			}
			ids, _ := appendN(t, l, len(acked), 1, 2)
			if crashed == nil {
				acked = append(acked, ids...)
			}
		}
		l.Close()
		if at.ID != acked[len(acked)-1] {
			t.Fatalf("crash at head %+v, the last acknowledged record is %s", at, acked[len(acked)-1])
		}
		check(t, crashed, acked, at)
	})
}

// TestZeroTailLostRecordIsCorruption: zeros where a durable record was
// (the witness's, or one that a later record vouches was synced) are
// still corruption, with zeros ahead of the records after them or not.
func TestZeroTailLostRecordIsCorruption(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	l := newTestLog(t, mem, "led", Options{})
	_, locs := appendN(t, l, 0, 20, 1)
	w := l.Durable()
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	l.Close()
	name := segmentName(1)
	orig := files(t, crashed, "led")
	if last := locs[len(locs)-1]; int64(len(orig[name])) <= last.End() {
		t.Fatalf("crashed segment of %d bytes, no zeros after the records at %d", len(orig[name]), last.End())
	}

	// The witness's record zeroed: a zero tail from there, but lost.
	contents := cloneFiles(orig)
	clear(contents[name][w.Loc.Offset:])
	fs := memDir(t, "led", contents)
	if _, _, err := Open("led", Options{FS: fs, Ledger: testLedger(), Witness: w}, Head{}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("witness's record zeroed: %v, want corruption", err)
	}
	if !bytesEqual(files(t, fs, "led"), contents) {
		t.Fatal("the refused open changed the files")
	}

	// A record in the middle zeroed, later ones vouching for it.
	contents = cloneFiles(orig)
	clear(contents[name][locs[5].Offset:locs[5].End()])
	if _, err, changed := openFiles(t, contents); changed || !errors.Is(err, ErrCorruption) {
		t.Fatalf("zeroed synced record: %v (changed %v), want corruption", err, changed)
	}
}

func bytesEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// TestZeroFillFaults: writes of zeros that fail (EIO, a full disk, a
// short write) fail no append and lose nothing acknowledged.
func TestZeroFillFaults(t *testing.T) {
	t.Parallel()
	for _, fault := range []faultfs.Fault{faultfs.EIO, faultfs.ENOSPC, faultfs.ShortWrite} {
		t.Run(fault.String(), func(t *testing.T) {
			inner := vfs.NewMem()
			fs := faultfs.Wrap(inner)
			var mu sync.Mutex
			zeros := map[[2]int64]bool{}
			zeroFill := func(off, n int64) {
				mu.Lock()
				zeros[[2]int64{off, n}] = true
				mu.Unlock()
			}
			failed := 0
			fs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
				mu.Lock()
				defer mu.Unlock()
				if op.Kind == faultfs.WriteAt && zeros[[2]int64{op.Offset, int64(op.Len)}] {
					failed++
					return fault
				}
				return faultfs.NoFault
			}))
			l := newTestLog(t, fs, "led", Options{SegmentSize: 8 << 10, test: testHooks{zeroFill: zeroFill}})
			acked := []eventid.ID{l.Head().ID}
			ids, _ := appendN(t, l, 0, 60, 2)
			acked = append(acked, ids...)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if failed < 2 {
				t.Fatalf("%d writes of zeros failed", failed)
			}
			fs.SetInjector(nil)
			checkExactly(t, "zero writes failing", fs, acked)
		})
	}
}

// TestReadOnlyFollowsZeroFill: a reader follows a writer whose records
// land in the zeros it wrote ahead of them (the file's size does not
// change) and across rotations: it sees every record, in order, never an
// error or a hidden tail.
func TestReadOnlyFollowsZeroFill(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mem", "disk"} {
		t.Run(kind, func(t *testing.T) {
			fs, dir := zeroFS(t, kind)
			w := newTestLog(t, fs, dir, Options{SegmentSize: 16 << 10})
			r, err := OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			want := []eventid.ID{w.Head().ID}
			done := make(chan struct{})
			var final Head
			go func() {
				defer close(done)
				for i := range 150 {
					b := &Batch{Entries: []Entry{entry(2 * i), entry(2*i + 1)}}
					if err := w.Append(b); err != nil {
						t.Error(err)
						return
					}
					want = append(want, b.IDs...)
				}
				final = w.Head()
			}()
			follow := func() {
				if _, err := r.Follow(); err != nil {
					t.Fatalf("Follow: %v", err)
				}
				// A write seen half done may be hidden; the zeros
				// ahead of the records never are.
				if h := r.HiddenTail(); h.Why == "unwritten space (zeros)" || h.Why == "frame length too small" {
					t.Fatalf("hidden tail %+v", h)
				}
			}
			for running := true; running; {
				select {
				case <-done:
					running = false
				default:
				}
				follow()
			}
			follow()
			if t.Failed() {
				return
			}
			if r.Head() != final || final.Loc.Segment < 3 {
				t.Fatalf("reader head %+v, writer's %+v (want at least 3 segments)", r.Head(), final)
			}
			got := roIDs(t, r)
			if len(got) != len(want) {
				t.Fatalf("reader shows %d records, %d written", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("record %d: %s, want %s", i, got[i], want[i])
				}
			}
			if _, err := r.Verify(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			w.Close()
		})
	}
}

// TestReadOnlyOpenBesideWriterInZeros: a writer appends records into
// the zeros ahead of its records (the file's size does not change) while
// a read-only open judges the end of what it scanned (testHooks.judge): what
// it finds there then (good records, some vouching that the zeros it saw
// were synced) is a writer at work, not corruption.
func TestReadOnlyOpenBesideWriterInZeros(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	w := newTestLog(t, fs, "led", Options{SegmentSize: 1 << 20})
	defer w.Close()
	appendN(t, w, 0, 5, 2)
	name, _ := w.Active()
	before := len(fileBytes(t, fs, fs.PathJoin("led", name)))
	judged := false
	judge := func() {
		if judged {
			return
		}
		judged = true
		appendN(t, w, 100, 3, 2) // three Sync groups: the later ones vouch for the first
	}
	r, err := OpenReadOnly("led", Options{FS: fs, Ledger: testLedger(), test: testHooks{judge: judge}})
	if err != nil {
		t.Fatalf("read-only open while the writer appends into its zeros: %v", err)
	}
	defer r.Close()
	if after := len(fileBytes(t, fs, fs.PathJoin("led", name))); after != before {
		t.Fatalf("the segment grew from %d to %d bytes: the appends did not land in the zeros", before, after)
	}
	if _, err := r.Follow(); err != nil {
		t.Fatal(err)
	}
	if r.Head() != w.Head() {
		t.Fatalf("reader head %+v, writer's %+v", r.Head(), w.Head())
	}
}

// TestLargeSyncGroupWritesNoZeros: a Sync group of more than zeroGroupMax
// bytes is written without zeros ahead (its fsync is shared by its many
// records; writing zeros would double the bytes written); small groups
// after it fill zeros ahead again.
func TestLargeSyncGroupWritesNoZeros(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mem", "disk"} {
		t.Run(kind, func(t *testing.T) {
			fs, dir := zeroFS(t, kind)
			l := newTestLog(t, fs, dir, Options{SegmentSize: 64 << 20})
			// 40 batches of 400 entries (~100 KiB each): past the zeros
			// the genesis' group wrote ahead.
			for i := range 40 {
				appendN(t, l, 1+i*400, 1, 400)
			}
			name, end := l.Active()
			if size := int64(len(fileBytes(t, fs, fs.PathJoin(dir, name)))); size != end {
				t.Fatalf("after large Sync groups the file is %d bytes, its records end at %d: zeros were written ahead of them", size, end)
			}
			appendN(t, l, 20000, 3, 2)
			name, end = l.Active()
			if size := int64(len(fileBytes(t, fs, fs.PathJoin(dir, name)))); size <= end {
				t.Fatalf("after small Sync groups the file is %d bytes, its records end at %d: no zeros ahead", size, end)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadOnlyOpenBesideWriterCuttingZeros: a writer cuts the zeros ahead
// of its records (it seals or closes the segment: Log.sealEnd) while a
// read-only open judges the zeros that end what it scanned
// (testHooks.judge, after the size was checked): the file, shorter than
// when it was scanned, is a writer at work, not corruption, and every
// record is shown.
func TestReadOnlyOpenBesideWriterCuttingZeros(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mem", "disk"} {
		t.Run(kind, func(t *testing.T) {
			fs, dir := zeroFS(t, kind)
			w := newTestLog(t, fs, dir, Options{SegmentSize: 1 << 20})
			appendN(t, w, 0, 5, 2)
			want := w.Head()
			name, _ := w.Active()
			path := fs.PathJoin(dir, name)
			before := len(fileBytes(t, fs, path))
			closed := false
			judge := func() {
				if !closed {
					closed = true
					if err := w.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				}
			}
			r, err := OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger(), test: testHooks{judge: judge}})
			if !closed {
				t.Fatal("the read-only open judged no tail: the segment had no zeros ahead of its records")
			}
			if after := len(fileBytes(t, fs, path)); after >= before {
				t.Fatalf("the segment is %d bytes after the writer's Close, %d before: no zeros were cut", after, before)
			}
			if err != nil {
				t.Fatalf("read-only open while the writer cuts its zeros: %v", err)
			}
			defer r.Close()
			if _, err := r.Follow(); err != nil {
				t.Fatal(err)
			}
			if r.Head() != want {
				t.Fatalf("reader head %+v, the writer's %+v", r.Head(), want)
			}
		})
	}
}

// TestReadOnlyOpenHiddenCorruptionJudgedAgain: a record changed in the
// active segment of a closed ledger, good records after it (corruption,
// as recovery says), and the file extended by a byte while a read-only
// open judges it (an attacker racing the open, as a writer cutting its
// zeros would: TestReadOnlyOpenBesideWriterCuttingZeros). That open
// hides the tail from the changed record on, as a write in progress:
// it reports it (HiddenTail) and never shows a record of it, not even
// after a Follow; the next open, the file no longer changing, reports the
// corruption.
func TestReadOnlyOpenHiddenCorruptionJudgedAgain(t *testing.T) {
	t.Parallel()
	fs, dir := zeroFS(t, "disk")
	w := newTestLog(t, fs, dir, Options{SegmentSize: 1 << 20})
	_, locs := appendN(t, w, 0, 5, 2)
	name, _ := w.Active()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := fs.PathJoin(dir, name)
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bad := locs[1]
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, bad.Offset+20); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, bad.Offset+20); err != nil {
		t.Fatal(err)
	}
	extended := false
	judge := func() {
		if !extended {
			extended = true
			st, err := f.Stat()
			if err == nil {
				_, err = f.WriteAt([]byte{0}, st.Size())
			}
			if err != nil {
				t.Errorf("extend %s: %v", path, err)
			}
		}
	}
	r, err := OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger(), test: testHooks{judge: judge}})
	if !extended {
		t.Fatal("the read-only open judged no tail")
	}
	if err != nil {
		t.Fatalf("a read-only open while the file changes: %v, want the bad record's tail hidden", err)
	}
	if _, err := r.Follow(); err != nil {
		t.Fatal(err)
	}
	h := r.HiddenTail()
	if r.Head().Loc != locs[0] || h.Why == "" || h.At.Offset > bad.Offset {
		t.Fatalf("head %+v, hidden %+v: want the first batch shown (its last at %+v), the tail from the changed record (offset %d) hidden", r.Head(), h, locs[0], bad.Offset)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger()}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("the next read-only open: %v, want the corruption reported", err)
	}
}
