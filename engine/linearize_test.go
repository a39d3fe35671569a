package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// The linearizability test runs many goroutines against a DB — conditional
// appends (ExpectedStreams, ExpectedHead), idempotent appends and their
// retries with the same events, Get, StreamHead, the ledger's head
// (LedgerInfo) and Replay of a stream — records every operation with the
// moments it was called and returned, and checks with porcupine that the
// history is linearizable: that some order of the operations, each taking
// effect between its call and its return, explains every result by a
// sequential model of a ledger (linModel). Between rounds the DB is closed
// and reopened, or crashed: the file system is cloned with what was synced
// (and, half the time, part of what was not), as a power cut leaves it,
// and the clone is opened. Every append is Sync, so an acknowledged append
// survives the crash; one whose return came after the crash has an
// unknown outcome, found by reading the reopened ledger as etcd's
// robustness tests resolve theirs: present, it took effect before the
// crash; absent, it is left out of the history (it had no effect: its
// result constrains nothing).
//
// ANNAL_LINEARIZE=long checks 100 histories instead of 4 (.ci/reliability).
// More histories rather than longer ones: porcupine's search grows fast
// with a history's length and concurrency (one of 12 clients and 3,800
// operations took over a minute, the timeout; four such passed in 55 s
// with a longer one), while a failure shows in a short history (without
// the wait for read-your-conflicts every run of the CI size fails).

const (
	linLedgers = 2 // a partition each: porcupine checks them apart
	linStreams = 3 // per ledger: entity "acct", keys s0..s2
)

// linKind is the kind of an operation.
type linKind int

const (
	linAppend linKind = iota
	linGet
	linStreamHead
	linLedgerHead
	linReplay
)

// linIn is an operation's input.
type linIn struct {
	kind    linKind
	ledger  int
	streams []int // an append: each event's stream; StreamHead, Replay: [stream]
	tags    []string
	// Conditions of an append.
	expHead      bool
	head         eventid.ID
	expStream    bool
	streamHeadID eventid.ID // the condition on streams[0]
	idem         string
	id           eventid.ID // Get
}

// linOut is an operation's result.
type linOut struct {
	err string       // "": success; "condition"; "notfound"
	ids []eventid.ID // an append's IDs; a Replay's
	// first is an append's first sequence number (0: not known). The
	// model places the append where its events are, which also makes
	// porcupine's search follow the ledger's order instead of trying every
	// order of concurrent appends.
	first uint64
	found eventid.ID // a ConditionError's Found
	id    eventid.ID // StreamHead, ledger head
	seq   uint64     // Get, StreamHead, ledger head
	strm  int        // Get: the event's stream
}

// linEvent is an event of the model.
type linEvent struct {
	id     eventid.ID
	stream int
}

// linState is the model's state of one ledger: its events after the
// genesis, in order, and the idempotency keys used. Steps never modify a
// state: they make a new one.
type linState struct {
	events []linEvent
	idem   map[string][]eventid.ID
}

func (s *linState) streamHead(stream int) (eventid.ID, uint64) {
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].stream == stream {
			return s.events[i].id, uint64(i) + 2
		}
	}
	return eventid.ID{}, 0
}

