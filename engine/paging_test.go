package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// Replay's bounds and cursors: From, To, After,
// AfterSeq, Reverse and Limit, checked against a model (a filter over the
// whole ledger), and paging with Limit and either cursor.

// pagingDB returns a DB with ledger "l" of n events (order(i)) appended in
// batches of various sizes, and the ledger's events in order.
func pagingDB(t *testing.T, n int) (*DB, []Event) {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "d"), &Options{Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; {
		var batch []EventInput
		for range 1 + i%5 {
			batch = append(batch, order(i))
			i++
		}
		if _, err := db.Append(ctx, "l", batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	return db, allEvents(t, db)
}

func allEvents(t *testing.T, db *DB) []Event {
	t.Helper()
	evs, err := collectEvents(db.Scan(context.Background(), "l", ScanOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func collectEvents(seq func(yield func(Event, error) bool)) ([]Event, error) {
	var out []Event
	for ev, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func seqsOfEvents(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// replayModel is what Replay with o returns, computed from all the
// ledger's events.
func replayModel(all []Event, o ReplayOptions) []Event {
	var out []Event
	for _, ev := range all {
		switch {
		case o.Entity != "" && ev.Entity != o.Entity,
			len(o.Keys) > 0 && !slices.Contains(o.Keys, ev.Key),
			len(o.Events) > 0 && !slices.Contains(o.Events, ev.Event),
			!o.From.IsZero() && ev.Time().Before(o.From),
			!o.To.IsZero() && ev.Time().After(o.To):
			continue
		}
		out = append(out, ev)
	}
	if o.Reverse {
		slices.Reverse(out)
	}
	// The cursor: after it in the replay's direction.
	cut := func(after func(ev Event) bool) {
		for i, ev := range out {
			if after(ev) {
				out = out[i:]
				return
			}
		}
		out = nil
	}
	if !o.After.IsZero() {
		cut(func(ev Event) bool { return (ev.ID.Compare(o.After) > 0) != o.Reverse && ev.ID != o.After })
	}
	if o.AfterSeq != 0 {
		cut(func(ev Event) bool { return (ev.Seq > o.AfterSeq) != o.Reverse && ev.Seq != o.AfterSeq })
	}
	if o.Limit > 0 && len(out) > o.Limit {
		out = out[:o.Limit]
	}
	return out
}

// TestReplayBounds compares Replay with random bounds, cursors, direction
// and limit with the model.
func TestReplayBounds(t *testing.T) {
	t.Parallel()
	db, all := pagingDB(t, 600)
	rng := rand.New(rand.NewPCG(13, 6))
	selections := []ReplayOptions{
		{Entity: "order", Keys: []string{"order-1"}},
		{Entity: "order", Keys: []string{"order-2", "order-6", "order-2"}},
		{Entity: "order"},
		{Events: []string{"order-paid"}},
		{Events: []string{"order-paid", "order-placed"}},
		{Entity: "order", Events: []string{"order-shipped"}},
		{Entity: "order", Keys: []string{"order-3", "order-5"}, Events: []string{"order-placed", "genesis"}},
		{Events: []string{"no-such-event"}},
	}
	ev := func() *Event { return &all[rng.IntN(len(all))] }
	for i := range 1500 {
		o := selections[i%len(selections)]
		if rng.IntN(3) == 0 {
			o.From = ev().Time().Add(time.Duration(rng.IntN(3)-1) * time.Microsecond)
		}
		if rng.IntN(3) == 0 {
			o.To = ev().Time().Add(time.Duration(rng.IntN(3)-1) * time.Microsecond)
		}
		switch rng.IntN(4) {
		case 0:
			o.After = ev().ID
		case 1:
			o.AfterSeq = ev().Seq
		case 2:
			e := ev()
			o.After, o.AfterSeq = e.ID, e.Seq
		}
		o.Reverse = rng.IntN(2) == 0
		if rng.IntN(2) == 0 {
			o.Limit = rng.IntN(150)
		}
		got, err := collectEvents(db.Replay(context.Background(), "l", o))
		if err != nil {
			t.Fatalf("Replay(%+v): %v", o, err)
		}
		if want := replayModel(all, o); !slices.Equal(seqsOfEvents(got), seqsOfEvents(want)) {
			t.Fatalf("Replay(%+v):\n got %v\nwant %v", o, seqsOfEvents(got), seqsOfEvents(want))
		}
	}
}

// TestScanCursors checks Scan's two cursors against each other and the
// model, in both directions.
func TestScanCursors(t *testing.T) {
	t.Parallel()
	db, all := pagingDB(t, 300)
	for _, e := range []Event{all[0], all[1], all[150], all[len(all)-2], all[len(all)-1]} {
		for _, rev := range []bool{false, true} {
			for _, limit := range []int{0, 1, 64, 65} {
				var want []Event
				for _, ev := range all {
					if (ev.Seq > e.Seq && !rev) || (ev.Seq < e.Seq && rev) {
						want = append(want, ev)
					}
				}
				if rev {
					slices.Reverse(want)
				}
				if limit > 0 && len(want) > limit {
					want = want[:limit]
				}
				for _, o := range []ScanOptions{{After: e.ID}, {AfterSeq: e.Seq}, {After: e.ID, AfterSeq: e.Seq}} {
					o.Reverse, o.Limit = rev, limit
					got, err := collectEvents(db.Scan(context.Background(), "l", o))
					if err != nil {
						t.Fatalf("Scan(%+v): %v", o, err)
					}
					if !slices.Equal(seqsOfEvents(got), seqsOfEvents(want)) {
						t.Fatalf("Scan(%+v):\n got %v\nwant %v", o, seqsOfEvents(got), seqsOfEvents(want))
					}
				}
			}
		}
	}
	// After the head: nothing forwards, everything backwards.
	head := all[len(all)-1].Seq
	if got, err := collectEvents(db.Scan(context.Background(), "l", ScanOptions{AfterSeq: head + 10})); err != nil || len(got) != 0 {
		t.Fatalf("Scan after #%d: %d events, %v; want none", head+10, len(got), err)
	}
	if got, err := collectEvents(db.Scan(context.Background(), "l", ScanOptions{AfterSeq: head + 10, Reverse: true})); err != nil || len(got) != len(all) {
		t.Fatalf("reverse Scan after #%d: %d events, %v; want %d", head+10, len(got), err, len(all))
	}
}

// TestReadOptionsInvalid: a negative Limit, a cursor of another ledger,
// two cursors that name different events are ErrInvalid, in Scan and
// Replay.
func TestReadOptionsInvalid(t *testing.T) {
	t.Parallel()
	db, all := pagingDB(t, 20)
	ctx := context.Background()
	other := eventid.New(uint64(time.Now().UnixMicro()), 1, all[0].ID.Ledger()+1)
	scans := []ScanOptions{
		{Limit: -1},
		{After: other},
		{After: all[3].ID, AfterSeq: all[4].Seq},
	}
	for _, o := range scans {
		if _, err := collectEvents(db.Scan(ctx, "l", o)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Scan(%+v): %v, want ErrInvalid", o, err)
		}
	}
	replays := []ReplayOptions{
		{Entity: "order", Limit: -1},
		{Entity: "order", After: other},
		{Entity: "order", After: all[3].ID, AfterSeq: all[4].Seq},
		{Events: []string{"order-paid"}, After: all[3].ID, AfterSeq: all[3].Seq + 100},
	}
	for _, o := range replays {
		if _, err := collectEvents(db.Replay(ctx, "l", o)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Replay(%+v): %v, want ErrInvalid", o, err)
		}
	}
}

// TestPaging pages Replay and Scan with Limit and a cursor (the last ID of
// a page as After, or its sequence number as AfterSeq), forwards and
// backwards, while events are appended between pages: a forward paging
// visits exactly the events of one replay made after the last append (the
// new events come after the cursor), a backward one exactly those of one
// replay made before the first (they come before the first page).
func TestPaging(t *testing.T) {
	t.Parallel()
	selections := []ReplayOptions{
		{Entity: "order", Keys: []string{"order-1", "order-4"}},
		{Entity: "order"},
		{Events: []string{"order-shipped"}},
		{Entity: "order", Events: []string{"order-paid"}},
		{Entity: "order", From: time.Unix(0, 0), To: time.Now().Add(time.Hour)},
	}
	// A hundred independent cases, each with its own DB: a few run at once.
	type pagingCase struct {
		name string
		run  func(t *testing.T)
	}
	var cases []pagingCase
	for si, sel := range selections {
		for _, rev := range []bool{false, true} {
			for _, page := range []int{1, 7, 64, 65, 100} {
				for _, bySeq := range []bool{false, true} {
					name := fmt.Sprintf("selection%d/reverse=%v/page=%d/bySeq=%v", si, rev, page, bySeq)
					cases = append(cases, pagingCase{name, func(t *testing.T) {
						db, _ := pagingDB(t, 400)
						ctx := context.Background()
						o := sel
						o.Reverse = rev
						before, err := collectEvents(db.Replay(ctx, "l", o))
						if err != nil {
							t.Fatal(err)
						}
						// Scan pages the whole ledger alongside.
						scanBefore := allEvents(t, db)
						if rev {
							slices.Reverse(scanBefore)
						}
						var paged, scanPaged []Event
						var cursor, scanCursor Event
						appended := 0
						for pages := 0; ; pages++ {
							if pages > 2000 {
								t.Fatal("paging does not end")
							}
							po := o
							po.Limit = page
							so := ScanOptions{Reverse: rev, Limit: page}
							if cursor.Seq != 0 {
								if bySeq {
									po.AfterSeq = cursor.Seq
								} else {
									po.After = cursor.ID
								}
							}
							if scanCursor.Seq != 0 {
								if bySeq {
									so.AfterSeq = scanCursor.Seq
								} else {
									so.After = scanCursor.ID
								}
							}
							got, err := collectEvents(db.Replay(ctx, "l", po))
							if err != nil {
								t.Fatal(err)
							}
							sgot, err := collectEvents(db.Scan(ctx, "l", so))
							if err != nil {
								t.Fatal(err)
							}
							if len(got) > page || len(sgot) > page {
								t.Fatalf("pages of %d and %d events, the limit is %d", len(got), len(sgot), page)
							}
							paged = append(paged, got...)
							scanPaged = append(scanPaged, sgot...)
							if len(got) > 0 {
								cursor = got[len(got)-1]
							}
							if len(sgot) > 0 {
								scanCursor = sgot[len(sgot)-1]
							}
							// New events between the first pages.
							if appended < 5 {
								if _, err := db.Append(ctx, "l", []EventInput{order(appended), order(appended + 1)}, nil); err != nil {
									t.Fatal(err)
								}
								appended++
								continue
							}
							if len(got) == 0 && len(sgot) == 0 {
								break
							}
						}
						want, scanWant := before, scanBefore
						if !rev {
							if want, err = collectEvents(db.Replay(ctx, "l", o)); err != nil {
								t.Fatal(err)
							}
							scanWant = allEvents(t, db)
						}
						if !slices.Equal(seqsOfEvents(paged), seqsOfEvents(want)) {
							t.Errorf("Replay paged:\n got %v\nwant %v", seqsOfEvents(paged), seqsOfEvents(want))
						}
						if !slices.Equal(seqsOfEvents(scanPaged), seqsOfEvents(scanWant)) {
							t.Errorf("Scan paged:\n got %v\nwant %v", seqsOfEvents(scanPaged), seqsOfEvents(scanWant))
						}
					}})
				}
			}
		}
	}
	runSubtests(t, len(cases), 4, func(i int) string { return cases[i].name }, func(t *testing.T, i int) { cases[i].run(t) })
}
