package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// subCollect takes events from a subscription until it has n, or an error.
func subCollect(ctx context.Context, db *DB, name string, o SubscribeOptions, n int) ([]Event, error) {
	var out []Event
	if n == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for ev, err := range db.Subscribe(ctx, name, o) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
		if len(out) == n {
			break
		}
	}
	return out, nil
}

// TestSubscribeSelectorAndCursor: Subscribe selects as Replay does
// (streams, an entity, event names, both, everything with the genesis)
// and takes the cursor as an ID or a sequence number, which must agree.
func TestSubscribeSelectorAndCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	var in []EventInput
	for i := range 30 {
		in = append(in, ev([]string{"order", "user"}[i%2], fmt.Sprintf("k%d", i%3), []string{"placed", "paid", "shipped", "noted"}[i%4]))
	}
	r, err := db.Append(ctx, "l", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]eventid.ID{info.Genesis}, r.IDs...)
	cases := []struct {
		name string
		o    SubscribeOptions
		want func(i int) bool // over in
	}{
		{"streams", SubscribeOptions{Entity: "order", Keys: []string{"k0", "k2"}}, func(i int) bool { return i%2 == 0 && i%3 != 1 }},
		{"entity", SubscribeOptions{Entity: "user"}, func(i int) bool { return i%2 == 1 }},
		{"events", SubscribeOptions{Events: []string{"paid", "noted"}}, func(i int) bool { return i%4 == 1 || i%4 == 3 }},
		{"both", SubscribeOptions{Entity: "order", Events: []string{"shipped"}}, func(i int) bool { return i%2 == 0 && i%4 == 2 }},
		{"after ID", SubscribeOptions{Entity: "order", After: r.IDs[9]}, func(i int) bool { return i > 9 && i%2 == 0 }},
		{"after seq", SubscribeOptions{Entity: "order", AfterSeq: r.Seq(9)}, func(i int) bool { return i > 9 && i%2 == 0 }},
		{"after both", SubscribeOptions{Events: []string{"placed"}, After: r.IDs[3], AfterSeq: r.Seq(3)}, func(i int) bool { return i > 3 && i%4 == 0 }},
		{"after genesis", SubscribeOptions{After: info.Genesis}, func(int) bool { return true }},
	}
	for _, tc := range cases {
		var want []eventid.ID
		for i := range in {
			if tc.want(i) {
				want = append(want, r.IDs[i])
			}
		}
		got, err := subCollect(ctx, db, "l", tc.o, len(want))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if g, w := fmt.Sprint(idsOfEvents(got)), fmt.Sprint(want); g != w {
			t.Fatalf("%s: got %s, want %s", tc.name, g, w)
		}
	}
	// The empty selector: every event, the genesis first.
	got, err := subCollect(ctx, db, "l", SubscribeOptions{}, len(all))
	if err != nil || fmt.Sprint(idsOfEvents(got)) != fmt.Sprint(all) {
		t.Fatalf("every event: %v %v", idsOfEvents(got), err)
	}
	// A new matching event comes through; a new other one does not.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	next := make(chan Event, 4)
	go func() {
		for e, err := range db.Subscribe(sctx, "l", SubscribeOptions{Events: []string{"late"}, After: r.IDs[len(r.IDs)-1]}) {
			if err != nil {
				close(next)
				return
			}
			next <- e
		}
	}()
	late, err := db.Append(ctx, "l", []EventInput{ev("order", "k9", "other"), ev("order", "k9", "late")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-next; e.ID != late.IDs[1] {
		t.Fatalf("the late event: %s, want %s", e.ID, late.IDs[1])
	}
	cancel()
	// Bad cursors and selectors.
	other, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		o    SubscribeOptions
		want error
	}{
		{SubscribeOptions{After: r.IDs[3], AfterSeq: r.Seq(4)}, ErrInvalid},
		{SubscribeOptions{Keys: []string{"k1"}}, ErrInvalid},
		{SubscribeOptions{After: other.Genesis}, ErrInvalid},
		{SubscribeOptions{After: eventid.New(r.IDs[0].Micros()+1, 7, info.ID)}, ErrNotFound},
		{SubscribeOptions{AfterSeq: 1000}, ErrNotFound},
	}
	for _, b := range bad {
		_, err := subCollect(ctx, db, "l", b.o, 1)
		if !errors.Is(err, b.want) {
			t.Fatalf("%+v: %v, want %v", b.o, err, b.want)
		}
	}
	if _, err := subCollect(ctx, db, "nope", SubscribeOptions{}, 1); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("unknown ledger: %v", err)
	}
}

