package index

import (
	"context"
	"syscall"
	"testing"
)

// BenchmarkSizeAndDigest indexes 100k records in batches of 1000, compacts
// the index, and reports its size on disk per event (index-B/event); one op
// is a Digest of the ledger, whose rate it reports (events/s, and CPU time
// per event).
func BenchmarkSizeAndDigest(b *testing.B) {
	const n = 100_000
	x := openAt(b, b.TempDir(), Options{})
	fill(b, x, n)
	if err := x.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	size := x.db.Metrics().DiskSpaceUsage()
	ctx := context.Background()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for b.Loop() {
		d, err := x.Digest(ctx, ledgerA, n)
		if err != nil || d.Count[0] != n {
			b.Fatalf("Digest: %v, %v", d, err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(size)/n, "index-B/event")
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/event")
}

// BenchmarkScans: one op is one event of a scan of 100k records: a stream
// (100 events, 1000 apart: each in its own block), an event name (every
// event), an entity from the middle.
func BenchmarkScans(b *testing.B) {
	const n = 100_000
	x := openAt(b, b.TempDir(), Options{})
	fill(b, x, n)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		scan func() func(func(Position, error) bool)
	}{
		{"Stream", func() func(func(Position, error) bool) {
			return x.Stream(ctx, ledgerA, []byte("order"), []byte("order-7"), 0)
		}},
		{"EventName", func() func(func(Position, error) bool) { return x.EventName(ctx, ledgerA, []byte("order-created"), 0) }},
		{"EntityEventsAfter", func() func(func(Position, error) bool) {
			return x.EntityEvents(ctx, ledgerA, []byte("order"), n/2)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			got := 0
			for got < b.N {
				for _, err := range c.scan() {
					if err != nil {
						b.Fatal(err)
					}
					if got++; got >= b.N {
						break
					}
				}
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkReadsCPU reports the CPU time of point lookups by ID and by
// sequence number, and of a time scan, among 100k records (cpu-ns/op:
// steadier than the wall time on a shared machine).
func BenchmarkReadsCPU(b *testing.B) {
	const n = 100_000
	x := openAt(b, b.TempDir(), Options{})
	fill(b, x, n)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		op   func(s uint64) bool
	}{
		{"Lookup", func(s uint64) bool {
			got, _, found, err := x.Lookup(idOf(ledgerA, s))
			return err == nil && found && got == s
		}},
		{"BySeq", func(s uint64) bool {
			id, found, err := x.BySeq(ledgerA, s)
			return err == nil && found && id == idOf(ledgerA, s)
		}},
		{"TimeRange1000", func(s uint64) bool {
			k := 0
			for _, err := range x.TimeRange(ctx, ledgerA, idOf(ledgerA, s%(n-1000)+1), idOf(ledgerA, s%(n-1000)+1000), false) {
				if err != nil {
					return false
				}
				k++
			}
			return k == 1000
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			seq := uint64(0)
			for b.Loop() {
				seq = seq*6364136223846793005 + 1442695040888963407
				if s := 1 + seq%n; !c.op(s) {
					b.Fatalf("seq %d: not found", s)
				}
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
