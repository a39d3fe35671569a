package segment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// genesisEntry is the first event of the test ledger.
var genesisEntry = Entry{Entity: "ledger", Key: "test", Event: "ledger-created", Meta: []byte(`{"actor":"test"}`), Data: []byte(`{"name":"test"}`)}

func testLedger() eventid.LedgerID {
	c := eventid.Content{Entity: genesisEntry.Entity, Key: genesisEntry.Key, Event: genesisEntry.Event, Meta: genesisEntry.Meta, Data: genesisEntry.Data}
	return c.LedgerID()
}

// entry returns a realistic event of about 250 bytes.
func entry(i int) Entry {
	return Entry{
		Entity: "order",
		Key:    fmt.Sprintf("order-%d", i%300),
		Event:  "order-placed",
		Meta:   []byte(fmt.Sprintf(`{"actor":"user-%d","cause":"req-%08d","source":"web"}`, i%50, i)),
		Data:   []byte(fmt.Sprintf(`{"currency":"EUR","items":[{"qty":%d,"sku":"sku-%d"}],"note":"some words to make it realistic","total":%d.5}`, i%7+1, i%1000, i)),
	}
}

// newTestLog creates a ledger on fs in dir with the genesis appended.
func newTestLog(t testing.TB, fs vfs.FS, dir string, o Options) *Log {
	t.Helper()
	o.FS, o.Ledger = fs, testLedger()
	l, err := Create(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Batch{Entries: []Entry{genesisEntry}}); err != nil {
		t.Fatal(err)
	}
	return l
}

func openTestLog(t testing.TB, fs vfs.FS, dir string, o Options) (*Log, *Recovery, error) {
	t.Helper()
	o.FS, o.Ledger = fs, testLedger()
	return Open(dir, o, Head{})
}

