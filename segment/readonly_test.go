package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func openReadOnlyTest(t testing.TB, fs vfs.FS, dir string) (*Log, error) {
	t.Helper()
	return OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger()})
}

// roIDs returns the IDs a read-only Log shows, in order.
func roIDs(t testing.TB, l *Log) []eventid.ID {
	t.Helper()
	var ids []eventid.ID
	it := l.NewIterator(1, FirstOffset)
	for it.Next() {
		ids = append(ids, it.Record().ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestReadOnlyShowsWhatRecoveryKeeps cuts the last segment at every byte
// of a batch of 5 records and of the single record before it: a read-only
// open must show exactly the head that recovery (Open) keeps, hide the
// rest, and change no byte.
func TestReadOnlyShowsWhatRecoveryKeeps(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{})
	for i := range 3 {
		if err := l.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	b := &Batch{Entries: []Entry{entry(3), entry(4), entry(5), entry(6), entry(7)}}
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	orig := files(t, fs, "led")
	name := segmentName(1)
	start := b.Locations[0].Offset - (b.Locations[0].Offset-FirstOffset)/4 // inside the records before the batch
	end := b.Locations[4].End()
	for size := start; size <= end; size++ {
		contents := cloneFiles(orig)
		contents[name] = contents[name][:size]
		rfs := memDir(t, "led", contents)
		r, err := openReadOnlyTest(t, rfs, "led")
		if err != nil {
			t.Fatalf("cut at %d: %v", size, err)
		}
		head, hidden := r.Head(), r.HiddenTail()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if after := files(t, rfs, "led"); !bytes.Equal(after[name], contents[name]) || len(after) != len(contents) {
			t.Fatalf("cut at %d: the read-only open changed the files", size)
		}
		rec, err, _ := openFiles(t, contents)
		if err != nil {
			t.Fatalf("cut at %d: recovery: %v", size, err)
		}
		if head != rec.Head {
			t.Fatalf("cut at %d: read-only head %s #%d at %d, recovery keeps %s #%d at %d", size, head.ID, head.Seq, head.Loc.Offset, rec.Head.ID, rec.Head.Seq, rec.Head.Loc.Offset)
		}
		if wantHidden := size - head.Loc.End(); hidden.Bytes != wantHidden || wantHidden > 0 && hidden.At.Offset != head.Loc.End() {
			t.Fatalf("cut at %d: hidden %+v, want %d bytes at %d", size, hidden, wantHidden, head.Loc.End())
		}
	}
}

// TestReadOnlySealedCorruption: a changed byte in a sealed segment is
// corruption; the same in the last segment is a hidden tail.
func TestReadOnlySealedCorruption(t *testing.T) {
	t.Parallel()
	orig, locs := smallLedger(t, 40, 4<<10)
	if _, ok := orig[segmentName(3)]; !ok {
		t.Fatal("want at least 3 segments")
	}
	var inFirst, inLast Location
	for _, loc := range locs {
		if loc.Segment == 1 && loc.Offset > FirstOffset {
			inFirst = loc
		}
		if loc.Segment == uint64(len(orig)) {
			inLast = loc
		}
	}
	contents := cloneFiles(orig)
	contents[segmentName(1)][inFirst.Offset+20] ^= 0x10
	_, err := openReadOnlyTest(t, memDir(t, "led", contents), "led")
	if ce, ok := corruptionAt(err); !ok || ce.Offset != inFirst.Offset {
		t.Fatalf("bit flip in a sealed segment: %v, want corruption at %d", err, inFirst.Offset)
	}
	// The same in the last segment's last record: corruption at the
	// open, as recovery says (a single changed bit explains it).
	contents = cloneFiles(orig)
	last := segmentName(inLast.Segment)
	contents[last][inLast.Offset+20] ^= 0x10
	if _, err := openReadOnlyTest(t, memDir(t, "led", contents), "led"); !errors.Is(err, ErrCorruption) {
		t.Fatalf("bit flip in the last record at the open: %v, want corruption", err)
	}
	// Written after the open, it is a tail not shown, not an error.
	flipped := contents[last]
	contents[last] = flipped[:inLast.Offset]
	fs := memDir(t, "led", contents)
	r, err := openReadOnlyTest(t, fs, "led")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := fs.OpenReadWrite(fs.PathJoin("led", last), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Clone(flipped[inLast.Offset:]), inLast.Offset); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if moved, err := r.Follow(); moved || err != nil {
		t.Fatalf("Follow: moved %v, %v", moved, err)
	}
	if h := r.HiddenTail(); h.At.Offset != inLast.Offset || r.Head().Loc.End() != inLast.Offset {
		t.Fatalf("bit flip in the last record: hidden %+v, head ends at %d; want hidden from %d", h, r.Head().Loc.End(), inLast.Offset)
	}
}

// TestReadOnlyFollow follows a writer through rotations, batches and a
// reopen; Append and Sync of the reader fail with ErrReadOnly.
func TestReadOnlyFollow(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	w := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	r, err := openReadOnlyTest(t, fs, "led")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Append(&Batch{Entries: []Entry{entry(0)}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append: %v, want ErrReadOnly", err)
	}
	if err := r.Sync(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Sync: %v, want ErrReadOnly", err)
	}
	want := []eventid.ID{w.Head().ID}
	for round := range 30 {
		b := &Batch{}
		for i := range round%4 + 1 {
			b.Entries = append(b.Entries, entry(round*10+i))
		}
		if err := w.Append(b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b.IDs...)
		if round%3 != 0 {
			continue
		}
		moved, err := r.Follow()
		if err != nil || !moved {
			t.Fatalf("round %d: Follow: moved %v, %v", round, moved, err)
		}
		if r.Head() != w.Head() {
			t.Fatalf("round %d: reader head %+v, writer %+v", round, r.Head(), w.Head())
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Follow(); err != nil {
		t.Fatal(err)
	}
	got := roIDs(t, r)
	if len(got) != len(want) || r.Head().Loc.Segment < 3 {
		t.Fatalf("reader shows %d records in %d segments, want %d in at least 3", len(got), r.Head().Loc.Segment, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: %s, want %s", i+1, got[i], want[i])
		}
	}
	if moved, err := r.Follow(); moved || err != nil {
		t.Fatalf("Follow with nothing new: moved %v, %v", moved, err)
	}
}

// TestReadOnlySizeChangesWhileRead: the last segment, holding a torn
// write, is cut by the writer's recovery between the reader's Stat and its
// reads (testHooks.afterSize). The reader must not report corruption or an
// error, and must show what the writer appends after its recovery.
func TestReadOnlySizeChangesWhileRead(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "led")
	w := newTestLog(t, vfs.Default, dir, Options{})
	for i := range 5 {
		if err := w.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	good := w.Head()
	b := &Batch{Entries: []Entry{entry(5)}}
	if err := w.Append(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, segmentName(1))
	// A torn write: the last record cut in its middle.
	if err := os.Truncate(path, b.Locations[0].Offset+b.Locations[0].Size/2); err != nil {
		t.Fatal(err)
	}
	r, err := openReadOnlyTest(t, vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Head() != good || r.HiddenTail().Bytes != b.Locations[0].Size/2 {
		t.Fatalf("head %+v hidden %+v; want head %+v and the torn half hidden", r.Head(), r.HiddenTail(), good)
	}
	// The torn record grows (as if the writer were still writing it, the
	// reader sees a larger size), and recovery cuts it right after the
	// reader's Stat.
	if err := os.Truncate(path, good.Loc.End()+4096); err != nil {
		t.Fatal(err)
	}
	hooked := 0
	r.opts.test.afterSize = func(uint64) {
		hooked++
		if err := os.Truncate(path, good.Loc.End()); err != nil {
			t.Error(err)
		}
	}
	moved, err := r.Follow()
	r.opts.test.afterSize = nil
	if err != nil || moved || hooked == 0 {
		t.Fatalf("Follow during the cut: moved %v, %v (hook ran %d times)", moved, err, hooked)
	}
	w, _, err = Open(dir, Options{Ledger: testLedger()}, Head{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nb := &Batch{Entries: []Entry{entry(6), entry(7)}}
	if err := w.Append(nb); err != nil {
		t.Fatal(err)
	}
	if moved, err := r.Follow(); err != nil || !moved || r.Head() != w.Head() {
		t.Fatalf("Follow after the writer's recovery: moved %v, %v; head %+v, want %+v", moved, err, r.Head(), w.Head())
	}
}

// TestReadOnlyDiverged: the record at the reader's head is replaced (the
// file cut before it and other records written): Follow returns
// ErrDiverged, and keeps returning it.
func TestReadOnlyDiverged(t *testing.T) {
	t.Parallel()
	dir, locs, r := readOnlyAfter(t, 4)
	if moved, err := r.Follow(); err != nil || moved {
		t.Fatalf("Follow: moved %v, %v", moved, err)
	}
	// Cut the last two records, then append others in their place.
	if err := os.Truncate(filepath.Join(dir, segmentName(1)), locs[2].Offset); err != nil {
		t.Fatal(err)
	}
	w, _, err := Open(dir, Options{Ledger: testLedger()}, Head{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		if err := w.Append(&Batch{Entries: []Entry{entry(100 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := r.Follow(); !errors.Is(err, ErrDiverged) {
			t.Fatalf("Follow after the head was replaced: %v, want ErrDiverged", err)
		}
	}
}

// TestReadOnlyCutWhileScanned: the segments a reader shows are cut
// before the record at the reader's head (the later segment removed) and
// a writer appends other records in their place, as after a crash that
// lost what the reader had shown, or an operator restoring an older copy,
// between the reader's look at the segment's size and its reads of what
// follows its head (testHooks.afterSize). The segment had a
// successor when the reader looked (sealed), so what the reader then
// reads past its head, the writer's new records, does not continue its
// chain. That is not corruption: the segments no longer hold what the
// reader showed, and Follow must say ErrDiverged, as it does when the cut
// comes before its look (TestReadOnlyDiverged), and keep saying it.
func TestReadOnlyCutWhileScanned(t *testing.T) {
	t.Parallel()
	dir, locs, r := readOnlyAfter(t, 4)
	shown := r.Head()
	if shown.Loc != locs[3] {
		t.Fatalf("reader head at %+v, want %+v", shown.Loc, locs[3])
	}
	// Two more records in segment 1, then a rotation: segment 1 is
	// sealed, with records the reader has not shown.
	rec := locs[3].Size
	w, _, err := Open(dir, Options{Ledger: testLedger(), SegmentSize: locs[3].End() + 2*rec + rec/2}, Head{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 7; i++ {
		if err := w.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if w.Head().Loc.Segment != 2 {
		t.Fatalf("the writer's head is in segment %d, want 2", w.Head().Loc.Segment)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg1 := filepath.Join(dir, segmentName(1))
	hooked := 0
	r.opts.test.afterSize = func(seg uint64) {
		if seg != 1 || hooked > 0 {
			return
		}
		hooked++
		// Records 2 and up lost: segment 1 cut before the reader's
		// head, segment 2 gone; then a writer appends new records in
		// their place.
		if err := os.Truncate(seg1, locs[1].Offset); err != nil {
			t.Error(err)
			return
		}
		if err := os.Remove(filepath.Join(dir, segmentName(2))); err != nil {
			t.Error(err)
			return
		}
		w, _, err := Open(dir, Options{Ledger: testLedger()}, Head{})
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close()
		for i := range 8 {
			if err := w.Append(&Batch{Entries: []Entry{entry(100 + i)}}); err != nil {
				t.Error(err)
				return
			}
		}
	}
	_, err = r.Follow()
	r.opts.test.afterSize = nil
	if hooked == 0 {
		t.Fatal("the hook did not run")
	}
	var ce *CorruptionError
	if !errors.Is(err, ErrDiverged) || errors.As(err, &ce) {
		t.Fatalf("Follow with the shown segment cut and rewritten during its read: %v (%T), want ErrDiverged, not a corruption", err, err)
	}
	if _, err := r.Follow(); !errors.Is(err, ErrDiverged) {
		t.Fatalf("the next Follow: %v, want ErrDiverged", err)
	}
}

// readOnlyAfter creates a ledger in a new directory with n records after
// its genesis, closes the writer, and opens a read-only Log on it (closed
// when the test ends); it returns the directory and the records'
// locations.
func readOnlyAfter(t *testing.T, n int) (dir string, locs []Location, r *Log) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "led")
	w := newTestLog(t, vfs.Default, dir, Options{})
	for i := range n {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := w.Append(b); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, b.Locations[0])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := openReadOnlyTest(t, vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, locs, r
}

// TestReadOnlyLimit: a read-only Log with Options.Limit shows the
// records up to the bound and none after it, whatever the segments
// hold (at the open and at each Follow, across segments), follows a
// bound that moves on, and fails with ErrDiverged when the record it
// reaches at the bound is not the one vouched for.
func TestReadOnlyLimit(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	w := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	var heads []Head
	for i := range 40 {
		if err := w.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
		heads = append(heads, w.Head())
	}
	if w.Head().Loc.Segment < 3 {
		t.Fatalf("the writer's records end in segment %d, want at least 3", w.Head().Loc.Segment)
	}
	var mu sync.Mutex
	bound, bounded := heads[4], true
	limit := func() (Head, bool) {
		mu.Lock()
		defer mu.Unlock()
		return bound, bounded
	}
	set := func(h Head) {
		mu.Lock()
		bound = h
		mu.Unlock()
	}
	r, err := OpenReadOnly("led", Options{FS: fs, Ledger: testLedger(), Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Head() != heads[4] || uint64(len(roIDs(t, r))) != heads[4].Seq {
		t.Fatalf("opened with the bound at #%d: head %+v, %d records shown", heads[4].Seq, r.Head(), len(roIDs(t, r)))
	}
	for i := 4; i < len(heads); i++ { // each segment's last record among them
		set(heads[i])
		if _, err := r.Follow(); err != nil {
			t.Fatalf("bound at #%d: %v", heads[i].Seq, err)
		}
		if r.Head() != heads[i] || uint64(len(roIDs(t, r))) != heads[i].Seq {
			t.Fatalf("bound at #%d (segment %d): head %+v, %d records shown", heads[i].Seq, heads[i].Loc.Segment, r.Head(), len(roIDs(t, r)))
		}
	}

	// A bound that the records do not reach as vouched: another ID at
	// its sequence number.
	r2, err := OpenReadOnly("led", Options{FS: fs, Ledger: testLedger(), Limit: func() (Head, bool) {
		h := heads[9]
		h.ID = heads[8].ID
		return h, true
	}})
	if err == nil {
		r2.Close()
		t.Fatal("a bound at another record than the segments hold opened")
	}
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("a bound at another record: %v, want ErrDiverged", err)
	}
}
