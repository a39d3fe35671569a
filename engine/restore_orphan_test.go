package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
)

// TestRestoreSkipsLedgerWhoseCreateFailed: a CreateLedger that fails
// while the store holds back its chunks (the call times out) leaves in
// the bucket the manifest its Writer wrote when it took the new ledger:
// a ledger folder with no event and no checkpoint, which no data
// directory holds. A restore of every ledger is not refused for it (no
// signed checkpoint; and its name, taken by the ledger the retry made):
// it restores the ledgers that hold events, and lists that one as not
// restored, saying why (a restore by name passes over it).
func TestRestoreSkipsLedgerWhoseCreateFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	key := filepath.Join(t.TempDir(), "shared.key")
	o := replOptions(st, Replicated)
	o.SigningKeyFile = key
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err == nil {
		t.Fatal("CreateLedger with the store holding back every chunk succeeded")
	}
	st.release()
	orders, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(ctx, db, "orders", 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids, err := bucketLedgers(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("the bucket holds ledgers %v, want 3 (one of them the failed create's)", ids)
	}
	for _, name := range []string{"", "orders"} {
		res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Ledger: name, Options: &Options{SigningKeyFile: key}})
		if err != nil {
			t.Fatalf("restore %q: %v", name, err)
		}
		want := map[string]uint64{"cash": 1, "orders": 2}
		wantSkipped := 1
		if name != "" {
			want, wantSkipped = map[string]uint64{"orders": 2}, 0
		}
		if len(res) != len(want)+wantSkipped {
			t.Fatalf("restore %q: %+v, want %v and %d not restored", name, res, want, wantSkipped)
		}
		for _, r := range res {
			if r.Skipped != "" {
				if r.Name != "orders" || r.ID == orders.ID || r.Events != 0 || !strings.Contains(r.Skipped, "manifest only") {
					t.Fatalf("restore %q: not restored: %+v, want the failed create's ledger, its manifest only", name, r)
				}
				continue
			}
			if want[r.Name] != r.Events || r.Name == "orders" && r.ID != orders.ID {
				t.Fatalf("restore %q: %+v, want %v (orders: %s)", name, res, want, orders.ID)
			}
		}
	}
}

// TestRestoreByIDOfLedgerWithoutEvent: the ledger a failed CreateLedger
// left (a manifest, no event, no checkpoint), named by its ID with
// RestoreUnsigned, fails saying that the bucket holds no event of it,
// not that a point in time (none given) is before its first event.
func TestRestoreByIDOfLedgerWithoutEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	o := replOptions(st, Replicated)
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	cash, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err == nil {
		t.Fatal("CreateLedger with the store holding back every chunk succeeded")
	}
	st.release()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids, err := bucketLedgers(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id == cash.ID {
			continue
		}
		_, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Ledger: id.String(), Unsigned: RestoreUnsigned})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "holds no event") || strings.Contains(err.Error(), "point in time") {
			t.Fatalf("restore by ID of the failed create's ledger %s: %v", id, err)
		}
	}
}

// TestRestoreOfLedgerStrippedToManifest: an attacker (or an operator
// clearing "stale" objects) deletes a ledger's checkpoint and every chunk
// from the bucket, leaving its manifests. A restore of every ledger never
// passes over it in silence: a ledger written in one session (its
// manifest looks as a failed CreateLedger's does) is listed as not
// restored, saying that the bucket holds its manifest only and that
// deleted objects look so; one whose manifest records a later epoch (its
// directory was reopened, so it had events) fails the restore as
// corruption, naming the manifest.
func TestRestoreOfLedgerStrippedToManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, reopened := range []bool{false, true} {
		st := newReplStore()
		key := filepath.Join(t.TempDir(), "shared.key")
		o := replOptions(st, Replicated)
		o.SigningKeyFile = key
		dir := t.TempDir()
		db, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		cash, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := appendOne(ctx, db, "cash", i); err != nil {
				t.Fatal(err)
			}
			if _, err := appendOne(ctx, db, "orders", i); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if reopened {
			if db, err = Open(dir, o); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range append(listAll(t, st, replica.LedgerPrefix(cash.ID)+"wal/"), replica.CheckpointKey(cash.ID)) {
			if err := st.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Options: &Options{SigningKeyFile: key}})
		if reopened {
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), replica.LedgerPrefix(cash.ID)+"manifest/") || !strings.Contains(err.Error(), "deleted") {
				t.Fatalf("restore of a bucket whose reopened ledger lost its checkpoint and chunks: %v, want corruption naming its manifest", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("restore of a bucket whose ledger lost its checkpoint and chunks: %v", err)
		}
		var restored, skipped []string
		for _, r := range res {
			if r.Skipped != "" {
				skipped = append(skipped, r.Name)
				if r.ID != cash.ID || !strings.Contains(r.Skipped, "manifest only") || !strings.Contains(r.Skipped, "deleted") {
					t.Fatalf("not restored: %+v, want cash (%s), its manifest only, deleted objects named as a cause", r, cash.ID)
				}
				continue
			}
			restored = append(restored, r.Name)
		}
		if len(restored) != 1 || restored[0] != "orders" || len(skipped) != 1 {
			t.Fatalf("restored %v, not restored %v: want orders restored and cash listed as not restored", restored, skipped)
		}
	}
}
