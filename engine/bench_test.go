package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// buildLedger creates a directory with one ledger of n events (plus the
// genesis) appended in batches of 1,000 without fsync, and returns it.
func buildLedger(b *testing.B, dir string, n int) {
	b.Helper()
	ctx := context.Background()
	db, err := Open(dir, &Options{Durability: None})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		b.Fatal(err)
	}
	batch := make([]EventInput, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, order(i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := db.Append(ctx, "l", batch, nil); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpen opens a closed directory holding one ledger of 10^4, 10^5
// and 10^6 events. Open reads the active segment (at most SegmentSize) and
// the sealed segments changed since an earlier Open stamped them (none
// here after the first open), so its cost should not grow with the ledger
// beyond one segment. The first open after the
// build also replays the index's write-ahead log (Pebble's unflushed
// memtable, at most its size), reported as first-open-ms; the timed opens
// are the ones after it.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{1e4, 1e5, 1e6} {
		b.Run(fmt.Sprintf("%.0e", float64(n)), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "data")
			buildLedger(b, dir, n)
			// Let the kernel write back the build's dirty pages first, or
			// Open's few fsyncs wait behind them.
			syscall.Sync()
			start := time.Now()
			db, err := Open(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			first := time.Since(start)
			db.Close()
			b.ResetTimer()
			for b.Loop() {
				db, err := Open(dir, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(first.Microseconds())/1000, "first-open-ms")
			b.ReportMetric(float64(n), "events")
		})
	}
}

// BenchmarkAppend appends batches of 1, 10, 100 and 1,000 events of about
// 250 bytes to one ledger with None durability: the CPU cost of the append
// path (canonical JSON, IDs and checksums, the segment write, the index
// commit) without the fsync.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ctx := context.Background()
			db, err := Open(filepath.Join(b.TempDir(), "d"), &Options{Durability: None})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
				b.Fatal(err)
			}
			pool := make([]EventInput, 10_000)
			var bytes int
			for i := range pool {
				pool[i] = order(i)
				bytes += len(pool[i].Meta) + len(pool[i].Data)
			}
			b.SetBytes(int64(bytes / len(pool) * size))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := i * size % (len(pool) - size)
				if _, err := db.Append(ctx, "l", pool[start:start+size], nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendConcurrent: 64 goroutines (32 per GOMAXPROCS at 2) each
// append one event at a time in Sync mode, sharing fsyncs and index
// commits; events/s in all.
func BenchmarkAppendConcurrent(b *testing.B) {
	ctx := context.Background()
	db, err := Open(filepath.Join(b.TempDir(), "d"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		b.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		b.Fatal(err)
	}
	st0 := l.log.Stats()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1))
			if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	// Group commit's yield: how many events shared each segment fsync.
	st := l.log.Stats()
	b.ReportMetric(float64(st.Records-st0.Records)/float64(max(1, st.Syncs-st0.Syncs)), "events/fsync")
}
