package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// getsDownStore is a store whose reads of objects fail while down is
// set (its lists answer: the bucket is reachable, its objects are not).
type getsDownStore struct {
	store.Store
	down atomic.Bool
}

func (s *getsDownStore) Get(ctx context.Context, key string) (store.Object, error) {
	if s.down.Load() {
		return store.Object{}, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

// TestFollowerRestartWithStoreDownServesOnlyWhatItLaid: a well-formed
// event added at the end of a follower's copy while it was stopped (as
// TestFollowerRestartRefusesEventsNotInBucket), and the follower opened
// again while the bucket's objects cannot be read: its first poll fails
// (not damage: it is retried), so the copy is not checked against the
// bucket yet. The DB must not serve the event meanwhile: it was neither
// laid nor verified by the follower; the ledger's reads fail, saying
// why. Once the store answers, the ledger stops, as when it answered at
// once. A copy nobody wrote into is served again once the store answers.
func TestFollowerRestartWithStoreDownServesOnlyWhatItLaid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	vkey, info, forkDir, forged := forkedRecord(t, st)
	dir := followedCopy(t, st, vkey)
	clean := copyDir(t, dir)
	extendCopy(t, dir, forkDir, info.ID)

	// reads reads the ledger through the DB while the store is down: no
	// event after the 11 laid, and (held) an error saying why.
	reads := func(fw *Follower) {
		t.Helper()
		for range 20 {
			if ev, err := fw.DB().Get(ctx, forged); err == nil {
				t.Fatalf("with the store down, the follower serves event %d %q, which it did not lay", ev.Seq, ev.Event)
			}
			for ev, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
				if err != nil {
					if !errors.Is(err, ErrLedgerUnavailable) || !strings.Contains(err.Error(), "not checked against the bucket") {
						t.Fatalf("a scan of the follower's DB with the store down: %v, want ErrLedgerUnavailable saying the copy is not checked", err)
					}
					break
				}
				if ev.ID == forged || ev.Seq > 11 {
					t.Fatalf("with the store down, a scan of the follower's DB gives event %d %q", ev.Seq, ev.Event)
				}
			}
		}
	}
	view := &getsDownStore{Store: st}
	view.down.Store(true)
	fw := openTestFollower(t, dir, view, vkey)
	defer fw.Close()
	reads(fw)
	view.down.Store(false)
	if s := waitStopped(t, fw, "cash"); !errors.Is(s.Stopped, replica.ErrDiverged) {
		t.Fatalf("once the store answered, the ledger stopped with %v, want ErrDiverged", s.Stopped)
	}

	view = &getsDownStore{Store: st}
	view.down.Store(true)
	fw = openTestFollower(t, clean, view, vkey)
	defer fw.Close()
	reads(fw)
	view.down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		var err error
		for _, err = range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
			if err != nil {
				break
			}
			n++
		}
		if err == nil && n == 11 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the untouched copy, the store back: a scan gives %d events, %v; want the 11", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