// linModel returns the sequential model: genesis holds each ledger's
// genesis ID (the ledger head of an empty model).
func linModel(genesis []eventid.ID) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			parts := make([][]porcupine.Operation, linLedgers)
			for _, op := range h {
				l := op.Input.(*linIn).ledger
				parts[l] = append(parts[l], op)
			}
			return parts
		},
		Init: func() any { return &linState{} },
		Step: func(st, input, output any) (bool, any) {
			s, in, out := st.(*linState), input.(*linIn), output.(*linOut)
			head, headSeq := genesis[in.ledger], uint64(1)
			if n := len(s.events); n > 0 {
				head, headSeq = s.events[n-1].id, uint64(n)+1
			}
			switch in.kind {
			case linAppend:
				if in.idem != "" {
					if ids, ok := s.idem[in.idem]; ok {
						return out.err == "" && slices.Equal(out.ids, ids), s
					}
				}
				if in.expHead && head != in.head {
					return out.err == "condition" && out.found == head, s
				}
				if in.expStream {
					if sh, _ := s.streamHead(in.streams[0]); sh != in.streamHeadID {
						return out.err == "condition" && out.found == sh, s
					}
				}
				if out.err != "" || len(out.ids) != len(in.streams) {
					return false, s
				}
				if out.first != 0 && out.first != headSeq+1 {
					return false, s
				}
				next := &linState{events: slices.Clip(s.events), idem: s.idem}
				for i, id := range out.ids {
					if slices.ContainsFunc(next.events, func(e linEvent) bool { return e.id == id }) {
						return false, s
					}
					next.events = append(next.events, linEvent{id: id, stream: in.streams[i]})
				}
				if in.idem != "" {
					next.idem = make(map[string][]eventid.ID, len(s.idem)+1)
					for k, v := range s.idem {
						next.idem[k] = v
					}
					next.idem[in.idem] = out.ids
				}
				return true, next
			case linGet:
				for i, e := range s.events {
					if e.id == in.id {
						return out.err == "" && out.seq == uint64(i)+2 && out.strm == e.stream, s
					}
				}
				return out.err == "notfound", s
			case linStreamHead:
				id, seq := s.streamHead(in.streams[0])
				return out.err == "" && out.id == id && out.seq == seq, s
			case linLedgerHead:
				return out.err == "" && out.id == head && out.seq == headSeq, s
			case linReplay:
				var ids []eventid.ID
				for _, e := range s.events {
					if e.stream == in.streams[0] {
						ids = append(ids, e.id)
					}
				}
				return out.err == "" && slices.Equal(out.ids, ids), s
			}
			return false, s
		},
		Equal: func(a, b any) bool {
			x, y := a.(*linState), b.(*linState)
			if !slices.Equal(x.events, y.events) || len(x.idem) != len(y.idem) {
				return false
			}
			for k, v := range x.idem {
				if !slices.Equal(v, y.idem[k]) {
					return false
				}
			}
			return true
		},
		Hash: func(a any) uint64 {
			s := a.(*linState)
			h := uint64(len(s.events))
			if n := len(s.events); n > 0 {
				h ^= binary.BigEndian.Uint64(s.events[n-1].id[8:])
			}
			return h
		},
		DescribeOperation: func(input, output any) string {
			in, ok1 := input.(*linIn)
			out, ok2 := output.(*linOut)
			if !ok1 || !ok2 {
				return fmt.Sprint(input, output)
			}
			short := func(id eventid.ID) string {
				if id.IsZero() {
					return "none"
				}
				return id.String()[20:]
			}
			var res string
			switch out.err {
			case "":
			case "condition":
				res = " -> condition failed, found " + short(out.found)
			default:
				res = " -> " + out.err
			}
			switch in.kind {
			case linAppend:
				var c []string
				if in.expHead {
					c = append(c, "head="+short(in.head))
				}
				if in.expStream {
					c = append(c, fmt.Sprintf("s%d=%s", in.streams[0], short(in.streamHeadID)))
				}
				if in.idem != "" {
					c = append(c, "key="+in.idem)
				}
				if res == "" {
					var ids []string
					for _, id := range out.ids {
						ids = append(ids, short(id))
					}
					res = " -> " + strings.Join(ids, ",")
				}
				return fmt.Sprintf("append%v [%s]%s", in.streams, strings.Join(c, " "), res)
			case linGet:
				if res == "" {
					res = fmt.Sprintf(" -> #%d s%d", out.seq, out.strm)
				}
				return "get " + short(in.id) + res
			case linStreamHead:
				return fmt.Sprintf("head s%d -> %s #%d", in.streams[0], short(out.id), out.seq)
			case linLedgerHead:
				return fmt.Sprintf("ledger head -> %s #%d", short(out.id), out.seq)
			default:
				var ids []string
				for _, id := range out.ids {
					ids = append(ids, short(id))
				}
				return fmt.Sprintf("replay s%d -> [%s]", in.streams[0], strings.Join(ids, ","))
			}
		},
		DescribeState: func(a any) string {
			s := a.(*linState)
			var b strings.Builder
			for i, e := range s.events {
				fmt.Fprintf(&b, "#%d s%d %s\n", i+2, e.stream, e.id.String()[20:])
			}
			return b.String()
		},
	}
}

// linHistory records the operations of a run.
type linHistory struct {
	mu    sync.Mutex
	clock atomic.Int64
	ops   []porcupine.Operation
	// pending: appends whose outcome is unknown (returned after a crash),
	// resolved after the reopen.
	pending []porcupine.Operation
}

// linRun is the state of the test across rounds.
type linRun struct {
	t       *testing.T
	hist    *linHistory
	names   []string
	genesis []eventid.ID
	crashAt atomic.Int64 // the clock at the crash of this round; 0: none
	// idem: idempotent appends to retry, with their events.
	idemMu sync.Mutex
	idem   []linIn
	ops    atomic.Int64 // operations done this round
}

