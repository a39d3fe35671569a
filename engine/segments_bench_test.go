package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// BenchmarkReadSegments reads a ledger of 100,000 events (about 17 MB)
// in segments small enough that it has about 8, or about 40 of them:
// fewer, or more than a Log keeps open (segment.DefaultMaxOpenSegments).
// Get reads events by random ID; Scan reads the ledger in order. An op
// is one event.
func BenchmarkReadSegments(b *testing.B) {
	ctx := context.Background()
	for _, segs := range []int{8, 40} {
		dir := filepath.Join(b.TempDir(), "data")
		segSize := int64(17<<20) / int64(segs)
		o := &Options{SegmentSize: segSize, Durability: None, CheckpointInterval: -1}
		db, err := Open(dir, o)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			b.Fatal(err)
		}
		batch := make([]EventInput, 0, 1000)
		for i := range 100_000 {
			if batch = append(batch, order(i)); len(batch) == cap(batch) {
				if _, err := db.Append(ctx, "l", batch, nil); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		db.Close()
		db, err = Open(dir, o)
		if err != nil {
			b.Fatal(err)
		}
		var ids []eventid.ID
		for e, err := range db.Scan(ctx, "l", ScanOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, e.ID)
		}
		b.Run(fmt.Sprintf("Get/segments=%d", segs), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.Get(ctx, ids[rng.IntN(len(ids))]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Scan/segments=%d", segs), func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for n < b.N {
				for _, err := range db.Scan(ctx, "l", ScanOptions{}) {
					if err != nil {
						b.Fatal(err)
					}
					if n++; n >= b.N {
						break
					}
				}
			}
		})
		db.Close()
	}
}
