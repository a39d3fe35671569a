package s3test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/segment/testseed"
)

// TestCheckpointsCoverOnlyStoredEvents: the background checkpointer of a
// replicated ledger signs only events the bucket holds, in both modes,
// while events are durable locally and not stored yet (Replicated: each
// upload held back 200 ms by the proxy; Shipped: within ShipInterval).
// The signer remembers what it signed: a signature past the bucket would
// make it refuse the restore after a disk loss as a rollback.
func TestCheckpointsCoverOnlyStoredEvents(t *testing.T) {
	for _, mode := range []engine.Replication{engine.Replicated, engine.Shipped} {
		t.Run(mode.String(), func(t *testing.T) {
			credentialsInEnvironment(t, secret)
			ctx := context.Background()
			url := bucketURL(endpoint, fmt.Sprintf("ck%d", prefixes.Add(1)))
			var p *faultProxy
			if mode == engine.Replicated {
				p = startFaultProxy(t, testseed.Seed(t), 0, latency)
				url = bucketURL(p.url, fmt.Sprintf("ck%d", prefixes.Add(1)))
			}
			db, err := engine.Open(t.TempDir(), &engine.Options{Replica: url, Replication: mode, ShipInterval: 2 * time.Second,
				CheckpointInterval: 100 * time.Millisecond, SigningKeyFile: filepath.Join(t.TempDir(), "signer.key")})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: lossLedger})
			if err != nil {
				t.Fatal(err)
			}
			// A new ledger's first checkpoint (its genesis) is signed
			// before anything is stored, in Shipped mode: from the
			// genesis stored on.
			if err := db.WaitReplicated(ctx, info.Genesis); err != nil {
				t.Fatal(err)
			}
			if p != nil {
				// From now on every request waits 200 ms.
				p.mu.Lock()
				p.rate = 1
				p.mu.Unlock()
			}
			done := make(chan error, 1)
			go func() {
				for i := range 5 {
					if _, err := db.Append(ctx, lossLedger, []engine.EventInput{{Entity: "account", Key: "a", Event: "paid", Data: []byte(eventData(1, 0, i))}}, nil); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			checked := 0
			for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				// The stored head first: it only grows.
				rs, err := db.ReplicaStatus(lossLedger)
				if err != nil {
					t.Fatal(err)
				}
				ck, err := db.LatestCheckpoint(lossLedger)
				if err != nil {
					t.Fatal(err)
				}
				rs2, err := db.ReplicaStatus(lossLedger)
				if err != nil {
					t.Fatal(err)
				}
				if ck.Size > rs2.Stored {
					t.Fatalf("a checkpoint of %d events signed, the bucket holds %d (local head %d)", ck.Size, rs2.Stored, rs2.Head)
				}
				if rs.Head > rs.Stored {
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("no event was durable locally and not stored while the test looked")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
