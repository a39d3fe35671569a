package segment

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzOpenSegment replaces the last segment of a small ledger (two
// segments, a fixed clock, so the bytes are the same every run) with the
// fuzzer's bytes. Open must never panic; if it accepts the ledger, Verify
// passes and the records are a prefix of the ledger's: damage can cost the
// unsynced tail, never change or invent a record.
func FuzzOpenSegment(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fs := vfs.NewMem()
	o := Options{SegmentSize: 2 << 10, Now: func() time.Time { return now }}
	l := newTestLog(f, fs, "led", o)
	for i := range 12 {
		if err := l.Append(&Batch{Entries: []Entry{entry(i)}}); err != nil {
			f.Fatal(err)
		}
	}
	var want []eventid.ID
	it := l.NewIterator(1, FirstOffset)
	for it.Next() {
		want = append(want, it.Record().ID)
	}
	last := segmentName(l.committed.Load().segNum)
	l.Close()
	orig := files(f, fs, "led")
	seg := orig[last]
	f.Add(seg)
	f.Add(seg[:len(seg)-100])
	f.Add(append(bytes.Clone(seg[:len(seg)-50]), make([]byte, 50)...))
	flipped := bytes.Clone(seg)
	flipped[len(flipped)/2] ^= 0x10
	f.Add(flipped)
	f.Add(seg[:headerSize])
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		contents := cloneFiles(orig)
		contents[last] = data
		fs := memDir(t, "led", contents)
		l, _, err := openTestLog(t, fs, "led", o)
		if err != nil {
			return
		}
		defer l.Close()
		if _, err := l.Verify(context.Background(), nil); err != nil {
			t.Fatalf("Open accepted a ledger that does not verify: %v", err)
		}
		it := l.NewIterator(1, FirstOffset)
		i := 0
		for it.Next() {
			if i >= len(want) || it.Record().ID != want[i] {
				t.Fatalf("record %d is %s, not the ledger's", i, it.Record().ID)
			}
			i++
		}
		if it.Err() != nil {
			t.Fatalf("iterating an accepted ledger: %v", it.Err())
		}
	})
}
