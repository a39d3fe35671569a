package index

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileSystems are the file systems every round-trip test runs on.
var fileSystems = []struct {
	name string
	open func(t testing.TB) *Index
}{
	{"disk", func(t testing.TB) *Index { return openAt(t, t.TempDir(), Options{}) }},
	{"mem", func(t testing.TB) *Index { return openAt(t, "idx", Options{FS: vfs.NewMem()}) }},
}

func openAt(t testing.TB, dir string, opts Options) *Index {
	t.Helper()
	x, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return x
}

const (
	ledgerA eventid.LedgerID = 0x0000a001
	ledgerB eventid.LedgerID = 0x0000b001
)

// event describes a record to index; loc and ID derive from seq.
type event struct {
	seq                uint64
	entity, key, event string
	idem               string // "" for none
	batchLen           uint32
}

func locOf(seq uint64) segment.Location {
	return segment.Location{Segment: 1 + seq/1000, Offset: int64(seq%1000) * 100, Size: 100}
}

// idOf gives seq a distinct, increasing ID in ledger.
func idOf(ledger eventid.LedgerID, seq uint64) eventid.ID {
	return eventid.New(1_700_000_000_000_000+seq*10, uint32(seq*2654435761), ledger)
}

func (e event) record(ledger eventid.LedgerID) *Record {
	r := &Record{
		ID: idOf(ledger, e.seq), Seq: e.seq, Loc: locOf(e.seq),
		Entity: []byte(e.entity), Key: []byte(e.key), Event: []byte(e.event),
	}
	if e.idem != "" {
		r.IdempotencyKey, r.BatchLen, r.Digest = []byte(e.idem), e.batchLen, digestOf(e.idem)
	}
	return r
}

// digestOf is a test's digest of a batch: DigestSize bytes that depend on s.
func digestOf(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

func posOf(ledger eventid.LedgerID, seq uint64) Position {
	return Position{ID: idOf(ledger, seq), Seq: seq, Loc: locOf(seq)}
}

// add indexes events in one batch with a progress marker on the last.
func add(t testing.TB, x *Index, ledger eventid.LedgerID, events ...event) {
	t.Helper()
	b := x.NewBatch()
	defer b.Close()
	for _, e := range events {
		b.Add(ledger, e.record(ledger))
	}
	last := events[len(events)-1].seq
	b.SetProgress(ledger, segment.Head{ID: idOf(ledger, last), Seq: last, Loc: locOf(last)})
	if err := b.Commit(false); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// collect drains an iterator, failing the test on an error.
func collect(t testing.TB, seq iter.Seq2[Position, error]) []Position {
	t.Helper()
	var out []Position
	for p, err := range seq {
		if err != nil {
			t.Fatalf("iteration: %v", err)
		}
		out = append(out, p)
	}
	return out
}

func positions(ledger eventid.LedgerID, seqs ...uint64) []Position {
	out := make([]Position, 0, len(seqs))
	for _, s := range seqs {
		out = append(out, posOf(ledger, s))
	}
	return out
}

func checkPositions(t testing.TB, what string, got, want []Position) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", what, seqsOf(got), seqsOf(want))
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Errorf("%s: first difference at %d: got %+v, want %+v", what, i, got[i], want[i])
				break
			}
		}
	}
}

func seqsOf(ps []Position) []uint64 {
	out := make([]uint64, len(ps))
	for i, p := range ps {
		out[i] = p.Seq
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, fs := range fileSystems {
		t.Run(fs.name, func(t *testing.T) {
			x := fs.open(t)
			ctx := context.Background()
			add(t, x, ledgerA,
				event{seq: 1, entity: "order", key: "o-1", event: "created", idem: "req-1", batchLen: 2},
				event{seq: 2, entity: "order", key: "o-2", event: "created"},
			)
			add(t, x, ledgerA,
				event{seq: 3, entity: "order", key: "o-1", event: "paid"},
				event{seq: 4, entity: "user", key: "u-1", event: "created", idem: "req-2", batchLen: 1},
			)

			for seq := uint64(1); seq <= 4; seq++ {
				id := idOf(ledgerA, seq)
				gotSeq, loc, found, err := x.Lookup(id)
				if err != nil || !found || gotSeq != seq || loc != locOf(seq) {
					t.Errorf("Lookup(%v) = %d, %+v, %v, %v; want %d, %+v, true, nil", id, gotSeq, loc, found, err, seq, locOf(seq))
				}
				gotID, found, err := x.BySeq(ledgerA, seq)
				if err != nil || !found || gotID != id {
					t.Errorf("BySeq(%d) = %v, %v, %v; want %v", seq, gotID, found, err, id)
				}
			}
			if _, _, found, err := x.Lookup(idOf(ledgerA, 5)); found || err != nil {
				t.Errorf("Lookup of an unknown ID: found %v, err %v", found, err)
			}
			if _, found, err := x.BySeq(ledgerA, 5); found || err != nil {
				t.Errorf("BySeq(5): found %v, err %v", found, err)
			}

			for _, c := range []struct {
				key         string
				first       uint64
				count       uint32
				wantPresent bool
			}{{"req-1", 1, 2, true}, {"req-2", 4, 1, true}, {"req-3", 0, 0, false}} {
				d, found, err := x.Idempotency(ledgerA, []byte(c.key))
				if err != nil || found != c.wantPresent || d.FirstSeq != c.first || d.Count != c.count {
					t.Errorf("Idempotency(%q) = %+v, %v, %v; want %d, %d, %v", c.key, d, found, err, c.first, c.count, c.wantPresent)
				}
				if found && string(d.Digest[:]) != string(digestOf(c.key)) {
					t.Errorf("Idempotency(%q): digest %x, want %x", c.key, d.Digest, digestOf(c.key))
				}
			}

			head, found, err := x.Progress(ledgerA)
			want := segment.Head{ID: idOf(ledgerA, 4), Seq: 4, Loc: locOf(4)}
			if err != nil || !found || head != want {
				t.Errorf("Progress = %+v, %v, %v; want %+v", head, found, err, want)
			}

			checkPositions(t, "Stream(order, o-1)", collect(t, x.Stream(ctx, ledgerA, []byte("order"), []byte("o-1"), 0)), positions(ledgerA, 1, 3))
			checkPositions(t, "EventName(created)", collect(t, x.EventName(ctx, ledgerA, []byte("created"), 0)), positions(ledgerA, 1, 2, 4))
			checkPositions(t, "Entity(order)", collect(t, x.Entity(ctx, ledgerA, []byte("order"), 0)), positions(ledgerA, 1, 3, 2))
			checkPositions(t, "TimeRange(all)", collect(t, x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false)), positions(ledgerA, 1, 2, 3, 4))

			p, found, err := x.StreamHead(ledgerA, []byte("order"), []byte("o-1"))
			if err != nil || !found || p != posOf(ledgerA, 3) {
				t.Errorf("StreamHead(order, o-1) = %+v, %v, %v; want seq 3", p, found, err)
			}
			if _, found, err := x.StreamHead(ledgerA, []byte("order"), []byte("o-3")); found || err != nil {
				t.Errorf("StreamHead of an empty stream: found %v, err %v", found, err)
			}
		})
	}
}

