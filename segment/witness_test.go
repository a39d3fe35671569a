package segment

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDurable: Durable advances with each fsync (a Sync batch, the
// Interval syncer, Sync, rotation's seal, Close), not with a None write.
func TestDurable(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10, SyncInterval: time.Millisecond})
	if d, h := l.Durable(), l.Head(); d != h || d.Seq != 1 {
		t.Fatalf("after the genesis: durable %+v, head %+v", d, h)
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(1)}, Durability: None}); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d.Seq != 1 {
		t.Fatalf("a None append moved the durable head to #%d", d.Seq)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, h := l.Durable(), l.Head(); d != h {
		t.Fatalf("after Sync: durable %+v, head %+v", d, h)
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(2)}, Durability: Interval}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.Durable() != l.Head() {
		if time.Now().After(deadline) {
			t.Fatalf("the interval syncer did not move the durable head in 10 s: %+v, head %+v", l.Durable(), l.Head())
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 40 { // rotations
		if err := l.Append(&Batch{Entries: []Entry{entry(i), entry(i + 1)}}); err != nil {
			t.Fatal(err)
		}
		if d, h := l.Durable(), l.Head(); d != h {
			t.Fatalf("after a Sync batch: durable %+v, head %+v", d, h)
		}
	}
	if l.Head().Loc.Segment < 3 {
		t.Fatalf("no rotation: head %+v", l.Head())
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(99)}, Durability: None}); err != nil {
		t.Fatal(err)
	}
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != head {
		t.Fatalf("after Close: durable %+v, head %+v", d, head)
	}
}

// witnessLedger is a ledger of 60 Sync records in 4 KiB segments and its
// exact head, the witness of a clean close.
func witnessLedger(t *testing.T) (map[string][]byte, []Location, Head) {
	t.Helper()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	locs := []Location{l.Head().Loc}
	for i := range 60 {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, b.Locations[0])
	}
	w := l.Durable()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return files(t, fs, "led"), locs, w
}

func openWithWitness(t *testing.T, contents map[string][]byte, w Head) (*Recovery, map[string][]byte, error) {
	t.Helper()
	fs := memDir(t, "led", contents)
	l, rec, err := Open("led", Options{FS: fs, Ledger: testLedger(), Witness: w}, Head{})
	if err == nil {
		l.Close()
	}
	return rec, files(t, fs, "led"), err
}

// TestWitnessRefusesLostTail: with the witness of a clean close, every
// loss of the tail is corruption and changes no file; a torn write after
// the witness is cut.
func TestWitnessRefusesLostTail(t *testing.T) {
	t.Parallel()
	orig, locs, w := witnessLedger(t)
	last := segmentName(w.Loc.Segment)
	prev := segmentName(w.Loc.Segment - 1)
	var inLast []Location
	for _, loc := range locs {
		if loc.Segment == w.Loc.Segment {
			inLast = append(inLast, loc)
		}
	}
	if len(inLast) < 3 {
		t.Fatalf("%d records in the last segment", len(inLast))
	}
	set := func(name string, b []byte) func(map[string][]byte) {
		return func(m map[string][]byte) { m[name] = b }
	}
	for _, c := range []struct {
		name   string
		change func(map[string][]byte)
	}{
		{"last segment removed", func(m map[string][]byte) { delete(m, last) }},
		{"last two removed", func(m map[string][]byte) { delete(m, last); delete(m, prev) }},
		{"last emptied", set(last, nil)},
		{"last cut to its header", set(last, orig[last][:headerSize])},
		{"last cut inside its header", set(last, orig[last][:20])},
		{"last header zeroed", set(last, append(make([]byte, headerSize), orig[last][headerSize:]...))},
		{"last cut at a record boundary", set(last, orig[last][:inLast[1].Offset])},
		{"last record cut", set(last, orig[last][:w.Loc.End()-7])},
		{"last 40 bytes zeroed", set(last, append(bytes.Clone(orig[last][:w.Loc.End()-40]), make([]byte, 40)...))},
		{"last segment an older copy", set(last, orig[last][:inLast[2].Offset])},
		{"witness record replaced by another", set(last, append(bytes.Clone(orig[last][:inLast[len(inLast)-1].Offset]), orig[last][inLast[0].Offset:inLast[0].End()]...))},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := cloneFiles(orig)
			c.change(m)
			before := cloneFiles(m)
			_, after, err := openWithWitness(t, m, w)
			var cerr *CorruptionError
			if !errors.As(err, &cerr) || !errors.Is(err, ErrCorruption) || cerr.Expected == "" || cerr.Found == "" {
				t.Fatalf("Open: %v, want a CorruptionError with expected and found", err)
			}
			// A zeroed header with records after it is corruption by the
			// rule that was there before the witness, which says so.
			if c.name != "last header zeroed" && !strings.Contains(err.Error(), "acknowledged events lost") {
				t.Errorf("error %q does not say the events were lost", err)
			}
			if !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatal("Open changed the files")
			}
			// Without the witness, the same files open (as before it).
			if _, _, err := openWithWitness(t, before, Head{}); c.name != "last header zeroed" && c.name != "witness record replaced by another" && err != nil {
				t.Fatalf("without a witness: %v", err)
			}
		})
	}

	t.Run("torn write after the witness", func(t *testing.T) {
		m := cloneFiles(orig)
		m[last] = append(bytes.Clone(orig[last]), orig[last][inLast[0].Offset:inLast[0].Offset+30]...)
		rec, after, err := openWithWitness(t, m, w)
		if err != nil || rec.TruncatedBytes != 30 || rec.Head != w || !bytes.Equal(after[last], orig[last]) {
			t.Fatalf("Open: %v, %+v", err, rec)
		}
	})
	t.Run("unfinished segment after the witness's", func(t *testing.T) {
		m := cloneFiles(orig)
		m[segmentName(w.Loc.Segment+1)] = make([]byte, 10)
		rec, after, err := openWithWitness(t, m, w)
		if err != nil || rec.RemovedSegment != w.Loc.Segment+1 || !maps.EqualFunc(after, orig, bytes.Equal) {
			t.Fatalf("Open: %v, %+v", err, rec)
		}
	})
	t.Run("an older witness allows an older cut", func(t *testing.T) {
		older := Head{Seq: w.Seq - 3, Loc: inLast[len(inLast)-4]}
		m := cloneFiles(orig)
		// A torn last record after the older witness.
		m[last] = orig[last][:w.Loc.End()-7]
		l, rec, err := Open("led", Options{FS: memDir(t, "led", m), Ledger: testLedger(), Witness: headAt(t, orig, older)}, Head{})
		if err != nil || rec.TruncatedBytes == 0 {
			t.Fatalf("Open: %v, %+v", err, rec)
		}
		l.Close()
	})
}

// headAt returns the head of the record at h.Loc in files.
func headAt(t *testing.T, contents map[string][]byte, h Head) Head {
	t.Helper()
	fs := memDir(t, "led", contents)
	l, _, err := Open("led", Options{FS: fs, Ledger: testLedger()}, Head{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := l.ReadAt(h.Loc)
	if err != nil {
		t.Fatal(err)
	}
	return Head{ID: r.ID, Seq: r.Seq, Loc: h.Loc}
}
