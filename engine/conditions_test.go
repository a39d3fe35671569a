package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

func ev(entity, key, event string) EventInput {
	return EventInput{Entity: entity, Key: key, Event: event, Meta: []byte(`{}`), Data: []byte(`{}`)}
}

func TestStreamAndSelectorConditions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	app := func(e EventInput, o *AppendOptions) (eventid.ID, error) {
		ids, err := idsOf(db.Append(ctx, "l", []EventInput{e}, o))
		if err != nil {
			return eventid.ID{}, err
		}
		return ids[0], nil
	}
	// A new stream: "no event yet" holds once.
	first, err := app(ev("order", "o1", "placed"), &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "o1"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = app(ev("order", "o1", "placed"), &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "o1"}}})
	var ce *ConditionError
	if !errors.As(err, &ce) || ce.Found != first {
		t.Fatalf("'no event yet' on a stream with one: %v", err)
	}
	second, err := app(ev("order", "o1", "paid"), &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "o1", Head: first}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app(ev("order", "o1", "paid"), &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "o1", Head: first}}}); !errors.As(err, &ce) || ce.Found != second || ce.Head != second {
		t.Fatalf("stale stream head: %v", err)
	}
	// Another stream's events do not move this one's head.
	if _, err := app(ev("order", "o2", "placed"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := app(ev("order", "o1", "shipped"), &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "o1", Head: second}}}); err != nil {
		t.Fatalf("stream head after another stream's event: %v", err)
	}

	// Selectors relative to a point in the ledger.
	mark, err := app(ev("audit", "a", "mark"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app(ev("order", "o3", "placed"), nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		sel   Selector
		fails bool
	}{
		{"matching stream", Selector{Entity: "order", Keys: []string{"o3"}}, true},
		{"other stream", Selector{Entity: "order", Keys: []string{"o1"}}, false},
		{"whole entity", Selector{Entity: "order"}, true},
		{"other entity", Selector{Entity: "invoice"}, false},
		{"event name", Selector{Events: []string{"placed"}}, true},
		{"other event name", Selector{Events: []string{"refunded"}}, false},
		{"entity and name", Selector{Entity: "order", Events: []string{"placed"}}, true},
		{"entity and other name", Selector{Entity: "order", Events: []string{"paid"}}, false},
	} {
		sel := tc.sel
		sel.After = mark
		_, err := app(ev("audit", "a", "check"), &AppendOptions{IfNoneSince: &sel})
		if tc.fails != errors.Is(err, ErrConditionFailed) || !tc.fails && err != nil {
			t.Errorf("%s: %v (want failure: %v)", tc.name, err, tc.fails)
		}
	}
	if _, err := app(ev("audit", "a", "x"), &AppendOptions{IfNoneSince: &Selector{Keys: []string{"k"}, After: mark}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("keys without an entity: %v", err)
	}
}

// TestOptimisticConcurrencyOnOneStream: 8 writers append to one stream,
// each expecting the head it last saw and retrying with the head a failed
// condition reports, in Sync mode so that appends share commits. Every
// success must have expected exactly the event before it: no two writers
// ever extend the same head, even when their appends are committed in one
// group, before either is indexed.
func TestOptimisticConcurrencyOnOneStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	type success struct{ expected, got eventid.ID }
	var mu sync.Mutex
	var wins []success
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var head eventid.ID
			for n := 0; n < 10; {
				ids, err := idsOf(db.Append(ctx, "l", []EventInput{ev("account", "acc-1", "debited")},
					&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1", Head: head}}}))
				var ce *ConditionError
				switch {
				case errors.As(err, &ce):
					head = ce.Found
				case err != nil:
					t.Error(err)
					return
				default:
					mu.Lock()
					wins = append(wins, success{head, ids[0]})
					mu.Unlock()
					head = ids[0]
					n++
				}
			}
		}()
	}
	wg.Wait()
	if len(wins) != 80 {
		t.Fatalf("%d successful appends, want 80", len(wins))
	}
	sort.Slice(wins, func(i, j int) bool { return wins[i].got.Less(wins[j].got) })
	var prev eventid.ID
	for i, w := range wins {
		if w.expected != prev {
			t.Fatalf("append %d expected %s but followed %s", i, w.expected, prev)
		}
		prev = w.got
	}
}

// TestIdempotencyKey: a retry appends nothing and returns the first
// append's IDs; concurrent appends with one key append once; the keys
// survive a rebuild of the index from the segments.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	batch := []EventInput{ev("payment", "p1", "received"), ev("payment", "p1", "booked")}
	first, err := idsOf(db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "req-1"}))
	if err != nil {
		t.Fatal(err)
	}
	again, err := idsOf(db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "req-1", ExpectedHead: first[0]}))
	if err != nil || fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("retry: %v %v, want %v (the first result, whatever the other conditions say now)", again, err, first)
	}
	if info, _ := db.Ledger("l"); info.Count != 3 {
		t.Fatalf("%d events after a retry, want 3", info.Count)
	}

	// 8 concurrent appends with one key, in Sync mode, queued behind a
	// large append so that they share one commit: one batch is appended,
	// all get its IDs. Rounds, each with its own key.
	big := make([]EventInput, 2000)
	for i := range big {
		big[i] = order(i)
	}
	for round := range 10 {
		key := fmt.Sprintf("req-round-%d", round)
		before, _ := db.Ledger("l")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := db.Append(ctx, "l", big, nil); err != nil {
				t.Error(err)
			}
		}()
		results := make([][]eventid.ID, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids, err := idsOf(db.Append(ctx, "l", []EventInput{ev("payment", key, "received")}, &AppendOptions{IdempotencyKey: key}))
				if err != nil {
					t.Error(err)
				}
				results[i] = ids
			}()
		}
		wg.Wait()
		for _, r := range results {
			if len(r) != 1 || r[0] != results[0][0] {
				t.Fatalf("round %d: concurrent appends with one key got %v", round, results)
			}
		}
		if after, _ := db.Ledger("l"); after.Count != before.Count+uint64(len(big))+1 {
			t.Fatalf("round %d: %d events appended, want %d", round, after.Count-before.Count, len(big)+1)
		}
	}
	db.Close()

	// The index is rebuilt from the segments: the keys come back.
	if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	again, err = idsOf(db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "req-1"}))
	if err != nil || fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("retry after an index rebuild: %v %v, want %v", again, err, first)
	}
}

