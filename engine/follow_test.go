package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// TestSubscribeSeesEveryCommitOnceInOrder: a subscriber started midway
// receives every later event exactly once, in order, while 8 writers
// append concurrently.
func TestSubscribeSeesEveryCommitOnceInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	first, err := idsOf(db.Append(ctx, "l", []EventInput{order(0)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 40
	total := writers * each
	subCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := make(chan []Event, 1)
	go func() {
		var evs []Event
		for ev, err := range db.Subscribe(subCtx, "l", SubscribeOptions{After: first[0]}) {
			if err != nil {
				break
			}
			evs = append(evs, ev)
			if len(evs) == total {
				break
			}
		}
		got <- evs
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := db.Append(ctx, "l", []EventInput{order(w*each + i)}, &AppendOptions{Durability: None}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	evs := <-got
	if len(evs) != total {
		t.Fatalf("subscriber got %d events, want %d", len(evs), total)
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i)+3 {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, i+3)
		}
	}
	// A cancelled subscription ends with the context's error.
	c2, cancel2 := context.WithCancel(ctx)
	cancel2()
	var last error
	for _, err := range db.Subscribe(c2, "l", SubscribeOptions{After: evs[len(evs)-1].ID}) {
		last = err
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("cancelled subscription ended with %v", last)
	}
}

func TestVerifyLedgerAndIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := idsOf(db.Append(ctx, "l", []EventInput{order(1), order(2), order(3)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx, "l", nil)
	if err != nil || rep.Events != 4 || rep.Head != ids[2] {
		t.Fatalf("Verify: %+v %v", rep, err)
	}
	// An index entry the segments do not have (in Pebble: the ledger's
	// tail written first).
	if err := db.idx.FlushTails(); err != nil {
		t.Fatal(err)
	}
	b := db.idx.NewBatch()
	fake := eventid.New(ids[0].Micros()+1, 0xdead, info.ID)
	b.Add(info.ID, &index.Record{ID: fake, Seq: 2, Loc: segment.Location{Segment: 1, Offset: 64, Size: 100}, Entity: []byte("x"), Key: []byte("y"), Event: []byte("z")})
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := db.Verify(ctx, "l", nil); !errors.Is(err, segment.ErrCorruption) {
		t.Fatalf("Verify with a bogus index entry: %v, want corruption", err)
	}
}

// TestVerifyStreamEntries: an index whose ID and sequence entries are
// right but which files an event under a stream, entity or event name it
// does not have (or, after a rebuild, under one more idempotency key)
// fails Verify, which names the families.
func TestVerifyStreamEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	defer func() { db.Close() }()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{order(1), order(2)}, nil); err != nil {
		t.Fatal(err)
	}
	e, err := db.GetSeq(ctx, "l", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, loc, _, err := db.idx.Lookup(e.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The ledger's tail in Pebble, which the cases rewrite.
	if err := db.idx.FlushTails(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    index.Record
		want []string
	}{
		{"another stream", index.Record{Entity: []byte(e.Entity), Key: []byte("not-" + e.Key), Event: []byte(e.Event)}, []string{"E (streams)"}},
		{"another entity", index.Record{Entity: []byte("shipment"), Key: []byte(e.Key), Event: []byte(e.Event)}, []string{"E (streams)", "A (entities)"}},
		{"another event name", index.Record{Entity: []byte(e.Entity), Key: []byte(e.Key), Event: []byte("cancelled")}, []string{"N (event names)"}},
		{"an idempotency key", index.Record{Entity: []byte(e.Entity), Key: []byte(e.Key), Event: []byte(e.Event), IdempotencyKey: []byte("k"), BatchLen: 1, Digest: make([]byte, index.DigestSize)}, []string{"K (idempotency keys)"}},
	} {
		// The ledger indexed again, event #2 as the case says (the
		// blocks of T and S, which group events, as before).
		b := db.idx.NewBatch()
		b.DeleteEvents(info.ID)
		var head segment.Head
		for seq := uint64(1); seq <= 3; seq++ {
			ev, err := db.GetSeq(ctx, "l", seq)
			if err != nil {
				t.Fatal(err)
			}
			_, evLoc, _, err := db.idx.Lookup(ev.ID)
			if err != nil {
				t.Fatal(err)
			}
			r := index.Record{ID: ev.ID, Seq: seq, Loc: evLoc, Entity: []byte(ev.Entity), Key: []byte(ev.Key), Event: []byte(ev.Event)}
			if seq == e.Seq {
				r = tc.r
				r.ID, r.Seq, r.Loc = e.ID, e.Seq, loc
			}
			b.Add(info.ID, &r)
			head = segment.Head{ID: ev.ID, Seq: seq, Loc: evLoc}
		}
		b.SetProgress(info.ID, head)
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		b.Close()
		_, err := db.Verify(ctx, "l", nil)
		if !errors.Is(err, segment.ErrCorruption) {
			t.Fatalf("%s: Verify: %v, want corruption", tc.name, err)
		}
		for _, fam := range tc.want {
			if !strings.Contains(err.Error(), fam) {
				t.Fatalf("%s: %v does not name family %s", tc.name, err, fam)
			}
		}
		// A reopen with a full verification rebuilds nothing (the index
		// is not behind), so rebuild it: delete it and reopen.
		db.Close()
		if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
			t.Fatal(err)
		}
		db = openTest(t, dir)
		if _, err := db.Verify(ctx, "l", nil); err != nil {
			t.Fatalf("after a rebuild: %v", err)
		}
	}
}

// TestScansSeeAPrefix: while 4 writers append, concurrent scans and gets
// always see a gap-free prefix of the ledger (sequence numbers 1..k), and
// every ID an append returned is readable at once.
func TestScansSeeAPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				ids, err := idsOf(db.Append(ctx, "l", []EventInput{order(w*100 + i), order(w*100 + i + 1)}, &AppendOptions{Durability: None}))
				if err != nil {
					t.Error(err)
					return
				}
				for _, id := range ids {
					if _, err := db.Get(ctx, id); err != nil {
						t.Errorf("an ID Append returned is not readable: %v", err)
						return
					}
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				want := uint64(1)
				for ev, err := range db.Scan(ctx, "l", ScanOptions{}) {
					if err != nil {
						t.Error(err)
						return
					}
					if ev.Seq != want {
						t.Errorf("scan saw #%d where #%d belongs: not a prefix", ev.Seq, want)
						return
					}
					want++
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	readers.Wait()
	if info, _ := db.Ledger("l"); info.Count != 401 {
		t.Fatalf("%d events, want 401", info.Count)
	}
}

// TestManyLedgersConcurrently: 3 ledgers, each with 4 writers, a reader
// that scans, and a subscriber from the start; every subscriber receives
// exactly its own ledger's events, once, in order, and each ledger
// verifies.
func TestManyLedgersConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	names := []string{"alpha", "beta", "gamma"}
	const writers, each = 4, 25
	for _, n := range names {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	subCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var subs, work sync.WaitGroup
	got := make([][]Event, len(names))
	for li, n := range names {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for ev, err := range db.Subscribe(subCtx, n, SubscribeOptions{}) {
				if err != nil {
					t.Errorf("%s: subscription ended: %v", n, err)
					return
				}
				got[li] = append(got[li], ev)
				if len(got[li]) == writers*each+1 {
					return
				}
			}
		}()
		for w := range writers {
			work.Add(1)
			go func() {
				defer work.Done()
				for i := range each {
					if _, err := db.Append(ctx, n, []EventInput{order(w*each + i)}, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		work.Add(1)
		go func() {
			defer work.Done()
			for range 20 {
				prev := uint64(0)
				for ev, err := range db.Scan(ctx, n, ScanOptions{}) {
					if err != nil || ev.Ledger != n || ev.Seq != prev+1 {
						t.Errorf("%s: scan saw %s #%d after #%d (%v)", n, ev.Ledger, ev.Seq, prev, err)
						return
					}
					prev = ev.Seq
				}
			}
		}()
	}
	work.Wait()
	subs.Wait()
	for li, n := range names {
		if len(got[li]) != writers*each+1 {
			t.Fatalf("%s: subscriber got %d events, want %d", n, len(got[li]), writers*each+1)
		}
		for i, ev := range got[li] {
			if ev.Ledger != n || ev.Seq != uint64(i)+1 {
				t.Fatalf("%s: event %d is %s #%d", n, i, ev.Ledger, ev.Seq)
			}
		}
		if _, err := db.Verify(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadOnlySubscribeEndsWhenLedgerFilesReplaced: a read-only follower
// (annal tail, a service's Subscribe on OpenReadOnly) of a ledger whose
// directory is removed, or replaced by an older copy (rm -rf + cp -a, a
// restore), or whose active segment is replaced by an older copy, ends
// with an error naming what changed (segment.ErrFileChanged), as it does
// when the segment is cut in place ("the segments no longer hold what a
// read-only log showed") and as the writer's watch does. It read through
// the handles it had opened: it waited for ever on the deleted files,
// silently (annal tail printed nothing and never exited while a writer
// appended events of another history to the restored ledger).
func TestReadOnlySubscribeEndsWhenLedgerFilesReplaced(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// change changes the ledger's files (its directory ldir; older
		// is a copy of it taken before the last appends) and returns
		// what the error must name.
		change func(t *testing.T, ldir, older string) string
	}{
		{"ledger directory removed", func(t *testing.T, ldir, older string) string {
			if err := os.RemoveAll(ldir); err != nil {
				t.Fatal(err)
			}
			return ldir
		}},
		{"ledger directory replaced by an older copy", func(t *testing.T, ldir, older string) string {
			if err := os.RemoveAll(ldir); err != nil {
				t.Fatal(err)
			}
			copyTree(t, older, ldir)
			return ldir
		}},
		{"active segment replaced by an older copy", func(t *testing.T, ldir, older string) string {
			segs, err := filepath.Glob(filepath.Join(ldir, "*.seg"))
			if err != nil || len(segs) == 0 {
				t.Fatal(segs, err)
			}
			active := segs[len(segs)-1]
			replace(t, active, readFile(t, filepath.Join(older, filepath.Base(active))))
			return active
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := checkpointLedger(t)
			ldir := filepath.Join(dir, "ledgers", id)
			older := filepath.Join(t.TempDir(), "older")
			copyTree(t, ldir, older)
			db := openTest(t, dir)
			appendEvents(t, db, "acct", 10, appendSpec{Event: placed, Batch: batchesOf(7)})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), FollowInterval: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			n := 0
			var end error
			what := ""
			for _, err := range ro.Subscribe(ctx, "acct", SubscribeOptions{}) {
				if err != nil {
					end = err
					break
				}
				n++
				if n == 31 {
					what = tc.change(t, ldir, older)
				}
			}
			if n != 31 {
				t.Errorf("the follower read %d events before the change, want 31", n)
			}
			if end == nil || errors.Is(end, context.DeadlineExceeded) || !errors.Is(end, segment.ErrFileChanged) || !strings.Contains(end.Error(), what) {
				t.Errorf("the follower of a ledger whose files were changed (%s): %v after 1.5 s (follow interval 5 ms); want an error naming the change (segment.ErrFileChanged, naming %s)", tc.name, end, what)
			}
		})
	}
}

// TestVerifyDuringAppends: Verify while 4 goroutines append never
// reports a damaged index: the segments' check may end at an event
// committed but not yet indexed (the index follows a moment later), and
// Verify compares the index with the segments only once it covers them.
func TestVerifyDuringAppends(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "v"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := db.Append(ctx, "v", []EventInput{order(g*100000 + i)}, &AppendOptions{Durability: None}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	runs := 40
	if raceEnabled {
		runs = 10
	}
	for range runs {
		if _, err := db.Verify(ctx, "v", nil); err != nil {
			t.Errorf("verify during appends: %v", err)
			break
		}
	}
	close(stop)
	wg.Wait()
}