// do runs one operation and records it. An append whose return comes
// after the round's crash has an unknown outcome; a read that returns
// after it is dropped (it constrains nothing).
func (r *linRun) do(client int, in *linIn, f func() *linOut) *linOut {
	call := r.hist.clock.Add(1)
	out := f()
	ret := r.hist.clock.Add(1)
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	r.hist.mu.Lock()
	defer r.hist.mu.Unlock()
	if c := r.crashAt.Load(); c != 0 && ret > c {
		if in.kind == linAppend {
			r.hist.pending = append(r.hist.pending, op)
		}
		return out
	}
	r.hist.ops = append(r.hist.ops, op)
	return out
}

func linEvents(in *linIn) []EventInput {
	evs := make([]EventInput, len(in.streams))
	for i, s := range in.streams {
		evs[i] = EventInput{Entity: "acct", Key: fmt.Sprintf("s%d", s), Event: "moved", Meta: []byte(`{}`),
			Data: []byte(fmt.Sprintf(`{"t":%q}`, in.tags[i]))}
	}
	return evs
}

// errOut turns an error into a result, or fails the test for one the
// model does not know.
func (r *linRun) errOut(err error) *linOut {
	var ce *ConditionError
	switch {
	case errors.As(err, &ce):
		return &linOut{err: "condition", found: ce.Found}
	case errors.Is(err, ErrNotFound):
		return &linOut{err: "notfound"}
	}
	r.t.Errorf("unexpected error: %v", err)
	return &linOut{err: err.Error()}
}

// worker runs operations until the round has done enough or crashed.
func (r *linRun) worker(ctx context.Context, db *DB, client, round int, rng *rand.Rand, budget int) {
	var known []eventid.ID
	tag := 0
	newTags := func(n int) []string {
		tags := make([]string, n)
		for i := range tags {
			tags[i] = fmt.Sprintf("c%d-r%d-%d-%d", client, round, tag, i)
		}
		tag++
		return tags
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
		out := r.do(client, in, func() *linOut {
			res, err := db.Append(ctx, r.names[in.ledger], linEvents(in), o)
			if err != nil {
				return r.errOut(err)
			}
			return &linOut{ids: res.IDs, first: res.FirstSeq}
		})
		known = append(known, out.ids...)
		if !out.found.IsZero() {
			known = append(known, out.found)
		}
		return out
	}
	get := func(l int, id eventid.ID) *linOut {
		return r.do(client, &linIn{kind: linGet, ledger: l, id: id}, func() *linOut {
			ev, err := db.Get(ctx, id)
			if err != nil {
				return r.errOut(err)
			}
			var s int
			fmt.Sscanf(ev.Key, "s%d", &s)
			return &linOut{seq: ev.Seq, strm: s}
		})
	}
	streamHead := func(l, s int) *linOut {
		return r.do(client, &linIn{kind: linStreamHead, ledger: l, streams: []int{s}}, func() *linOut {
			h, err := db.StreamHead(ctx, r.names[l], "acct", fmt.Sprintf("s%d", s))
			if err != nil {
				return r.errOut(err)
			}
			return &linOut{id: h.ID, seq: h.Seq}
		})
	}
	for r.crashAt.Load() == 0 && r.ops.Add(1) <= int64(budget) {
		l, s := rng.IntN(linLedgers), rng.IntN(linStreams)
		streams := []int{s}
		if rng.IntN(4) == 0 {
			streams = append(streams, (s+1)%linStreams)
		}
		switch p := rng.IntN(100); {
		case p < 35: // read the stream head, append on it; on a conflict, read what it found
			for try := 0; try < 3; try++ {
				h := streamHead(l, s)
				out := appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams)), expStream: true, streamHeadID: h.id})
				if out.err != "condition" || out.found.IsZero() {
					break
				}
				get(l, out.found)
			}
		case p < 45: // the same on the ledger's head
			h := r.do(client, &linIn{kind: linLedgerHead, ledger: l}, func() *linOut {
				info, err := db.Ledger(r.names[l])
				if err != nil {
					return r.errOut(err)
				}
				return &linOut{id: info.Head, seq: info.Count}
			})
			out := appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams)), expHead: true, head: h.id})
			if out.err == "condition" {
				get(l, out.found)
			}
		case p < 55:
			appendOp(&linIn{ledger: l, streams: streams, tags: newTags(len(streams))})
		case p < 65: // a new idempotent append
			in := &linIn{ledger: l, streams: streams, tags: newTags(len(streams)), idem: fmt.Sprintf("k%d-r%d-%d", client, round, tag)}
			appendOp(in)
			r.idemMu.Lock()
			r.idem = append(r.idem, *in)
			r.idemMu.Unlock()
		case p < 72: // a retry of an earlier one (maybe of an earlier round), with the same events
			r.idemMu.Lock()
			var in linIn
			ok := len(r.idem) > 0
			if ok {
				in = r.idem[rng.IntN(len(r.idem))]
			}
			r.idemMu.Unlock()
			if ok {
				appendOp(&in)
			}
		case p < 85:
			if len(known) == 0 || rng.IntN(10) == 0 {
				// An ID no event has.
				get(l, r.genesis[l].Ledger().MinForTime(time.Unix(int64(1e9+rng.IntN(1e6)), 0)))
				break
			}
			id := known[rng.IntN(len(known))]
			get(r.ledgerOf(id), id)
		case p < 92:
			streamHead(l, s)
		default:
			r.do(client, &linIn{kind: linReplay, ledger: l, streams: []int{s}}, func() *linOut {
				out := &linOut{}
				for ev, err := range db.Replay(ctx, r.names[l], ReplayOptions{Entity: "acct", Keys: []string{fmt.Sprintf("s%d", s)}}) {
					if err != nil {
						return r.errOut(err)
					}
					out.ids = append(out.ids, ev.ID)
				}
				return out
			})
		}
	}
}

