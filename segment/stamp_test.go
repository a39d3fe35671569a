package segment

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestOpenSkipsOnlyUnchangedSealedSegments: with VerifySealed, Open reads
// every record, whatever the progress marker says, except those of the sealed
// segments whose stamps still match their files; a sealed segment written
// in place (a payload byte changed behind the progress marker) or touched is
// read again, and the damage is found.
func TestOpenSkipsOnlyUnchangedSealedSegments(t *testing.T) {
	t.Parallel()
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
	l, _, err = Open(dir, o, head)
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
