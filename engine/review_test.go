package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/segment"
)

// TestEverySegmentLostWitnessFromIndex: meta.db removed and every segment
// of a ledger removed (its directory and NAME file left): the index's
// witness says events were durable, so the ledger is corruption, not an
// unfinished CreateLedger whose directory Open removes.
func TestEverySegmentLostWitnessFromIndex(t *testing.T) {
	lt := newLostTailLedger(t)
	dir := t.TempDir()
	copyTree(t, lt.dir, dir)
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= lt.segs; n++ {
		if err := os.Remove(lt.seg(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	before := hashTree(t, filepath.Join(dir, ledgersDir))
	db, err := Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var bad error
	for _, err := range db.Unavailable() {
		if strings.Contains(err.Error(), lt.id.String()) {
			bad = err
		}
	}
	db.Close()
	if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
		t.Fatalf("ledger l: %v, want corruption saying acknowledged events were lost", bad)
	}
	if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
		t.Fatalf("files under ledgers/ changed: %s", d)
	}
}