// ledgerOf returns the index of the ledger of id (an ID the test was
// given by the engine).
func (r *linRun) ledgerOf(id eventid.ID) int {
	for i, g := range r.genesis {
		if g.Ledger() == id.Ledger() {
			return i
		}
	}
	r.t.Errorf("the engine returned %s, an ID of no ledger of the test", id)
	return 0
}

// resolve settles the appends of unknown outcome after a crash, from the
// reopened DB: those whose events are there took effect before the crash
// (their window ends at it); the others are left out.
func (r *linRun) resolve(ctx context.Context, db *DB, crashEnd int64) (present, absent int) {
	byTag := map[string]eventid.ID{}
	seqOf := map[eventid.ID]uint64{}
	for _, name := range r.names {
		for ev, err := range db.Scan(ctx, name, ScanOptions{}) {
			if err != nil {
				r.t.Fatal(err)
			}
			var d struct{ T string }
			if json.Unmarshal(ev.Data, &d) == nil && d.T != "" {
				if was, ok := byTag[d.T]; ok {
					// Only an idempotent append is tried twice with
					// the same events: it must have appended once.
					r.t.Fatalf("after the crash, ledger %s has the event %s twice: %s and %s", name, d.T, was, ev.ID)
				}
				byTag[d.T] = ev.ID
				seqOf[ev.ID] = ev.Seq
			}
		}
	}
	for _, op := range r.hist.pending {
		in := op.Input.(*linIn)
		if op.Call > crashEnd {
			// Called after the crash: it ran on the DB that crashed,
			// not on the clone that was opened. (Its events may be
			// there all the same: an idempotent retry's, appended by
			// an earlier attempt.)
			absent++
			continue
		}
		var ids []eventid.ID
		for _, tag := range in.tags {
			if id, ok := byTag[tag]; ok {
				ids = append(ids, id)
			}
		}
		switch len(ids) {
		case 0:
			absent++
			continue
		case len(in.tags):
		default:
			r.t.Fatalf("after the crash, %d of the %d events of a batch are there: %v", len(ids), len(in.tags), in.tags)
		}
		present++
		op.Output = &linOut{ids: ids, first: seqOf[ids[0]]}
		op.Return = crashEnd
		r.hist.ops = append(r.hist.ops, op)
	}
	r.hist.pending = nil
	return present, absent
}

// TestLinearizable checks the concurrent history of the engine's API
// against a sequential model with porcupine, over rounds separated by a
// clean close or a crash (see the comment at the top of this file).
func TestLinearizable(t *testing.T) {
	t.Parallel()
	runs, rounds, clients, budget := 4, 4, 8, 160
	if raceEnabled {
		runs, budget = 1, 100
	}
	if os.Getenv("ANNAL_LINEARIZE") == "long" {
		runs, rounds, clients, budget = 100, 6, 8, 200
	}
	seed := testSeed(t)
	histories, total, crashes, present, absent := 0, 0, 0, 0, 0
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		ops, c, p, a := linearizeRun(t, rng, rounds, clients, budget)
		histories++
		total += ops
		crashes += c
		present += p
		absent += a
		if t.Failed() {
			t.Fatalf("run %d failed; seed %d", run, seed)
		}
	}
	t.Logf("%d histories checked, %d operations, %d crashes (%d appends of unknown outcome found after the crash, %d not)", histories, total, crashes, present, absent)
}

