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
