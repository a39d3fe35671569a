package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/cockroachdb/pebble/v2"
)

// writeFormat2Index replaces the index of dir with one of format version
// 2, as annal wrote it before issue 15: five entries an event (T, S, E, A,
// N, each with the event's ID and location) and a 44-byte progress marker
// of each ledger. positions and events are a ledger's, in ledger order.
func writeFormat2Index(t *testing.T, dir string, ledger eventid.LedgerID, positions []index.Position, events []Event) {
	t.Helper()
	path := filepath.Join(dir, indexDir)
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	pdb, err := pebble.Open(path, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u32 := binary.BigEndian.AppendUint32
	u64 := binary.BigEndian.AppendUint64
	name := func(dst []byte, s string) []byte { return append(binary.AppendUvarint(dst, uint64(len(s))), s...) }
	prefix := func(fam byte) []byte { return u32([]byte{fam}, uint32(ledger)) }
	loc := func(dst []byte, p index.Position) []byte {
		return u32(u64(u64(dst, p.Loc.Segment), uint64(p.Loc.Offset)), uint32(p.Loc.Size))
	}
	b := pdb.NewBatch()
	set := func(k, v []byte) {
		if err := b.Set(k, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	set([]byte{'V'}, u32(nil, 2))
	for i, p := range positions {
		e := events[i]
		idLoc := loc(slices.Clone(p.ID[:]), p)
		set(append(prefix('T'), p.ID[:]...), loc(u64(nil, p.Seq), p))
		set(u64(prefix('S'), p.Seq), p.ID[:])
		set(u64(name(name(prefix('E'), e.Entity), e.Key), p.Seq), idLoc)
		set(u64(name(prefix('A'), e.Entity), p.Seq), idLoc)
		set(u64(name(prefix('N'), e.Event), p.Seq), idLoc)
	}
	last := positions[len(positions)-1]
	set(prefix('P'), loc(u64(slices.Clone(last.ID[:]), last.Seq), last))
	if err := errors.Join(b.Commit(pebble.Sync), pdb.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestIndexFormat2Rebuilt: a data directory whose index has format version
// 2 (five entries an event) opens: the index is rebuilt from the segments
// in format 3, with progress reported, and every read agrees with what
// the DB read before.
func TestIndexFormat2Rebuilt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		var in []EventInput
		for j := range i % 7 * 20 {
			in = append(in, EventInput{Entity: fmt.Sprint("account-", j%3), Key: fmt.Sprint("k", (i+j)%5), Event: fmt.Sprint("ev", j%4),
				Data: []byte(fmt.Sprint(i*1000 + j))})
		}
		if len(in) == 0 {
			in = append(in, payment("a", i))
		}
		if _, err := db.Append(ctx, "l", in, nil); err != nil {
			t.Fatal(err)
		}
	}
	all := collect(t, db.Scan(ctx, "l", ScanOptions{}))
	type read struct {
		name string
		o    ReplayOptions
	}
	reads := []read{
		{"entity", ReplayOptions{Entity: "account-1"}},
		{"stream", ReplayOptions{Entity: "account-2", Keys: []string{"k3"}}},
		{"event names", ReplayOptions{Events: []string{"ev0", "ev3"}}},
		{"stream reverse, after", ReplayOptions{Entity: "account-0", Keys: []string{"k1"}, Reverse: true, AfterSeq: all[len(all)/2].Seq}},
		{"entity paged", ReplayOptions{Entity: "account-0", AfterSeq: 100, Limit: 50}},
	}
	want := map[string][]Event{}
	for _, r := range reads {
		want[r.name] = collect(t, db.Replay(ctx, "l", r.o))
		if len(want[r.name]) == 0 {
			t.Fatalf("%s: no event", r.name)
		}
	}
	ledger := all[0].ID.Ledger()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The positions of the events, from the index format 3 wrote.
	x, err := index.Open(filepath.Join(dir, indexDir), index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var positions []index.Position
	for p, err := range x.TimeRange(ctx, ledger, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false) {
		if err != nil {
			t.Fatal(err)
		}
		positions = append(positions, p)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if len(positions) != len(all) {
		t.Fatalf("%d positions, %d events", len(positions), len(all))
	}
	writeFormat2Index(t, dir, ledger, positions, all)

	var mu sync.Mutex
	var progress []string
	db, err = Open(dir, &Options{Progress: func(what string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, fmt.Sprintf("%s %d/%d", what, done, total))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if why := db.IndexRebuilt(); !errors.Is(why, index.ErrOldFormat) || !strings.Contains(why.Error(), "version 2") {
		t.Fatalf("IndexRebuilt = %v, want index.ErrOldFormat of version 2", why)
	}
	mu.Lock()
	done := fmt.Sprintf("index ledger l %d/%d", len(all), len(all))
	if !slices.Contains(progress, done) {
		t.Errorf("progress %q, want %q among them", progress, done)
	}
	mu.Unlock()
	if got := collect(t, db.Scan(ctx, "l", ScanOptions{})); !eventsEqual(got, all) {
		t.Fatalf("scan after the rebuild: %d events, want %d", len(got), len(all))
	}
	for _, r := range reads {
		if got := collect(t, db.Replay(ctx, "l", r.o)); !eventsEqual(got, want[r.name]) {
			t.Errorf("%s after the rebuild: %d events, want %d", r.name, len(got), len(want[r.name]))
		}
	}
	for i := 0; i < len(all); i += 7 {
		e := all[i]
		got, err := db.Get(ctx, e.ID)
		if err != nil || !eventsEqual([]Event{got}, []Event{e}) {
			t.Fatalf("Get(%v) after the rebuild: %+v, %v", e.ID, got, err)
		}
		if got, err = db.GetSeq(ctx, "l", e.Seq); err != nil || got.ID != e.ID {
			t.Fatalf("GetSeq(%d) after the rebuild: %v, %v; want %v", e.Seq, got.ID, err, e.ID)
		}
	}
}

func eventsEqual(a, b []Event) bool {
	return slices.EqualFunc(a, b, func(x, y Event) bool {
		return x.ID == y.ID && x.Seq == y.Seq && x.Ledger == y.Ledger && x.Entity == y.Entity && x.Key == y.Key &&
			x.Event == y.Event && string(x.Meta) == string(y.Meta) && string(x.Data) == string(y.Data)
	})
}
