package segment

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/annal-db/annal/segment/corruption"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifySpan: the spans a Log commits verify one after the other from
// the genesis, each giving the head the Log had after it; a flipped byte,
// a span given after the wrong head, at the wrong offset, or cut inside a
// batch is corruption.
func TestVerifySpan(t *testing.T) {
	t.Parallel()
	var spans []Span
	records := func(s Span) {
		s.Bytes = append([]byte(nil), s.Bytes...)
		spans = append(spans, s)
	}
	l := newTestLog(t, vfs.Default, t.TempDir(), Options{SegmentSize: 8 << 10, Hooks: Hooks{Records: records}})
	for i := range 60 {
		b := &Batch{Entries: []Entry{entry(2 * i), entry(2*i + 1)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	r1, err := l.ReadAt(spans[0].Last.Loc)
	if err != nil {
		t.Fatal(err)
	}
	genesis := r1.Prev
	if spans[0].Last.Seq != 1 {
		t.Fatalf("the first span ends at %d, want the genesis alone", spans[0].Last.Seq)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	head := Head{ID: genesis}
	n := 0
	for i, s := range spans {
		got, err := VerifySpan(l.ledger, head, "span", s.Segment, s.Offset, s.Bytes, func(r *Record, loc Location) error { n++; return nil })
		if err != nil {
			t.Fatalf("span %d: %v", i, err)
		}
		if got != s.Last {
			t.Fatalf("span %d: head %+v, the Log's %+v", i, got, s.Last)
		}
		head = got
	}
	if n != 121 {
		t.Fatalf("visited %d records, want 121", n)
	}
	s := spans[5]
	before := spans[4].Last
	for i := 0; i < len(s.Bytes); i += 7 {
		b := append([]byte(nil), s.Bytes...)
		b[i] ^= 0x20
		if _, err := VerifySpan(l.ledger, before, "span", s.Segment, s.Offset, b, nil); !errors.Is(err, corruption.Err) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	if _, err := VerifySpan(l.ledger, spans[3].Last, "span", s.Segment, s.Offset, s.Bytes, nil); !errors.Is(err, corruption.Err) {
		t.Fatalf("after the wrong head: %v", err)
	}
	if _, err := VerifySpan(l.ledger, before, "span", s.Segment, s.Offset-1<<20, s.Bytes, nil); !errors.Is(err, corruption.Err) {
		t.Fatalf("at an offset before the header: %v", err)
	}
	one := frameSize + int(binary.BigEndian.Uint32(s.Bytes))
	if _, err := VerifySpan(l.ledger, before, "span", s.Segment, s.Offset, s.Bytes[:one], nil); !errors.Is(err, corruption.Err) {
		t.Fatalf("a span cut after the first record of a batch of two: %v", err)
	}
}