// linearizeRun runs one history of rounds and checks it; it returns the
// operations checked, the crashes, and the unknown appends resolved.
func linearizeRun(t *testing.T, rng *rand.Rand, rounds, clients, budget int) (ops, crashes, present, absent int) {
	ctx := context.Background()
	var mem *vfs.MemFS = vfs.NewCrashableMem()
	tmp := t.TempDir()
	metaPath := filepath.Join(tmp, "meta-0.db")
	open := func() *DB {
		db, err := Open(crashDir, &Options{fs: mem, metaPath: metaPath, SegmentSize: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if u := db.Unavailable(); len(u) > 0 {
			t.Fatalf("ledgers unavailable: %v", u)
		}
		return db
	}
	db := open()
	r := &linRun{t: t, hist: &linHistory{}}
	for i := range linLedgers {
		info, err := db.CreateLedger(ctx, LedgerSpec{Name: fmt.Sprintf("l%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		r.names = append(r.names, info.Name)
		r.genesis = append(r.genesis, info.Genesis)
	}
	for round := range rounds {
		crash := round%2 == 1
		r.crashAt.Store(0)
		r.ops.Store(0)
		var wg sync.WaitGroup
		for c := range clients {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(c)))
			wg.Go(func() { r.worker(ctx, db, c, round, wrng, budget) })
		}
		if crash {
			// A crash after a random part of the round's operations.
			at := int64(budget/4 + rng.IntN(budget/2))
			for r.ops.Load() < at {
				time.Sleep(100 * time.Microsecond)
			}
			r.crashAt.Store(r.hist.clock.Add(1))
			// The metadata as of its last commit, then the file system
			// with what was synced (and maybe part of the rest).
			var meta bytes.Buffer
			if err := db.meta.View(func(tx *bolt.Tx) error {
				_, err := tx.WriteTo(&meta)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			cfg := vfs.CrashCloneCfg{}
			if rng.IntN(2) == 0 {
				cfg.UnsyncedDataPercent = 1 + rng.IntN(99)
				cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), 3))
			}
			clone := mem.CrashClone(cfg)
			crashEnd := r.hist.clock.Add(1)
			wg.Wait()
			db.Close() // the DB that crashed: what it does now is not seen
			mem = clone
			metaPath = filepath.Join(tmp, fmt.Sprintf("meta-%d.db", round+1))
			if err := os.WriteFile(metaPath, meta.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			db = open()
			p, a := r.resolve(ctx, db, crashEnd)
			present += p
			absent += a
			crashes++
		} else {
			wg.Wait()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = open()
		}
		if t.Failed() {
			db.Close()
			return
		}
	}
	db.Close()
	res, info := porcupine.CheckOperationsVerbose(linModel(r.genesis), r.hist.ops, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("porcupine timed out on a history of %d operations", len(r.hist.ops))
	default:
		f, err := os.CreateTemp("", "annal-linearize-*.html")
		if err == nil {
			porcupine.Visualize(linModel(r.genesis), info, f)
			f.Close()
			// And as text, in order of calls, the longest partial
			// linearization of each partition first.
			var b strings.Builder
			m := linModel(r.genesis)
			parts := m.Partition(r.hist.ops)
			for pi, lin := range info.PartialLinearizations() {
				fmt.Fprintf(&b, "partition %d: longest partial linearizations:\n", pi)
				for _, seq := range lin {
					for _, i := range seq {
						op := parts[pi][i]
						fmt.Fprintf(&b, "  [%d,%d] c%d %s\n", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
					}
					b.WriteString("  --\n")
				}
				fmt.Fprintf(&b, "partition %d: history:\n", pi)
				for _, op := range parts[pi] {
					fmt.Fprintf(&b, "  [%d,%d] c%d %s\n", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
				}
			}
			os.WriteFile(f.Name()+".txt", []byte(b.String()), 0o600)
			t.Errorf("the history of %d operations is not linearizable: see %s", len(r.hist.ops), f.Name())
		} else {
			t.Errorf("the history of %d operations is not linearizable (and its visualization could not be written: %v)", len(r.hist.ops), err)
		}
	}
	return len(r.hist.ops), crashes, present, absent
}
