package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/annal-db/annal/engine"
)

// restoreBench builds a ledger of n events (its genesis included) in
// Shipped mode, appended in batches of 500 with durability None, waits
// until the bucket holds them all, then restores it five times into a
// fresh directory and prints each restore's events per second.
func restoreBench(b *bench, n int) error {
	ctx := context.Background()
	src, err := b.dir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	url := b.replica()
	start := time.Now()
	db, err := engine.Open(src, &engine.Options{Replica: url, Replication: engine.Shipped})
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: ledgerName}); err != nil {
		return err
	}
	evs := make([]engine.EventInput, 0, 500)
	var last engine.AppendResult
	for i := 1; i < n; {
		evs = evs[:0]
		for ; len(evs) < 500 && i < n; i++ {
			evs = append(evs, event(i))
		}
		if last, err = db.Append(ctx, ledgerName, evs, &engine.AppendOptions{Durability: engine.None}); err != nil {
			return err
		}
	}
	id, _ := last.Last()
	if err := db.WaitReplicated(ctx, id); err != nil {
		return err
	}
	if _, err := db.Checkpoint(ctx, ledgerName); err != nil {
		return err
	}
	st, err := db.ReplicaStatus(ledgerName)
	if err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "restore: a ledger of %d events built and shipped in %.1f s (%d chunks and the sealed segments)\n", n, time.Since(start).Seconds(), st.Chunks)
	key := &engine.Options{SigningKeyFile: filepath.Join(src, "signing.key")}
	var rates []float64
	for i := 1; i <= 5; i++ {
		dst, err := b.dir()
		if err != nil {
			return err
		}
		t := time.Now()
		got, err := engine.Restore(ctx, filepath.Join(dst, "r"), engine.RestoreOptions{Replica: url, Options: key})
		took := time.Since(t)
		os.RemoveAll(dst)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0].Events != uint64(n) {
			return fmt.Errorf("restore: %+v restored, want one ledger of %d events", got, n)
		}
		rates = append(rates, float64(n)/took.Seconds())
		fmt.Fprintf(out, "  restore %d: %.2f s, %.0f events/s\n", i, took.Seconds(), rates[len(rates)-1])
	}
	slices.Sort(rates)
	verdict := "met"
	if median(rates) < 300_000 {
		verdict = "MISSED"
	}
	fmt.Fprintf(out, "  restore events/s (>= 300000): median %.0f, spread %.0f..%.0f: %s\n", median(rates), rates[0], rates[len(rates)-1], verdict)
	return nil
}
