package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReadSpan: spans read back from the segments hold the bytes that
// Hooks.Records gave at commit, whole batches within one segment, at most
// max bytes unless one batch is larger; ReadSealed gives a sealed file
// whole with its first and last records, and refuses the active one.
func TestReadSpan(t *testing.T) {
	t.Parallel()
	committed := map[uint64][]byte{} // by segment: the records' bytes as committed
	starts := map[uint64]int64{}
	records := func(s Span) {
		if _, ok := starts[s.Segment]; !ok {
			starts[s.Segment] = s.Offset
		}
		committed[s.Segment] = append(committed[s.Segment], s.Bytes...)
	}
	dir := t.TempDir()
	l := newTestLog(t, vfs.Default, dir, Options{SegmentSize: 8 << 10, Hooks: Hooks{Records: records}})
	for i := range 60 {
		b := &Batch{Entries: []Entry{entry(2 * i), entry(2*i + 1)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if len(committed) < 3 {
		t.Fatalf("%d segments, want at least 3", len(committed))
	}
	for _, max := range []int{1, 300, 1 << 20} {
		from := Location{Segment: 1, Offset: starts[1]}
		next := uint64(1)
		got := map[uint64][]byte{}
		for next <= l.Head().Seq {
			visited := 0
			s, err := l.ReadSpan(from, max, func(r *Record, loc Location) {
				if r.Seq != next+uint64(visited) {
					t.Fatalf("max %d: record #%d, want #%d", max, r.Seq, next+uint64(visited))
				}
				visited++
			})
			if err != nil {
				t.Fatalf("max %d, from #%d: %v", max, next, err)
			}
			// each sees the span's records, and maybe the first of a
			// batch left out.
			if s.FirstSeq != next || s.Last.Seq > next+uint64(visited)-1 || s.Last.Seq+2 < next+uint64(visited) || s.Segment != from.Segment || s.Offset != from.Offset {
				t.Fatalf("max %d: span %+v from #%d at %+v (%d records)", max, s, next, from, visited)
			}
			if n := len(s.Bytes); n > max && s.Last.Seq > s.FirstSeq+1 {
				t.Fatalf("max %d: a span of %d bytes, of more than one batch", max, n)
			}
			if s.FirstSeq > 1 && (s.Last.Seq-s.FirstSeq)%2 != 1 {
				t.Fatalf("max %d: span #%d to #%d is not whole batches of two", max, s.FirstSeq, s.Last.Seq)
			}
			got[s.Segment] = append(got[s.Segment], s.Bytes...)
			next = s.Last.Seq + 1
			from = Location{Segment: s.Segment, Offset: s.Last.Loc.End()}
			if _, ok := starts[s.Segment+1]; ok && s.Last.Loc.End() == starts[s.Segment]+int64(len(committed[s.Segment])) {
				from = Location{Segment: s.Segment + 1, Offset: starts[s.Segment+1]}
			}
		}
		for seg, b := range committed {
			if !bytes.Equal(got[seg], b) {
				t.Fatalf("max %d: segment %d: the spans read differ from those committed", max, seg)
			}
		}
	}
	data, first, last, err := l.ReadSealed(1)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, file) || first != 1 || !bytes.HasSuffix(data[:starts[1]+int64(len(committed[1]))], committed[1]) {
		t.Fatalf("ReadSealed(1): %d bytes #%d to #%d, the file has %d", len(data), first, last, len(file))
	}
	if _, f2, _, err := l.ReadSealed(2); err != nil || f2 != last+1 {
		t.Fatalf("ReadSealed(2): first #%d, %v; want #%d", f2, err, last+1)
	}
	active, _ := l.Active()
	var n uint64
	for seg := range committed {
		n = max(n, seg)
	}
	if _, _, _, err := l.ReadSealed(n); err == nil {
		t.Fatalf("ReadSealed of the active segment %s: no error", active)
	}
	if _, err := l.ReadSpan(Location{Segment: n, Offset: l.Head().Loc.End()}, 100, nil); err == nil {
		t.Fatal("ReadSpan past the head: no error")
	}
}
