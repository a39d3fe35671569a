package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkAppendDurability appends batches of 1, 10, 100 and 1,000
// events in each durability mode, one appender: the workloads on which the
// Merkle tree's cost is measured (single Sync appends, batched appends),
// against the code without the tree, in the same run.
func BenchmarkAppendDurability(b *testing.B) {
	for _, d := range []struct {
		name string
		mode Durability
	}{{"sync", Sync}, {"interval", Interval}, {"none", None}} {
		for _, size := range []int{1, 10, 100, 1000} {
			if d.mode == Sync && size == 1000 {
				continue // the same as 100 in Sync: the fsync dominates
			}
			b.Run(fmt.Sprintf("%s/batch=%d", d.name, size), func(b *testing.B) {
				ctx := context.Background()
				db, err := Open(filepath.Join(b.TempDir(), "d"), &Options{Durability: d.mode})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
					b.Fatal(err)
				}
				pool := make([]EventInput, 10_000)
				for i := range pool {
					pool[i] = order(i)
				}
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
}
