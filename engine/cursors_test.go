package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// TestCursorsAtLedgerEdges: the cursors at the edges of a ledger, for Scan
// and Replay, forwards and backwards.
func TestCursorsAtLedgerEdges(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	ctx := context.Background()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var all []Event
	for i := range 20 {
		if _, err := db.Append(ctx, "c", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all = collect(t, db.Scan(ctx, "c", ScanOptions{}))
	if len(all) != 21 {
		t.Fatalf("%d events", len(all))
	}
	head := all[20]
	seqs := func(evs []Event) []uint64 {
		var s []uint64
		for _, e := range evs {
			s = append(s, e.Seq)
		}
		return s
	}
	read := func(o ScanOptions, replay bool) ([]Event, error) {
		var out []Event
		var seq func(func(Event, error) bool)
		if replay {
			seq = db.Replay(ctx, "c", ReplayOptions{Events: []string{"ledger-created", "order-placed", "order-paid", "order-shipped"},
				From: o.From, To: o.To, After: o.After, AfterSeq: o.AfterSeq, Reverse: o.Reverse, Limit: o.Limit})
		} else {
			seq = db.Scan(ctx, "c", o)
		}
		for ev, err := range seq {
			if err != nil {
				return out, err
			}
			out = append(out, ev)
		}
		return out, nil
	}
	for _, replay := range []bool{false, true} {
		what := map[bool]string{false: "scan", true: "replay"}[replay]
		check := func(name string, o ScanOptions, want []uint64) {
			t.Helper()
			got, err := read(o, replay)
			if err != nil {
				t.Errorf("%s %s: %v", what, name, err)
				return
			}
			if fmt.Sprint(seqs(got)) != fmt.Sprint(want) {
				t.Errorf("%s %s: %v, want %v", what, name, seqs(got), want)
			}
		}
		check("after head", ScanOptions{After: head.ID}, nil)
		check("after head seq", ScanOptions{AfterSeq: head.Seq}, nil)
		check("after head reverse limit 1", ScanOptions{After: head.ID, Reverse: true, Limit: 1}, []uint64{20})
		check("after genesis reverse", ScanOptions{After: info.Genesis, Reverse: true}, nil)
		check("after seq 1 reverse", ScanOptions{AfterSeq: 1, Reverse: true}, nil)
		check("after seq past head reverse limit 2", ScanOptions{AfterSeq: 99, Reverse: true, Limit: 2}, []uint64{21, 20})
		check("after seq past head", ScanOptions{AfterSeq: 99}, nil)
		check("after genesis limit 1", ScanOptions{After: info.Genesis, Limit: 1}, []uint64{2})
		// Time bounds at the exact µs of events.
		t5, t9 := all[4].Time(), all[8].Time()
		check("from = to = an event's µs", ScanOptions{From: t5, To: t5}, []uint64{5})
		check("from t5 to t9", ScanOptions{From: t5, To: t9}, []uint64{5, 6, 7, 8, 9})
		check("from t5 to t9 reverse", ScanOptions{From: t5, To: t9, Reverse: true}, []uint64{9, 8, 7, 6, 5})
		check("from t5 to t9 after #6", ScanOptions{From: t5, To: t9, AfterSeq: 6}, []uint64{7, 8, 9})
		check("from t5 to t9 after #6 reverse", ScanOptions{From: t5, To: t9, AfterSeq: 6, Reverse: true}, []uint64{5})
		check("from t5 to t9 after #2 (before From)", ScanOptions{From: t5, To: t9, AfterSeq: 2}, []uint64{5, 6, 7, 8, 9})
		check("from t5 to t9 after #12 reverse (after To)", ScanOptions{From: t5, To: t9, AfterSeq: 12, Reverse: true}, []uint64{9, 8, 7, 6, 5})
		check("to before the first event", ScanOptions{To: all[0].Time().Add(-time.Microsecond)}, nil)
		check("from after the last", ScanOptions{From: head.Time().Add(time.Microsecond)}, nil)
		check("from > to", ScanOptions{From: t9, To: t5}, nil)
		// Bounds are taken to the microsecond (documented): one inside
		// an event's microsecond includes it.
		check("sub-µs From (t5+1ns)", ScanOptions{From: t5.Add(time.Nanosecond), To: t9}, []uint64{5, 6, 7, 8, 9})
		check("sub-µs To (t9+999ns)", ScanOptions{From: t5, To: t9.Add(999 * time.Nanosecond)}, []uint64{5, 6, 7, 8, 9})
		check("To one µs before t9", ScanOptions{From: t5, To: t9.Add(-time.Nanosecond)}, []uint64{5, 6, 7, 8})
		// Paging backwards by one, down to the genesis, with either cursor.
		for _, bySeq := range []bool{false, true} {
			var got []uint64
			o := ScanOptions{Reverse: true, Limit: 1}
			for range 30 {
				page, err := read(o, replay)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				got = append(got, page[0].Seq)
				if bySeq {
					o.AfterSeq = page[0].Seq
				} else {
					o.After = page[0].ID
				}
			}
			if len(got) != 21 || got[20] != 1 {
				t.Errorf("%s paging down by one (bySeq %v): %v", what, bySeq, got)
			}
		}
		// Cursors that disagree or belong elsewhere.
		if _, err := read(ScanOptions{After: all[3].ID, AfterSeq: 5}, replay); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: disagreeing cursors: %v", what, err)
		}
		other := eventid.New(head.ID.Micros(), 0, info.ID+1)
		if _, err := read(ScanOptions{After: other}, replay); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: an ID of another ledger: %v", what, err)
		}
		if _, err := read(ScanOptions{Limit: -1}, replay); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Limit -1: %v", what, err)
		}
	}
}
