package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
)

// randomPosting returns n positions of ledger, each following the one
// before (postingFollows), starting at seq first: sequence gaps of 1 to
// 2^40, segment changes, gaps between frames, offsets up to near the
// largest int64, sizes up to the largest uint32, timestamps up to near
// the largest uint64.
func randomPosting(r *rand.Rand, ledger eventid.LedgerID, first uint64, n int) []Position {
	ps := make([]Position, 0, n)
	seq, micros := first, r.Uint64N(1<<62)
	loc := segment.Location{Segment: r.Uint64N(1 << 40), Offset: r.Int64N(1 << 50), Size: r.Int64N(1 << 20)}
	for range n {
		ps = append(ps, Position{ID: eventid.New(micros, r.Uint32(), ledger), Seq: seq, Loc: loc})
		seq += 1 + r.Uint64N([]uint64{1, 100, 1 << 40}[r.IntN(3)])
		micros += 1 + r.Uint64N([]uint64{1, 1000, 1 << 50}[r.IntN(3)])
		size := []int64{0, r.Int64N(300), math.MaxUint32}[r.IntN(3)]
		// The largest offset a frame of any size can have.
		const top = math.MaxInt64 - math.MaxUint32
		next := uint64(loc.Offset + loc.Size) // at most 2^63-1
		switch r.IntN(4) {
		case 0: // a later segment, any offset
			loc.Segment += 1 + r.Uint64N(3)
			next = []uint64{0, r.Uint64N(1 << 30), top}[r.IntN(3)]
		case 1: // the next frame
		default: // a gap
			next += 1 + r.Uint64N(1<<[]int{8, 20, 40}[r.IntN(3)])
		}
		if next > top {
			loc.Segment, next = loc.Segment+1, 0
		}
		loc.Offset, loc.Size = int64(next), size
	}
	return ps
}

// TestPostingRoundTrip: random postings decode to the positions they were
// encoded from; postingEntries splits a sequence where an event does not
// follow the one before (an earlier frame, timestamp or sequence number)
// and at postingMax, and the postings it writes decode, one after the
// other, to the whole sequence.
func TestPostingRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 4))
	prefix := string(appendEventPrefix(nil, ledgerA, []byte("n")))
	for i := range 2000 {
		ps := randomPosting(r, ledgerA, 1+r.Uint64N(1<<50), 1+r.IntN(20))
		key := binary.BigEndian.AppendUint64([]byte(prefix), ps[0].Seq)
		v := appendPosting(nil, ps)
		got, err := decodePosting(nil, key, len(prefix), v)
		if err != nil || !slices.Equal(got, ps) {
			t.Fatalf("posting %d: decoded %+v, %v; want %+v", i, got, err, ps)
		}
	}

	// Runs that postingEntries must split: a frame before the one
	// before, an equal timestamp, a segment going back, and more than
	// postingMax events.
	var all []Position
	seq := uint64(1)
	for _, n := range []int{3, postingMax + 7, 1} {
		run := randomPosting(r, ledgerA, seq, n)
		all = append(all, run...)
		seq = run[len(run)-1].Seq + 1
	}
	back := all[len(all)-1]
	back.Seq, back.ID = seq, eventid.New(back.ID.Micros()+1, 1, ledgerA)
	back.Loc.Offset = max(0, back.Loc.Offset-1)
	same := back
	same.Seq++
	down := same
	down.Seq, down.ID = down.Seq+1, eventid.New(same.ID.Micros()+1, 2, ledgerA)
	down.Loc.Segment--
	all = append(all, back, same, down)
	var (
		got   []Position
		count int
	)
	postingEntries(prefix, all, nil, nil, func(k, v []byte) {
		count++
		var err error
		if got, err = decodePosting(got, k, len(prefix), v); err != nil {
			t.Fatalf("posting %d: %v", count, err)
		}
	})
	if !slices.Equal(got, all) {
		t.Fatalf("postings decode to %d positions, want the %d written", len(got), len(all))
	}
	// The runs of 3 and postingMax+7 (two), the one of 1 and back
	// (which follows it: a later frame of a later segment, or not), same
	// and down each alone at least.
	if count < 6 {
		t.Fatalf("%d postings, want at least 6", count)
	}
}

