package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreRefusesTwoLedgersOfOneName: two data directories replicate
// to one prefix (signing with one key), and each made a ledger "orders":
// two ledgers of the bucket have that name. A restore of "orders" by name
// does not pick one of them: it is refused, naming both IDs (restore one
// by its ID); and so is a restore of every ledger, which would make a
// directory holding two ledgers of one name.
func TestRestoreRefusesTwoLedgersOfOneName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	key := filepath.Join(t.TempDir(), "shared.key")
	var ids []string
	for range 2 {
		o := replOptions(st, Replicated)
		o.SigningKeyFile = key
		db, err := Open(t.TempDir(), o)
		if err != nil {
			t.Fatal(err)
		}
		info, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := appendOne(ctx, db, "orders", 1); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID.String())
	}
	if ids[0] == ids[1] {
		t.Fatalf("both ledgers have the ID %s", ids[0])
	}
	for _, name := range []string{"orders", ""} {
		dir := filepath.Join(t.TempDir(), "restored")
		_, err := Restore(ctx, dir, RestoreOptions{store: st, Ledger: name, Options: &Options{SigningKeyFile: key}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ids[0]) || !strings.Contains(err.Error(), ids[1]) {
			t.Fatalf("restore of %q with two ledgers named orders in the bucket: %v, want ErrInvalid naming %s and %s", name, err, ids[0], ids[1])
		}
		checkNothingLeft(t, dir)
	}
	// One of them by its ID restores.
	dir := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(ctx, dir, RestoreOptions{store: st, Ledger: ids[1], Options: &Options{SigningKeyFile: key}})
	if err != nil || len(res) != 1 || res[0].ID.String() != ids[1] || res[0].Name != "orders" {
		t.Fatalf("restore of ledger %s by its ID: %+v, %v", ids[1], res, err)
	}
}
