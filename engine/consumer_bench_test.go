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

// BenchmarkConsumerAck: one Ack per event given, by durability of the
// acknowledgements (Sync: a bbolt commit, an fsync of meta.db, per Ack).
// go test -run '^$' -bench ConsumerAck ./engine
func BenchmarkConsumerAck(b *testing.B) {
	ctx := context.Background()
	for _, d := range []Durability{Sync, Interval, None} {
		b.Run(d.String(), func(b *testing.B) {
			db, err := Open(b.TempDir(), &Options{Durability: None})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
				b.Fatal(err)
			}
			c, err := db.Consumer("l", "c", ConsumerOptions{Durability: d})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ready := make([]EventInput, 0, 1000)
			for i := 0; i < cap(ready); i++ {
				ready = append(ready, order(i))
			}
			next, n := 0, 0
			b.ResetTimer()
			for e, err := range c.Events(ctx) {
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Ack(ctx, e.ID); err != nil {
					b.Fatal(err)
				}
				if n++; n > b.N {
					break
				}
				if e.Seq > uint64(next) {
					// Keep the ledger ahead of the consumer.
					b.StopTimer()
					if _, err := db.Append(ctx, "l", ready, nil); err != nil {
						b.Fatal(err)
					}
					next += len(ready)
					b.StartTimer()
				}
			}
		})
	}
}