// TestPostingCorrupt: every malformed posting value is ErrCorruption
// naming the key: a cut in the middle of an event, bytes after the last
// event, a zero delta, a field beyond its range, an overlong varint, an
// empty value. A cut between two events decodes to the events before it.
func TestPostingCorrupt(t *testing.T) {
	t.Parallel()
	prefix := appendStreamPrefix(nil, ledgerA, []byte("e"), []byte("k"))
	key := binary.BigEndian.AppendUint64(slices.Clone(prefix), 7)
	ps := []Position{
		{ID: eventid.New(1000, 0xdeadbeef, ledgerA), Seq: 7, Loc: segment.Location{Segment: 2, Offset: 4096, Size: 300}},
		{ID: eventid.New(1005, 1, ledgerA), Seq: 9, Loc: segment.Location{Segment: 2, Offset: 4396, Size: 200}},
		{ID: eventid.New(2000, 2, ledgerA), Seq: 20, Loc: segment.Location{Segment: 3, Offset: 64, Size: 100}},
	}
	v := appendPosting(nil, ps)
	// Where each event's encoding ends.
	var ends []int
	for i := range ps {
		ends = append(ends, len(appendPosting(nil, ps[:i+1])))
	}
	// The encoding of ps[0] then one event with the given fields.
	uv := binary.AppendUvarint
	first := v[:ends[0]]
	second := func(dseq, dseg, off, size, dus uint64) []byte {
		b := uv(uv(uv(uv(uv(slices.Clone(first), dseq), dseg), off), size), dus)
		return binary.BigEndian.AppendUint32(b, 5)
	}
	isCorrupt := func(what string, k, v []byte) {
		t.Helper()
		_, err := decodePosting(nil, k, len(prefix), v)
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), describeKey(k)) {
			t.Errorf("%s (% x): %v, want ErrCorruption naming %s", what, v, err, describeKey(k))
		}
	}
	for n := range len(v) {
		if i := slices.Index(ends, n); i >= 0 {
			got, err := decodePosting(nil, key, len(prefix), v[:n])
			if err != nil || !slices.Equal(got, ps[:i+1]) {
				t.Errorf("cut after event %d: %v, %v; want %v", i, got, err, ps[:i+1])
			}
			continue
		}
		isCorrupt(fmt.Sprintf("cut at byte %d", n), key, v[:n])
	}
	for _, c := range []struct {
		name string
		v    []byte
	}{
		{"trailing byte", append(slices.Clone(v), 1)},
		{"trailing event without its checksum", append(slices.Clone(v), 1, 0, 0, 1, 1, 0xff)},
		{"zero sequence delta", second(0, 0, 0, 1, 1)},
		{"sequence beyond 2^64-1", second(math.MaxUint64-6, 0, 0, 1, 1)},
		{"zero timestamp delta", second(1, 0, 0, 1, 0)},
		{"timestamp beyond 2^64-1", second(1, 0, 0, 1, math.MaxUint64-999)},
		{"segment beyond 2^64-1", second(1, math.MaxUint64-1, 0, 1, 1)},
		{"gap beyond 2^64-1", second(1, 0, math.MaxUint64-4395, 1, 1)},
		{"offset beyond 2^63-1", second(1, 0, math.MaxInt64, 1, 1)},
		{"offset and size beyond 2^63-1", second(1, 1, math.MaxInt64, 1, 1)},
		{"size beyond 2^32-1", second(1, 1, 0, math.MaxUint32+1, 1)},
		{"first offset beyond 2^63-1", binary.BigEndian.AppendUint32(uv(uv(uv(uv(nil, 1), math.MaxInt64+1), 1), 1), 0)},
		{"overlong varint", append(slices.Clone(first), 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0)},
		{"empty", nil},
	} {
		isCorrupt(c.name, key, c.v)
	}
	isCorrupt("short key", key[:len(key)-1], v)
	isCorrupt("long key", append(slices.Clone(key), 0), v)
}

