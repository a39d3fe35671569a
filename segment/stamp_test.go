package segment

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// rotatedLog writes a closed log of 60 records over at least 3 segments
// in a new directory and returns it with its head.
func rotatedLog(t *testing.T) (vfs.FS, string, Head) {
	t.Helper()
	fs, dir := vfs.Default, filepath.Join(t.TempDir(), "led")
	l := newTestLog(t, fs, dir, Options{SegmentSize: 4 << 10})
	for i := range 60 {
		if err := l.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if head.Loc.Segment < 3 {
		t.Fatalf("no rotation: head %+v", head)
	}
	return fs, dir, head
}

// TestOpenSkipsOnlyUnchangedSealedSegments: with VerifySealed, Open reads
// every record, whatever the progress marker says, except those of the sealed
// segments whose stamps still match their files; a sealed segment written
// in place (a payload byte changed behind the progress marker) or touched is
// read again, and the damage is found.
func TestOpenSkipsOnlyUnchangedSealedSegments(t *testing.T) {
	t.Parallel()
	fs, dir, head := rotatedLog(t)
	open := func(o Options) *Recovery {
		t.Helper()
		o.FS, o.Ledger, o.VerifySealed = fs, testLedger(), true
		l, rec, err := Open(dir, o, head)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	rec := open(Options{})
	if rec.VerifiedFrom != 1 || rec.Records != int64(head.Seq) {
		t.Fatalf("no stamps: verified from #%d, %d records; want every record (#1, %d)", rec.VerifiedFrom, rec.Records, head.Seq)
	}
	if len(rec.Stamps) != int(head.Loc.Segment)-1 {
		t.Fatalf("%d stamps for %d sealed segments", len(rec.Stamps), head.Loc.Segment-1)
	}
	back, err := UnmarshalStamps(MarshalStamps(rec.Stamps))
	if err != nil || !reflect.DeepEqual(back, rec.Stamps) {
		t.Fatalf("stamps do not survive their text: %v\n%+v\n%+v", err, back, rec.Stamps)
	}
	if _, err := UnmarshalStamps([]byte("annal sealed segments v1\n1 2 3\n")); err == nil {
		t.Error("a damaged stamps file parsed")
	}
	stamps := rec.Stamps
	lastSealed := stamps[len(stamps)-1].Last.Seq
	rec = open(Options{Stamps: stamps})
	if rec.VerifiedFrom != lastSealed+1 {
		t.Fatalf("with stamps of every sealed segment: verified from #%d, want #%d (the active segment only)", rec.VerifiedFrom, lastSealed+1)
	}

	// A touched segment (only its times changed) is read again.
	seg2 := filepath.Join(dir, segmentName(2))
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(seg2, later, later); err != nil {
		t.Fatal(err)
	}
	rec = open(Options{Stamps: stamps})
	if rec.VerifiedFrom != stamps[0].Last.Seq+1 {
		t.Fatalf("segment 2 touched: verified from #%d, want #%d (segment 2 on)", rec.VerifiedFrom, stamps[0].Last.Seq+1)
	}
	stamps = rec.Stamps

	// A byte of a record's payload changed in place in segment 2, behind
	// the progress marker: found.
	b, err := os.ReadFile(seg2)
	if err != nil {
		t.Fatal(err)
	}
	b[headerSize+frameSize+20] ^= 1
	if err := os.WriteFile(seg2, b, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{FS: fs, Ledger: testLedger(), VerifySealed: true, Stamps: stamps}
	if _, _, err := Open(dir, o, head); !errors.Is(err, ErrCorruption) {
		t.Fatalf("a record changed in place in a stamped segment: Open gave %v, want corruption", err)
	}
	// Without VerifySealed, Open trusts what is behind the progress marker.
	o.VerifySealed = false
	l, _, err := Open(dir, o, head)
	if err != nil {
		t.Fatalf("without VerifySealed: %v", err)
	}
	l.Close()
}

// TestOpenReadsEverySegmentWhenStampsDoNotChain: stamps whose identities
// match the files but whose last head is not the one the next segment's
// header continues from (a stamps file no Open wrote) spare nothing:
// Open reads every segment and opens the log, rather than refusing it.
func TestOpenReadsEverySegmentWhenStampsDoNotChain(t *testing.T) {
	t.Parallel()
	fs, dir, head := rotatedLog(t)
	o := Options{FS: fs, Ledger: testLedger(), VerifySealed: true}
	l, rec, err := Open(dir, o, head)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	o.Stamps = rec.Stamps
	o.Stamps[len(o.Stamps)-1].Last.Seq--
	l, rec, err = Open(dir, o, head)
	if err != nil {
		t.Fatalf("stamps whose last head is wrong: %v", err)
	}
	l.Close()
	if rec.VerifiedFrom != 1 || rec.Records != int64(head.Seq) {
		t.Errorf("stamps whose last head is wrong: verified from #%d, %d records; want every record (#1, %d)", rec.VerifiedFrom, rec.Records, head.Seq)
	}
}

// TestReadOnlySkipsOnlyUnchangedSealedSegments: with VerifySealed, a
// read-only open skips the sealed segments whose stamps match their
// files (from the first, as Open does), reads the rest, stamps the
// sealed segments it read whole (stamps Open accepts too), and finds a
// record changed in place in a segment whose stamp no longer matches.
func TestReadOnlySkipsOnlyUnchangedSealedSegments(t *testing.T) {
	t.Parallel()
	fs, dir, head := rotatedLog(t)
	open := func(stamps []Stamp) (Head, uint64, []Stamp, error) {
		t.Helper()
		r, err := OpenReadOnly(dir, Options{FS: fs, Ledger: testLedger(), VerifySealed: true, Stamps: stamps})
		if err != nil {
			return Head{}, 0, nil, err
		}
		defer r.Close()
		from, _ := r.VerifiedFrom()
		return r.Head(), from, r.Stamps(), nil
	}
	h, from, stamps, err := open(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every segment is stamped, the last one too: the log is closed, it
	// ends with its last record.
	if h != head || from != 1 || len(stamps) != int(head.Loc.Segment) || stamps[len(stamps)-1].Last != head {
		t.Fatalf("no stamps: head %+v (want %+v), verified from #%d (want #1), %d stamps for %d segments", h, head, from, len(stamps), head.Loc.Segment)
	}
	// The reader's stamps of the sealed segments are those Open makes.
	wl, rec, err := Open(dir, Options{FS: fs, Ledger: testLedger(), VerifySealed: true}, Head{})
	if err != nil {
		t.Fatal(err)
	}
	wl.Close()
	if !reflect.DeepEqual(stamps[:len(stamps)-1], rec.Stamps) {
		t.Fatalf("read-only stamps differ from Open's:\n%+v\n%+v", stamps, rec.Stamps)
	}
	if h, from, again, err := open(stamps); err != nil || h != head || from != head.Seq+1 || !reflect.DeepEqual(again, stamps) {
		t.Fatalf("with stamps of every segment: %v, head %+v (want %+v), verified from #%d (want #%d), stamps kept: %v", err, h, head, from, head.Seq+1, reflect.DeepEqual(again, stamps))
	}
	// Only the sealed ones stamped (the writer's): the last is read.
	lastSealed := stamps[len(stamps)-2].Last.Seq
	if h, from, _, err := open(stamps[:len(stamps)-1]); err != nil || h != head || from != lastSealed+1 {
		t.Fatalf("with stamps of the sealed segments: %v, head %+v (want %+v), verified from #%d (want #%d)", err, h, head, from, lastSealed+1)
	}
	// The last segment appended to after its stamp: read again, from the
	// stamped records on.
	wl, _, err = Open(dir, Options{FS: fs, Ledger: testLedger()}, head)
	if err != nil {
		t.Fatal(err)
	}
	if err := wl.Append(&Batch{Entries: []Entry{entry(60)}}); err != nil {
		t.Fatal(err)
	}
	grown := wl.Head()
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	if h, from, _, err := open(stamps); err != nil || h != grown || from != lastSealed+1 {
		t.Fatalf("the last segment grown after its stamp: %v, head %+v (want %+v), verified from #%d (want #%d)", err, h, grown, from, lastSealed+1)
	}
	// A stamp that does not continue the chain spares nothing.
	bad := slices.Clone(stamps)
	bad[0].Last.Seq--
	if _, from, _, err := open(bad); err != nil || from != 1 {
		t.Fatalf("stamps that do not chain: %v, verified from #%d, want #1", err, from)
	}
	// A byte changed in place in segment 2: its stamp no longer matches,
	// the segment is read again and the damage found.
	seg2 := filepath.Join(dir, segmentName(2))
	b, err := os.ReadFile(seg2)
	if err != nil {
		t.Fatal(err)
	}
	b[headerSize+frameSize+20] ^= 1
	if err := os.WriteFile(seg2, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := open(stamps); !errors.Is(err, ErrCorruption) {
		t.Fatalf("a record changed in place in a stamped segment: %v, want corruption", err)
	}
}
