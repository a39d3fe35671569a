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

	bolt "go.etcd.io/bbolt"
)

// metaCutTemplate builds a data directory whose meta.db has a history
// (three ledgers, appends, consumer positions, four Opens and Closes) and
// returns it with the high-water mark of meta.db's pages, in bytes.
func metaCutTemplate(t *testing.T) (dir string, hwm int64) {
	t.Helper()
	ctx := context.Background()
	dir = t.TempDir()
	for round := range 4 {
		db := openTest(t, dir)
		for l := range 3 {
			name := fmt.Sprintf("l%d", l)
			if round == 0 {
				if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			evs := make([]EventInput, 20)
			for i := range evs {
				evs[i] = order(round*100 + i)
			}
			res, err := db.Append(ctx, name, evs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.SetConsumerPosition(ctx, name, fmt.Sprintf("c%d", round), res.IDs[3]); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := bolt.Open(filepath.Join(dir, metaFile), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return dir, hwm
}

// TestMetaCut: meta.db truncated by an operator (to nothing, to one page,
// to its two meta pages, to half, into the pages it uses, to exactly
// those), with and without the index. Open never panics: a file cut into
// its pages fails with an error that names it and says it is cut short
// (it said "nil pointer dereference", bbolt's fault reading a page past
// the end through its map), leaving it as it was; an empty one is
// rebuilt from the segments and MetaRebuilt says so; one cut only past
// the pages it uses opens whole, consumer positions included. A reader
// (OpenReadOnly) always opens, naming the ledgers from their NAME files;
// its Consumers says when it could not read meta.db.
func TestMetaCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tpl, hwm := metaCutTemplate(t)
	const page = 4096
	if hwm < 4*page {
		t.Fatalf("meta.db uses %d bytes: too few pages for the cases", hwm)
	}
	type outcome int
	const (
		opens   outcome = iota // every ledger, every consumer position
		rebuilt                // every ledger, no consumer, MetaRebuilt
		cut                    // Open fails: cut short
		tooSmall
	)
	sizes := []struct {
		name string
		size int64
	}{
		{"emptied", 0}, {"one page", page}, {"meta pages only", 2 * page},
		{"half of its pages", hwm / 2}, {"its last page cut", hwm - page}, {"to its pages", hwm},
	}
	for _, sz := range sizes {
		want := opens
		switch {
		case sz.size == 0:
			want = rebuilt
		case sz.size < 2*page:
			want = tooSmall
		case sz.size < hwm:
			want = cut
		}
		for _, noIndex := range []bool{false, true} {
			name := sz.name
			if noIndex {
				name += ", no index"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				copyTree(t, tpl, dir)
				metaPath := filepath.Join(dir, metaFile)
				if err := os.Truncate(metaPath, sz.size); err != nil {
					t.Fatal(err)
				}
				if noIndex {
					if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
						t.Fatal(err)
					}
				}
				before, err := os.ReadFile(metaPath)
				if err != nil {
					t.Fatal(err)
				}
				db, err := Open(dir, nil)
				switch want {
				case cut, tooSmall:
					if err == nil {
						db.Close()
						t.Fatalf("Open of a meta.db of %d bytes (its pages reach %d): opened", sz.size, hwm)
					}
					msg := "is damaged: it is cut short: its pages run to byte " + fmt.Sprint(hwm)
					if want == tooSmall {
						msg = "file size too small"
					}
					if !strings.Contains(err.Error(), metaPath) || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "nil pointer") {
						t.Fatalf("Open: %v\nwant an error naming %s and saying %q", err, metaPath, msg)
					}
					if after, _ := os.ReadFile(metaPath); string(after) != string(before) {
						t.Errorf("the failed Open changed meta.db (%d bytes, then %d)", len(before), len(after))
					}
				default:
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					if u := db.Unavailable(); len(u) != 0 {
						t.Errorf("unavailable: %v", u)
					}
					if got := len(db.Ledgers()); got != 3 {
						t.Errorf("%d ledgers, want 3", got)
					}
					if rb := db.MetaRebuilt(); (rb != nil) != (want == rebuilt) || rb != nil && !strings.Contains(rb.Error(), "was empty") {
						t.Errorf("MetaRebuilt: %v", rb)
					}
					if want == rebuilt {
						// The positions are lost until the loss is accepted.
						if _, err := db.Consumers(db.Ledgers()[0].Name); !errors.Is(err, ErrPositionsLost) {
							t.Errorf("Consumers before AcceptLostPositions: %v", err)
						}
						if err := db.AcceptLostPositions(); err != nil {
							t.Fatal(err)
						}
					}
					for _, li := range db.Ledgers() {
						if _, err := db.Verify(ctx, li.Name, nil); err != nil {
							t.Errorf("Verify %s: %v", li.Name, err)
						}
						cs, err := db.Consumers(li.Name)
						if err != nil {
							t.Errorf("Consumers %s: %v", li.Name, err)
						}
						if n := map[outcome]int{opens: 4, rebuilt: 0}[want]; len(cs) != n {
							t.Errorf("ledger %s has %d consumers, want %d", li.Name, len(cs), n)
						}
					}
					if rb := db.MetaRebuilt(); rb != nil {
						t.Errorf("MetaRebuilt after AcceptLostPositions: %v", rb)
					}
					if err := db.Close(); err != nil {
						t.Fatal(err)
					}
				}
				if want != opens && want != rebuilt {
					// The reader, on what the failed Open left.
					r, err := OpenReadOnly(dir, nil)
					if err != nil {
						t.Fatalf("OpenReadOnly: %v", err)
					}
					defer r.Close()
					var names []string
					for _, li := range r.Ledgers() {
						names = append(names, li.Name)
					}
					if fmt.Sprint(names) != "[l0 l1 l2]" {
						t.Errorf("the reader shows ledgers %v, want [l0 l1 l2]", names)
					}
					// Consumer positions are only in meta.db: the reader
					// says it could not read it, or (a cut that spares the
					// pages it reads) gives them.
					if _, err := r.Consumers("l0"); err != nil && !strings.Contains(err.Error(), "the metadata file could not be read") {
						t.Errorf("the reader's Consumers: %v", err)
					}
				}
			})
		}
	}
}
