package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// mappedLog creates a ledger of n entries in a new directory of the real
// file system, in segments of segSize bytes, and returns it with the
// locations of the entries (the genesis first).
func mappedLog(t *testing.T, n int, segSize int64) (*Log, []Location, []Entry) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "led")
	l := newTestLog(t, vfs.Default, dir, Options{SegmentSize: segSize, Durability: None})
	t.Cleanup(func() { l.Close() })
	locs := []Location{l.Head().Loc}
	ents := []Entry{genesisEntry}
	for i := 0; i < n; i++ {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, b.Locations...)
		ents = append(ents, b.Entries...)
	}
	return l, locs, ents
}

// isMapped reports whether the Log reads segment n from a map.
func isMapped(l *Log, n uint64) bool {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	s := l.readers[n]
	return s != nil && s.m != nil
}

func checkRecord(t *testing.T, r *Record, e Entry) {
	t.Helper()
	if string(r.Entity) != e.Entity || string(r.Key) != e.Key || string(r.Event) != e.Event || !bytes.Equal(r.Meta, e.Meta) || !bytes.Equal(r.Data, e.Data) {
		t.Fatalf("record %s/%s/%s %s %s, want %+v", r.Entity, r.Key, r.Event, r.Meta, r.Data, e)
	}
}

// TestMappedReads reads every record of sealed segments and of the
// active one, which grows after it is mapped, by location and in order.
func TestMappedReads(t *testing.T) {
	t.Parallel()
	if !mapSupported {
		t.Skip("no memory maps here")
	}
	l, locs, ents := mappedLog(t, 200, 8<<10)
	active := l.committed.Load().segNum
	if active < 3 {
		t.Fatalf("only %d segments", active)
	}
	for i, loc := range locs {
		r, err := l.ReadAt(loc)
		if err != nil {
			t.Fatal(err)
		}
		checkRecord(t, r, ents[i])
	}
	if !isMapped(l, 1) {
		t.Fatal("sealed segment 1 is not mapped")
	}
	if mapGrowing && !isMapped(l, active) {
		t.Fatal("the active segment is not mapped")
	}
	// Appends after the map: written by pwrite, read through the map.
	for i := 0; i < 20; i++ {
		b := &Batch{Entries: []Entry{entry(1000 + i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		r, err := l.ReadAt(b.Locations[0])
		if err != nil {
			t.Fatal(err)
		}
		checkRecord(t, r, b.Entries[0])
		locs, ents = append(locs, b.Locations...), append(ents, b.Entries...)
	}
	it := l.NewIterator(1, FirstOffset)
	i := 0
	for ; it.Next(); i++ {
		checkRecord(t, it.Record(), ents[i])
		if it.Location() != locs[i] {
			t.Fatalf("record %d at %+v, want %+v", i, it.Location(), locs[i])
		}
	}
	if it.Err() != nil || i != len(ents) {
		t.Fatalf("iterated %d of %d: %v", i, len(ents), it.Err())
	}
}

// TestMappedSegmentCut cuts a mapped segment file under the Log, sealed
// or active, and reads it: an error naming the file and offset, not a
// crash (a read of the pages past the new end raises SIGBUS; without
// the fault caught, this test kills the process).
func TestMappedSegmentCut(t *testing.T) {
	if !mapSupported {
		t.Skip("no memory maps here")
	}
	for _, which := range []string{"sealed", "active"} {
		t.Run(which, func(t *testing.T) {
			l, locs, _ := mappedLog(t, 200, 8<<10)
			seg := uint64(1)
			if which == "active" {
				if !mapGrowing {
					t.Skip("the active segment is not mapped here")
				}
				seg = l.committed.Load().segNum
			}
			var in []Location
			for _, loc := range locs {
				if loc.Segment == seg {
					if _, err := l.ReadAt(loc); err != nil {
						t.Fatal(err)
					}
					in = append(in, loc)
				}
			}
			if !isMapped(l, seg) {
				t.Fatalf("segment %d is not mapped", seg)
			}
			path := filepath.Join(l.Dir(), segmentName(seg))
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
			faults := mapFaults.Load()
			last := in[len(in)-1]
			_, err := l.ReadAt(last)
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), segmentName(seg)) {
				t.Fatalf("read of a cut segment: %v, want corruption naming %s", err, segmentName(seg))
			}
			if mapFaults.Load() == faults {
				t.Fatal("the read did not fault: it did not read the map")
			}
			it := l.NewIterator(seg, in[0].Offset)
			for it.Next() {
			}
			if !errors.Is(it.Err(), ErrCorruption) {
				t.Fatalf("iterator over a cut segment: %v, want corruption", it.Err())
			}
			// The file written again with other bytes: read through the
			// map, refused by the frame CRC.
			if err := os.WriteFile(path, bytes.Repeat([]byte{0x5a}, int(last.End())), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ReadAt(last); !errors.Is(err, ErrCorruption) {
				t.Fatalf("read of a rewritten segment: %v, want corruption", err)
			}
		})
	}
}

// TestMappedReadOnlyCut: a read-only Log maps the active segment of a
// writer; the file is then cut before what it showed (as a recovery
// that cut a torn tail would, or an operator): reads fail, Follow
// reports the divergence, the process lives.
func TestMappedReadOnlyCut(t *testing.T) {
	if !mapSupported || !mapGrowing {
		t.Skip("the active segment is not mapped here")
	}
	w, locs, _ := mappedLog(t, 50, 1<<20)
	r, err := OpenReadOnly(w.Dir(), Options{FS: vfs.Default, Ledger: testLedger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	last := locs[len(locs)-1]
	if r.Head().Loc != last {
		t.Fatalf("reader head at %+v, want %+v", r.Head().Loc, last)
	}
	if _, err := r.ReadAt(last); err != nil {
		t.Fatal(err)
	}
	if !isMapped(r, last.Segment) {
		t.Fatal("the reader did not map the active segment")
	}
	if err := os.Truncate(filepath.Join(w.Dir(), segmentName(last.Segment)), locs[10].Offset); err != nil {
		t.Fatal(err)
	}
	faults := mapFaults.Load()
	if _, err := r.ReadAt(last); !errors.Is(err, ErrCorruption) {
		t.Fatalf("read of a cut segment: %v, want corruption", err)
	}
	if mapFaults.Load() == faults {
		t.Fatal("the read did not fault: it did not read the map")
	}
	if _, err := r.Follow(); !errors.Is(err, ErrDiverged) {
		t.Fatalf("Follow after the cut: %v, want ErrDiverged", err)
	}
}

// TestMappedConcurrentReads reads through maps while appends grow the
// active segment and rotate (run with -race).
func TestMappedConcurrentReads(t *testing.T) {
	t.Parallel()
	l, _, _ := mappedLog(t, 10, 16<<10)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				it := l.NewIterator(1, FirstOffset)
				var n uint64
				for it.Next() {
					n++
					if _, err := l.ReadAt(it.Location()); err != nil {
						errs <- err
						return
					}
				}
				if it.Err() != nil || n < seen {
					errs <- errors.Join(it.Err(), errors.New("fewer records than before"))
					return
				}
				seen = n
			}
		}()
	}
	var ids []eventid.ID
	for i := 0; i < 500; i++ {
		b := &Batch{Entries: []Entry{entry(i), entry(i + 1)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.IDs...)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l.Head().ID != ids[len(ids)-1] {
		t.Fatal("head moved")
	}
}
