package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// TestLinearizableAcrossTakeover checks with porcupine (the model of
// linearize_test.go) a history that crosses a takeover: clients append
// and read on writer A (Replicated, a Memory store); mid-history A's
// chunk uploads are held (A cut off from the store) and a DB on another
// directory (a copy of A's taken before the history) takes the ledgers
// with Takeover; then A's uploads go on, and meet B's fence. Each client
// moves to B when a call on A fails with ErrFenced. An append that failed with ErrFenced or ErrNotStored
// has an unknown outcome (its batch may have been stored before the
// fence): it is in the history with no return (porcupine: an infinite
// return time), and its events, if the new writer's ledger holds them at
// the end, as its result; if it does not, it had no effect and is left
// out. Every acknowledged append must be in the new writer's ledger.
func TestLinearizableAcrossTakeover(t *testing.T) {
	t.Parallel()
	runs, clients, budget := 3, 8, 360
	if raceEnabled {
		runs, budget = 1, 200
	}
	seed := testSeed(t)
	total, unknown, present := 0, 0, 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		ops, u, p := linearizeTakeoverRun(t, rng, clients, budget)
		total += ops
		unknown += u
		present += p
		if t.Failed() {
			t.Fatalf("run %d failed; seed %d", run, seed)
		}
	}
	t.Logf("%d histories across a takeover, %d operations checked; %d appends of unknown outcome (fenced or not stored), %d of them found in the new writer's ledger", runs, total, unknown, present)
}

// takeRun is one history across a takeover.
type takeRun struct {
	lin     *linRun
	a       *DB
	b       atomic.Pointer[DB]
	bReady  chan struct{} // closed when b is set (or the takeover failed)
	unknown []porcupine.Operation
	acked   [][]eventid.ID // the IDs of acknowledged appends
	takeAt  [2]int64       // the clock when Takeover was called, returned
}

