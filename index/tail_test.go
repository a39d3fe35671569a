package index

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// randomEvents returns n events from seq first on, of a few entities,
// keys and names, some with idempotency keys (a key used twice
// included).
func randomEvents(rng *rand.Rand, first uint64, n int) []event {
	out := make([]event, n)
	for i := range out {
		e := event{seq: first + uint64(i),
			entity: fmt.Sprintf("ent%d", rng.IntN(4)),
			key:    strings.Repeat("k", 1+rng.IntN(3)) + fmt.Sprint(rng.IntN(3)),
			event:  fmt.Sprintf("name%d", rng.IntN(5))}
		if rng.IntN(8) == 0 {
			e.idem, e.batchLen = fmt.Sprintf("idem%d", rng.IntN(40)), uint32(1+rng.IntN(5))
		}
		out[i] = e
	}
	return out
}

// tailAdd adds events to a ledger's tail and publishes them.
func tailAdd(t testing.TB, x *Index, ledger eventid.LedgerID, evs ...event) {
	t.Helper()
	if len(evs) == 0 {
		return
	}
	tl := x.Tail(ledger)
	tailStage(tl, ledger, evs)
	last := evs[len(evs)-1].seq
	if err := tl.Publish(segment.Head{ID: idOf(ledger, last), Seq: last, Loc: locOf(last)}, segment.Head{}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// tailStage adds events to a tail, unpublished.
func tailStage(tl *Tail, ledger eventid.LedgerID, evs []event) {
	for _, e := range evs {
		tl.Add(idOf(ledger, e.seq), e.seq, locOf(e.seq), e.entity, e.key, e.event)
		if e.idem != "" {
			tl.AddIdempotency(e.idem, e.batchLen, [DigestSize]byte(digestOf(e.idem)))
		}
	}
}

// view is what the read tests ask of an index, or of the model.
type view interface {
	lookup(id eventid.ID) string
	bySeq(seq uint64) string
	timeRange(lo, hi eventid.ID, reverse bool) []Position
	seqScan(fam byte, a, b string, r SeqRange) []Position
	entity(entity string, after uint64) []Position
	streamHead(entity, key string) string
	idem(key string) string
}

type indexView struct {
	t      testing.TB
	x      *Index
	ledger eventid.LedgerID
}

func (v indexView) lookup(id eventid.ID) string {
	seq, loc, found, err := v.x.Lookup(id)
	if err != nil {
		v.t.Fatalf("Lookup: %v", err)
	}
	return fmt.Sprint(seq, loc, found)
}

func (v indexView) bySeq(seq uint64) string {
	id, found, err := v.x.BySeq(v.ledger, seq)
	if err != nil {
		v.t.Fatalf("BySeq: %v", err)
	}
	return fmt.Sprint(id, found)
}

func (v indexView) timeRange(lo, hi eventid.ID, reverse bool) []Position {
	return collect(v.t, v.x.TimeRange(context.Background(), v.ledger, lo, hi, reverse))
}

func (v indexView) seqScan(fam byte, a, b string, r SeqRange) []Position {
	ctx := context.Background()
	switch fam {
	case famStream:
		return collect(v.t, v.x.StreamRange(ctx, v.ledger, []byte(a), []byte(b), r))
	case famEntity:
		return collect(v.t, v.x.EntityEventsRange(ctx, v.ledger, []byte(a), r))
	}
	return collect(v.t, v.x.EventNameRange(ctx, v.ledger, []byte(a), r))
}

func (v indexView) entity(entity string, after uint64) []Position {
	return collect(v.t, v.x.Entity(context.Background(), v.ledger, []byte(entity), after))
}

func (v indexView) streamHead(entity, key string) string {
	p, found, err := v.x.StreamHead(v.ledger, []byte(entity), []byte(key))
	if err != nil {
		v.t.Fatalf("StreamHead: %v", err)
	}
	return fmt.Sprint(p, found)
}

func (v indexView) idem(key string) string {
	d, found, err := v.x.Idempotency(v.ledger, []byte(key))
	if err != nil {
		v.t.Fatalf("Idempotency: %v", err)
	}
	return fmt.Sprint(d, found)
}

// model is the reads of a list of events, in sequence order, computed
// directly.
type model struct {
	ledger eventid.LedgerID
	evs    []event
}

func (m model) pos(e event) Position { return posOf(m.ledger, e.seq) }

func (m model) lookup(id eventid.ID) string {
	for _, e := range m.evs {
		if idOf(m.ledger, e.seq) == id {
			return fmt.Sprint(e.seq, locOf(e.seq), true)
		}
	}
	return fmt.Sprint(0, segment.Location{}, false)
}

func (m model) bySeq(seq uint64) string {
	for _, e := range m.evs {
		if e.seq == seq {
			return fmt.Sprint(idOf(m.ledger, seq), true)
		}
	}
	return fmt.Sprint(eventid.ID{}, false)
}

func (m model) timeRange(lo, hi eventid.ID, reverse bool) []Position {
	var out []Position
	for _, e := range m.evs {
		if id := idOf(m.ledger, e.seq); id.Compare(lo) >= 0 && id.Compare(hi) <= 0 {
			out = append(out, m.pos(e))
		}
	}
	if reverse {
		slices.Reverse(out)
	}
	return out
}

func (m model) seqScan(fam byte, a, b string, r SeqRange) []Position {
	var out []Position
	for _, e := range m.evs {
		match := fam == famStream && e.entity == a && e.key == b || fam == famEntity && e.entity == a || fam == famEvent && e.event == a
		if match && e.seq > r.After && (r.Before == 0 || e.seq < r.Before) {
			out = append(out, m.pos(e))
		}
	}
	if r.Reverse {
		slices.Reverse(out)
	}
	return out
}

func (m model) entity(entity string, after uint64) []Position {
	var evs []event
	for _, e := range m.evs {
		if e.entity == entity && e.seq > after {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(p, q event) int {
		return bytes.Compare(appendName(nil, []byte(p.key)), appendName(nil, []byte(q.key)))
	})
	out := []Position(nil)
	for _, e := range evs {
		out = append(out, m.pos(e))
	}
	return out
}

func (m model) streamHead(entity, key string) string {
	ps := m.seqScan(famStream, entity, key, SeqRange{Reverse: true})
	if len(ps) == 0 {
		return fmt.Sprint(Position{}, false)
	}
	return fmt.Sprint(ps[0], true)
}

func (m model) idem(key string) string {
	for i := len(m.evs) - 1; i >= 0; i-- {
		if e := m.evs[i]; e.idem == key {
			return fmt.Sprint(Idem{FirstSeq: e.seq, Count: e.batchLen, Digest: [DigestSize]byte(digestOf(key))}, true)
		}
	}
	return fmt.Sprint(Idem{}, false)
}

// reads returns the results of a set of reads of v that the seed and the
// events (their names, sequence numbers) decide: every read function,
// forward and reverse.
func reads(v view, ledger eventid.LedgerID, evs []event, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []string
	add := func(what string, r any) { out = append(out, fmt.Sprintf("%s: %v", what, r)) }
	n := uint64(len(evs)) + 2
	bound := func() uint64 { return rng.Uint64N(n + 1) }
	for seq := uint64(0); seq <= n; seq++ {
		add(fmt.Sprint("BySeq ", seq), v.bySeq(seq))
		add(fmt.Sprint("Lookup ", seq), v.lookup(idOf(ledger, seq)))
	}
	add("Lookup off", v.lookup(eventid.New(1_700_000_000_000_005, 1, ledger)))
	for range 6 {
		lo, hi := idOf(ledger, bound()), idOf(ledger, bound())
		if rng.IntN(3) == 0 {
			lo = idPred(lo) // between IDs
		}
		for _, rev := range []bool{false, true} {
			add(fmt.Sprint("TimeRange ", lo, hi, rev), seqsOf(v.timeRange(lo, hi, rev)))
		}
	}
	add("TimeRange all", seqsOf(v.timeRange(eventid.ID{}, eventid.New(eventid.MaxMicros, ^uint32(0), ledger), false)))
	entities, keys, names, idems := map[string]bool{"none": true}, map[string]bool{"none": true}, map[string]bool{"none": true}, map[string]bool{"none": true}
	for _, e := range evs {
		entities[e.entity], keys[e.key], names[e.event] = true, true, true
		if e.idem != "" {
			idems[e.idem] = true
		}
	}
	sorted := func(m map[string]bool) []string {
		s := make([]string, 0, len(m))
		for k := range m {
			s = append(s, k)
		}
		slices.Sort(s)
		return s
	}
	ranges := func() []SeqRange {
		rs := []SeqRange{{}, {Reverse: true}}
		for range 3 {
			r := SeqRange{After: bound(), Before: bound(), Reverse: rng.IntN(2) == 0}
			if rng.IntN(3) == 0 {
				r.Before = 0
			}
			rs = append(rs, r)
		}
		return rs
	}
	for _, ent := range sorted(entities) {
		for _, r := range ranges() {
			add(fmt.Sprint("EntityEvents ", ent, r), seqsOf(v.seqScan(famEntity, ent, "", r)))
		}
		for _, after := range []uint64{0, bound()} {
			add(fmt.Sprint("Entity ", ent, after), seqsOf(v.entity(ent, after)))
		}
		for _, k := range sorted(keys) {
			add(fmt.Sprint("StreamHead ", ent, k), v.streamHead(ent, k))
			for _, r := range ranges() {
				add(fmt.Sprint("Stream ", ent, k, r), seqsOf(v.seqScan(famStream, ent, k, r)))
			}
		}
	}
	for _, name := range sorted(names) {
		for _, r := range ranges() {
			add(fmt.Sprint("EventName ", name, r), seqsOf(v.seqScan(famEvent, name, "", r)))
		}
	}
	for _, k := range sorted(idems) {
		add("Idempotency "+k, v.idem(k))
	}
	return out
}

// indexOnlyReads are the reads with no model: the digest and prefix
// matches, compared between two indexes.
func indexOnlyReads(t testing.TB, x *Index, ledger eventid.LedgerID, n uint64) []string {
	var out []string
	for _, maxSeq := range []uint64{0, 1, n / 3, n / 2, n, n + 5} {
		d, err := x.Digest(context.Background(), ledger, maxSeq)
		if err != nil {
			t.Fatalf("Digest: %v", err)
		}
		out = append(out, fmt.Sprint("Digest ", maxSeq, d.Count, d.Sum))
	}
	for seq := uint64(1); seq <= n; seq += 1 + n/20 {
		id := idOf(ledger, seq)
		for _, l := range []int{1, 2, 6, 15, 16} {
			for _, odd := range []int{-1, int(id[l-1] >> 4)} {
				ids, err := x.PrefixMatches([]eventid.LedgerID{ledger, ledgerB}, id[:l], odd, 3)
				if err != nil {
					t.Fatalf("PrefixMatches: %v", err)
				}
				out = append(out, fmt.Sprint("PrefixMatches ", seq, l, odd, ids))
			}
		}
	}
	return out
}

func diffReads(t testing.TB, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d reads, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] {
			if bad++; bad <= 5 {
				t.Errorf("%s:\n got %s\nwant %s", what, got[i], want[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d reads differ", what, bad)
	}
}

// blockFlush makes the next flush of a tail of x stop before its Pebble commit
// (committed false) or after it, before the tail drops the part
// (committed true), until release is called.
func blockFlush(x *Index, committed bool) (stopped <-chan struct{}, release func()) {
	stop, cont := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(c bool) {
		if c == committed {
			once.Do(func() {
				close(stop)
				<-cont
			})
		}
	}
	x.flushHook.Store(&hook)
	return stop, func() { close(cont) }
}

// TestTailReadsAgree splits the same events between Pebble (flushed), a
// frozen part (not written yet, or written and not yet dropped: the state
// a read meets when a flush commits between its capture of the tail and
// its read of Pebble) and the active part, at many boundaries, and
// compares every read function with an index that holds them all in
// Pebble, and with the model.
func TestTailReadsAgree(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	const n = 240
	evs := randomEvents(rng, 1, n)
	ref := openAt(t, "ref", Options{FS: vfs.NewMem()})
	add(t, ref, ledgerA, evs...)
	add(t, ref, ledgerB, randomEvents(rng, 1, 30)...)
	want := reads(indexView{t, ref, ledgerA}, ledgerA, evs, 1)
	diffReads(t, "Pebble-only index against the model", want, reads(model{ledgerA, evs}, ledgerA, evs, 1))
	wantIdx := indexOnlyReads(t, ref, ledgerA, n)
	for _, cut := range [][2]int{{0, 0}, {0, n}, {n, 0}, {1, 1}, {100, 0}, {0, 100}, {100, 50}, {37, 150}, {n - 1, 1}, {200, 40}} {
		for _, mode := range []string{"none", "frozen", "written"} {
			if mode != "none" && cut[1] == 0 {
				continue
			}
			name := fmt.Sprintf("pebble %d, frozen %d (%s), active %d", cut[0], cut[1], mode, n-cut[0]-cut[1])
			t.Run(name, func(t *testing.T) {
				x := openAt(t, "x", Options{FS: vfs.NewMem(), TailSize: 10 * n})
				add(t, x, ledgerB, randomEvents(rand.New(rand.NewPCG(7, 7)), 1, 30)...)
				tailAdd(t, x, ledgerB, event{seq: 31, entity: "ent0", key: "k0", event: "name0"})
				tl := x.Tail(ledgerA)
				tailAdd(t, x, ledgerA, evs[:cut[0]]...)
				if err := tl.Flush(); err != nil {
					t.Fatal(err)
				}
				tailAdd(t, x, ledgerA, evs[cut[0]:cut[0]+cut[1]]...)
				var flushed chan error
				release := func() {}
				if mode != "none" {
					var stopped <-chan struct{}
					stopped, release = blockFlush(x, mode == "written")
					flushed = make(chan error, 1)
					go func() { flushed <- tl.Flush() }()
					<-stopped
				}
				tailAdd(t, x, ledgerA, evs[cut[0]+cut[1]:]...)
				got := reads(indexView{t, x, ledgerA}, ledgerA, evs, 1)
				gotIdx := indexOnlyReads(t, x, ledgerA, n)
				release()
				if flushed != nil {
					if err := <-flushed; err != nil {
						t.Fatal(err)
					}
				}
				diffReads(t, "reads", got, want)
				diffReads(t, "digest and prefixes", gotIdx, wantIdx)
				// And once all is written.
				if err := x.Flush(); err != nil {
					t.Fatal(err)
				}
				diffReads(t, "reads after Flush", reads(indexView{t, x, ledgerA}, ledgerA, evs, 1), want)
				diffReads(t, "digest and prefixes after Flush", indexOnlyReads(t, x, ledgerA, n), wantIdx)
			})
		}
	}
}

// TestTailModel appends random groups to a small tail (frozen and written
// every few groups, in the background) with random explicit flushes, and
// compares every read function with the model after each step.
func TestTailModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			x := openAt(t, "x", Options{FS: vfs.NewMem(), TailSize: 1 + rng.IntN(40)})
			var evs []event
			for step := range 40 {
				g := randomEvents(rng, uint64(len(evs))+1, 1+rng.IntN(12))
				tailAdd(t, x, ledgerA, g...)
				evs = append(evs, g...)
				switch rng.IntN(6) {
				case 0:
					if err := x.Tail(ledgerA).Flush(); err != nil {
						t.Fatal(err)
					}
				case 1:
					if err := x.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				if step%4 == 3 || step == 39 {
					diffReads(t, fmt.Sprint("step ", step), reads(indexView{t, x, ledgerA}, ledgerA, evs, seed+uint64(step)),
						reads(model{ledgerA, evs}, ledgerA, evs, seed+uint64(step)))
				}
			}
		})
	}
}

// TestTailFlushWritesProgress: a flush of the tail writes the progress
// marker and durable witness of its last record; Close writes the tail,
// so that a reopened index holds every record.
func TestTailFlushWritesProgress(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	x, err := Open("x", Options{FS: fs, TailSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	evs := randomEvents(rand.New(rand.NewPCG(1, 2)), 1, 25)
	tl := x.Tail(ledgerA)
	tailStage(tl, ledgerA, evs[:5])
	dur := segment.Head{ID: idOf(ledgerA, 3), Seq: 3, Loc: locOf(3)}
	if err := tl.Publish(segment.Head{ID: idOf(ledgerA, 5), Seq: 5, Loc: locOf(5)}, dur); err != nil {
		t.Fatal(err)
	}
	if _, found, err := x.Progress(ledgerA); err != nil || found {
		t.Fatalf("Progress before any flush: found %v (%v), want none", found, err)
	}
	if err := tl.Flush(); err != nil {
		t.Fatal(err)
	}
	if h, found, err := x.Progress(ledgerA); err != nil || !found || h.Seq != 5 {
		t.Fatalf("Progress after Flush: %v %v (%v), want #5", h, found, err)
	}
	if d, found, err := x.Durable(ledgerA); err != nil || !found || d != dur {
		t.Fatalf("Durable after Flush: %v %v (%v), want %v", d, found, err, dur)
	}
	tailAdd(t, x, ledgerA, evs[5:]...) // 20 more: frozen once at 10+
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	x = openAt(t, "x", Options{FS: fs})
	if h, found, err := x.Progress(ledgerA); err != nil || !found || h.Seq != 25 {
		t.Fatalf("Progress after Close and reopen: %v %v (%v), want #25", h, found, err)
	}
	diffReads(t, "after reopen", reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), reads(model{ledgerA, evs}, ledgerA, evs, 3))
}

// TestTailIdleFlush: a tail that takes no record for tailIdle is written.
func TestTailIdleFlush(t *testing.T) {
	defer func(d time.Duration) { tailIdle = d }(tailIdle)
	tailIdle = 20 * time.Millisecond
	x := openAt(t, "x", Options{FS: vfs.NewMem()})
	tailAdd(t, x, ledgerA, randomEvents(rand.New(rand.NewPCG(1, 3)), 1, 3)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if h, found, err := x.Progress(ledgerA); err == nil && found && h.Seq == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle tail was not written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The progress marker is seen once the flush's commit is applied,
	// before the flush drops the records it wrote: wait for it to end.
	v, _ := x.tails.Load(ledgerA)
	tl := v.(*Tail)
	tl.mu.Lock()
	tl.holdLocked()
	tl.mu.Unlock()
	if x.tailBusy(ledgerA) {
		t.Error("the tail still holds records after its idle flush")
	}
}

// TestTailOrderAndBatches: the tail refuses a record out of sequence
// order, a Batch refuses records of a ledger whose tail holds some, and
// DeleteLedger and DeleteEvents drop the tail.
func TestTailOrderAndBatches(t *testing.T) {
	t.Parallel()
	x := openAt(t, "x", Options{FS: vfs.NewMem()})
	tailAdd(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n"})
	tl := x.Tail(ledgerA)
	tl.Add(idOf(ledgerA, 3), 3, locOf(3), "e", "k", "n")
	if err := tl.Publish(segment.Head{ID: idOf(ledgerA, 3), Seq: 3, Loc: locOf(3)}, segment.Head{}); err == nil {
		t.Error("Publish of #3 after #1: no error")
	}
	b := x.NewBatch()
	b.Add(ledgerA, event{seq: 2, entity: "e", key: "k", event: "n"}.record(ledgerA))
	if err := b.Commit(false); err == nil {
		t.Error("a Batch added a record of a ledger with a busy tail")
	}
	b.Close()
	if err := x.DeleteLedger(ledgerA); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := x.BySeq(ledgerA, 1); found || x.tailBusy(ledgerA) {
		t.Error("DeleteLedger left the tail")
	}
	tailAdd(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n"})
	b = x.NewBatch()
	b.DeleteEvents(ledgerA)
	b.Add(ledgerA, event{seq: 1, entity: "e2", key: "k", event: "n"}.record(ledgerA))
	b.SetProgress(ledgerA, segment.Head{ID: idOf(ledgerA, 1), Seq: 1, Loc: locOf(1)})
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if p := collect(t, x.Stream(context.Background(), ledgerA, []byte("e"), []byte("k"), 0)); len(p) != 0 {
		t.Errorf("after DeleteEvents: stream e/k %v, want none", seqsOf(p))
	}
}

// TestTailRace: 16 goroutines read every path while 4 append (one ledger
// each) to small tails that are written in the background.
func TestTailRace(t *testing.T) {
	t.Parallel()
	x := openAt(t, "x", Options{FS: vfs.NewMem(), TailSize: 64})
	ledgers := []eventid.LedgerID{ledgerA, ledgerB, 0xc001, 0xd001}
	var written [4]atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range ledgers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			seq := uint64(0)
			for seq < 3000 {
				g := randomEvents(rng, seq+1, 1+rng.IntN(20))
				tailAdd(t, x, ledgers[w], g...)
				seq += uint64(len(g))
				written[w].Store(seq)
			}
		}()
	}
	var bad atomic.Int64
	for r := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 6))
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := rng.IntN(4)
				ledger := ledgers[w]
				n := written[w].Load()
				if n == 0 {
					continue
				}
				// Every record up to n is readable, once, in order.
				seq := 1 + rng.Uint64N(n)
				if id, found, err := x.BySeq(ledger, seq); err != nil || !found || id != idOf(ledger, seq) {
					bad.Add(1)
				}
				if s, _, found, err := x.Lookup(idOf(ledger, seq)); err != nil || !found || s != seq {
					bad.Add(1)
				}
				var prev uint64
				count := uint64(0)
				for p, err := range x.TimeRange(ctx, ledger, idOf(ledger, 1), idOf(ledger, n), false) {
					if err != nil || p.Seq != prev+1 {
						bad.Add(1)
						break
					}
					prev = p.Seq
					count++
				}
				if count != n {
					bad.Add(1)
				}
				total := 0
				for p, err := range x.EntityEventsRange(ctx, ledger, []byte("ent1"), SeqRange{Before: n + 1, Reverse: rng.IntN(2) == 0}) {
					if err != nil || p.Seq > n {
						bad.Add(1)
						break
					}
					total++
				}
				for _, err := range x.Entity(ctx, ledger, []byte("ent2"), 0) {
					if err != nil {
						bad.Add(1)
					}
				}
				for _, err := range x.EventName(ctx, ledger, []byte("name3"), 0) {
					if err != nil {
						bad.Add(1)
					}
				}
				if _, _, err := x.StreamHead(ledger, []byte("ent0"), []byte("k1")); err != nil {
					bad.Add(1)
				}
				if _, _, err := x.Idempotency(ledger, []byte("idem3")); err != nil {
					bad.Add(1)
				}
				if d, err := x.Digest(ctx, ledger, n); err != nil || d.Count[slotTime] != n || d.Count[slotEntity] != n {
					bad.Add(1)
				}
				if _, err := x.PrefixMatches([]eventid.LedgerID{ledger}, []byte{0x06}, -1, 2); err != nil {
					bad.Add(1)
				}
			}
		}()
	}
	for w := range ledgers {
		for written[w].Load() < 3000 {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	if b := bad.Load(); b > 0 {
		t.Fatalf("%d reads wrong while appending", b)
	}
}

// TestTailIdleDuringFlush: an idle check that finds a write running waits
// for the next one, so records published meanwhile are written too.
func TestTailIdleDuringFlush(t *testing.T) {
	defer func(d time.Duration) { tailIdle = d }(tailIdle)
	tailIdle = 10 * time.Millisecond
	x := openAt(t, "x", Options{FS: vfs.NewMem()})
	evs := randomEvents(rand.New(rand.NewPCG(1, 4)), 1, 6)
	tailAdd(t, x, ledgerA, evs[:3]...)
	stopped, release := blockFlush(x, false)
	flushed := make(chan error, 1)
	go func() { flushed <- x.Tail(ledgerA).Flush() }()
	<-stopped
	tailAdd(t, x, ledgerA, evs[3:]...)
	time.Sleep(10 * tailIdle) // idle checks while the write is held
	release()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if h, found, err := x.Progress(ledgerA); err == nil && found && h.Seq == 6 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the records published while a write ran were never written")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeleteEventsKeepsTailUntilCommit: DeleteEvents drops the ledger's
// tail when its batch commits, not when it is called. A batch that is
// closed without a commit, or whose commit fails, leaves the tail (and so
// every read of the records it holds, which Pebble does not have yet) as
// it was; one that commits replaces it with what it wrote.
func TestDeleteEventsKeepsTailUntilCommit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 1))
	const n = 60
	evs := randomEvents(rng, 1, n)
	for _, how := range []string{"closed", "failed commit", "committed"} {
		t.Run(how, func(t *testing.T) {
			x := openAt(t, "x", Options{FS: vfs.NewMem(), TailSize: 10 * n})
			add(t, x, ledgerA, evs[:n/2]...)
			tailAdd(t, x, ledgerA, evs[n/2:]...)
			want := reads(model{ledgerA, evs}, ledgerA, evs, 3)
			diffReads(t, "before the batch", reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
			b := x.NewBatch()
			b.DeleteEvents(ledgerA)
			switch how {
			case "closed":
				b.Close()
			case "failed commit":
				// Valid records, then one of another ledger: Commit
				// writes nothing.
				for _, e := range evs[:5] {
					b.Add(ledgerA, e.record(ledgerA))
				}
				b.Add(ledgerA, evs[5].record(ledgerB))
				if err := b.Commit(false); !errors.Is(err, ErrInvalid) {
					t.Fatalf("Commit of an invalid batch: %v, want ErrInvalid", err)
				}
				b.Close()
			case "committed":
				// Indexed again from the first record, as the engine
				// does: the tail's records are in the batch.
				for _, e := range evs {
					b.Add(ledgerA, e.record(ledgerA))
				}
				if err := b.Commit(false); err != nil {
					t.Fatalf("Commit: %v", err)
				}
				b.Close()
				if x.tailBusy(ledgerA) {
					t.Fatal("the tail still holds records after the deletion committed")
				}
			}
			diffReads(t, fmt.Sprintf("after the batch (%s)", how), reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
			// What is in the tail is still written by a flush.
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
			diffReads(t, fmt.Sprintf("after the batch (%s) and Flush", how), reads(indexView{t, x, ledgerA}, ledgerA, evs, 3), want)
		})
	}
}

// TestTailPublishRefusedChangesNothing: a Publish refused because a
// record is out of sequence publishes none of its records and leaves the
// sequence number the tail wants as it was, so that the records that do
// follow are taken next.
func TestTailPublishRefusedChangesNothing(t *testing.T) {
	t.Parallel()
	x := openAt(t, "x", Options{FS: vfs.NewMem()})
	evs := randomEvents(rand.New(rand.NewPCG(15, 2)), 1, 6)
	tailAdd(t, x, ledgerA, evs[:3]...)
	tl := x.Tail(ledgerA)
	tailStage(tl, ledgerA, []event{evs[3], evs[5]}) // #4, then #6 instead of #5
	if err := tl.Publish(segment.Head{ID: idOf(ledgerA, 6), Seq: 6, Loc: locOf(6)}, segment.Head{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Publish of #4 and #6: %v, want ErrInvalid", err)
	}
	diffReads(t, "after the refused Publish", reads(indexView{t, x, ledgerA}, ledgerA, evs[:3], 4), reads(model{ledgerA, evs[:3]}, ledgerA, evs[:3], 4))
	tailAdd(t, x, ledgerA, evs[3:]...)
	diffReads(t, "after #4 to #6", reads(indexView{t, x, ledgerA}, ledgerA, evs, 4), reads(model{ledgerA, evs}, ledgerA, evs, 4))
}
