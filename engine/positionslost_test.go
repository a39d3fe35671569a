package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLostPositionsLastUntilAccepted: meta.db removed; one Open rebuilds
// it (and is closed); the next Open, as a service starting after the
// terminal that saw the note, still reports the loss (MetaRebuilt matches
// ErrPositionsLost), every consumer call fails with it, and a read-only
// open reports it too, until AcceptLostPositions; then consumers work
// again, from the first event, and later Opens report nothing. (The
// second Open saw MetaRebuilt() == nil, and a consumer started where the
// documented advice put it skipped the events it was never given.)
func TestLostPositionsLastUntilAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 5, appendSpec{Options: unsynced})
	c, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := take(ctx, t, c, 3, func(int, Event) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir) // the rebuild, as `annal verify` would do it
	if !errors.Is(db.MetaRebuilt(), ErrPositionsLost) {
		t.Fatalf("the rebuilding Open: MetaRebuilt %v", db.MetaRebuilt())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		db = openTest(t, dir) // the service
		rb := db.MetaRebuilt()
		if !errors.Is(rb, ErrPositionsLost) || !strings.Contains(rb.Error(), "AcceptLostPositions") || !strings.Contains(rb.Error(), "was missing") {
			t.Fatalf("open %d after the rebuild: MetaRebuilt %v, want ErrPositionsLost naming the cure", round+2, rb)
		}
		if _, err := db.Consumer("l", "c", ConsumerOptions{}); !errors.Is(err, ErrPositionsLost) {
			t.Fatalf("Consumer: %v, want ErrPositionsLost", err)
		}
		if _, err := db.Consumer("l", "new", ConsumerOptions{}); !errors.Is(err, ErrPositionsLost) {
			t.Fatalf("Consumer of a new name: %v, want ErrPositionsLost", err)
		}
		if _, err := db.Consumers("l"); !errors.Is(err, ErrPositionsLost) {
			t.Fatalf("Consumers: %v, want ErrPositionsLost", err)
		}
		info, err := db.Ledger("l")
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SetConsumerPosition(ctx, "l", "new", info.Head); !errors.Is(err, ErrPositionsLost) {
			t.Fatalf("SetConsumerPosition: %v, want ErrPositionsLost", err)
		}
		if err := db.DeleteConsumer(ctx, "l", "c"); !errors.Is(err, ErrPositionsLost) {
			t.Fatalf("DeleteConsumer: %v, want ErrPositionsLost", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ro.MetaRebuilt(), ErrPositionsLost) {
		t.Errorf("OpenReadOnly: MetaRebuilt %v, want ErrPositionsLost", ro.MetaRebuilt())
	}
	ro.Close()

	db = openTest(t, dir)
	if err := db.AcceptLostPositions(); err != nil {
		t.Fatal(err)
	}
	if err := db.MetaRebuilt(); err != nil {
		t.Fatalf("after AcceptLostPositions: MetaRebuilt %v", err)
	}
	c, err = db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := take(ctx, t, c, 1, nil); err != nil || got[0].Seq != 1 {
		t.Fatalf("after the loss is accepted: %v %v, want the genesis", seqs(got), err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if err := db.MetaRebuilt(); err != nil {
		t.Fatalf("the Open after the loss was accepted: MetaRebuilt %v", err)
	}
}
