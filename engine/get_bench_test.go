package engine

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// BenchmarkGet reads events of a ledger of 200,000 by random ID.
// cpu-ns/op is the process's CPU time (all threads) a Get.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	buildLedger(b, dir, 200_000)
	db, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var ids []eventid.ID
	for e, err := range db.Scan(ctx, "l", ScanOptions{}) {
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for b.Loop() {
		if _, err := db.Get(ctx, ids[rng.IntN(len(ids))]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