// TestPostingsMatchTimeIndex: over a ledger of many commits whose records
// span several segments, the stream, entity, entity-events and
// event-name scans (forward, reverse, bounded) return, for every event,
// the position that the T and S entries give its ID and sequence number,
// and exactly the events the model expects.
func TestPostingsMatchTimeIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := fileSystems[1].open(t)
	r := rand.New(rand.NewPCG(15, 16))
	type rec struct {
		pos                Position
		entity, key, event string
	}
	var (
		recs   []rec
		seq    uint64
		micros uint64 = 1_700_000_000_000_000
		loc           = segment.Location{Segment: 1}
	)
	for c := range 80 {
		b := x.NewBatch()
		n := 1 + r.IntN([]int{3, 40, 400}[c%3])
		batch := make([]*Record, 0, n)
		for range n {
			seq++
			micros += 1 + r.Uint64N(50)
			if loc.Offset > 40_000 {
				loc.Segment, loc.Offset = loc.Segment+1, 0 // a new segment
			}
			loc.Size = 50 + r.Int64N(200)
			e := rec{pos: Position{ID: eventid.New(micros, r.Uint32(), ledgerA), Seq: seq, Loc: loc},
				entity: fmt.Sprint("ent", r.IntN(3)), key: fmt.Sprint("k", r.IntN(4)), event: fmt.Sprint("ev", r.IntN(5))}
			loc.Offset += loc.Size
			recs = append(recs, e)
			batch = append(batch, &Record{ID: e.pos.ID, Seq: e.pos.Seq, Loc: e.pos.Loc,
				Entity: []byte(e.entity), Key: []byte(e.key), Event: []byte(e.event)})
		}
		if c%5 == 4 {
			// As the engine re-indexes an idempotent batch: its first
			// record last.
			batch = append(batch[1:], batch[0])
		}
		for _, rc := range batch {
			b.Add(ledgerA, rc)
		}
		last := recs[len(recs)-1].pos
		b.SetProgress(ledgerA, segment.Head{ID: last.ID, Seq: last.Seq, Loc: last.Loc})
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	if recs[len(recs)-1].pos.Loc.Segment < 4 {
		t.Fatalf("the ledger spans %d segments, want several", recs[len(recs)-1].pos.Loc.Segment)
	}
	// Every position a scan yields is the one T and S give.
	checkT := func(what string, ps []Position) {
		t.Helper()
		for _, p := range ps {
			s, l, found, err := x.Lookup(p.ID)
			if err != nil || !found || s != p.Seq || l != p.Loc {
				t.Fatalf("%s: %+v; T gives seq %d, %+v, %v, %v", what, p, s, l, found, err)
			}
			id, found, err := x.BySeq(ledgerA, p.Seq)
			if err != nil || !found || id != p.ID {
				t.Fatalf("%s: %+v; S gives %v, %v, %v", what, p, id, found, err)
			}
		}
	}
	want := func(keep func(rec) bool, rg SeqRange) []Position {
		var out []Position
		for _, e := range recs {
			if keep(e) && e.pos.Seq > rg.After && (rg.Before == 0 || e.pos.Seq < rg.Before) {
				out = append(out, e.pos)
			}
		}
		if rg.Reverse {
			slices.Reverse(out)
		}
		return out
	}
	ranges := []SeqRange{{}, {Reverse: true}, {After: seq / 3}, {After: seq / 3, Before: seq / 2}, {After: seq / 4, Before: seq - 10, Reverse: true}}
	for _, rg := range ranges {
		for i := range 3 {
			ent := fmt.Sprint("ent", i)
			got := collect(t, x.EntityEventsRange(ctx, ledgerA, []byte(ent), rg))
			checkPositions(t, fmt.Sprintf("entity events %s %+v", ent, rg), got, want(func(e rec) bool { return e.entity == ent }, rg))
			checkT("entity events", got)
			for j := range 4 {
				k := fmt.Sprint("k", j)
				got := collect(t, x.StreamRange(ctx, ledgerA, []byte(ent), []byte(k), rg))
				checkPositions(t, fmt.Sprintf("stream %s/%s %+v", ent, k, rg), got, want(func(e rec) bool { return e.entity == ent && e.key == k }, rg))
				checkT("stream", got)
			}
		}
		for i := range 5 {
			ev := fmt.Sprint("ev", i)
			got := collect(t, x.EventNameRange(ctx, ledgerA, []byte(ev), rg))
			checkPositions(t, fmt.Sprintf("event name %s %+v", ev, rg), got, want(func(e rec) bool { return e.event == ev }, rg))
			checkT("event name", got)
		}
	}
	// Entity: one key's events after another, in the order of the keys'
	// encoding (here all of length 2: bytewise).
	got := collect(t, x.Entity(ctx, ledgerA, []byte("ent1"), seq/5))
	var wantEntity []Position
	for j := range 4 {
		wantEntity = append(wantEntity, want(func(e rec) bool { return e.entity == "ent1" && e.key == fmt.Sprint("k", j) }, SeqRange{After: seq / 5})...)
	}
	checkPositions(t, "entity", got, wantEntity)
	checkT("entity", got)
}

// TestDigestCoversPostingPositions: a posting that names the right
// sequence numbers with another location or ID (a well-formed value)
// changes the digest of its family and of no other.
func TestDigestCoversPostingPositions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var evs []event
	for i := uint64(1); i <= 20; i++ {
		evs = append(evs, event{seq: i, entity: "e", key: fmt.Sprint("k", i%2), event: "v"})
	}
	want := NewDigest(ledgerA)
	for _, e := range evs {
		want.Add(e.record(ledgerA))
	}
	prefix := appendStreamPrefix(nil, ledgerA, []byte("e"), []byte("k1"))
	key := binary.BigEndian.AppendUint64(slices.Clone(prefix), 1)
	for _, c := range []struct {
		name   string
		change func(p *Position)
	}{
		{"location", func(p *Position) { p.Loc.Offset += p.Loc.Size }},
		{"checksum", func(p *Position) { p.ID = eventid.New(p.ID.Micros(), p.ID.Checksum()+1, ledgerA) }},
	} {
		x := openAt(t, t.TempDir(), Options{})
		add(t, x, ledgerA, evs...)
		if got, err := x.Digest(ctx, ledgerA, 20); err != nil || got.Diff(want) != "" {
			t.Fatalf("%s: before the change: %v %s", c.name, err, got.Diff(want))
		}
		v, found, err := x.get(key)
		if err != nil || !found {
			t.Fatalf("%s: posting of k1: %v, %v", c.name, found, err)
		}
		ps, err := decodePosting(nil, key, len(prefix), v)
		if err != nil || len(ps) != 10 {
			t.Fatalf("%s: posting of k1: %v, %v", c.name, ps, err)
		}
		c.change(&ps[len(ps)-1])
		if err := x.db.Set(key, appendPosting(nil, ps), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		got, err := x.Digest(ctx, ledgerA, 20)
		if err != nil {
			t.Fatal(err)
		}
		if diff := got.Diff(want); !strings.Contains(diff, familyNames[famStream]) || strings.Count(diff, "family") != 1 {
			t.Errorf("%s changed: digest differs in %q, want family E alone", c.name, diff)
		}
	}
}
