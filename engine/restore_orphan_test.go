package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreSkipsLedgerWhoseCreateFailed: a CreateLedger that fails
// while the store holds back its chunks (the call times out) leaves in
// the bucket the manifest its Writer wrote when it took the new ledger:
// a ledger folder with no event and no checkpoint, which no data
// directory holds. A restore of every ledger is not refused for it (no
// signed checkpoint; and its name, taken by the ledger the retry made):
// it restores the ledgers that hold events.
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
		if name != "" {
			want = map[string]uint64{"orders": 2}
		}
		if len(res) != len(want) {
			t.Fatalf("restore %q: %+v, want %v", name, res, want)
		}
		for _, r := range res {
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
