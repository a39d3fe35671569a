package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// TestTreeWrittenBesideAppends: without a replica, the leaves of appended
// events are hashed and written to the tree file by a goroutine of their
// own once treeFlushLeaves events wait, not by the appends: the file holds
// them without any reader having asked, and what readers get while the
// appends and those writes go on is the tree of the events' own export
// lines: every inclusion proof (against a tree of events already
// returned) and every signed checkpoint verifies against the root the
// export gives at that size, and Verify finds the tree equal to the
// events at the end.
func TestTreeWrittenBesideAppends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "w"}); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("w")
	if err != nil {
		t.Fatal(err)
	}

	// No reader: the appends alone write the tree file.
	next := 0
	batch := func(n int) []EventInput {
		evs := make([]EventInput, n)
		for i := range evs {
			evs[i] = order(next)
			next++
		}
		return evs
	}
	for range 3*treeFlushLeaves/10 + 5 {
		if _, err := db.Append(ctx, "w", batch(10), &AppendOptions{Durability: None}); err != nil {
			t.Fatal(err)
		}
	}
	l.idxMu.Lock()
	l.waitTreeLocked()
	written, waiting, published := l.tree.Size(), len(l.treePend), l.indexed
	l.idxMu.Unlock()
	if written < 2*treeFlushLeaves || written+uint64(waiting) != published {
		t.Fatalf("after %d events appended, none read: the tree file holds %d leaves and %d wait; want at least %d written, and %d in all", published, written, waiting, 2*treeFlushLeaves, published)
	}

	// Appenders, with readers proving and checkpointing meanwhile. Each
	// write of the tree is held a little, so that readers come while one
	// is in progress.
	db.test.treeWrite = func() { time.Sleep(2 * time.Millisecond) }
	type proof struct {
		seq, size uint64
		p         InclusionProof
	}
	var (
		returned atomic.Uint64 // the last sequence number an append returned
		ids      sync.Map      // sequence number → ID, of events returned
		mu       sync.Mutex
		proofs   []proof
		cks      []Checkpoint
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	var mkMu sync.Mutex
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				mkMu.Lock()
				evs := batch(1 + (w*7+i*13)%40)
				mkMu.Unlock()
				res, err := db.Append(ctx, "w", evs, &AppendOptions{Durability: Interval})
				if err != nil {
					t.Error(err)
					return
				}
				for j, id := range res.IDs {
					ids.Store(res.Seq(j), id)
				}
				_, last := res.Last()
				for {
					r := returned.Load()
					if last <= r || returned.CompareAndSwap(r, last) {
						break
					}
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if r == 0 && i%8 == 0 {
					c, err := db.Checkpoint(ctx, "w")
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					cks = append(cks, c)
					mu.Unlock()
					continue
				}
				size := returned.Load()
				if size == 0 {
					continue
				}
				seq := 1 + (uint64(i)*7919+uint64(r)*104729)%size
				v, ok := ids.Load(seq)
				if !ok {
					continue // appended before this phase
				}
				p, err := db.ProveInclusion(ctx, v.(eventid.ID), size)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				proofs = append(proofs, proof{seq, size, p})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if t.Failed() {
		return
	}

	export, _ := exportBytes(t, db, "w", ExportOptions{})
	leaves := mkLeaves(t, export)
	if len(proofs) == 0 || len(cks) == 0 {
		t.Fatalf("%d proofs and %d checkpoints read during the appends; want some of each", len(proofs), len(cks))
	}
	for _, pr := range proofs {
		if pr.p.Seq != pr.seq || pr.p.TreeSize != pr.size || pr.p.LeafHash != leaves[pr.seq-1] {
			t.Fatalf("event #%d in the tree of %d: proof %+v, the export's leaf %s", pr.seq, pr.size, pr.p, leaves[pr.seq-1])
		}
		if err := tree.VerifyInclusion(pr.seq-1, pr.size, leaves[pr.seq-1], pr.p.Hashes, mkRoot(leaves[:pr.size])); err != nil {
			t.Fatalf("event #%d in the tree of %d: %v", pr.seq, pr.size, err)
		}
	}
	for _, c := range cks {
		if c.Size > uint64(len(leaves)) || c.Root != mkRoot(leaves[:c.Size]) {
			t.Fatalf("checkpoint of %d events, root %s: not the export's", c.Size, c.Root)
		}
	}
	if _, err := db.Verify(ctx, "w", nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events; %d proofs and %d checkpoints checked", len(leaves), len(proofs), len(cks))
}
