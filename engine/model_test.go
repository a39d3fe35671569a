package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

var modelSeqs = flag.Int("model-sequences", 200, "random operation sequences of TestModel")

// modelEvent is an event as the model knows it.
type modelEvent struct {
	id                 eventid.ID
	entity, key, event string
	data               string // canonical
}

// model is the simple in-memory truth the engine is compared with.
type model struct {
	ledgers map[string][]modelEvent    // events after the genesis, in order
	idem    map[string][]eventid.ID    // ledger+"\x00"+key -> IDs of the first append
	idemEvs map[string][]EventInput    // ledger+"\x00"+key -> the events of the first append
	genesis map[string]eventid.ID      // ledger -> genesis ID
	byID    map[eventid.ID]*modelEvent // every event
}

func (m *model) streamHead(ledger, entity, key string) eventid.ID {
	evs := m.ledgers[ledger]
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].entity == entity && evs[i].key == key {
			return evs[i].id
		}
	}
	return eventid.ID{}
}

func (m *model) head(ledger string) eventid.ID {
	if evs := m.ledgers[ledger]; len(evs) > 0 {
		return evs[len(evs)-1].id
	}
	return m.genesis[ledger]
}

// TestModel runs random sequences of creates, appends (plain, batched,
// conditional, idempotent), reads, scans, replays, subscriptions and
// reopens against the
// engine and the model, requires the same results, and verifies every
// ledger at the end.
func TestModel(t *testing.T) {
	t.Parallel()
	n := *modelSeqs
	if testing.Short() || raceEnabled {
		n = 20
	}
	seed := testSeed(t)
	t.Logf("%d sequences", n)
	// The sequences are independent, each in its own directory: a few run
	// at once.
	runSubtests(t, n, 4, func(s int) string { return fmt.Sprintf("sequence %d", s) }, func(t *testing.T, s int) {
		defer func() {
			if t.Failed() {
				t.Logf("sequence %d failed (seed %d)", s, seed)
			}
		}()
		runModel(t, rand.New(rand.NewPCG(seed, uint64(s))), s)
	})
}