func TestAppendReadIterateReopen(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	var ids []eventid.ID
	var locs []Location
	for b := 0; b < 50; b++ {
		batch := &Batch{}
		for i := 0; i < b%7+1; i++ {
			batch.Entries = append(batch.Entries, entry(len(ids)+i))
		}
		if err := l.Append(batch); err != nil {
			t.Fatal(err)
		}
		if batch.FirstSeq != uint64(len(ids))+2 {
			t.Fatalf("batch %d: first seq %d, want %d", b, batch.FirstSeq, len(ids)+2)
		}
		ids = append(ids, batch.IDs...)
		locs = append(locs, batch.Locations...)
	}
	if got := l.committed.Load().segNum; got < 3 {
		t.Fatalf("only %d segments: rotation did not happen", got)
	}
	for i, loc := range locs {
		r, err := l.ReadAt(loc)
		if err != nil {
			t.Fatal(err)
		}
		want := entry(i)
		if r.ID != ids[i] || string(r.Key) != want.Key || string(r.Data) != string(want.Data) || r.Seq != uint64(i)+2 {
			t.Fatalf("record %d: %s #%d %s, want %s #%d %s", i, r.ID, r.Seq, r.Key, ids[i], i+2, want.Key)
		}
	}
	it := l.NewIterator(1, FirstOffset)
	n := 0
	for it.Next() {
		if n > 0 && it.Record().ID != ids[n-1] {
			t.Fatalf("iterator record %d: %s, want %s", n, it.Record().ID, ids[n-1])
		}
		n++
	}
	if it.Err() != nil || n != len(ids)+1 {
		t.Fatalf("iterated %d records (err %v), want %d", n, it.Err(), len(ids)+1)
	}
	head, err := l.Verify(context.Background(), nil)
	if err != nil || head.ID != ids[len(ids)-1] {
		t.Fatalf("Verify: head %s, err %v", head.ID, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2, rec, err := openTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rec.Records != int64(len(ids))+1 || rec.TruncatedBytes != 0 || rec.Head.ID != ids[len(ids)-1] {
		t.Fatalf("recovery %+v", rec)
	}
	// Appends go on after the reopen, chained to the old head.
	b := &Batch{Entries: []Entry{entry(9999)}}
	if err := l2.Append(b); err != nil {
		t.Fatal(err)
	}
	r, err := l2.ReadAt(b.Locations[0])
	if err != nil || r.Prev != ids[len(ids)-1] || r.Seq != uint64(len(ids))+2 {
		t.Fatalf("record after reopen: %+v %v", r, err)
	}
	if _, err := l2.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestOpenFromProgressMarker: Open verifies only the records after the
// progress marker it is given, and refuses a marker that names no record
// (ErrProgressMismatch).
func TestOpenFromProgressMarker(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{SegmentSize: 4 << 10})
	var mid Head
	for i := 0; i < 100; i++ {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		if i == 60 {
			mid = l.Head()
		}
	}
	l.Close()
	o := Options{FS: fs, Ledger: testLedger(), SegmentSize: 4 << 10}
	l2, rec, err := Open("led", o, mid)
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
	if rec.Records != 39 {
		t.Fatalf("verified %d records after the progress marker, want 39", rec.Records)
	}
	bogus := mid
	bogus.ID[0] ^= 1
	if _, _, err := Open("led", o, bogus); !errors.Is(err, ErrProgressMismatch) {
		t.Fatalf("bogus progress marker: %v, want ErrProgressMismatch", err)
	}
}

func TestConditionsAndErrors(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	o := Options{FS: fs, Ledger: testLedger()}
	l, err := Create("led", o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(&Batch{Entries: []Entry{entry(1)}}); !errors.Is(err, ErrNotGenesis) {
		t.Fatalf("non-genesis first entry: %v", err)
	}
	if err := l.Append(&Batch{Entries: []Entry{genesisEntry}}); err != nil {
		t.Fatal(err)
	}
	errHead := errors.New("head moved")
	head := l.Head()
	if err := l.Append(&Batch{Entries: []Entry{entry(2)}, Check: func(h Head) error {
		if h.ID != head.ID {
			return errHead
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(3)}, Check: func(h Head) error {
		if h.ID != head.ID {
			return errHead
		}
		return nil
	}}); err != errHead {
		t.Fatalf("stale head condition: %v", err)
	}
	if l.Head().Seq != 2 {
		t.Fatalf("head seq %d after a rejected batch, want 2", l.Head().Seq)
	}
	// Given timestamps and IDs, as an import gives them.
	e := entry(4)
	e.Micros = l.Head().ID.Micros() // not after the head
	if err := l.Append(&Batch{Entries: []Entry{e}}); !errors.Is(err, ErrTimeOrder) {
		t.Fatalf("timestamp at the head: %v", err)
	}
	e.Micros = l.Head().ID.Micros() + 10
	e.ID = eventid.New(e.Micros, 1, l.ledger)
	if err := l.Append(&Batch{Entries: []Entry{e}}); !errors.Is(err, ErrIDMismatch) {
		t.Fatalf("wrong ID: %v", err)
	}
	c := eventid.Content{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
	e.ID = c.ID(l.ledger, e.Micros, l.Head().ID)
	b := &Batch{Entries: []Entry{e, entry(5)}}
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	if b.IDs[0] != e.ID || b.IDs[1].Micros() <= e.Micros {
		t.Fatalf("ids %v", b.IDs)
	}
	big := entry(6)
	big.Data = make([]byte, 17<<20)
	if err := l.Append(&Batch{Entries: []Entry{big}}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	if err := l.Append(&Batch{}); err == nil {
		t.Fatal("empty batch accepted")
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestClockKeepsOrderAcrossReopen(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newTestLog(t, fs, "led", Options{Now: func() time.Time { return now }})
	if err := l.Append(&Batch{Entries: []Entry{entry(1)}}); err != nil {
		t.Fatal(err)
	}
	last := l.Head().ID.Micros()
	l.Close()
	// The wall clock is now an hour behind the ledger.
	back := now.Add(-time.Hour)
	o := Options{FS: fs, Ledger: testLedger(), Now: func() time.Time { return back }}
	l2, _, err := Open("led", o, Head{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	b := &Batch{Entries: []Entry{entry(2)}}
	if err := l2.Append(b); err != nil {
		t.Fatal(err)
	}
	if b.IDs[0].Micros() != last+1 {
		t.Fatalf("timestamp %d after a reopen with the clock behind, want %d", b.IDs[0].Micros(), last+1)
	}
}

// TestGroupCommit: 64 concurrent Sync appenders on a real directory. Every
// append gets its own consecutive sequence numbers, the ledger verifies,
// and appends share fsyncs.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	l := newTestLog(t, vfs.Default, t.TempDir(), Options{SegmentSize: 64 << 10})
	defer l.Close()
	const writers, each = 64, 30
	var wg sync.WaitGroup
	seqs := make(chan uint64, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b := &Batch{Entries: []Entry{entry(w*each + i)}}
				if err := l.Append(b); err != nil {
					t.Error(err)
					return
				}
				seqs <- b.FirstSeq
			}
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("sequence number %d given twice", s)
		}
		seen[s] = true
	}
	if len(seen) != writers*each || l.Head().Seq != writers*each+1 {
		t.Fatalf("%d appends, head #%d", len(seen), l.Head().Seq)
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Syncs >= st.Records {
		t.Fatalf("no group commit: %d syncs for %d records", st.Syncs, st.Records)
	}
	t.Logf("%d records in %d writes and %d syncs (%.1f records a sync)", st.Records, st.Writes, st.Syncs, float64(st.Records)/float64(st.Syncs))
}

// TestIdempotencyTrailer: a batch's idempotency key is stored with its
// first record, outside the event checksum, and read back by every reader.
func TestIdempotencyTrailer(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l := newTestLog(t, fs, "led", Options{})
	b := &Batch{Entries: []Entry{entry(1), entry(2), entry(3)}, IdempotencyKey: []byte("req-42")}
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	for i, loc := range b.Locations {
		r, err := l.ReadAt(loc)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (string(r.IdempotencyKey) != "req-42" || r.BatchLen != 3) || i > 0 && (r.IdempotencyKey != nil || r.BatchLen != 0) {
			t.Fatalf("record %d: key %q, batch %d", i, r.IdempotencyKey, r.BatchLen)
		}
		// The ID is the event's alone: the same content without a key
		// gives the same checksum.
		c := r.Content()
		if c.ID(l.Ledger(), r.ID.Micros(), r.Prev) != r.ID {
			t.Fatalf("record %d: checksum covers the trailer", i)
		}
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l2, _, err := openTestLog(t, fs, "led", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	it := l2.NewIterator(b.Locations[0].Segment, b.Locations[0].Offset)
	if !it.Next() || string(it.Record().IdempotencyKey) != "req-42" {
		t.Fatalf("iterator after reopen: %v %q", it.Err(), it.Record().IdempotencyKey)
	}
}
