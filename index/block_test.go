package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// countFamily returns the number of keys of a family of a ledger.
func countFamily(t *testing.T, x *Index, fam byte, ledger eventid.LedgerID) int {
	t.Helper()
	it, err := x.familyIter(context.Background(), fam, ledger)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBlocksAndPostings: one commit of 1,000 events of one stream, name
// and entity is 16 T blocks (64 events each, the last 40) and S entries,
// and 4 postings in each of E, A and N (256 sequence numbers each, the
// last 232); a block ends where the segment changes; every event is found
// by ID and by sequence number, and every scan returns them all.
func TestBlocksAndPostings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := fileSystems[1].open(t)
	var evs []event
	for i := uint64(1); i <= 1000; i++ {
		evs = append(evs, event{seq: i, entity: "e", key: "k", event: "n"})
	}
	// locOf changes segment at seq 1000: the last event is a block of
	// its own.
	add(t, x, ledgerA, evs...)
	for fam, want := range map[byte]int{famTime: 17, famSeq: 17, famStream: 4, famEntity: 4, famEvent: 4} {
		if got := countFamily(t, x, fam, ledgerA); got != want {
			t.Errorf("family %c: %d keys, want %d", fam, got, want)
		}
	}
	for i := uint64(1); i <= 1000; i++ {
		seq, loc, found, err := x.Lookup(idOf(ledgerA, i))
		if err != nil || !found || seq != i || loc != locOf(i) {
			t.Fatalf("Lookup(%d) = %d, %v, %v, %v", i, seq, loc, found, err)
		}
		id, found, err := x.BySeq(ledgerA, i)
		if err != nil || !found || id != idOf(ledgerA, i) {
			t.Fatalf("BySeq(%d) = %v, %v, %v", i, id, found, err)
		}
	}
	// IDs between events, before the first and after the last, and seqs
	// out of range, are not found.
	for _, id := range []eventid.ID{eventid.New(idOf(ledgerA, 70).Micros()+1, 0, ledgerA), eventid.New(1, 0, ledgerA),
		eventid.New(idOf(ledgerA, 1000).Micros()+1, 0, ledgerA), eventid.New(idOf(ledgerA, 64).Micros(), 1, ledgerA)} {
		if _, _, found, err := x.Lookup(id); found || err != nil {
			t.Errorf("Lookup(%v): found %v, %v", id, found, err)
		}
	}
	for _, seq := range []uint64{0, 1001, math.MaxUint64} {
		if _, found, err := x.BySeq(ledgerA, seq); found || err != nil {
			t.Errorf("BySeq(%d): found %v, %v", seq, found, err)
		}
	}
	all := make([]uint64, 1000)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	checkPositions(t, "stream", collect(t, x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), 0)), positions(ledgerA, all...))
	checkPositions(t, "stream after 300", collect(t, x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), 300)), positions(ledgerA, all[300:]...))
	checkPositions(t, "entity after 511", collect(t, x.Entity(ctx, ledgerA, []byte("e"), 511)), positions(ledgerA, all[511:]...))
	checkPositions(t, "name (255, 770)", collect(t, x.EventNameRange(ctx, ledgerA, []byte("n"), SeqRange{After: 255, Before: 770})), positions(ledgerA, all[255:769]...))
	rev := positions(ledgerA, all[1:999]...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	checkPositions(t, "entity events reverse (1, 1000)", collect(t, x.EntityEventsRange(ctx, ledgerA, []byte("e"), SeqRange{After: 1, Before: 1000, Reverse: true})), rev)
	if p, found, err := x.StreamHead(ledgerA, []byte("e"), []byte("k")); err != nil || !found || p != posOf(ledgerA, 1000) {
		t.Errorf("StreamHead = %+v, %v, %v", p, found, err)
	}
}