func idsOfEvents(evs []Event) []eventid.ID {
	out := make([]eventid.ID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// TestSubscribeCancelDuringCatchUp: cancelling the context in the loop
// body during the catch-up stops the subscription within checkEvery
// events, with the context's error once; with a selector, within
// checkEvery events read, matched or not.
func TestSubscribeCancelDuringCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 3000, appendSpec{Event: func(i int) EventInput {
		if i%500 == 0 {
			return ev("order", "k", "rare")
		}
		return order(i)
	}, Options: unsynced})
	for _, o := range []SubscribeOptions{{}, {Events: []string{"rare"}}} {
		sctx, cancel := context.WithCancel(ctx)
		n, after := 0, 0
		var errs []error
		for _, err := range db.Subscribe(sctx, "l", o) {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n++
			if n == 1 && len(o.Events) > 0 || n == 10 {
				cancel()
			} else if sctx.Err() != nil {
				after++
			}
		}
		cancel()
		if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
			t.Fatalf("%+v: ended with %v, want one context.Canceled", o, errs)
		}
		// Unfiltered: at most checkEvery events. Filtered: the next match
		// is 500 events away, more than checkEvery, so none.
		if limit := map[bool]int{false: checkEvery, true: 0}[len(o.Events) > 0]; after > limit {
			t.Fatalf("%+v: %d events after the cancel, want at most %d", o, after, limit)
		}
	}
}

// TestSubscribeCloseEndsSubscribers: Close with live subscribers (waiting
// for a commit, filtered and waiting, suspended in the loop body during
// the catch-up, and one that calls Close itself from its loop body)
// returns, and each subscriber ends with one ErrClosed and nothing after.
func TestSubscribeCloseEndsSubscribers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 2000, appendSpec{Options: unsynced})
	type result struct {
		name   string
		events int
		errs   []error
		late   bool // an event after the error
	}
	results := make(chan result, 4)
	run := func(name string, o SubscribeOptions, body func(n int)) {
		go func() {
			r := result{name: name}
			for _, err := range db.Subscribe(ctx, "l", o) {
				if err != nil {
					r.errs = append(r.errs, err)
					continue
				}
				if len(r.errs) > 0 {
					r.late = true
				}
				r.events++
				body(r.events)
			}
			results <- r
		}()
	}
	caughtUp := make(chan struct{})
	release := make(chan struct{})
	run("waiting", SubscribeOptions{}, func(n int) {
		if n == 2001 {
			close(caughtUp)
		}
	})
	run("filtered", SubscribeOptions{Events: []string{"never"}}, func(int) {})
	inBody := make(chan struct{})
	run("suspended", SubscribeOptions{}, func(n int) {
		if n == 10 {
			close(inBody)
			<-release
		}
	})
	<-caughtUp
	<-inBody
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not return with live subscribers")
	}
	close(release)
	for range 3 {
		r := <-results
		if len(r.errs) != 1 || !errors.Is(r.errs[0], ErrClosed) || r.late {
			t.Fatalf("%s: after %d events ended with %v (event after it: %v), want one ErrClosed", r.name, r.events, r.errs, r.late)
		}
	}

	// Close from the loop body, during the catch-up.
	db = openTest(t, db.dir)
	var errs []error
	n := 0
	for _, err := range db.Subscribe(ctx, "l", SubscribeOptions{}) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n++; n == 10 {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrClosed) || n != 10 {
		t.Fatalf("Close from the loop body: %d events, then %v; want 10, then one ErrClosed", n, errs)
	}
}
