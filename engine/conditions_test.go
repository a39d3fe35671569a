package engine

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
)

func ev(entity, key, event string) EventInput {
	return EventInput{Entity: entity, Key: key, Event: event, Meta: []byte(`{}`), Data: []byte(`{}`)}
}

func TestStreamAndSelectorConditions(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	app := func(e EventInput, o *AppendOptions) (eventid.ID, error) {
		ids, err := db.Append(ctx, "l", []EventInput{e}, o)
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
				ids, err := db.Append(ctx, "l", []EventInput{ev("account", "acc-1", "debited")},
					&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1", Head: head}}})
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
