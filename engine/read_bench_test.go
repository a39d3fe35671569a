package engine

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkRead reads a ledger of 200,000 events with Scan (forwards and
// backwards) and Replay (one stream, an entity, an event name), reporting
// events per second. An op is one event; cpu-ns/op is the process's CPU
// time (all threads) an event.
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
			// CPU time too: on a machine shared with other work, it
			// varies less than the wall time.
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
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
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
