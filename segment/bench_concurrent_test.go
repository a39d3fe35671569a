package segment

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkAppendConcurrentSync: 64 appenders of one Sync event each, on
// the real file system. It reports how many events shared an fsync and
// how many writes each fsync covered (group commit and its pipeline).
func BenchmarkAppendConcurrentSync(b *testing.B) {
	l := newTestLog(b, vfs.Default, b.TempDir(), Options{})
	defer l.Close()
	st0 := l.Stats()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Append(&Batch{Entries: []Entry{entry(int(n.Add(1)))}, Durability: Sync}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	st := l.Stats()
	syncs := float64(max(1, st.Syncs-st0.Syncs))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(st.Records-st0.Records)/syncs, "events/fsync")
	b.ReportMetric(float64(st.Writes-st0.Writes)/syncs, "writes/fsync")
}

// BenchmarkAppendSyncBatch10: one appender of Sync batches of 10 events,
// on the real file system: the cost of a group's write and fsync.
func BenchmarkAppendSyncBatch10(b *testing.B) {
	l := newTestLog(b, vfs.Default, b.TempDir(), Options{})
	defer l.Close()
	b.ResetTimer()
	for i := range b.N {
		batch := &Batch{Durability: Sync}
		for j := range 10 {
			batch.Entries = append(batch.Entries, entry(i*10+j))
		}
		if err := l.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "events/s")
}