func runModel(t *testing.T, rng *rand.Rand, seq int) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{Durability: None, SegmentSize: 4 << 10}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	m := &model{ledgers: map[string][]modelEvent{}, idem: map[string][]eventid.ID{}, idemEvs: map[string][]EventInput{}, genesis: map[string]eventid.ID{}, byID: map[eventid.ID]*modelEvent{}}
	names := []string{"a", "b", "c"}
	pick := func(v []string) string { return v[rng.IntN(len(v))] }
	fail := func(op string, format string, a ...any) {
		t.Helper()
		t.Fatalf("sequence %d, %s: %s", seq, op, fmt.Sprintf(format, a...))
	}
	ledgerNames := func() []string {
		var out []string
		for name := range m.ledgers {
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}

	for op := range 40 {
		switch r := rng.IntN(100); {
		case r < 10 || len(m.ledgers) == 0: // create
			name := pick(names)
			info, err := db.CreateLedger(ctx, LedgerSpec{Name: name})
			_, exists := m.ledgers[name]
			switch {
			case exists && !errors.Is(err, ErrLedgerExists):
				fail("create", "ledger %q exists, got %v", name, err)
			case !exists && err != nil:
				fail("create", "%q: %v", name, err)
			case !exists:
				m.ledgers[name] = nil
				m.genesis[name] = info.Genesis
			}

		case r < 55: // append
			name := pick(ledgerNames())
			var batch []EventInput
			var want []modelEvent
			for range rng.IntN(4) + 1 {
				e := EventInput{Entity: pick([]string{"order", "payment", "user"}), Key: fmt.Sprintf("k%d", rng.IntN(4)),
					Event: pick([]string{"created", "changed", "closed"}), Meta: []byte(`{"op": 1}`), Data: []byte(fmt.Sprintf(`{"v": %d, "w": [1, 2.50]}`, rng.IntN(1000)))}
				batch = append(batch, e)
				data, _ := canon.Append(nil, e.Data)
				want = append(want, modelEvent{entity: e.Entity, key: e.Key, event: e.Event, data: string(data)})
			}
			var o AppendOptions
			outcome := "ok"
			switch rng.IntN(5) {
			case 1:
				o.ExpectedHead = m.head(name)
				if rng.IntN(3) == 0 && len(m.ledgers[name]) > 0 {
					o.ExpectedHead = m.genesis[name] // stale
					outcome = "condition"
				}
			case 2:
				c := ExpectedStream{Entity: batch[0].Entity, Key: batch[0].Key}
				c.Head = m.streamHead(name, c.Entity, c.Key)
				if rng.IntN(3) == 0 {
					if c.Head.IsZero() {
						c.Head = m.genesis[name]
					} else {
						c.Head = eventid.ID{}
					}
					outcome = "condition"
				}
				o.ExpectedStreams = []ExpectedStream{c}
			case 3:
				o.IdempotencyKey = fmt.Sprintf("req-%d", rng.IntN(6))
				if first, used := m.idemEvs[name+"\x00"+o.IdempotencyKey]; used {
					// A retry: half the time with the first append's
					// events, else with these (other events, unless
					// they happen to be the same).
					if rng.IntN(2) == 0 {
						batch = first
					}
					outcome = "duplicate"
					if !sameEvents(batch, first) {
						outcome = "mismatch"
					}
				}
			}
			ids, err := idsOf(db.Append(ctx, name, batch, &o))
			switch outcome {
			case "ok":
				if err != nil || len(ids) != len(batch) {
					fail("append", "%v (%d IDs)", err, len(ids))
				}
				for i := range want {
					want[i].id = ids[i]
					m.ledgers[name] = append(m.ledgers[name], want[i])
					m.byID[ids[i]] = &m.ledgers[name][len(m.ledgers[name])-1]
				}
				if o.IdempotencyKey != "" {
					m.idem[name+"\x00"+o.IdempotencyKey] = ids
					m.idemEvs[name+"\x00"+o.IdempotencyKey] = batch
				}
			case "condition":
				if !errors.Is(err, ErrConditionFailed) {
					fail("append", "a failing condition gave %v", err)
				}
			case "duplicate":
				if err != nil || fmt.Sprint(ids) != fmt.Sprint(m.idem[name+"\x00"+o.IdempotencyKey]) {
					fail("append", "a retry gave %v %v, want %v", ids, err, m.idem[name+"\x00"+o.IdempotencyKey])
				}
			case "mismatch":
				var me *IdempotencyMismatchError
				if !errors.As(err, &me) || fmt.Sprint(me.First.IDs) != fmt.Sprint(m.idem[name+"\x00"+o.IdempotencyKey]) {
					fail("append", "a retry with other events gave %v, want ErrIdempotencyMismatch naming %v", err, m.idem[name+"\x00"+o.IdempotencyKey])
				}
			}

		case r < 70: // point reads
			for id, me := range m.byID {
				ev, err := db.Get(ctx, id)
				if err != nil || ev.Key != me.key || ev.Event != me.event || string(ev.Data) != me.data {
					fail("get", "%s: %+v %v, want %+v", id, ev, err, *me)
				}
				break
			}
			name := pick(ledgerNames())
			if evs := m.ledgers[name]; len(evs) > 0 {
				i := rng.IntN(len(evs))
				ev, err := db.GetSeq(ctx, name, uint64(i)+2)
				if err != nil || ev.ID != evs[i].id {
					fail("getseq", "#%d: %s %v, want %s", i+2, ev.ID, err, evs[i].id)
				}
			}

		case r < 85: // scans
			name := pick(ledgerNames())
			evs := m.ledgers[name]
			o := ScanOptions{Reverse: rng.IntN(2) == 0, Limit: rng.IntN(5)}
			var want []eventid.ID
			all := append([]eventid.ID{m.genesis[name]}, modelIDs(evs)...)
			if o.Reverse {
				slices.Reverse(all)
			}
			if len(all) > 2 && rng.IntN(2) == 0 {
				o.After = all[1]
				all = all[2:]
			}
			want = all
			if o.Limit > 0 && len(want) > o.Limit {
				want = want[:o.Limit]
			}
			var got []eventid.ID
			for ev, err := range db.Scan(ctx, name, o) {
				if err != nil {
					fail("scan", "%v", err)
				}
				got = append(got, ev.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				fail("scan", "%+v: got %v, want %v", o, got, want)
			}

		case r < 95: // replays
			name := pick(ledgerNames())
			o := ReplayOptions{}
			switch rng.IntN(3) {
			case 0:
				o.Entity, o.Keys = "order", []string{"k0", "k2"}
			case 1:
				o.Entity = "payment"
			case 2:
				o.Events = []string{"closed"}
			}
			var want, got []eventid.ID
			for _, e := range m.ledgers[name] {
				if (o.Entity == "" || e.entity == o.Entity && (len(o.Keys) == 0 || slices.Contains(o.Keys, e.key))) &&
					(len(o.Events) == 0 || slices.Contains(o.Events, e.event)) {
					want = append(want, e.id)
				}
			}
			for ev, err := range db.Replay(ctx, name, o) {
				if err != nil {
					fail("replay", "%v", err)
				}
				got = append(got, ev.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				fail("replay", "%+v: got %v, want %v", o, got, want)
			}

		case r < 97: // a subscription from a random event: the events after it, then an append's
			name := pick(ledgerNames())
			evs := m.ledgers[name]
			after, from := eventid.ID{}, 0
			if k := rng.IntN(len(evs) + 2); k == 1 {
				after, from = m.genesis[name], 0
			} else if k > 1 {
				after, from = evs[k-2].id, k-1
			}
			want := modelIDs(evs[from:])
			if after.IsZero() {
				want = append([]eventid.ID{m.genesis[name]}, want...)
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			next, stop := iter.Pull2(db.Subscribe(sctx, name, SubscribeOptions{After: after}))
			var got []eventid.ID
			for len(got) < len(want) {
				ev, err, ok := next()
				if !ok || err != nil {
					fail("subscribe", "after %s: stopped after %v: %v", after, got, err)
				}
				got = append(got, ev.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				fail("subscribe", "after %s: got %v, want %v", after, got, want)
			}
			// A new event reaches the subscriber.
			ids, err := idsOf(db.Append(ctx, name, []EventInput{ev("order", "k1", "noted")}, nil))
			if err != nil {
				fail("subscribe", "append: %v", err)
			}
			m.ledgers[name] = append(m.ledgers[name], modelEvent{id: ids[0], entity: "order", key: "k1", event: "noted", data: "{}"})
			m.byID[ids[0]] = &m.ledgers[name][len(m.ledgers[name])-1]
			if e, err, ok := next(); !ok || err != nil || e.ID != ids[0] {
				fail("subscribe", "the new event: %v %v %v, want %s", e.ID, err, ok, ids[0])
			}
			cancel()
			if _, err, ok := next(); !ok || !errors.Is(err, context.Canceled) {
				fail("subscribe", "after cancel: %v %v, want context.Canceled", err, ok)
			}
			stop()

		default: // reopen
			if err := db.Close(); err != nil {
				fail("close", "%v", err)
			}
			if db, err = Open(dir, opts); err != nil {
				fail("reopen", "%v", err)
			}
		}
		_ = op
	}
	for _, name := range ledgerNames() {
		rep, err := db.Verify(ctx, name, nil)
		if err != nil || rep.Events != uint64(len(m.ledgers[name]))+1 {
			fail("verify", "%s: %+v %v, want %d events", name, rep, err, len(m.ledgers[name])+1)
		}
	}
}

func modelIDs(evs []modelEvent) []eventid.ID {
	out := make([]eventid.ID, len(evs))
	for i, e := range evs {
		out[i] = e.id
	}
	return out
}

// sameEvents reports whether two batches of the model are the same events:
// names, and meta and data in canonical form.
func sameEvents(a, b []EventInput) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		am, _ := canon.Append(nil, a[i].Meta)
		bm, _ := canon.Append(nil, b[i].Meta)
		ad, _ := canon.Append(nil, a[i].Data)
		bd, _ := canon.Append(nil, b[i].Data)
		if a[i].Entity != b[i].Entity || a[i].Key != b[i].Key || a[i].Event != b[i].Event || string(am) != string(bm) || string(ad) != string(bd) {
			return false
		}
	}
	return true
}
