package engine

import (
	"context"
	"testing"
)

// BenchmarkVerifyFull runs Verify (annal verify --full) over a ledger of
// 2*10^5 events (10^4 with -short): the full check's rate, in events/s.
func BenchmarkVerifyFull(b *testing.B) {
	n := 200_000
	if testing.Short() {
		n = 10_000
	}
	benchVerify(b, n)
}

// benchVerify runs Verify over a ledger of n events, made by an import
// before the timer starts: every check it makes (records, leaf hashes
// against the tree file, the index's digest). It reports events/s, MB/s
// of the segment files, and the allocations of a verification.
func benchVerify(b *testing.B, n int) {
	db, info, n := importedLedgerOf(b, n)
	info, err := db.Ledger(info.Name)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var i int
	for b.Loop() {
		i++
		rep, err := db.Verify(context.Background(), info.Name, nil)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Events != uint64(n) || rep.TreeSize != uint64(n) {
			b.Fatalf("verified %d events, %d leaves, want %d", rep.Events, rep.TreeSize, n)
		}
	}
	b.SetBytes(info.Bytes)
	b.ReportMetric(float64(n)*float64(i)/b.Elapsed().Seconds(), "events/s")
}
