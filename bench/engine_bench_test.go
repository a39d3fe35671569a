package bench

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2"
)

// Engine-level workloads: annal's engine against Pebble alone
// storing the same events as values keyed by their IDs. Both on real
// files. The Pebble value is the event's entity, key, event name, meta
// and data concatenated: the same bytes annal stores, without annal's
// chain, checksums, index families or verification.

func engineInput(i int) engine.EventInput {
	e := Entry(i)
	return engine.EventInput{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
}

func pebbleValue(e engine.EventInput) []byte {
	v := make([]byte, 0, len(e.Entity)+len(e.Key)+len(e.Event)+len(e.Meta)+len(e.Data))
	v = append(v, e.Entity...)
	v = append(v, e.Key...)
	v = append(v, e.Event...)
	v = append(v, e.Meta...)
	return append(v, e.Data...)
}

// buildEngine makes an engine directory with one ledger of n events in
// batches of 1,000 and returns the open DB and the IDs.
func buildEngine(b *testing.B, n int, d engine.Durability) (*engine.DB, []eventid.ID) {
	b.Helper()
	db, err := engine.Open(filepath.Join(b.TempDir(), "annal"), &engine.Options{Durability: d})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.CreateLedger(context.Background(), engine.LedgerSpec{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	var ids []eventid.ID
	batch := make([]engine.EventInput, 0, 1000)
	for i := range n {
		batch = append(batch, engineInput(i))
		if len(batch) == cap(batch) || i == n-1 {
			got, err := db.Append(context.Background(), "bench", batch, nil)
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, got.IDs...)
			batch = batch[:0]
		}
	}
	return db, ids
}

func buildPebble(b *testing.B, ids []eventid.ID) *pebble.DB {
	b.Helper()
	db, err := pebble.Open(filepath.Join(b.TempDir(), "pebble"), &pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	wb := db.NewBatch()
	for i, id := range ids {
		wb.Set(id[:], pebbleValue(engineInput(i)), nil)
		if wb.Len() > 1<<20 || i == len(ids)-1 {
			if err := wb.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			wb = db.NewBatch()
		}
	}
	return db
}

// BenchmarkEngineAppendSync appends batches of 1,000 events of ~250 bytes
// with one fsync per batch.
func BenchmarkEngineAppendSync(b *testing.B) {
	batch := make([]engine.EventInput, 1000)
	for i := range batch {
		batch[i] = engineInput(i)
	}
	b.Run("annal", func(b *testing.B) {
		db, _ := buildEngine(b, 1, engine.Sync)
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := db.Append(context.Background(), "bench", batch, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("pebble", func(b *testing.B) {
		db, err := pebble.Open(filepath.Join(b.TempDir(), "pebble"), &pebble.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		b.ReportAllocs()
		n := uint64(0)
		for b.Loop() {
			wb := db.NewBatch()
			for _, e := range batch {
				n++
				id := eventid.New(n, 1, 1)
				wb.Set(id[:], pebbleValue(e), nil)
			}
			if err := wb.Commit(pebble.Sync); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkEngineScan reads a whole ledger of 100,000 events in time
// order: annal's Scan (index walk, each event read from its segment and
// returned as an Event) against a Pebble iterator over the same values.
func BenchmarkEngineScan(b *testing.B) {
	const n = 100_000
	adb, ids := buildEngine(b, n, engine.None)
	defer adb.Close()
	pdb := buildPebble(b, ids)
	defer pdb.Close()
	b.Run("annal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			count := 0
			for _, err := range adb.Scan(context.Background(), "bench", engine.ScanOptions{}) {
				if err != nil {
					b.Fatal(err)
				}
				count++
			}
			if count != n+1 {
				b.Fatalf("scanned %d", count)
			}
		}
		b.ReportMetric(float64(b.N*(n+1))/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("pebble", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			it, err := pdb.NewIter(nil)
			if err != nil {
				b.Fatal(err)
			}
			count, size := 0, 0
			for it.First(); it.Valid(); it.Next() {
				size += len(it.Value())
				count++
			}
			it.Close()
			if count != n {
				b.Fatalf("scanned %d", count)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkEngineGet reads events by ID at random.
func BenchmarkEngineGet(b *testing.B) {
	const n = 100_000
	adb, ids := buildEngine(b, n, engine.None)
	defer adb.Close()
	pdb := buildPebble(b, ids)
	defer pdb.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	b.Run("annal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := adb.Get(context.Background(), ids[rng.IntN(n)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pebble", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			id := ids[rng.IntN(n)]
			v, closer, err := pdb.Get(id[:])
			if err != nil {
				b.Fatal(err)
			}
			_ = v
			closer.Close()
		}
	})
}
