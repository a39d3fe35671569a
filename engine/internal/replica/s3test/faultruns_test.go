package s3test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment/testseed"
)

// faultStoreTimeout is the faulty run's StoreTimeout, and
// faultCallMargin what an Append may take beyond it (the local fsync, the
// scheduling of a 2-core machine).
const (
	faultStoreTimeout = 2 * time.Second
	faultCallMargin   = time.Second
)

// TestFaultsReplicatedDiskLoss: the Replicated disk loss run with the
// writer's store behind the fault proxy, which fails, slows or loses the
// response of 6% of the requests: after each restore every acknowledged
// event is there, once; an append that failed with ErrNotStored is there
// at most once; and no Append took longer than StoreTimeout plus a
// margin.
func TestFaultsReplicatedDiskLoss(t *testing.T) {
	credentialsInEnvironment(t, secret)
	seed := testseed.Seed(t)
	p := startFaultProxy(t, seed, 0.06, fail500, fail503, lostResponse, succeededThen500, resetMidBody, latency)
	prefix := fmt.Sprintf("loss%d", prefixes.Add(1))
	d := &diskLoss{mode: "replicated", rounds: 20, replicaURL: bucketURL(p.url, prefix), prefix: prefix,
		seed: seed, storeTimeout: faultStoreTimeout, killMin: 50 * time.Millisecond, killMax: 600 * time.Millisecond}
	start := time.Now()
	fig := d.run(t)
	p.report(t)
	t.Logf("%d rounds in %v: %d events acknowledged, 0 lost; %d appends failed with ErrNotStored; %d events stored though their Append did not return or failed; ledger %d events; longest Append %v (bound %v + %v), longest restore %v",
		d.rounds, time.Since(start).Round(time.Millisecond), fig.acked, fig.notStored, fig.storedUnacked, fig.events,
		fig.maxCall.Round(time.Millisecond), faultStoreTimeout, faultCallMargin, fig.restoreTime.Round(time.Millisecond))
	if p.faults() == 0 {
		t.Fatalf("no fault in %d requests", p.requests.Load())
	}
	if fig.maxCall > faultStoreTimeout+faultCallMargin {
		t.Fatalf("an Append took %v: past StoreTimeout %v plus %v", fig.maxCall, faultStoreTimeout, faultCallMargin)
	}
}

// TestFaultProxyProbeLostResponses: the probe at Open passes when the
// answer to one of its conditional writes is lost after the write was
// applied (the retry's 412 is its own write, which a read back tells):
// the create, then the replace with the current ETag.
func TestFaultProxyProbeLostResponses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []fault
	}{
		{"create", []fault{lostResponse}},
		{"replace", []fault{forward, forward, forward, forward, lostResponse}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startFaultProxy(t, 1, 0)
			s := openProxiedStore(t, p)
			p.script = tc.script
			if err := store.Probe(context.Background(), s, "probe/"); err != nil {
				t.Fatalf("Probe with the answer to request %d lost: %v", len(tc.script), err)
			}
			if p.counts[lostResponse].Load() != 1 {
				t.Fatalf("%d answers lost, want 1", p.counts[lostResponse].Load())
			}
		})
	}
}
