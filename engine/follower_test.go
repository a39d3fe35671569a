package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// followerWriter opens a Shipped writer on a new directory replicating to
// st, with a key outside it, and creates the ledger "cash".
func followerWriter(t *testing.T, st store.Store) (*DB, *Options, LedgerInfo) {
	t.Helper()
	o := replOptions(st, Shipped)
	o.SigningKeyFile = filepath.Join(t.TempDir(), "writer.key")
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WaitReplicated(context.Background(), info.Genesis); err != nil {
		t.Fatal(err)
	}
	return db, o, info
}

func openTestFollower(t *testing.T, dir string, st store.Store, vkey string) *Follower {
	t.Helper()
	fw, err := OpenFollower(dir, FollowerOptions{store: st, VerifierKey: vkey, PollInterval: 20 * time.Millisecond,
		Options: &Options{FollowInterval: 5 * time.Millisecond, TempDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	return fw
}

// waitFollowed waits until the follower's copy of ledger name holds n
// events, or the ledger stops.
func waitFollowed(t *testing.T, fw *Follower, name string, n uint64) FollowerStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := fw.Status(name)
		if err == nil && (s.Local >= n || s.Stopped != nil) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower of %s: %+v (%v), want %d events", name, s, err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFollowerKeepsUpWithWriter: a follower on another directory keeps a
// copy of a ledger that a writer appends to: a subscriber on the
// follower's DB gets every event the writer acknowledged, in order, and
// Get, Scan, the checkpoint and an inclusion proof work on the copy,
// while appends to it are refused. The lag (an append's return to the
// follower's subscriber) is logged.
func TestFollowerKeepsUpWithWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, _ := followerWriter(t, st)
	defer w.Close()
	fw := openTestFollower(t, t.TempDir(), st, w.key.Verifier)
	defer fw.Close()
	waitFollowed(t, fw, "cash", 1)

	const n = 400
	acked := make([]time.Time, n+2)
	var mu sync.Mutex
	ids := make([]eventid.ID, n+2)
	go func() {
		for i := range n {
			res, err := appendOne(ctx, w, "cash", i)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked[res.FirstSeq], ids[res.FirstSeq] = time.Now(), res.IDs[0]
			mu.Unlock()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lags []time.Duration
	for ev, err := range fw.DB().Subscribe(sctx, "cash", SubscribeOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq == 1 {
			continue
		}
		now := time.Now()
		mu.Lock()
		at, id := acked[ev.Seq], ids[ev.Seq]
		mu.Unlock()
		if !at.IsZero() {
			lags = append(lags, now.Sub(at))
			if ev.ID != id {
				t.Fatalf("event #%d: the follower serves %s, the writer acknowledged %s", ev.Seq, ev.ID, id)
			}
		}
		if ev.Seq == n+1 {
			break
		}
	}
	slices.Sort(lags)
	t.Logf("lag from an append's return to the follower's subscriber, %d events, poll 20 ms, Shipped 50 ms: p50 %v, p99 %v, max %v",
		len(lags), lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1])

	db := fw.DB()
	mu.Lock()
	last := ids[n+1]
	mu.Unlock()
	ev, err := db.Get(ctx, last)
	if err != nil || ev.Seq != n+1 {
		t.Fatalf("Get on the follower: %+v, %v", ev, err)
	}
	count := 0
	for _, err := range db.Scan(ctx, "cash", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		count++
	}
	if count != n+1 {
		t.Fatalf("Scan on the follower: %d events, want %d", count, n+1)
	}
	if _, err := appendOne(ctx, db, "cash", 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("an append to the follower's DB: %v, want ErrReadOnly", err)
	}
	// The writer's checkpoint of every event, and a proof of inclusion from
	// the follower's tree file, checked against it.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := waitFollowedSigned(t, fw, "cash", n+1)
	if s.Bucket != n+1 || s.Behind != 0 || s.Stopped != nil {
		t.Fatalf("status: %+v", s)
	}
	ro, err := OpenReadOnly(fw.Dir(), &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ck, err := ro.LatestCheckpoint("cash")
	if err != nil || ck.Size != n+1 {
		t.Fatalf("the checkpoint read beside the follower: %+v, %v", ck, err)
	}
	p, err := ro.ProveInclusion(ctx, last, ck.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, p.LeafHash, p.Hashes, ck.Root); err != nil {
		t.Fatalf("the inclusion proof of the follower's copy: %v", err)
	}
}

// waitFollowedSigned waits until the follower verified a checkpoint of n
// events of ledger name.
func waitFollowedSigned(t *testing.T, fw *Follower, name string, n uint64) FollowerStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, _ := fw.Status(name)
		if s.Signed >= n || s.Stopped != nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower of %s: %+v, want a checkpoint of %d events", name, s, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = fmt.Sprint
var _ = sort.Ints
var _ = strings.Contains
var _ = replica.ErrDiverged
