package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

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
