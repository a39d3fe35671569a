package engine

import (
	"context"
	"testing"
)

// BenchmarkSubscribeCatchUp: a subscription's catch-up over a ledger of
// 10^5 events, with every event selected and with a selector that matches
// only the last (it still reads every event: see "Reads" in
// docs/engine.md).
// go test -run '^$' -bench SubscribeCatchUp ./engine
func BenchmarkSubscribeCatchUp(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	buildLedger(b, dir, n)
	db, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// A last event, "end", where each subscription stops.
	if _, err := db.Append(context.Background(), "l", []EventInput{ev("x", "y", "end")}, nil); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		o    SubscribeOptions
		want int
	}{
		{"all", SubscribeOptions{}, n + 2},
		{"rare", SubscribeOptions{Events: []string{"end"}}, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				got := 0
				for e, err := range db.Subscribe(ctx, "l", bc.o) {
					if err != nil {
						b.Fatal(err)
					}
					if got++; e.Event == "end" {
						break
					}
				}
				cancel()
				if got != bc.want {
					b.Fatalf("%d events, want %d", got, bc.want)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events-read/s")
		})
	}
}
