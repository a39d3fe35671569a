package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestBatchedAppendReadableOnReturn: 16 appenders of batches of 32 to 100
// events (at or over parallelHookMin and parallelCanonMin, whose leaf
// hashes, index insert and canonicalization run on two goroutines), in
// Interval and None durability, each on a stream of its own. When an
// Append returns, its events are readable: Get and GetSeq find each of
// them at the IDs and sequence numbers returned, with the canonical meta
// and data, and the stream's head (index tail) is its last event. At the
// end Verify finds every event and the tree's leaves equal to them.
func TestBatchedAppendReadableOnReturn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []Durability{Interval, None} {
		t.Run(mode.String(), func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "d"), &Options{Durability: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
				t.Fatal(err)
			}
			const writers, each = 16, 6
			var wg sync.WaitGroup
			var total sync.Map
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("w-%d", w)
					for i := range each {
						n := 32 + (w*7+i*13)%69
						evs := make([]EventInput, n)
						for j := range evs {
							evs[j] = EventInput{Entity: "order", Key: key, Event: "order-placed",
								Meta: []byte(fmt.Sprintf(`{ "w": %d, "i": %d }`, w, i)),
								Data: []byte(fmt.Sprintf(`{"n": %d, "a": [1, 2.50]}`, j))}
						}
						res, err := db.Append(ctx, "l", evs, nil)
						if err != nil {
							t.Error(err)
							return
						}
						for j, id := range res.IDs {
							e, err := db.Get(ctx, id)
							if err != nil {
								t.Errorf("Get of event %d of a returned append: %v", j, err)
								return
							}
							want := fmt.Sprintf(`{"a":[1,2.5],"n":%d}`, j)
							if e.Seq != res.Seq(j) || e.Key != key || string(e.Data) != want || string(e.Meta) != fmt.Sprintf(`{"i":%d,"w":%d}`, i, w) {
								t.Errorf("Get(%v) = #%d %s %s %s, want #%d %s %s", id, e.Seq, e.Key, e.Meta, e.Data, res.Seq(j), key, want)
								return
							}
							if e, err := db.GetSeq(ctx, "l", res.Seq(j)); err != nil || e.ID != id {
								t.Errorf("GetSeq(#%d) = %v, %v; want %v", res.Seq(j), e.ID, err, id)
								return
							}
						}
						lastID, lastSeq := res.Last()
						h, err := db.StreamHead(ctx, "l", "order", key)
						if err != nil || h.ID != lastID || h.Seq != lastSeq {
							t.Errorf("StreamHead after an append of #%d..#%d = %+v, %v", res.FirstSeq, lastSeq, h, err)
							return
						}
						total.Store(lastSeq, n)
					}
				}()
			}
			wg.Wait()
			var events uint64 = 1 // the genesis
			total.Range(func(_, n any) bool { events += uint64(n.(int)); return true })
			rep, err := db.Verify(ctx, "l", nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Events != events || rep.TreeSize != events {
				t.Fatalf("Verify: %d events, tree of %d; %d appended", rep.Events, rep.TreeSize, events)
			}
		})
	}
}

// TestBatchInvalidEventReportedInOrder: in a batch canonicalized in two
// halves (parallelCanonMin events or more), the error is the first bad
// event's, as in order, whichever half finds its own first, and nothing
// is stored.
func TestBatchInvalidEventReportedInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	const n = 4 * parallelCanonMin
	for _, bad := range [][]int{{n - 1}, {n / 2}, {n/2 - 1, n/2 + 1}, {3, n - 2}, {0}} {
		evs := make([]EventInput, n)
		for i := range evs {
			evs[i] = order(i)
		}
		for k, i := range bad {
			if k%2 == 0 {
				evs[i].Data = []byte(`{"a":`) // not JSON
			} else {
				evs[i].Key = "" // no key
			}
		}
		_, err := db.Append(ctx, "l", evs, nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("event %d:", bad[0])) {
			t.Fatalf("bad events %v: %v, want ErrInvalid for event %d", bad, err, bad[0])
		}
		if info, err := db.Ledger("l"); err != nil || info.Count != 1 {
			t.Fatalf("bad events %v: the ledger has %d events (%v), want the genesis only", bad, info.Count, err)
		}
	}
	evs := make([]EventInput, n)
	for i := range evs {
		evs[i] = order(i)
	}
	if _, err := db.Append(ctx, "l", evs, nil); err != nil {
		t.Fatal(err)
	}
}
