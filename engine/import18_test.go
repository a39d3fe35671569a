package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
)

// syntheticExport returns an export of n events (a genesis event, then
// events of 300 streams), each line's ID computed from its content and
// the line before, as annal's export writes them.
func syntheticExport(n int) []byte {
	var out []byte
	var ledger eventid.LedgerID
	var prev eventid.ID
	micros := uint64(1_700_000_000_000_000)
	for i := 0; i < n; i++ {
		entity, key, event := "order", "order-"+strconv.Itoa(i%300), "order-placed"
		meta := []byte(`{"actor":"user-` + strconv.Itoa(i%50) + `"}`)
		data := []byte(`{"n":` + strconv.Itoa(i) + `,"note":"some words"}`)
		if i == 0 {
			entity, key, event, data = "ledger", "synthetic", "ledger-created", []byte(`{"name":"synthetic"}`)
		}
		c := eventid.Content{Entity: entity, Key: key, Event: event, Meta: meta, Data: data}
		if i == 0 {
			ledger = c.LedgerID()
			prev = eventid.Genesis(ledger)
		}
		micros += 13
		id := c.ID(ledger, micros, prev)
		out = ndjson.AppendLine(out, id, micros, entity, key, event, meta, data)
		prev = id
	}
	return out
}

// TestImportFlushesDuringImport: an import whose index entries fill the
// smallest memtables several times (Pebble flushes during the import, and
// compactEarly flushes after it) stores what a rebuild of the index from
// its segments gives, and segments and tree that verify.
func TestImportFlushesDuringImport(t *testing.T) {
	ctx := context.Background()
	n := 250_000
	if testing.Short() {
		n = 120_000
	}
	in := syntheticExport(n)
	dir := t.TempDir()
	opts := &Options{CacheSize: MinCacheSize}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := db.idx.FlushState()
	if err != nil {
		t.Fatal(err)
	}
	info := importBytes(t, db, in, ImportOptions{})
	if info.Count != uint64(n) {
		t.Fatalf("imported %d events, want %d", info.Count, n)
	}
	after, _, err := db.idx.FlushState()
	if err != nil {
		t.Fatal(err)
	}
	// Pebble's flush, compactEarly's, and the import's own at the end.
	if after-before < 3 {
		t.Fatalf("%d flushes during the import, want 3 or more (the test's input no longer fills the memtables)", after-before)
	}
	rep, err := db.Verify(ctx, info.Name, nil)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Events != uint64(n) {
		t.Fatalf("verified %d events, want %d", rep.Events, n)
	}
	imported, err := db.idx.Digest(ctx, info.ID, info.Count)
	if err != nil {
		t.Fatal(err)
	}
	reopenRebuilt(t, db, dir, opts, info, imported).Close()
}

// reopenRebuilt closes db, opens dir again with opts and RebuildIndex,
// and fails t unless the index rebuilt from the segments holds what
// imported (the digest of the imported ledger's index before) says.
func reopenRebuilt(t *testing.T, db *DB, dir string, opts *Options, info LedgerInfo, imported *index.Digest) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o := *opts
	o.RebuildIndex = true
	db, err := Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := db.idx.Digest(context.Background(), info.ID, info.Count)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if diff := imported.Diff(rebuilt); diff != "" || imported.Count != rebuilt.Count {
		db.Close()
		t.Fatalf("the imported index differs from the rebuilt one: %s", diff)
	}
	return db
}
