package s3test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/testseed"
)

// diskLoss is a run of rounds in which a child writer appends to a
// replicated directory, is SIGKILLed at a random point, its directory is
// deleted (the disk is lost), and a fresh one is restored from the bucket
// for the next round's writer.
type diskLoss struct {
	mode         string // "replicated" or "shipped"
	rounds       int
	replicaURL   string // the writer's replica (maybe through the fault proxy)
	prefix       string // the bucket's prefix, read directly by the restore
	storeTimeout time.Duration
	shipInterval time.Duration
	pause        time.Duration // each appender's pause after each Append
	seed         uint64        // the kills' seed; 0: testseed's
	// killMin and killMax bound the random time from the writer's first
	// acknowledgement to its SIGKILL.
	killMin, killMax time.Duration
}

// ackedEvent is an append the writer acknowledged.
type ackedEvent struct {
	id string
	at time.Time // when the parent read the acknowledgement
}

// lossFigures are what a run measured.
type lossFigures struct {
	acked, notStored, takeovers int
	storedUnacked               int             // restored events whose Append had not returned or failed
	lost                        []int           // Shipped: per round, events acknowledged and not restored
	lostAge                     []time.Duration // Shipped: per round, the oldest lost event's age at the kill
	maxCall                     time.Duration   // the longest Append call, whatever its outcome
	restoreTime                 time.Duration   // the longest restore
	events                      uint64          // the ledger's events at the end
}

