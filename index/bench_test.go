package index

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// benchRecord is a record shaped like a typical event: a short entity,
// key and event name.
func benchRecord(seq uint64) *Record {
	return &Record{
		ID: idOf(ledgerA, seq), Seq: seq, Loc: locOf(seq),
		Entity: []byte("order"), Key: fmt.Appendf(nil, "order-%d", seq%1000), Event: []byte("order-created"),
	}
}

// fill indexes n records in batches of 1000, each with its progress
// marker, then flushes Pebble's memtable so that reads measure the
// sstables, not a memtable that a background flush may be writing out.
func fill(b *testing.B, x *Index, n uint64) {
	batch := x.NewBatch()
	defer batch.Close()
	for seq := uint64(1); seq <= n; seq++ {
		batch.Add(ledgerA, benchRecord(seq))
		if seq%1000 == 0 || seq == n {
			batch.SetProgress(ledgerA, segment.Head{ID: idOf(ledgerA, seq), Seq: seq, Loc: locOf(seq)})
			if err := batch.Commit(false); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.db.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAddCommit measures the append path: one op is a batch of 1000
// records and its progress marker, committed without sync, on disk.
func BenchmarkAddCommit(b *testing.B) {
	const perBatch = 1000
	x := openAt(b, b.TempDir(), Options{})
	recs := make([]*Record, perBatch)
	for i := range recs {
		recs[i] = benchRecord(uint64(i + 1))
	}
	batch := x.NewBatch()
	defer batch.Close()
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		for _, r := range recs {
			seq++
			r.ID, r.Seq, r.Loc = idOf(ledgerA, seq), seq, locOf(seq)
			batch.Add(ledgerA, r)
		}
		batch.SetProgress(ledgerA, segment.Head{ID: idOf(ledgerA, seq), Seq: seq, Loc: locOf(seq)})
		if err := batch.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkTimeRange measures a full forward scan of 100k records: one op
// is the whole scan.
func BenchmarkTimeRange(b *testing.B) {
	const n = 100_000
	x := openAt(b, b.TempDir(), Options{})
	fill(b, x, n)
	ctx := context.Background()
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		count := 0
		for _, err := range x.TimeRange(ctx, ledgerA, eventid.ID{}, eventid.MaxForMicros(math.MaxUint64), false) {
			if err != nil {
				b.Fatal(err)
			}
			count++
		}
		if count != n {
			b.Fatalf("scanned %d records, want %d", count, n)
		}
		total += count
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkLookup measures point lookups by ID among 100k records.
func BenchmarkLookup(b *testing.B) {
	const n = 100_000
	x := openAt(b, b.TempDir(), Options{})
	fill(b, x, n)
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq = seq*6364136223846793005 + 1442695040888963407 // a cheap LCG
		s := 1 + seq%n
		got, _, found, err := x.Lookup(idOf(ledgerA, s))
		if err != nil || !found || got != s {
			b.Fatalf("Lookup(seq %d) = %d, %v, %v", s, got, found, err)
		}
	}
}
