package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/segment"
)

// TestEverySegmentLostWitnessFromIndex: meta.db removed and every segment
// of a ledger removed (its directory and NAME file left): the index's
// witness says events were durable, so the ledger is corruption, not an
// unfinished CreateLedger whose directory Open removes.
func TestEverySegmentLostWitnessFromIndex(t *testing.T) {
	t.Parallel()
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

// TestLostTailRebuildIndexKeepsWitness: with meta.db gone, the index's
// progress marker is the only witness of a ledger's durable head.
// Rebuilding the index (Options.RebuildIndex, annal reindex) must not
// throw that witness away before recovery has used it: the six lost
// tails are still refused as corruption, and no byte under ledgers/
// changes (the zeroed tail was cut, destroying the evidence).
func TestLostTailRebuildIndexKeepsWitness(t *testing.T) {
	t.Parallel()
	lt := newLostTailLedger(t)
	for _, c := range lostTailCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, lt.dir, dir)
			if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
				t.Fatal(err)
			}
			c.damage(t, lt, dir)
			before := hashTree(t, filepath.Join(dir, ledgersDir))
			// The rebuild, then an ordinary Open (annal reindex, then any
			// command): the witness must survive the rebuild's Close.
			for _, rebuild := range []bool{true, false} {
				db, err := Open(dir, &Options{SegmentSize: 4096, RebuildIndex: rebuild})
				if err != nil {
					t.Fatal(err)
				}
				var bad error
				for _, err := range db.Unavailable() {
					if strings.Contains(err.Error(), lt.id.String()) {
						bad = err
					}
				}
				if _, err := db.Ledger("other"); err != nil {
					t.Errorf("ledger other: %v", err)
				}
				db.Close()
				if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
					t.Fatalf("RebuildIndex %v: ledger l: %v, want corruption", rebuild, bad)
				}
				if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
					t.Fatalf("RebuildIndex %v: files under ledgers/ changed: %s", rebuild, d)
				}
			}
			// The segments restored (from a backup): the ledger opens whole,
			// and its index is complete.
			ld := filepath.Join(ledgersDir, lt.id.String())
			if err := os.RemoveAll(filepath.Join(dir, ld)); err != nil {
				t.Fatal(err)
			}
			copyTree(t, filepath.Join(lt.dir, ld), filepath.Join(dir, ld))
			db, err := Open(dir, &Options{SegmentSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			info, err := db.Ledger("l")
			if err != nil || info.Count != 300 {
				t.Fatalf("restored ledger l: %+v, %v", info, err)
			}
			if rep, err := db.Verify(context.Background(), "l", nil); err != nil {
				t.Fatalf("restored ledger l: verify: %v (%+v)", err, rep)
			}
			n := 0
			for _, err := range db.Scan(context.Background(), "l", ScanOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 300 {
				t.Fatalf("restored ledger l: scan gives %d events, want 300", n)
			}
		})
	}
}

// TestIndexWitnessExactAfterCleanClose: after a clean Close the index's
// witness is the exact head too, whatever the appends' durability: with
// meta.db gone, a lost tail of Interval and None appends (one batch each,
// indexed before their sync) is refused, not cut.
func TestIndexWitnessExactAfterCleanClose(t *testing.T) {
	t.Parallel()
	for _, d := range []Durability{Interval, None} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			db, err := Open(dir, &Options{SyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
			if err != nil {
				t.Fatal(err)
			}
			evs := make([]EventInput, 50)
			for i := range evs {
				evs[i] = order(i)
			}
			if _, err := db.Append(ctx, "l", evs, &AppendOptions{Durability: d}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
				t.Fatal(err)
			}
			seg := filepath.Join(dir, ledgersDir, info.ID.String(), fmt.Sprintf("%020d.seg", 1))
			fi, err := os.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(make([]byte, 40), fi.Size()-40)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			before := hashTree(t, filepath.Join(dir, ledgersDir))
			db, err = Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Refused under its name (its NAME file's), though meta.db
			// is gone.
			lerr := db.Unavailable()["l"]
			db.Close()
			if !errors.Is(lerr, segment.ErrCorruption) || !strings.Contains(lerr.Error(), "acknowledged events lost") {
				t.Fatalf("ledger l: %v, want corruption", lerr)
			}
			if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
				t.Fatalf("files under ledgers/ changed: %s", d)
			}
		})
	}
}
