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
// laid nor verified by the follower; the ledger's reads give at most the
// 11 events its checkpoint covers (TestFollowerRestartServesSignedPrefix)
// or fail, saying why. Once the store answers, the ledger stops, as when it answered at
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
	// event after the 11 laid, or (held) an error saying why.
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

// TestFollowerRestartServesSignedPrefix: a follower opened again while
// the bucket's objects cannot be read serves its copy up to the
// checkpoint it verified before (its checkpoint file, signed by the
// writer's key, whose root the copy's first 11 events match), not the
// event added after it while it was stopped (a well-formed record of a
// fork of the writer, as TestFollowerRestartRefusesEventsNotInBucket
// plants it): Get, Scan and Stats give the 11 events, and the planted one
// is not found. Once the store answers, the poll finds the planted event
// and stops the ledger, and its reads fail with why.
func TestFollowerRestartServesSignedPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	vkey, info, forkDir, forged := forkedRecord(t, st)
	dir := followedCopy(t, st, vkey)
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var signed []Event
	for ev, err := range ro.Scan(ctx, "cash", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		signed = append(signed, ev)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if len(signed) != 11 {
		t.Fatalf("the follower's copy holds %d events, want 11", len(signed))
	}
	extendCopy(t, dir, forkDir, info.ID)

	view := &getsDownStore{Store: st}
	view.down.Store(true)
	fw := openTestFollower(t, dir, view, vkey)
	defer fw.Close()
	if s, err := fw.Status("cash"); err != nil || s.LastError == nil || s.Local != 11 || s.Signed != 11 {
		t.Fatalf("the follower's status with the store down: %+v, %v; want its first poll failed, 11 events served", s, err)
	}
	for range 20 {
		if ev, err := fw.DB().Get(ctx, forged); !errors.Is(err, ErrNotFound) {
			t.Fatalf("with the store down, Get of the planted event: %+v, %v; want ErrNotFound", ev, err)
		}
		var got []Event
		for ev, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
			if err != nil {
				t.Fatalf("a scan of the follower's DB with the store down: %v, want the signed prefix", err)
			}
			got = append(got, ev)
		}
		if len(got) != len(signed) {
			t.Fatalf("with the store down, a scan gives %d events, want the %d signed", len(got), len(signed))
		}
		for i := range got {
			if got[i].ID != signed[i].ID {
				t.Fatalf("with the store down, event %d is %s, want %s", i+1, got[i].ID, signed[i].ID)
			}
		}
		if ev, err := fw.DB().Get(ctx, signed[10].ID); err != nil || ev.Seq != 11 {
			t.Fatalf("with the store down, Get of the last signed event: %+v, %v", ev, err)
		}
		if l, err := fw.DB().Ledger("cash"); err != nil || l.Count != 11 {
			t.Fatalf("with the store down, the ledger: %+v, %v; want 11 events", l, err)
		}
	}

	view.down.Store(false)
	s := waitStopped(t, fw, "cash")
	if !errors.Is(s.Stopped, replica.ErrDiverged) {
		t.Fatalf("once the store answered, the ledger stopped with %v, want ErrDiverged", s.Stopped)
	}
	var scanErr error
	for _, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
		if err != nil {
			scanErr = err
			break
		}
	}
	if !errors.Is(scanErr, replica.ErrDiverged) {
		t.Fatalf("a scan of the stopped ledger: %v, want its stop (ErrDiverged)", scanErr)
	}
}

// TestFollowerRestartServesLaidEventsOnceChecked: a follower laid 16
// events of which its checkpoint covers 11, and is opened again while the
// bucket's objects cannot be read: it serves the 11 signed, not the 5 it
// laid after them (the copy is not checked against the bucket yet), and
// all 16 once the store answers and its first poll checked them.
func TestFollowerRestartServesLaidEventsOnceChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, _, _, info := keyedWriter(t, st)
	defer w.Close()
	for i := range 10 {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "cash", info.ID, 11)
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, w.key.Verifier)
	waitFollowedSigned(t, fw, "cash", 11)
	for i := range 5 {
		if _, err := appendOne(ctx, w, "cash", 10+i); err != nil {
			t.Fatal(err)
		}
	}
	if s := waitFollowed(t, fw, "cash", 16); s.Stopped != nil || s.Signed != 11 {
		t.Fatalf("the follower: %+v, want 16 events laid, 11 signed", s)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}

	count := func(fw *Follower) (n uint64, err error) {
		for _, err = range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
			if err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	view := &getsDownStore{Store: st}
	view.down.Store(true)
	fw = openTestFollower(t, dir, view, w.key.Verifier)
	defer fw.Close()
	for range 20 {
		if n, err := count(fw); n != 11 || err != nil {
			t.Fatalf("with the store down, a scan gives %d events, %v; want the 11 signed", n, err)
		}
	}
	view.down.Store(false)
	waitFollowed(t, fw, "cash", 16)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := count(fw)
		if err == nil && n == 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store back: a scan gives %d events, %v; want the 16 laid", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
