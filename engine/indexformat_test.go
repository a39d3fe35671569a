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

// writeFormat2Index replaces the index of dir with one of format version 2,
// as annal wrote it before blocks and postings: five entries an event (T,
// S, E, A, N, each with the event's ID and location) and a 44-byte progress
// marker of each ledger. positions and events are a ledger's, in ledger
// order.
func writeFormat2Index(t *testing.T, dir string, ledger eventid.LedgerID, positions []index.Position, events []Event) {
	t.Helper()
	set, done := oldIndexWriter(t, dir)
	defer done()
	prefix := func(fam byte) []byte { return idxU32([]byte{fam}, uint32(ledger)) }
	loc := func(dst []byte, p index.Position) []byte {
		return idxU32(idxU64(idxU64(dst, p.Loc.Segment), uint64(p.Loc.Offset)), uint32(p.Loc.Size))
	}
	set([]byte{'V'}, idxU32(nil, 2))
	for i, p := range positions {
		e := events[i]
		idLoc := loc(slices.Clone(p.ID[:]), p)
		set(append(prefix('T'), p.ID[:]...), loc(idxU64(nil, p.Seq), p))
		set(idxU64(prefix('S'), p.Seq), p.ID[:])
		set(idxU64(idxName(idxName(prefix('E'), e.Entity), e.Key), p.Seq), idLoc)
		set(idxU64(idxName(prefix('A'), e.Entity), p.Seq), idLoc)
		set(idxU64(idxName(prefix('N'), e.Event), p.Seq), idLoc)
	}
	last := positions[len(positions)-1]
	set(prefix('P'), loc(idxU64(slices.Clone(last.ID[:]), last.Seq), last))
}

// Encoders of the old index writers.
var (
	idxU32 = binary.BigEndian.AppendUint32
	idxU64 = binary.BigEndian.AppendUint64
	idxUv  = binary.AppendUvarint
)

// idxName appends a length-prefixed name, as the index keys hold them.
func idxName(dst []byte, s string) []byte { return append(idxUv(dst, uint64(len(s))), s...) }

// oldIndexWriter replaces the index of dir with an empty Pebble store:
// set adds an entry to one batch, which done commits.
func oldIndexWriter(t *testing.T, dir string) (set func(k, v []byte), done func()) {
	t.Helper()
	path := filepath.Join(dir, indexDir)
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	pdb, err := pebble.Open(path, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := pdb.NewBatch()
	set = func(k, v []byte) {
		if err := b.Set(k, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	done = func() {
		if err := errors.Join(b.Commit(pebble.Sync), pdb.Close()); err != nil {
			t.Fatal(err)
		}
	}
	return set, done
}

// writeFormat3Index replaces the index of dir with one of format version
// 3, as annal wrote it before postings held IDs and locations: T blocks
// and S entries (one block an event here, which format 3 allowed), E, A
// and N postings of sequence numbers only (runs of up to 256 an entry,
// the first in the key, then uvarint deltas), and a 44-byte progress
// marker. positions and events are a ledger's, in ledger order.
func writeFormat3Index(t *testing.T, dir string, ledger eventid.LedgerID, positions []index.Position, events []Event) {
	t.Helper()
	set, done := oldIndexWriter(t, dir)
	defer done()
	prefix := func(fam byte) []byte { return idxU32([]byte{fam}, uint32(ledger)) }
	set([]byte{'V'}, idxU32(nil, 3))
	postings := map[string][]uint64{}
	var order []string
	post := func(k []byte, seq uint64) {
		if _, ok := postings[string(k)]; !ok {
			order = append(order, string(k))
		}
		postings[string(k)] = append(postings[string(k)], seq)
	}
	for i, p := range positions {
		e := events[i]
		blk := idxUv(idxUv(idxUv(idxUv(nil, p.Seq), p.Loc.Segment), uint64(p.Loc.Offset)), p.ID.Micros())
		set(append(prefix('T'), p.ID[:]...), idxUv(idxU32(blk, p.ID.Checksum()), uint64(p.Loc.Size)))
		set(idxU64(prefix('S'), p.Seq), p.ID[:])
		post(idxName(idxName(prefix('E'), e.Entity), e.Key), p.Seq)
		post(idxName(prefix('A'), e.Entity), p.Seq)
		post(idxName(prefix('N'), e.Event), p.Seq)
	}
	for _, k := range order {
		seqs := postings[k]
		for i := 0; i < len(seqs); i += 256 {
			run := seqs[i:min(i+256, len(seqs))]
			var v []byte
			for j := 1; j < len(run); j++ {
				v = idxUv(v, run[j]-run[j-1])
			}
			set(idxU64([]byte(k), run[0]), v)
		}
	}
	last := positions[len(positions)-1]
	set(prefix('P'), idxU32(idxU64(idxU64(idxU64(slices.Clone(last.ID[:]), last.Seq), last.Loc.Segment), uint64(last.Loc.Offset)), uint32(last.Loc.Size)))
}

// TestIndexFormat2Rebuilt: a data directory whose index has format version
// 2 (five entries an event) opens: the index is rebuilt from the segments
// in the current format, with progress reported, and every read agrees
// with what the DB read before.
func TestIndexFormat2Rebuilt(t *testing.T) { checkOldIndexRebuilt(t, 2, writeFormat2Index) }

// TestIndexFormat3Rebuilt: the same for an index of format version 3
// (postings of sequence numbers without IDs and locations).
func TestIndexFormat3Rebuilt(t *testing.T) { checkOldIndexRebuilt(t, 3, writeFormat3Index) }

// checkOldIndexRebuilt writes a ledger, replaces its index with one of an
// older format version by write, and checks that Open rebuilds it with
// progress and that every read agrees with the reads before.
func checkOldIndexRebuilt(t *testing.T, version int, write func(*testing.T, string, eventid.LedgerID, []index.Position, []Event)) {
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

	// The positions of the events, from the index the DB wrote.
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
	write(t, dir, ledger, positions, all)

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
	if why := db.IndexRebuilt(); !errors.Is(why, index.ErrOldFormat) || !strings.Contains(why.Error(), fmt.Sprint("version ", version)) {
		t.Fatalf("IndexRebuilt = %v, want index.ErrOldFormat of version %d", why, version)
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