// TestDigestIndependentOfGrouping: an index of events committed one at a
// time and one of the same events in one commit have other blocks and
// postings, and the same digest, which is that of the records.
func TestDigestIndependentOfGrouping(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var evs []event
	for i := uint64(1); i <= 700; i++ {
		e := event{seq: i, entity: fmt.Sprint("e", i%3), key: fmt.Sprint("k", i%7), event: fmt.Sprint("v", i%5)}
		if i%50 == 0 {
			e.idem, e.batchLen = fmt.Sprint("idem-", i), 1
		}
		evs = append(evs, e)
	}
	one, bulk := fileSystems[1].open(t), openAt(t, t.TempDir(), Options{})
	for _, e := range evs {
		add(t, one, ledgerA, e)
	}
	add(t, bulk, ledgerA, evs...)
	if a, b := countFamily(t, one, famTime, ledgerA), countFamily(t, bulk, famTime, ledgerA); a != 700 || b >= 700 {
		t.Fatalf("T blocks: %d and %d, want 700 and fewer", a, b)
	}
	want := NewDigest(ledgerA)
	for _, e := range evs {
		want.Add(e.record(ledgerA))
	}
	for name, x := range map[string]*Index{"one at a time": one, "bulk": bulk} {
		got, err := x.Digest(ctx, ledgerA, 700)
		if err != nil {
			t.Fatal(err)
		}
		if diff := got.Diff(want); diff != "" {
			t.Errorf("%s: %s", name, diff)
		}
	}
	// Up to a sequence number inside a block and a posting.
	part := NewDigest(ledgerA)
	for _, e := range evs[:333] {
		part.Add(e.record(ledgerA))
	}
	if got, err := bulk.Digest(ctx, ledgerA, 333); err != nil || got.Diff(part) != "" {
		t.Errorf("bulk up to 333: %v %s", err, got.Diff(part))
	}
}

// TestDeleteEvents: a ledger indexed again from its first record in
// other commits, after DeleteEvents, reads each event once.
func TestDeleteEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := fileSystems[1].open(t)
	var evs []event
	for i := uint64(1); i <= 200; i++ {
		evs = append(evs, event{seq: i, entity: "e", key: "k", event: "n"})
	}
	add(t, x, ledgerA, evs...)
	add(t, x, ledgerB, evs[:5]...)
	b := x.NewBatch()
	defer b.Close()
	b.DeleteEvents(ledgerA)
	for i, e := range evs {
		b.Add(ledgerA, e.record(ledgerA))
		if i%30 == 0 {
			b.SetProgress(ledgerA, segment.Head{ID: idOf(ledgerA, e.seq), Seq: e.seq, Loc: locOf(e.seq)})
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	all := make([]uint64, 200)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	checkPositions(t, "stream", collect(t, x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), 0)), positions(ledgerA, all...))
	checkPositions(t, "time", collect(t, x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false)), positions(ledgerA, all...))
	checkPositions(t, "other ledger", collect(t, x.Stream(ctx, ledgerB, []byte("e"), []byte("k"), 0)), positions(ledgerB, all[:5]...))
	want := NewDigest(ledgerA)
	for _, e := range evs {
		want.Add(e.record(ledgerA))
	}
	if got, err := x.Digest(ctx, ledgerA, 200); err != nil || got.Diff(want) != "" {
		t.Errorf("digest: %v %s", err, got.Diff(want))
	}
}

