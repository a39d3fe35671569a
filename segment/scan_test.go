package segment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestScannerFramesAcrossChunks verifies a segment whose records are
// read in several chunks: small records that straddle the end of a
// chunk, and records larger than a chunk (the chunk grows). Every record
// is seen whole, in order, with the counts of the progress; a byte
// changed in the middle of a large record, past the first chunk it
// starts in, is a frame CRC mismatch at that record's offset.
func TestScannerFramesAcrossChunks(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 8 << 20})
	big := func(i int) Entry {
		e := entry(i)
		e.Data = []byte(`"` + strings.Repeat(string(rune('a'+i%26)), scanChunk+1000*i) + `"`)
		return e
	}
	var want []Entry
	var locs []Location
	for b := range 40 {
		batch := &Batch{}
		for i := range 50 {
			batch.Entries = append(batch.Entries, entry(b*50+i))
		}
		if b%10 == 3 {
			batch.Entries = append(batch.Entries, big(b))
		}
		if err := l.Append(batch); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch.Entries...)
		locs = append(locs, batch.Locations...)
	}
	if n := l.committed.Load().segNum; n != 1 {
		t.Fatalf("%d segments, want 1", n)
	}
	var mu sync.Mutex
	var seen int
	var lastRecords, lastBytes int64
	var bytesWant int64
	for _, loc := range locs {
		bytesWant += loc.Size
	}
	v := &Visitor{Segment: func(uint64) func(*Record, Location) {
		return func(r *Record, loc Location) {
			mu.Lock()
			defer mu.Unlock()
			if r.Seq == 1 {
				bytesWant += loc.Size // the genesis
				return
			}
			i := int(r.Seq) - 2
			if i >= len(want) {
				t.Errorf("record #%d: more records than appended", r.Seq)
				return
			}
			e := &want[i]
			if string(r.Entity) != e.Entity || string(r.Key) != e.Key || string(r.Meta) != string(e.Meta) || string(r.Data) != string(e.Data) {
				t.Errorf("record #%d differs from the entry appended", r.Seq)
			}
			if loc != locs[i] {
				t.Errorf("record #%d at %+v, appended at %+v", r.Seq, loc, locs[i])
			}
			seen++
		}
	}}
	progress := func(records, bytes int64) { lastRecords, lastBytes = records, bytes }
	if _, err := l.VerifyVisit(context.Background(), progress, v); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Fatalf("%d records seen, %d appended", seen, len(want))
	}
	if lastRecords != int64(len(want))+1 || lastBytes != bytesWant {
		t.Fatalf("progress ended at %d records, %d bytes; want %d, %d", lastRecords, lastBytes, len(want)+1, bytesWant)
	}

	// A byte changed in the middle of the last large record.
	var loc Location
	for i := range want {
		if len(want[i].Data) > scanChunk {
			loc = locs[i]
		}
	}
	f, err := fs.OpenReadWrite(fs.PathJoin("led", segmentName(1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	at := loc.Offset + loc.Size - 500
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = l.VerifyVisit(context.Background(), nil, nil)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != loc.Offset || !strings.Contains(ce.Problem, "frame CRC mismatch") {
		t.Fatalf("verify after a byte changed at %d in the record at %d: %v, want a frame CRC mismatch at %d", at, loc.Offset, err, loc.Offset)
	}
	l.Close()
}
