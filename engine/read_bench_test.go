package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkRead reads a ledger of 200,000 events with Scan (forwards and
// backwards) and Replay (one stream, an entity, an event name), reporting
// events per second. An op is one event.
func BenchmarkRead(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name string
		seq  func(db *DB) func(yield func(Event, error) bool)
	}{
		{"Scan", func(db *DB) func(yield func(Event, error) bool) { return db.Scan(ctx, "l", ScanOptions{}) }},
		{"ScanReverse", func(db *DB) func(yield func(Event, error) bool) {
			return db.Scan(ctx, "l", ScanOptions{Reverse: true})
		}},
		{"ReplayStream", func(db *DB) func(yield func(Event, error) bool) {
			return db.Replay(ctx, "l", ReplayOptions{Entity: "order", Keys: []string{"order-3"}})
		}},
		{"ReplayEntity", func(db *DB) func(yield func(Event, error) bool) {
			return db.Replay(ctx, "l", ReplayOptions{Entity: "order"})
		}},
		{"ReplayEvent", func(db *DB) func(yield func(Event, error) bool) {
			return db.Replay(ctx, "l", ReplayOptions{Events: []string{"order-paid"}})
		}},
	}
	dir := filepath.Join(b.TempDir(), "data")
	buildLedger(b, dir, 200_000)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			db, err := Open(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for n < b.N {
				for _, err := range c.seq(db) {
					if err != nil {
						b.Fatal(err)
					}
					if n++; n >= b.N {
						break
					}
				}
			}
		})
	}
}