// FuzzDecode: the decoders of T blocks and postings never panic, report
// any malformed value as ErrCorruption naming the key, and what they
// decode encodes back to the same events.
func FuzzDecode(f *testing.F) {
	recs := []blockRec{{id: idOf(ledgerA, 1), seq: 1, loc: locOf(1)}, {id: idOf(ledgerA, 2), seq: 2, loc: locOf(2)}}
	f.Add(idOf(ledgerA, 2).Micros(), idOf(ledgerA, 2).Checksum(), appendBlock(nil, recs))
	f.Add(uint64(5), uint32(0), []byte{1, 2, 3})
	f.Add(uint64(1), uint32(7), appendPosting(nil, []Position{
		{ID: idOf(ledgerA, 1), Seq: 1, Loc: locOf(1)}, {ID: idOf(ledgerA, 3), Seq: 3, Loc: locOf(3)},
		{ID: idOf(ledgerA, 300), Seq: 300, Loc: segment.Location{Segment: 9, Offset: 1 << 40, Size: math.MaxUint32}},
		{ID: idOf(ledgerA, 1<<40), Seq: 1 << 40, Loc: segment.Location{Segment: 9, Offset: 1<<40 + math.MaxUint32, Size: 0}}}))
	f.Fuzz(func(t *testing.T, micros uint64, checksum uint32, v []byte) {
		key := appendTimeKey(nil, ledgerA, eventid.New(micros, checksum, ledgerA))
		blk, err := decodeBlock(nil, key, v)
		if err != nil {
			if !errors.Is(err, ErrCorruption) || !bytes.Contains([]byte(err.Error()), []byte(describeKey(key))) {
				t.Fatalf("block: %v", err)
			}
		} else {
			var back []blockRec
			for i, p := range blk {
				back = append(back, blockRec{id: p.ID, seq: p.Seq, loc: p.Loc})
				if i > 0 && !back[i].follows(&back[i-1]) {
					t.Fatalf("event %d does not follow the one before: %+v", i, blk)
				}
			}
			again, err := decodeBlock(nil, key, appendBlock(nil, back))
			if err != nil || fmt.Sprint(again) != fmt.Sprint(blk) {
				t.Fatalf("round trip: %v, %v, want %v", again, err, blk)
			}
		}
		pkey := binary.BigEndian.AppendUint64(appendEventPrefix(nil, ledgerA, []byte("n")), micros)
		ps, err := decodePosting(nil, pkey, len(pkey)-8, v)
		if err != nil {
			if !errors.Is(err, ErrCorruption) || !bytes.Contains([]byte(err.Error()), []byte(describeKey(pkey))) {
				t.Fatalf("posting: %v", err)
			}
			return
		}
		if len(ps) == 0 || ps[0].Seq != micros {
			t.Fatalf("posting decoded as %v, not starting at the key's sequence number %d", ps, micros)
		}
		for i := 1; i < len(ps); i++ {
			if !postingFollows(&ps[i], &ps[i-1]) {
				t.Fatalf("posting event %d does not follow the one before: %v", i, ps)
			}
		}
		back := appendPosting(nil, ps)
		if len(back) > len(v) {
			t.Fatalf("posting %v re-encoded in %d bytes, from %d", ps, len(back), len(v))
		}
		if again, err := decodePosting(nil, pkey, len(pkey)-8, back); err != nil || fmt.Sprint(again) != fmt.Sprint(ps) {
			t.Fatalf("posting round trip: %v, %v, want %v", again, err, ps)
		}
	})
}

// TestAddOutOfOrder: the engine's re-indexing adds the first record of an
// idempotent batch after its last; a commit's blocks and postings are in
// sequence order all the same, so scans with a cursor find every event
// once, in order (they missed some before).
func TestAddOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := fileSystems[1].open(t)
	var order []uint64
	for first := uint64(1); first <= 100; first += 10 {
		for s := first + 1; s < first+10; s++ {
			order = append(order, s)
		}
		order = append(order, first)
	}
	b := x.NewBatch()
	defer b.Close()
	for _, s := range order {
		b.Add(ledgerA, event{seq: s, entity: "e", key: "k", event: "n"}.record(ledgerA))
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	add(t, x, ledgerA, event{seq: 101, entity: "e", key: "k", event: "n"})
	all := make([]uint64, 101)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	for _, after := range []uint64{0, 1, 5, 50, 100} {
		checkPositions(t, fmt.Sprint("stream after ", after), collect(t, x.Stream(ctx, ledgerA, []byte("e"), []byte("k"), after)), positions(ledgerA, all[after:]...))
		checkPositions(t, fmt.Sprint("entity after ", after), collect(t, x.Entity(ctx, ledgerA, []byte("e"), after)), positions(ledgerA, all[after:]...))
	}
	checkPositions(t, "time", collect(t, x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false)), positions(ledgerA, all...))
}