func linearizeTakeoverRun(t *testing.T, rng *rand.Rand, clients, budget int) (ops, unknown, present int) {
	ctx := context.Background()
	// A's uploads go through stA, which holds them while B takes over
	// (A cut off from the store, or paused: its appends then fail, and
	// its uploads land after B's fence); B's go to the store directly.
	mem := store.NewMemory()
	stA := &replStore{Store: mem}
	dirA := t.TempDir()
	a := openRepl(t, dirA, stA, Replicated)
	r := &takeRun{lin: &linRun{t: t, hist: &linHistory{}}, bReady: make(chan struct{})}
	for i := range linLedgers {
		info, err := a.CreateLedger(ctx, LedgerSpec{Name: fmt.Sprintf("l%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		r.lin.names = append(r.lin.names, info.Name)
		r.lin.genesis = append(r.lin.genesis, info.Genesis)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	dirB := copyDir(t, dirA)
	r.a = openRepl(t, dirA, stA, Replicated)
	defer r.a.Close()

	// The takeover after a random part of the operations.
	at := int64(budget/4 + rng.IntN(budget/3))
	var takeErr error
	go func() {
		defer close(r.bReady)
		for r.lin.ops.Load() < at {
			time.Sleep(100 * time.Microsecond)
		}
		stA.holdChunks()
		defer stA.release()
		for deadline := time.Now().Add(time.Second); stA.held.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Microsecond)
		}
		r.takeAt[0] = r.lin.hist.clock.Add(1)
		b, _, err := Takeover(ctx, dirB, replOptions(mem, Replicated))
		r.takeAt[1] = r.lin.hist.clock.Add(1)
		stA.release()
		if err != nil {
			takeErr = err
			return
		}
		r.b.Store(b)
	}()
	var wg sync.WaitGroup
	for c := range clients {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(c)))
		wg.Go(func() { r.worker(ctx, c, wrng, budget) })
	}
	wg.Wait()
	<-r.bReady
	if takeErr != nil {
		t.Fatalf("takeover: %v", takeErr)
	}
	b := r.b.Load()
	defer b.Close()
	if t.Failed() {
		return
	}

	// The new writer's ledgers: every acknowledged append is there, and
	// they settle the appends of unknown outcome.
	byTag := map[string]eventid.ID{}
	seqOf := map[eventid.ID]uint64{}
	have := map[eventid.ID]bool{}
	for _, name := range r.lin.names {
		for ev, err := range b.Scan(ctx, name, ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			have[ev.ID] = true
			var d struct{ T string }
			if json.Unmarshal(ev.Data, &d) == nil && d.T != "" {
				if was, ok := byTag[d.T]; ok {
					t.Fatalf("ledger %s holds the event %s twice: %s and %s", name, d.T, was, ev.ID)
				}
				byTag[d.T] = ev.ID
				seqOf[ev.ID] = ev.Seq
			}
		}
	}
	for _, ids := range r.acked {
		for _, id := range ids {
			if !have[id] {
				t.Fatalf("the acknowledged event %s is not in the new writer's ledger", id)
			}
		}
	}
	for _, op := range r.unknown {
		in := op.Input.(*linIn)
		var ids []eventid.ID
		for _, tag := range in.tags {
			if id, ok := byTag[tag]; ok {
				ids = append(ids, id)
			}
		}
		switch len(ids) {
		case 0:
			continue // no effect
		case len(in.tags):
		default:
			t.Fatalf("%d of the %d events of a batch are in the new writer's ledger: %v", len(ids), len(in.tags), in.tags)
		}
		present++
		op.Output = &linOut{ids: ids, first: seqOf[ids[0]]}
		r.lin.hist.ops = append(r.lin.hist.ops, op)
	}
	// Milliseconds: the model places each append at its first sequence
	// number. Before it did, a history that a loaded machine stretched
	// (many appends pending at once while A's uploads were held) took
	// porcupine over four minutes, as it tried every order of them.
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel(r.lin.genesis), r.lin.hist.ops, 4*time.Minute)
	t.Logf("porcupine: %d operations (%d of unknown outcome) checked in %v", len(r.lin.hist.ops), len(r.unknown), time.Since(checkStart).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("porcupine timed out on a history of %d operations", len(r.lin.hist.ops))
	default:
		m := linModel(r.lin.genesis)
		parts := m.Partition(r.lin.hist.ops)
		for pi, lin := range info.PartialLinearizations() {
			t.Logf("partition %d: a longest partial linearization:", pi)
			if len(lin) > 0 {
				for _, i := range lin[0] {
					op := parts[pi][i]
					t.Logf("  [%d,%d] c%d %s", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
				}
			}
			t.Logf("partition %d: history:", pi)
			for _, op := range parts[pi] {
				t.Logf("  [%d,%d] c%d %s", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
			}
		}
		t.Errorf("the history of %d operations across the takeover (called at %d, returned at %d) is not linearizable", len(r.lin.hist.ops), r.takeAt[0], r.takeAt[1])
	}
	return len(r.lin.hist.ops), len(r.unknown), present
}

// do runs one operation on the client's writer and records it: an
// append that fails with ErrFenced or ErrNotStored as of unknown outcome,
// a read that fails with ErrFenced not at all (it returned nothing). It
// returns the result, or nil and moved set when the client must move to
// the new writer.
func (r *takeRun) do(client int, in *linIn, f func() (*linOut, error)) (out *linOut, moved bool) {
	// (ClientId: the client, plus 100 on the new writer.)
	call := r.lin.hist.clock.Add(1)
	out, err := f()
	ret := r.lin.hist.clock.Add(1)
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	r.lin.hist.mu.Lock()
	defer r.lin.hist.mu.Unlock()
	switch {
	case err == nil:
		if in.kind == linAppend && out.err == "" {
			r.acked = append(r.acked, out.ids)
		}
		r.lin.hist.ops = append(r.lin.hist.ops, op)
		return out, false
	case errors.Is(err, ErrFenced) || errors.Is(err, ErrNotStored):
		if in.kind == linAppend {
			op.Return = math.MaxInt64
			r.unknown = append(r.unknown, op)
		}
		return nil, errors.Is(err, ErrFenced)
	}
	r.lin.t.Errorf("client %d: unexpected error: %v", client, err)
	return nil, false
}

// worker runs operations on A, then on B once a call on A fails with
// ErrFenced, until the run has done enough.
func (r *takeRun) worker(ctx context.Context, client int, rng *rand.Rand, budget int) {
	db := r.a
	onB := false
	move := func(moved bool) {
		if moved && !onB {
			<-r.bReady
			if b := r.b.Load(); b != nil {
				db, onB = b, true
			}
		}
	}
	id := func() int {
		if onB {
			return client + 100
		}
		return client
	}
	var known []eventid.ID
	tag := 0
	newTags := func(n int) []string {
		tags := make([]string, n)
		for i := range tags {
			tags[i] = fmt.Sprintf("c%d-%d-%d", client, tag, i)
		}
		tag++
		return tags
	}
	cond := func(err error) (*linOut, error) {
		var ce *ConditionError
		switch {
		case errors.Is(err, ErrFenced) || errors.Is(err, ErrNotStored):
			// Also a failed condition whose event could not be stored
			// (the caller cannot read it): of unknown outcome.
			return nil, err
		case errors.As(err, &ce):
			return &linOut{err: "condition", found: ce.Found}, nil
		case errors.Is(err, ErrNotFound):
			return &linOut{err: "notfound"}, nil
		}
		return nil, err
	}
	appendOp := func(in *linIn) *linOut {
		in.kind = linAppend
		o := &AppendOptions{Durability: Sync, IdempotencyKey: in.idem}
		if in.expHead {
			o.ExpectedHead = in.head
		}
		if in.expStream {
			o.ExpectedStreams = []ExpectedStream{{Entity: "acct", Key: fmt.Sprintf("s%d", in.streams[0]), Head: in.streamHeadID}}
		}
		out, moved := r.do(id(), in, func() (*linOut, error) {
			res, err := db.Append(ctx, r.lin.names[in.ledger], linEvents(in), o)
			if err != nil {
				return cond(err)
			}
			return &linOut{ids: res.IDs, first: res.FirstSeq}, nil
		})
		move(moved)
		if out == nil {
			return &linOut{err: "unknown"}
		}
		known = append(known, out.ids...)
		if !out.found.IsZero() {
			known = append(known, out.found)
		}
		return out
	}
	read := func(in *linIn, f func() (*linOut, error)) *linOut {
		out, moved := r.do(id(), in, f)
		move(moved)
		if out == nil {
			return &linOut{err: "unknown"}
		}
		return out
	}
	get := func(l int, id eventid.ID) *linOut {
		return read(&linIn{kind: linGet, ledger: l, id: id}, func() (*linOut, error) {
			ev, err := db.Get(ctx, id)
			if err != nil {
				return cond(err)
			}
			var s int
			fmt.Sscanf(ev.Key, "s%d", &s)
			return &linOut{seq: ev.Seq, strm: s}, nil
		})
	}
	streamHead := func(l, s int) *linOut {
		return read(&linIn{kind: linStreamHead, ledger: l, streams: []int{s}}, func() (*linOut, error) {
			h, err := db.StreamHead(ctx, r.lin.names[l], "acct", fmt.Sprintf("s%d", s))
			if err != nil {
				return cond(err)
			}
			return &linOut{id: h.ID, seq: h.Seq}, nil
		})
	}
	var idem []linIn
	for r.lin.ops.Add(1) <= int64(budget) && !r.lin.t.Failed() {
		l, s := rng.IntN(linLedgers), rng.IntN(linStreams)
		streams := []int{s}
		if rng.IntN(4) == 0 {
			streams = append(streams, (s+1)%linStreams)
		}
		switch p := rng.IntN(100); {
		case p < 35: // read the stream head, append on it
			h := streamHead(l, s)
			if h.err != "" {
				break
			}
			out := appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams)), expStream: true, streamHeadID: h.id})
			if out.err == "condition" && !out.found.IsZero() {
				get(l, out.found)
			}
		case p < 45: // the same on the ledger's head
			h := read(&linIn{kind: linLedgerHead, ledger: l}, func() (*linOut, error) {
				info, err := db.Ledger(r.lin.names[l])
				if err != nil {
					return cond(err)
				}
				return &linOut{id: info.Head, seq: info.Count}, nil
			})
			if h.err != "" {
				break
			}
			out := appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams)), expHead: true, head: h.id})
			if out.err == "condition" {
				get(l, out.found)
			}
		case p < 55:
			appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams))})
		case p < 65: // a new idempotent append
			in := &linIn{ledger: l, streams: streams, tags: newTags(len(streams)), idem: fmt.Sprintf("k%d-%d", client, tag)}
			appendOp(in)
			idem = append(idem, *in)
		case p < 72: // a retry of an earlier one, with the same events (maybe on the new writer)
			if len(idem) > 0 {
				in := idem[rng.IntN(len(idem))]
				appendOp(&in)
			}
		case p < 85:
			if len(known) == 0 || rng.IntN(10) == 0 {
				get(l, r.lin.genesis[l].Ledger().MinForTime(time.Unix(int64(1e9+rng.IntN(1e6)), 0)))
				break
			}
			id := known[rng.IntN(len(known))]
			get(r.lin.ledgerOf(id), id)
		case p < 92:
			streamHead(l, s)
		default:
			read(&linIn{kind: linReplay, ledger: l, streams: []int{s}}, func() (*linOut, error) {
				out := &linOut{}
				for ev, err := range db.Replay(ctx, r.lin.names[l], ReplayOptions{Entity: "acct", Keys: []string{fmt.Sprintf("s%d", s)}}) {
					if err != nil {
						return cond(err)
					}
					out.ids = append(out.ids, ev.ID)
				}
				return out, nil
			})
		}
	}
}