func TestTimeRangeOrder(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	// IDs with random timestamps and checksums, indexed in batches of 100
	// with gaps in time: the scan must come back in ID order.
	var ids []eventid.ID
	seen := map[eventid.ID]bool{}
	for len(ids) < 500 {
		id := eventid.New(rng.Uint64N(1<<20), rng.Uint32(), ledgerA)
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	// A ledger's IDs grow with its sequence numbers (the segments refuse
	// a timestamp not after the one before): T blocks rely on it.
	slices.SortFunc(ids, eventid.ID.Compare)
	b := x.NewBatch()
	defer b.Close()
	for i, id := range ids {
		b.Add(ledgerA, &Record{ID: id, Seq: uint64(i + 1), Loc: locOf(uint64(i + 1))})
		if i%100 == 99 {
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	bySeq := map[eventid.ID]uint64{}
	for i, id := range ids {
		bySeq[id] = uint64(i + 1)
	}
	sorted := slices.SortedFunc(slices.Values(ids), eventid.ID.Compare)

	want := func(lo, hi eventid.ID, reverse bool) []Position {
		var out []Position
		for _, id := range sorted {
			if lo.Compare(id) <= 0 && id.Compare(hi) <= 0 {
				out = append(out, Position{ID: id, Seq: bySeq[id], Loc: locOf(bySeq[id])})
			}
		}
		if reverse {
			slices.Reverse(out)
		}
		return out
	}
	ranges := []struct {
		name   string
		lo, hi eventid.ID
	}{
		{"all", eventid.ID{}, eventid.MaxForMicros(math.MaxUint64)},
		{"exact bounds", sorted[10], sorted[20]}, // inclusive at both ends
		{"one", sorted[42], sorted[42]},
		{"first", sorted[0], sorted[0]},
		{"last", sorted[len(sorted)-1], sorted[len(sorted)-1]},
		{"between", eventid.MinForMicros(sorted[100].Micros()), eventid.MaxForMicros(sorted[300].Micros())},
		{"empty, lo > hi", sorted[20], sorted[10]},
	}
	for _, r := range ranges {
		for _, reverse := range []bool{false, true} {
			got := collect(t, x.TimeRange(ctx, ledgerA, r.lo, r.hi, reverse))
			checkPositions(t, fmt.Sprintf("%s reverse=%v", r.name, reverse), got, want(r.lo, r.hi, reverse))
		}
	}
	if n := len(want(sorted[10], sorted[20], false)); n != 11 {
		t.Fatalf("inclusive range holds %d IDs, want 11", n)
	}
}

func TestStreamAfterSeq(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	var events []event
	var streamSeqs, nameSeqs []uint64
	for seq := uint64(1); seq <= 300; seq++ {
		e := event{seq: seq, entity: "acct", key: fmt.Sprint(seq % 3), event: []string{"deposit", "withdraw"}[seq%2]}
		if e.key == "1" {
			streamSeqs = append(streamSeqs, seq)
		}
		if e.event == "withdraw" {
			nameSeqs = append(nameSeqs, seq)
		}
		events = append(events, e)
	}
	// Index in reverse order, several batches: order must come from the
	// keys, not from insertion.
	slices.Reverse(events)
	for c := range slices.Chunk(events, 70) {
		add(t, x, ledgerA, c...)
	}
	after := func(seqs []uint64, a uint64) []uint64 {
		var out []uint64
		for _, s := range seqs {
			if s > a {
				out = append(out, s)
			}
		}
		return out
	}
	for _, a := range []uint64{0, 1, 2, 150, 298, 299, 300, math.MaxUint64} {
		checkPositions(t, fmt.Sprintf("Stream after %d", a),
			collect(t, x.Stream(ctx, ledgerA, []byte("acct"), []byte("1"), a)), positions(ledgerA, after(streamSeqs, a)...))
		checkPositions(t, fmt.Sprintf("EventName after %d", a),
			collect(t, x.EventName(ctx, ledgerA, []byte("withdraw"), a)), positions(ledgerA, after(nameSeqs, a)...))
	}
}

func TestEntityOrder(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	long := strings.Repeat("k", 130) // a 2-byte uvarint length
	add(t, x, ledgerA,
		event{seq: 1, entity: "e", key: "bb", event: "x"},
		event{seq: 2, entity: "e", key: "a", event: "x"},
		event{seq: 3, entity: "e", key: long, event: "x"},
		event{seq: 4, entity: "e", key: "z", event: "x"},
		event{seq: 5, entity: "e", key: "bb", event: "x"},
		event{seq: 6, entity: "e", key: "a", event: "x"},
		event{seq: 7, entity: "e", key: "", event: "x"},
		event{seq: 8, entity: "e", key: long, event: "x"},
		event{seq: 9, entity: "e2", key: "a", event: "x"},
	)
	// Encoded keys: "" (00), "a" (01 61), "z" (01 7a), "bb" (02 62 62),
	// long (82 01 ...).
	checkPositions(t, "Entity(e)", collect(t, x.Entity(ctx, ledgerA, []byte("e"), 0)), positions(ledgerA, 7, 2, 6, 4, 1, 5, 3, 8))
	// afterSeq applies to every key: the scan skips each key's early entries.
	checkPositions(t, "Entity(e) after 4", collect(t, x.Entity(ctx, ledgerA, []byte("e"), 4)), positions(ledgerA, 7, 6, 5, 8))
	checkPositions(t, "Entity(e) after 7", collect(t, x.Entity(ctx, ledgerA, []byte("e"), 7)), positions(ledgerA, 8))
	checkPositions(t, "Entity(e) after 8", collect(t, x.Entity(ctx, ledgerA, []byte("e"), 8)), nil)
	checkPositions(t, "Entity(e) after max", collect(t, x.Entity(ctx, ledgerA, []byte("e"), math.MaxUint64)), nil)
	checkPositions(t, "Stream(e, long)", collect(t, x.Stream(ctx, ledgerA, []byte("e"), []byte(long), 0)), positions(ledgerA, 3, 8))
}

func TestUnambiguousKeys(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	// Pairs whose concatenations collide, and names of 0x00 and 0xff bytes
	// around the boundaries of other names.
	streams := []struct{ entity, key string }{
		{"a", "bc"}, {"ab", "c"}, {"abc", ""}, {"", "abc"},
		{"\x00", ""}, {"", "\x00"}, {"\x00", "\x00"}, {"\x00\x00", ""},
		{"\xff", ""}, {"\xff", "\xff"}, {"\xff\xff", ""}, {"", "\xff\xff"},
		{"x\x00", "y"}, {"x", "\x00y"}, {"\x01a", ""}, {"\x01", "a"},
	}
	events := []string{"", "\x00", "\x00\x00", "\xff", "\xff\xff", "x", "x\x00", "x\xff"}
	var evs []event
	for i, s := range streams {
		for j := range 2 {
			seq := uint64(i*2 + j + 1)
			evs = append(evs, event{seq: seq, entity: s.entity, key: s.key, event: events[int(seq)%len(events)], idem: fmt.Sprintf("%q %q", s.entity, s.key), batchLen: uint32(j + 1)})
		}
	}
	add(t, x, ledgerA, evs...)

	for i, s := range streams {
		seqs := []uint64{uint64(i*2 + 1), uint64(i*2 + 2)}
		checkPositions(t, fmt.Sprintf("Stream(%q, %q)", s.entity, s.key),
			collect(t, x.Stream(ctx, ledgerA, []byte(s.entity), []byte(s.key), 0)), positions(ledgerA, seqs...))
		// Entity(e) holds exactly the streams whose entity is e.
		got := seqsOf(collect(t, x.Entity(ctx, ledgerA, []byte(s.entity), 0)))
		var want []uint64
		for k, o := range streams {
			if o.entity == s.entity {
				want = append(want, uint64(k*2+1), uint64(k*2+2))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("Entity(%q) = seqs %v, want %v", s.entity, got, want)
		}
	}
	for _, name := range events {
		var want []uint64
		for _, e := range evs {
			if e.event == name {
				want = append(want, e.seq)
			}
		}
		checkPositions(t, fmt.Sprintf("EventName(%q)", name), collect(t, x.EventName(ctx, ledgerA, []byte(name), 0)), positions(ledgerA, want...))
	}
	// Idempotency keys: the last write of each wins (batchLen 2).
	for i, s := range streams {
		k := fmt.Sprintf("%q %q", s.entity, s.key)
		d, found, err := x.Idempotency(ledgerA, []byte(k))
		if err != nil || !found || d.FirstSeq != uint64(i*2+2) || d.Count != 2 {
			t.Errorf("Idempotency(%q) = %+v, %v, %v", k, d, found, err)
		}
	}
	// Raw idempotency keys of 0x00 and 0xff bytes, each its own.
	raw := []string{"", "\x00", "\x00\x00", "\xff", "\xff\xff", "\x00\xff", "\xff\x00"}
	b := x.NewBatch()
	defer b.Close()
	for i, k := range raw {
		r := event{seq: uint64(100 + i)}.record(ledgerA)
		r.IdempotencyKey, r.BatchLen, r.Digest = []byte(k), uint32(i+1), digestOf(k)
		b.Add(ledgerA, r)
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	for i, k := range raw {
		d, found, err := x.Idempotency(ledgerA, []byte(k))
		if err != nil || !found || d.FirstSeq != uint64(100+i) || d.Count != uint32(i+1) || string(d.Digest[:]) != string(digestOf(k)) {
			t.Errorf("Idempotency(%q) = %+v, %v, %v; want %d, %d", k, d, found, err, 100+i, i+1)
		}
	}
	if _, found, _ := x.Idempotency(ledgerA, []byte("a")); found {
		t.Error("Idempotency(\"a\") found a prefix of another key")
	}
}

func TestLedgersIsolated(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	// The lowest and highest ledger IDs test the edges of the key ranges.
	ledgers := []eventid.LedgerID{0, ledgerA, ledgerA + 1, math.MaxUint32}
	for i, l := range ledgers {
		var evs []event
		for seq := uint64(1); seq <= uint64(10+i); seq++ {
			evs = append(evs, event{seq: seq, entity: "e", key: "k", event: "n", idem: fmt.Sprint("i", seq), batchLen: 1})
		}
		add(t, x, l, evs...)
	}
	check := func(l eventid.LedgerID, n uint64) {
		t.Helper()
		all := make([]uint64, 0, n)
		for s := uint64(1); s <= n; s++ {
			all = append(all, s)
		}
		want := positions(l, all...)
		checkPositions(t, fmt.Sprintf("ledger %v TimeRange", l), collect(t, x.TimeRange(ctx, l, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false)), want)
		checkPositions(t, fmt.Sprintf("ledger %v Stream", l), collect(t, x.Stream(ctx, l, []byte("e"), []byte("k"), 0)), want)
		checkPositions(t, fmt.Sprintf("ledger %v Entity", l), collect(t, x.Entity(ctx, l, []byte("e"), 0)), want)
		checkPositions(t, fmt.Sprintf("ledger %v EventName", l), collect(t, x.EventName(ctx, l, []byte("n"), 0)), want)
		head, found, err := x.Progress(l)
		if n == 0 {
			if found || err != nil {
				t.Errorf("ledger %v: Progress found %+v, %v after delete", l, head, err)
			}
		} else if err != nil || !found || head.Seq != n || head.ID != idOf(l, n) {
			t.Errorf("ledger %v: Progress = %+v, %v, %v; want seq %d", l, head, found, err, n)
		}
		for s := uint64(1); s <= n+1; s++ {
			id, found, err := x.BySeq(l, s)
			if err != nil || found != (s <= n) || (found && id != idOf(l, s)) {
				t.Errorf("ledger %v: BySeq(%d) = %v, %v, %v", l, s, id, found, err)
			}
			_, found, err = x.Idempotency(l, []byte(fmt.Sprint("i", s)))
			if err != nil || found != (s <= n) {
				t.Errorf("ledger %v: Idempotency(i%d) found %v, %v", l, s, found, err)
			}
		}
	}
	for i, l := range ledgers {
		check(l, uint64(10+i))
	}
	// DeleteLedger removes one ledger only, at either edge of the ID space.
	for _, del := range []int{1, 3, 0} {
		if err := x.DeleteLedger(ledgers[del]); err != nil {
			t.Fatal(err)
		}
		if _, _, found, err := x.Lookup(idOf(ledgers[del], 1)); found || err != nil {
			t.Errorf("Lookup after DeleteLedger(%v): found %v, err %v", ledgers[del], found, err)
		}
	}
	for i, l := range ledgers {
		n := uint64(10 + i)
		if i != 2 {
			n = 0
		}
		check(l, n)
	}
	// A deleted ledger can be indexed again.
	add(t, x, ledgers[3], event{seq: 1, entity: "e", key: "k", event: "n", idem: "i1", batchLen: 1})
	check(ledgers[3], 1)
	check(ledgers[2], 12)
}

func TestPrefixMatches(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	mk := func(hexPrefix string, ledger eventid.LedgerID) eventid.ID {
		// hexPrefix fills the first bytes of the timestamp; the rest is
		// fixed, so IDs of different ledgers can share a prefix.
		var id eventid.ID
		b := make([]byte, 0, 8)
		for i := 0; i < len(hexPrefix); i += 2 {
			var v byte
			fmt.Sscanf(hexPrefix[i:i+2], "%02x", &v)
			b = append(b, v)
		}
		copy(id[:8], b)
		binary.BigEndian.PutUint32(id[8:12], 0x12345678)
		binary.BigEndian.PutUint32(id[12:16], uint32(ledger))
		return id
	}
	ids := map[eventid.LedgerID][]eventid.ID{
		ledgerA: {mk("ab00", ledgerA), mk("ab10", ledgerA), mk("ab1f", ledgerA), mk("abf0", ledgerA), mk("abff", ledgerA), mk("ac00", ledgerA), mk("aaff", ledgerA)},
		ledgerB: {mk("ab11", ledgerB), mk("ab20", ledgerB)},
	}
	for l, list := range ids {
		b := x.NewBatch()
		for i, id := range list {
			b.Add(l, &Record{ID: id, Seq: uint64(i + 1), Loc: locOf(uint64(i + 1))})
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	both := []eventid.LedgerID{ledgerA, ledgerB}
	cases := []struct {
		ledgers []eventid.LedgerID
		prefix  string // hex digits; odd length sets the nibble
		limit   int
		want    []string // hex prefixes of the wanted IDs, in order
	}{
		{both, "ab", 10, []string{"ab00", "ab10", "ab11", "ab1f", "ab20", "abf0", "abff"}},
		{both, "ab1", 10, []string{"ab10", "ab11", "ab1f"}},
		{both, "ab1", 2, []string{"ab10", "ab11"}},
		{both, "abf", 10, []string{"abf0", "abff"}}, // nibble 15: the upper bound carries
		{both, "abff", 10, []string{"abff"}},
		{both, "a", 10, []string{"aaff", "ab00", "ab10", "ab11", "ab1f", "ab20", "abf0", "abff", "ac00"}},
		{both, "a", 3, []string{"aaff", "ab00", "ab10"}},
		{both, "", 100, []string{"aaff", "ab00", "ab10", "ab11", "ab1f", "ab20", "abf0", "abff", "ac00"}},
		{[]eventid.LedgerID{ledgerB}, "ab", 10, []string{"ab11", "ab20"}},
		{[]eventid.LedgerID{ledgerA, ledgerA}, "ab1", 10, []string{"ab10", "ab1f"}},
		{both, "ad", 10, nil},
		{both, "ab", 0, nil},
		{nil, "ab", 10, nil},
	}
	for _, c := range cases {
		whole, nibble := c.prefix, -1
		if len(whole)%2 == 1 {
			fmt.Sscanf(whole[len(whole)-1:], "%x", &nibble)
			whole = whole[:len(whole)-1]
		}
		prefix := make([]byte, len(whole)/2)
		for i := range prefix {
			fmt.Sscanf(whole[2*i:2*i+2], "%02x", &prefix[i])
		}
		got, err := x.PrefixMatches(c.ledgers, prefix, nibble, c.limit)
		if err != nil {
			t.Fatalf("PrefixMatches(%q): %v", c.prefix, err)
		}
		var gotHex []string
		for _, id := range got {
			if !strings.HasPrefix(id.String(), c.prefix) {
				t.Errorf("PrefixMatches(%q) returned %v", c.prefix, id)
			}
			gotHex = append(gotHex, id.String()[:4])
		}
		if !slices.Equal(gotHex, c.want) {
			t.Errorf("PrefixMatches(%q, limit %d) = %v, want %v", c.prefix, c.limit, gotHex, c.want)
		}
	}
	// A whole ID matches itself, with or without its ledger in the prefix.
	id := ids[ledgerB][0]
	for _, n := range []int{eventid.Size, 12, 15} {
		got, err := x.PrefixMatches(both, id[:n], -1, 2)
		if err != nil || len(got) != 1 || got[0] != id {
			t.Errorf("PrefixMatches(first %d bytes of %v) = %v, %v", n, id, got, err)
		}
	}
	if got, err := x.PrefixMatches(both, id[:], 0, 2); err != nil || len(got) != 0 {
		t.Errorf("a 33-digit prefix matched %v, %v", got, err)
	}
	for _, n := range []int{-2, 16} {
		if _, err := x.PrefixMatches(both, []byte{0xab}, n, 2); !errors.Is(err, ErrInvalid) {
			t.Errorf("nibble %d: err %v, want ErrInvalid", n, err)
		}
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	if _, found, err := x.Progress(ledgerA); found || err != nil {
		t.Fatalf("Progress of a new ledger: found %v, err %v", found, err)
	}
	for _, head := range []segment.Head{
		{ID: eventid.Genesis(ledgerA)}, // an empty ledger
		{ID: idOf(ledgerA, 7), Seq: 7, Loc: segment.Location{Segment: 3, Offset: 1 << 40, Size: math.MaxUint32}},
		{ID: idOf(ledgerA, 8), Seq: 8, Loc: segment.Location{Segment: math.MaxUint64, Offset: math.MaxInt64, Size: 0}},
	} {
		b := x.NewBatch()
		b.SetProgress(ledgerA, head)
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
		got, found, err := x.Progress(ledgerA)
		if err != nil || !found || got != head {
			t.Errorf("Progress = %+v, %v, %v; want %+v", got, found, err, head)
		}
	}
	if _, found, _ := x.Progress(ledgerB); found {
		t.Error("Progress of another ledger found")
	}
}

func TestInvalidBatch(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	good := event{seq: 1, entity: "e", key: "k", event: "n"}.record(ledgerA)
	cases := []struct {
		name string
		edit func(b *Batch)
	}{
		{"wrong ledger", func(b *Batch) { b.Add(ledgerB, good) }},
		{"negative offset", func(b *Batch) { r := *good; r.Loc.Offset = -1; b.Add(ledgerA, &r) }},
		{"size above u32", func(b *Batch) { r := *good; r.Loc.Size = math.MaxUint32 + 1; b.Add(ledgerA, &r) }},
		{"idempotency key, batch of 0", func(b *Batch) { r := *good; r.IdempotencyKey, r.Digest = []byte{}, digestOf(""); b.Add(ledgerA, &r) }},
		{"idempotency key, no digest", func(b *Batch) { r := *good; r.IdempotencyKey, r.BatchLen = []byte{}, 1; b.Add(ledgerA, &r) }},
		{"idempotency key, short digest", func(b *Batch) {
			r := *good
			r.IdempotencyKey, r.BatchLen, r.Digest = []byte{}, 1, make([]byte, DigestSize-1)
			b.Add(ledgerA, &r)
		}},
		{"progress offset", func(b *Batch) { b.SetProgress(ledgerA, segment.Head{Seq: 1, Loc: segment.Location{Offset: -5}}) }},
	}
	b := x.NewBatch()
	defer b.Close()
	for _, c := range cases {
		b.Add(ledgerA, good) // dropped with the bad one
		c.edit(b)
		if err := b.Commit(false); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Commit = %v, want ErrInvalid", c.name, err)
		}
		if _, _, found, err := x.Lookup(good.ID); found || err != nil {
			t.Fatalf("%s: a refused batch wrote its good record (found %v, err %v)", c.name, found, err)
		}
	}
	// The batch is usable again after a refused commit.
	b.Add(ledgerA, good)
	if b.Len() != 1 {
		t.Errorf("Len = %d, want 1", b.Len())
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := x.Lookup(good.ID); !found || err != nil {
		t.Fatalf("Lookup after a good commit: found %v, err %v", found, err)
	}
}

// TestBatchReuse commits one Batch many times: empty, small, and larger
// than Pebble's large-batch threshold (half a memtable), which Pebble
// applies as a memtable of its own and empties.
func TestBatchReuse(t *testing.T) {
	t.Parallel()
	x := openAt(t, "idx", Options{FS: vfs.NewMem(), CacheSize: 1}) // 4 MiB memtables
	b := x.NewBatch()
	defer b.Close()
	name := strings.Repeat("n", 1000)
	seq := uint64(0)
	for round, size := range []int{0, 0, 3, 3000, 0, 3000, 5} {
		first := seq + 1
		for range size {
			seq++
			b.Add(ledgerA, event{seq: seq, entity: name, key: "k", event: name}.record(ledgerA))
		}
		if err := b.Commit(round%2 == 0); err != nil {
			t.Fatalf("round %d: Commit: %v", round, err)
		}
		if size == 0 {
			continue
		}
		for _, s := range []uint64{first, seq} {
			if got, _, found, err := x.Lookup(idOf(ledgerA, s)); !found || err != nil || got != s {
				t.Fatalf("round %d: Lookup(seq %d) = %d, %v, %v", round, s, got, found, err)
			}
		}
	}
	n := len(collect(t, x.Stream(context.Background(), ledgerA, []byte(name), []byte("k"), 0)))
	if uint64(n) != seq {
		t.Errorf("stream holds %d events, want %d", n, seq)
	}
}

func TestFlushSurvivesCrash(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	x, err := Open("idx", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n", idem: "r", batchLen: 2}, event{seq: 2, entity: "e", key: "k", event: "n"})
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	// Only what was synced survives: the clone drops every unsynced byte.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for name, fs := range map[string]vfs.FS{"crash": crashed, "clean close": mem} {
		y, err := Open("idx", Options{FS: fs})
		if err != nil {
			t.Fatalf("%s: reopen: %v", name, err)
		}
		checkPositions(t, name+": Stream", collect(t, y.Stream(context.Background(), ledgerA, []byte("e"), []byte("k"), 0)), positions(ledgerA, 1, 2))
		if head, _, err := y.Progress(ledgerA); err != nil || head.Seq != 2 {
			t.Errorf("%s: Progress = %+v, %v", name, head, err)
		}
		if d, _, err := y.Idempotency(ledgerA, []byte("r")); err != nil || d.Count != 2 {
			t.Errorf("%s: Idempotency count %d, %v", name, d.Count, err)
		}
		if err := y.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// And on disk, through a clean Close.
	dir := t.TempDir()
	y := openAt(t, dir, Options{})
	add(t, y, ledgerB, event{seq: 1, entity: "e", key: "k", event: "n"})
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	z := openAt(t, dir, Options{})
	if _, _, found, err := z.Lookup(idOf(ledgerB, 1)); !found || err != nil {
		t.Errorf("after reopen: found %v, err %v", found, err)
	}
}

// TestProgressCoversEntries crashes after unsynced commits, keeping a random
// part of the unsynced bytes, and checks the invariant of the package: after
// recovery, a ledger's entries are exactly those up to its progress marker.
func TestProgressCoversEntries(t *testing.T) {
	t.Parallel()
	for round := range 10 {
		mem := vfs.NewCrashableMem()
		x, err := Open("idx", Options{FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		seq, flushed := uint64(0), uint64(0)
		for batch := range 40 {
			var evs []event
			for range 1 + rng.IntN(50) {
				seq++
				evs = append(evs, event{seq: seq, entity: "e", key: fmt.Sprint(seq % 5), event: "n"})
			}
			add(t, x, ledgerA, evs...)
			if batch == 15 {
				if err := x.Flush(); err != nil {
					t.Fatal(err)
				}
				flushed = seq
			}
		}
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(uint64(round), 9))})
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		y, err := Open("idx", Options{FS: crashed})
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		head, found, err := y.Progress(ledgerA)
		if err != nil || !found {
			t.Fatalf("round %d: Progress: %+v, %v, %v (the flushed batches are lost)", round, head, found, err)
		}
		if head.Seq < flushed {
			t.Errorf("round %d: progress at seq %d, below the flushed seq %d", round, head.Seq, flushed)
		}
		t.Logf("round %d: %d of %d records survived (%d flushed)", round, head.Seq, seq, flushed)
		all := collect(t, y.TimeRange(context.Background(), ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false))
		if uint64(len(all)) != head.Seq {
			t.Errorf("round %d: %d entries, progress at seq %d", round, len(all), head.Seq)
		}
		for i, p := range all {
			if p != posOf(ledgerA, uint64(i+1)) {
				t.Fatalf("round %d: entry %d is %+v", round, i, p)
			}
		}
		for s := uint64(1); s <= head.Seq+1; s++ {
			if _, found, err := y.BySeq(ledgerA, s); err != nil || found != (s <= head.Seq) {
				t.Errorf("round %d: BySeq(%d) found %v, err %v; progress %d", round, s, found, err, head.Seq)
			}
		}
		if err := y.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestContextCancel(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	var evs []event
	const n = 2000
	for seq := uint64(1); seq <= n; seq++ {
		evs = append(evs, event{seq: seq, entity: "e", key: "k", event: "n"})
	}
	add(t, x, ledgerA, evs...)
	scans := map[string]func(ctx context.Context) iter.Seq2[Position, error]{
		"TimeRange": func(ctx context.Context) iter.Seq2[Position, error] {
			return x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), true)
		},
		"Stream": func(ctx context.Context) iter.Seq2[Position, error] {
			return x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), 0)
		},
		"Entity": func(ctx context.Context) iter.Seq2[Position, error] {
			return x.Entity(ctx, ledgerA, []byte("e"), 0)
		},
		"EventName": func(ctx context.Context) iter.Seq2[Position, error] {
			return x.EventName(ctx, ledgerA, []byte("n"), 0)
		},
	}
	for name, scan := range scans {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		count, errs := 0, 0
		var last error
		for _, err := range scan(ctx) {
			if err != nil {
				errs++
				last = err
				continue
			}
			count++
			if count == 10 {
				cancel()
			}
		}
		if !errors.Is(last, context.Canceled) || errs != 1 {
			t.Errorf("%s: after cancel: %d errors, last %v; want one context.Canceled", name, errs, last)
		}
		if count >= n || count > 10+ctxCheckEvery {
			t.Errorf("%s: %d positions after cancel at 10", name, count)
		}
		// A context cancelled before the scan yields only its error.
		count, last = 0, nil
		for _, err := range scan(ctx) {
			count++
			last = err
		}
		if count != 1 || !errors.Is(last, context.Canceled) {
			t.Errorf("%s: cancelled context: %d yields, last %v", name, count, last)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	t.Run("newer refused", func(t *testing.T) {
		fs := vfs.NewMem()
		x, err := Open("idx", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.db.Set([]byte{famVersion}, binary.BigEndian.AppendUint32(nil, formatVersion+1), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = Open("idx", Options{FS: fs})
		if !errors.Is(err, ErrFormatVersion) || !strings.Contains(err.Error(), fmt.Sprint(formatVersion+1)) {
			t.Fatalf("Open of a version %d index: %v, want ErrFormatVersion naming it", formatVersion+1, err)
		}
		// The refused Open released the directory lock.
		_, err = Open("idx", Options{FS: fs})
		if !errors.Is(err, ErrFormatVersion) {
			t.Fatalf("second Open: %v", err)
		}
	})
	// Version 1 (K values without a digest): ErrOldFormat, which is not
	// ErrFormatVersion (the engine rebuilds it, it does not refuse it).
	t.Run("older reported", func(t *testing.T) {
		fs := vfs.NewMem()
		x, err := Open("idx", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.db.Set([]byte{famVersion}, binary.BigEndian.AppendUint32(nil, 1), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = Open("idx", Options{FS: fs})
		if !errors.Is(err, ErrOldFormat) || errors.Is(err, ErrFormatVersion) || !strings.Contains(err.Error(), "version 1") && !strings.Contains(err.Error(), " 1:") {
			t.Fatalf("Open of a version 1 index: %v, want ErrOldFormat naming 1", err)
		}
	})
	t.Run("missing with data", func(t *testing.T) {
		fs := vfs.NewMem()
		x, err := Open("idx", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		add(t, x, ledgerA, event{seq: 1})
		if err := x.db.Delete([]byte{famVersion}, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := Open("idx", Options{FS: fs}); !errors.Is(err, ErrCorruption) {
			t.Fatalf("Open without a version: %v, want ErrCorruption", err)
		}
	})
	t.Run("written at creation", func(t *testing.T) {
		x := fileSystems[1].open(t)
		v, found, err := x.get([]byte{famVersion})
		if err != nil || !found || binary.BigEndian.Uint32(v) != formatVersion {
			t.Fatalf("V = %x, %v, %v", v, found, err)
		}
	})
}

func TestCorruptValues(t *testing.T) {
	t.Parallel()
	x := fileSystems[1].open(t)
	ctx := context.Background()
	add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n", idem: "r", batchLen: 1})
	id := idOf(ledgerA, 1)
	// A T block of first seq 1, segment 1, offset 2^64-1.
	badOffset := binary.AppendUvarint([]byte{1, 1}, math.MaxUint64)
	for _, c := range []struct {
		name  string
		key   []byte
		value []byte
		read  func() error
	}{
		{"T short", appendTimeKey(nil, ledgerA, id), []byte{1, 2, 3}, func() error { _, _, _, err := x.Lookup(id); return err }},
		{"T offset", appendTimeKey(nil, ledgerA, id), badOffset, func() error { _, _, _, err := x.Lookup(id); return err }},
		{"T scan", appendTimeKey(nil, ledgerA, id), nil, func() error {
			return lastErr(x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false))
		}},
		{"S", appendSeqKey(nil, ledgerA, 1), []byte("short"), func() error { _, _, err := x.BySeq(ledgerA, 1); return err }},
		{"K", appendIdemKey(nil, ledgerA, []byte("r")), nil, func() error { _, _, err := x.Idempotency(ledgerA, []byte("r")); return err }},
		{"K of version 1", appendIdemKey(nil, ledgerA, []byte("r")), make([]byte, 12), func() error { _, _, err := x.Idempotency(ledgerA, []byte("r")); return err }},
		{"P", appendProgressKey(nil, ledgerA), []byte{0}, func() error { _, _, err := x.Progress(ledgerA); return err }},
		{"E", binary.BigEndian.AppendUint64(appendStreamPrefix(nil, ledgerA, []byte("e"), []byte("k")), 1), []byte{0}, func() error {
			return lastErr(x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), 0))
		}},
		{"E key", append(appendEntityPrefix(nil, ledgerA, []byte("e")), 0x05, 'k'), nil, func() error {
			return lastErr(x.Entity(ctx, ledgerA, []byte("e"), 0))
		}},
		{"N", binary.BigEndian.AppendUint64(appendEventPrefix(nil, ledgerA, []byte("n")), 1), []byte{0x80}, func() error {
			return lastErr(x.EventName(ctx, ledgerA, []byte("n"), 0))
		}},
	} {
		if err := x.db.Set(c.key, c.value, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		err := c.read()
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.key[0])) {
			t.Errorf("%s: %v, want ErrCorruption naming the key", c.name, err)
		}
	}
}

func lastErr(seq iter.Seq2[Position, error]) error {
	var last error
	for _, err := range seq {
		if err != nil {
			last = err
		}
	}
	return last
}

func TestClosed(t *testing.T) {
	t.Parallel()
	x, err := Open("idx", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	b := x.NewBatch()
	b.Add(ledgerA, event{seq: 1}.record(ledgerA))
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{
		"Close":        x.Close(),
		"Flush":        x.Flush(),
		"Commit":       b.Commit(false),
		"DeleteLedger": x.DeleteLedger(ledgerA),
		"TimeRange":    lastErr(x.TimeRange(context.Background(), ledgerA, eventid.ID{}, eventid.ID{}, false)),
	}
	_, _, _, checks["Lookup"] = x.Lookup(idOf(ledgerA, 1))
	_, _, checks["Progress"] = x.Progress(ledgerA)
	_, checks["PrefixMatches"] = x.PrefixMatches([]eventid.LedgerID{ledgerA}, nil, -1, 1)
	_, _, checks["StreamHead"] = x.StreamHead(ledgerA, nil, nil)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	b.Close()
	b.Close()
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	if _, err := Open("idx", Options{FS: fs, ReadOnly: true}); err == nil {
		t.Error("a read-only Open of a missing index succeeded")
	}
	x, err := Open("idx", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	add(t, x, ledgerA, event{seq: 1})
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	r := openAt(t, "idx", Options{FS: fs, ReadOnly: true})
	if _, _, found, err := r.Lookup(idOf(ledgerA, 1)); !found || err != nil {
		t.Errorf("read-only Lookup: found %v, err %v", found, err)
	}
	b := r.NewBatch()
	defer b.Close()
	b.Add(ledgerA, event{seq: 2}.record(ledgerA))
	if err := b.Commit(false); !errors.Is(err, pebble.ErrReadOnly) {
		t.Errorf("read-only Commit: %v, want pebble.ErrReadOnly", err)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openAt(t, dir, Options{})
	if y, err := Open(dir, Options{}); err == nil {
		_ = y.Close()
		t.Fatal("a second Open of the same directory succeeded")
	}
}

// FuzzStreamKeyUnambiguous checks that two different (entity, key) pairs
// never produce the same E key prefix, nor one that is a prefix of the
// other's full key: no stream scan can see another stream's entries.
func FuzzStreamKeyUnambiguous(f *testing.F) {
	f.Add([]byte("a"), []byte("bc"), []byte("ab"), []byte("c"))
	f.Add([]byte{}, []byte{0}, []byte{0}, []byte{})
	f.Add([]byte{0xff}, []byte{}, []byte{}, []byte{0xff})
	f.Add(bytes.Repeat([]byte{1}, 200), []byte("x"), bytes.Repeat([]byte{1}, 128), []byte("y"))
	f.Fuzz(func(t *testing.T, e1, k1, e2, k2 []byte) {
		p1 := appendStreamPrefix(nil, ledgerA, e1, k1)
		full2 := binary.BigEndian.AppendUint64(appendStreamPrefix(nil, ledgerA, e2, k2), 7)
		same := bytes.Equal(e1, e2) && bytes.Equal(k1, k2)
		if bytes.HasPrefix(full2, p1) != same {
			t.Fatalf("stream (%q, %q) prefix %x vs key of (%q, %q) %x", e1, k1, p1, e2, k2, full2)
		}
		// The same holds one level up, for an entity scan.
		if bytes.HasPrefix(full2, appendEntityPrefix(nil, ledgerA, e1)) != bytes.Equal(e1, e2) {
			t.Fatalf("entity %q prefix matches the key of entity %q", e1, e2)
		}
	})
}

// TestEntityEventsInLedgerOrder: all keys of an entity come back in
// sequence order, not grouped by key, and other entities stay out.
func TestEntityEventsInLedgerOrder(t *testing.T) {
	t.Parallel()
	x, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const ledger = eventid.LedgerID(0x1234)
	b := x.NewBatch()
	keys := []string{"zz", "a", "mm", "a", "zz"}
	for i, k := range keys {
		seq := uint64(i + 1)
		b.Add(ledger, &Record{ID: eventid.New(seq*10, 7, ledger), Seq: seq, Loc: segment.Location{Segment: 1, Offset: int64(64 * seq), Size: 64}, Entity: []byte("order"), Key: []byte(k), Event: []byte("e")})
	}
	b.Add(ledger, &Record{ID: eventid.New(100, 7, ledger), Seq: 6, Loc: segment.Location{Segment: 1, Offset: 1000, Size: 64}, Entity: []byte("orders"), Key: []byte("a"), Event: []byte("e")})
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var seqs []uint64
	for p, err := range x.EntityEvents(context.Background(), ledger, []byte("order"), 1) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, p.Seq)
	}
	if fmt.Sprint(seqs) != "[2 3 4 5]" {
		t.Fatalf("entity events after seq 1: %v, want [2 3 4 5]", seqs)
	}
}