// run runs the rounds; every check that fails ends the test.
func (d *diskLoss) run(t *testing.T) lossFigures {
	t.Helper()
	ctx := context.Background()
	if testing.Short() {
		d.rounds = min(d.rounds, 5)
	}
	seed := d.seed
	if seed == 0 {
		seed = testseed.Seed(t)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	// The key and its memory live outside the data directory, on a disk
	// that is not lost.
	keyDir := filepath.Join(base, "keys")
	if err := os.Mkdir(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(keyDir, "signer.key")
	bucketStore := openPrefix(t, d.prefix)
	acked := map[string]ackedEvent{}
	maybe := map[string]bool{}   // failed with ErrNotStored
	unacked := map[string]bool{} // restored, not acknowledged
	var fig lossFigures
	for round := 1; round <= d.rounds; round++ {
		c := startChildWriter(t, dir, d.replicaURL, keyFile, d.mode, round, d.storeTimeout, d.shipInterval, d.pause)
		delay := d.killMin + time.Duration(rng.Int64N(int64(d.killMax-d.killMin)+1))
		var kill <-chan time.Time
		giveUp := time.After(60 * time.Second)
		roundAcks := 0
		var ready time.Time
		var firstAck time.Duration
		take := func(rep childReport) {
			fig.maxCall = max(fig.maxCall, rep.took)
			switch rep.kind {
			case "ready":
				if rep.text == "takeover" {
					fig.takeovers++
					t.Logf("round %d: the restored directory was behind the bucket; the writer took it over", round)
				}
				ready = rep.at
				if round == 1 {
					d.awaitFirstCheckpoint(t, bucketStore, rep.id)
				}
			case "ack":
				if kill == nil {
					firstAck = rep.at.Sub(ready)
					kill = time.After(delay)
				}
				if _, dup := acked[rep.name]; dup {
					t.Fatalf("round %d: %s acknowledged twice", round, rep.name)
				}
				acked[rep.name] = ackedEvent{id: rep.id, at: rep.at}
				roundAcks++
			case "notstored":
				maybe[rep.name] = true
				fig.notStored++
			case "error":
				t.Fatalf("round %d: the writer's append %s failed after %v: %s", round, rep.name, rep.took, rep.text)
			}
		}
	loop:
		for {
			select {
			case rep, ok := <-c.reports:
				if !ok {
					c.cmd.Wait()
					t.Fatalf("round %d: the writer ended before it was killed (%v): %s", round, c.readErr, c.stderr.String())
				}
				take(rep)
			case <-kill:
				c.kill()
				break loop
			case <-giveUp:
				c.kill()
				t.Fatalf("round %d: the writer acknowledged nothing within 60 s: %s", round, c.stderr.String())
			}
		}
		// What the writer reported before it died was acknowledged.
		for rep := range c.reports {
			take(rep)
		}
		if c.readErr != nil {
			t.Fatal(c.readErr)
		}

		// The disk is lost.
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := engine.Restore(ctx, dir, engine.RestoreOptions{Replica: bucketURL(endpoint, d.prefix), Options: &engine.Options{SigningKeyFile: keyFile}})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: restore: %v\nthe bucket:\n%s", round, err, bucketDump(ctx, bucketStore))
		}
		fig.restoreTime = max(fig.restoreTime, took)
		if len(res) != 1 || res[0].Name != lossLedger {
			t.Fatalf("round %d: restored %+v; want the one ledger %s", round, res, lossLedger)
		}
		// The restore checked the bucket's signed checkpoint against the
		// events' root: it did not sign the ledger anew (check verifies
		// that checkpoint's root against the restored events again).
		if res[0].Resigned {
			t.Fatalf("round %d: the restore signed the ledger anew: the bucket's checkpoint was not the one checked", round)
		}
		ck, err := bucketStore.Get(ctx, replica.CheckpointKey(res[0].ID))
		if err != nil {
			t.Fatalf("round %d: the bucket's checkpoint: %v", round, err)
		}

		present, ckSize := d.check(t, round, dir, keyFile, res[0].Events, ck.Data)
		fig.events = res[0].Events
		lost, oldest := 0, time.Duration(0)
		var lostNames []string
		for name, a := range acked {
			id, ok := present[name]
			if !ok {
				lost++
				lostNames = append(lostNames, name)
				oldest = max(oldest, c.killed.Sub(a.at))
				delete(acked, name) // gone for good
				continue
			}
			if id != a.id {
				t.Fatalf("round %d: %s was acknowledged as %s, restored as %s", round, name, a.id, id)
			}
		}
		for name := range present {
			if _, ok := acked[name]; !ok && !unacked[name] {
				// An event whose Append had not returned (or failed with
				// ErrNotStored) when the writer was killed may be stored.
				unacked[name] = true
				fig.storedUnacked++
			}
		}
		sort.Strings(lostNames)

		if d.shipped() {
			fig.lost = append(fig.lost, lost)
			fig.lostAge = append(fig.lostAge, oldest)
		} else if lost > 0 {
			t.Fatalf("round %d: %d acknowledged events lost after the restore: %v", round, lost, lostNames)
		}
		t.Logf("round %d: first acknowledgement %v after ready, killed %v after it, %d acknowledged; restored %d events in %v (checkpoint at %d); lost %d (oldest %v before the kill)",
			round, firstAck.Round(time.Millisecond), delay.Round(time.Millisecond), roundAcks, res[0].Events, took.Round(time.Millisecond), ckSize, lost, oldest.Round(time.Millisecond))
	}
	fig.acked = len(acked)
	return fig
}

// awaitFirstCheckpoint waits until the bucket holds the new ledger's
// first signed checkpoint. Between the ledger's first manifest and that
// checkpoint, a bucket cannot be restored: the restore refuses a ledger
// without a checkpoint as damaged (ErrCorruption), and the disk lost
// there loses the ledger. The rounds test what comes after.
func (d *diskLoss) awaitFirstCheckpoint(t *testing.T, st store.Store, ledger string) {
	t.Helper()
	id, err := eventid.ParseLedgerID(ledger)
	if err != nil {
		t.Fatalf("the writer's ledger %q: %v", ledger, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := st.Head(context.Background(), replica.CheckpointKey(id))
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("the first checkpoint of ledger %s: %v", ledger, err)
		}
	}
}

func (d *diskLoss) shipped() bool { return d.mode == "shipped" }

// check opens the restored directory read-only, verifies the ledger in
// full (frames, chains, the Merkle tree, the signed checkpoint) and reads
// every event: each writer event at most once, and the Merkle root of the
// first events that the bucket's signed checkpoint bucketCk covers is its
// root. It returns the writer's events present, by name, with their IDs,
// and the size of bucketCk.
func (d *diskLoss) check(t *testing.T, round int, dir, keyFile string, events uint64, bucketCk []byte) (map[string]string, uint64) {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenReadOnly(dir, &engine.Options{SigningKeyFile: keyFile, VerifyIndex: true})
	if err != nil {
		t.Fatalf("round %d: open the restored directory: %v", round, err)
	}
	defer db.Close()
	rep, err := db.Verify(ctx, lossLedger, nil)
	if err != nil {
		t.Fatalf("round %d: Verify the restored ledger: %v", round, err)
	}
	if rep.Events != events || rep.CheckpointSize == 0 || rep.TreeNotChecked != "" || rep.IndexNotChecked != "" {
		t.Fatalf("round %d: Verify: %+v; want %d events, a checkpoint checked, the tree and the index compared", round, rep, events)
	}
	v, err := tree.NewVerifier(db.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	ck, err := tree.OpenCheckpoint(bucketCk, v)
	if err != nil || ck.Size == 0 || ck.Size > events {
		t.Fatalf("round %d: the bucket's checkpoint (size %d of %d events): %v", round, ck.Size, events, err)
	}
	var tb tree.Builder
	var buf []byte
	present := map[string]string{}
	n := uint64(0)
	for ev, err := range db.Scan(ctx, lossLedger, engine.ScanOptions{}) {
		if err != nil {
			t.Fatalf("round %d: scan: %v", round, err)
		}
		n++
		if n <= ck.Size {
			buf = append(buf[:0], 0)
			buf = ndjson.AppendLine(buf, ev.ID, ev.ID.Micros(), ev.Entity, ev.Key, ev.Event, ev.Meta, ev.Data)
			tb.Add(sha256.Sum256(buf[:len(buf)-1]))
			if n == ck.Size && tb.Root() != ck.Root {
				t.Fatalf("round %d: the root of the first %d restored events is not the bucket's signed checkpoint's", round, n)
			}
		}
		if ev.Seq == 1 {
			continue // the genesis event
		}
		var v struct{ Round, W, N int }
		if err := json.Unmarshal(ev.Data, &v); err != nil || v.Round == 0 {
			t.Fatalf("round %d: event #%d %s: data %s (%v)", round, ev.Seq, ev.ID, ev.Data, err)
		}
		name := eventName(v.Round, v.W, v.N)
		if first, dup := present[name]; dup {
			t.Fatalf("round %d: %s is in the restored ledger twice: %s and %s", round, name, first, ev.ID)
		}
		present[name] = ev.ID.String()
	}
	if n != events {
		t.Fatalf("round %d: scanned %d events, restored %d", round, n, events)
	}
	return present, ck.Size
}

// TestDiskLossReplicated: a Replicated writer process with 8 appenders is
// SIGKILLed at a random point, its disk lost, and a fresh directory
// restored from versitygw, 20 times, each round's writer on the directory
// the round before restored: every acknowledged event is restored once,
// the ledger verifies whole, and the restore kept the bucket's signed
// checkpoint, checked against the events.
func TestDiskLossReplicated(t *testing.T) {
	credentialsInEnvironment(t, secret)
	prefix := fmt.Sprintf("loss%d", prefixes.Add(1))
	d := &diskLoss{mode: "replicated", rounds: 20, replicaURL: bucketURL(endpoint, prefix), prefix: prefix,
		storeTimeout: 5 * time.Second, shipInterval: 0, killMin: 50 * time.Millisecond, killMax: 600 * time.Millisecond}
	start := time.Now()
	fig := d.run(t)
	t.Logf("%d rounds in %v: %d events acknowledged, 0 lost, %d more stored though their Append did not return; ledger %d events; longest Append %v, longest restore %v",
		d.rounds, time.Since(start).Round(time.Millisecond), fig.acked, fig.storedUnacked, fig.events, fig.maxCall.Round(time.Millisecond), fig.restoreTime.Round(time.Millisecond))
}

// shippedInterval and shippedMargin are the Shipped run's ShipInterval
// and the allowance for the uploads in flight at the kill: an event lost
// with the disk must have been acknowledged within their sum before it.
const (
	shippedInterval = 250 * time.Millisecond
	shippedMargin   = 500 * time.Millisecond
)

// TestDiskLossShipped: the same with a Shipped writer: the events
// acknowledged locally and lost with the disk are measured, and each was
// acknowledged within the documented window before the kill
// (ShipInterval plus the uploads in flight); every other acknowledged
// event is restored once, and the ledger verifies whole.
func TestDiskLossShipped(t *testing.T) {
	credentialsInEnvironment(t, secret)
	prefix := fmt.Sprintf("loss%d", prefixes.Add(1))
	d := &diskLoss{mode: "shipped", rounds: 20, replicaURL: bucketURL(endpoint, prefix), prefix: prefix,
		storeTimeout: 5 * time.Second, shipInterval: shippedInterval, pause: 5 * time.Millisecond, killMin: 50 * time.Millisecond, killMax: 1200 * time.Millisecond}
	start := time.Now()
	fig := d.run(t)
	total, worst, rounds := 0, time.Duration(0), 0
	for i, n := range fig.lost {
		total += n
		if n > 0 {
			rounds++
		}
		if fig.lostAge[i] > worst {
			worst = fig.lostAge[i]
		}
	}
	t.Logf("%d rounds in %v: %d events acknowledged and restored, %d lost in %d rounds (per round %v); the oldest lost event was acknowledged %v before the kill (window %v + %v); longest Append %v, longest restore %v",
		d.rounds, time.Since(start).Round(time.Millisecond), fig.acked, total, rounds, fig.lost, worst.Round(time.Millisecond), shippedInterval, shippedMargin,
		fig.maxCall.Round(time.Millisecond), fig.restoreTime.Round(time.Millisecond))
	if worst > shippedInterval+shippedMargin {
		t.Fatalf("an event acknowledged %v before the kill was lost: past the window of %v plus %v", worst, shippedInterval, shippedMargin)
	}
}