// TestInFlightViews checks, without timing, what conditions see of a
// batch the segment log has prepared but that is not indexed: its stream
// heads, its idempotency key and its events for selectors; and that an
// aborted batch leaves no trace.
func TestInFlightViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := db.ledger("l")
	head := l.log.Head()
	id := eventid.New(head.ID.Micros()+1, 1, info.ID)
	b := &segment.Batch{Entries: []segment.Entry{{Entity: "order", Key: "o1", Event: "placed"}}, IdempotencyKey: []byte("k"),
		IDs: []eventid.ID{id}, FirstSeq: head.Seq + 1}
	l.prepared(b)
	after := segment.Head{ID: id, Seq: head.Seq + 1}
	if got, err := l.streamHead("order", "o1", after); err != nil || got != id {
		t.Fatalf("stream head of an in-flight batch: %s %v", got, err)
	}
	if d, err := l.idempotent("k", after); err != nil || d == nil || d.firstSeq != head.Seq+1 || d.count != 1 {
		t.Fatalf("idempotency key of an in-flight batch: %+v %v", d, err)
	}
	if got, ok, err := l.matchedSince(&Selector{Entity: "order"}, head.Seq, after); err != nil || !ok || got != id {
		t.Fatalf("selector on an in-flight batch: %s %v %v", got, ok, err)
	}
	l.aborted(b)
	if got, err := l.streamHead("order", "o1", after); err != nil || !got.IsZero() {
		t.Fatalf("stream head after the batch aborted: %s %v", got, err)
	}
	if d, err := l.idempotent("k", after); err != nil || d != nil {
		t.Fatalf("idempotency key after the batch aborted: %+v %v", d, err)
	}
	if res, found, err := l.awaitFirst(ctx, "k", &duplicate{firstSeq: head.Seq + 1, count: 1}); err != nil || found || res.IDs != nil {
		t.Fatalf("waiting for an aborted first append: %v %v %v", res.IDs, found, err)
	}
}

// TestConflictsReadableForEveryCondition: read-your-conflicts for
// ExpectedHead and IfNoneSince, not only ExpectedStreams: 8 goroutines
// append on conditions; on each conflict, the Found event is readable by
// Get at once and a Replay after the caller's position sees something new.
func TestConflictsReadableForEveryCondition(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	ctx := context.Background()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	n := 30
	if raceEnabled {
		n = 10
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := map[string]int{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			useHead := g%2 == 0
			last := info.Genesis
			var lastSeq uint64 = 1
			for done := 0; done < n; {
				o := &AppendOptions{Durability: None}
				if useHead {
					o.ExpectedHead = last
				} else {
					o.IfNoneSince = &Selector{Entity: "acc", After: last}
				}
				r, err := db.Append(ctx, "r", []EventInput{{Entity: "acc", Key: "k", Event: "e", Data: []byte("1")}}, o)
				var ce *ConditionError
				switch {
				case err == nil:
					last, lastSeq = r.IDs[0], r.FirstSeq
					done++
					continue
				case errors.As(err, &ce):
				default:
					t.Error(err)
					return
				}
				mu.Lock()
				conflicts[map[bool]string{true: "head", false: "since"}[useHead]]++
				mu.Unlock()
				ev, err := db.Get(ctx, ce.Found)
				if err != nil {
					t.Errorf("conflict (%s): Found %s not readable: %v", ce.Condition, ce.Found, err)
					return
				}
				if _, err := db.Get(ctx, ce.Head); err != nil {
					t.Errorf("conflict (%s): Head %s not readable: %v", ce.Condition, ce.Head, err)
					return
				}
				if ev.Seq <= lastSeq {
					t.Errorf("conflict (%s): Found #%d is not after #%d", ce.Condition, ev.Seq, lastSeq)
				}
				evs := collect(t, db.Replay(ctx, "r", ReplayOptions{Entity: "acc", AfterSeq: lastSeq}))
				if len(evs) == 0 {
					t.Errorf("conflict (%s): a replay after #%d sees nothing new", ce.Condition, lastSeq)
					return
				}
				if useHead {
					h := collect(t, db.Scan(ctx, "r", ScanOptions{Reverse: true, Limit: 1}))
					last, lastSeq = h[0].ID, h[0].Seq
				} else {
					last, lastSeq = evs[len(evs)-1].ID, evs[len(evs)-1].Seq
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("conflicts: %v", conflicts)
}
