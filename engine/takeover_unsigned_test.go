package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
)

// TestTakeoverOfLedgerWithoutCheckpoint: a copy of a directory is behind
// its bucket in two ledgers, and the bucket lost one ledger's
// checkpoint object. Takeover refuses by default, naming the ledger and
// the two ways on, as a restore does (ErrNoCheckpoint); Unsigned
// SkipUnsigned takes the other ledger and leaves that one behind its
// bucket, not taken; RestoreUnsigned pulls its events too, verified, and
// the directory signs them: it appends after them, and verifies whole
// after a reopen.
func TestTakeoverOfLedgerWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, old, ids := behindWithoutCheckpoint(t)
	ckKey := replica.CheckpointKey(ids["orders"].ID)

	refused := copyDir(t, old)
	if _, _, err := Takeover(ctx, refused, replOptions(st, Replicated)); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("takeover with a ledger whose bucket has no checkpoint: %v, want ErrNoCheckpoint", err)
	} else {
		for _, want := range []string{ids["orders"].ID.String(), ckKey, "SkipUnsigned", "--unsigned skip", "--unsigned pull"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
	}

	skipped := copyDir(t, old)
	db, res, err := TakeoverWith(ctx, skipped, replOptions(st, Replicated), TakeoverOptions{Unsigned: SkipUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		switch {
		case r.Name == "orders" && (r.Skipped == "" || !strings.Contains(r.Skipped, ckKey) || r.Pulled != 1):
			t.Fatalf("orders: %+v, want skipped (naming %s), nothing pulled", r, ckKey)
		case r.Name == "cash" && (r.Skipped != "" || r.Pulled != 31):
			t.Fatalf("cash: %+v, want #2 to #31 pulled", r)
		}
	}
	if err := db.Unavailable()["orders"]; !errors.Is(err, ErrBehind) {
		t.Fatalf("orders after a takeover that skipped it: %v, want ErrBehind", err)
	}
	if _, err := appendOne(ctx, db, "cash", 100); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	pulled := copyDir(t, old)
	db, res, err = TakeoverWith(ctx, pulled, replOptions(st, Replicated), TakeoverOptions{Unsigned: RestoreUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Name == "orders" && (r.Skipped != "" || r.Pulled != 31 || r.Signed != 1) {
			t.Fatalf("orders: %+v, want #2 to #31 pulled, #1 signed (the directory's own checkpoint)", r)
		}
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable after the takeover: %v", u)
	}
	if next, err := appendOne(ctx, db, "orders", 100); err != nil || next.FirstSeq != 32 {
		t.Fatalf("append after the pull: %+v, %v; want #32", next, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(pulled, replOptions(st, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Verify(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if c, err := db.LatestCheckpoint("orders"); err != nil || c.Size != 32 {
		t.Fatalf("orders' checkpoint after the reopen: size %d, %v; want 32", c.Size, err)
	}
}

// behindWithoutCheckpoint makes a data directory with the ledgers cash
// and orders replicated to a bucket, stores 30 events in each beyond a
// copy of it made before, and deletes the bucket's checkpoint of orders.
// It returns the bucket, the copy, and the ledgers.
func behindWithoutCheckpoint(t *testing.T) (*replStore, string, map[string]LedgerInfo) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	a := openRepl(t, dir, st, Replicated)
	ids := map[string]LedgerInfo{}
	for _, name := range []string{"cash", "orders"} {
		info, err := a.CreateLedger(ctx, LedgerSpec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = info
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	old := copyDir(t, dir)
	a = openRepl(t, dir, st, Replicated)
	for i := range 30 {
		for _, name := range []string{"cash", "orders"} {
			if _, err := appendOne(ctx, a, name, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, replica.CheckpointKey(ids["orders"].ID)); err != nil {
		t.Fatal(err)
	}
	return st, old, ids
}

// TestTakeoverUnsignedOnlyForLedgersNamed: TakeoverOptions.Ledgers
// limits Unsigned to the ledgers it names. A copy behind its bucket in
// cash and orders, the bucket without orders' checkpoint: RestoreUnsigned
// for cash alone refuses the takeover, naming orders and the selection
// (orders keeps RefuseUnsigned); for orders, named by its ID (in upper
// case), it pulls
// orders' events, signed by the directory (Signed 1, its own checkpoint),
// and cash's, vouched for by the bucket's checkpoint: both are taken and
// append. A name that is no ledger of the directory, and Ledgers with
// RefuseUnsigned, are refused with ErrInvalid, nothing pulled.
func TestTakeoverUnsignedOnlyForLedgersNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, old, ids := behindWithoutCheckpoint(t)
	ckKey := replica.CheckpointKey(ids["orders"].ID)

	for _, c := range []struct {
		to   TakeoverOptions
		want string
	}{
		{TakeoverOptions{Unsigned: RestoreUnsigned, Ledgers: []string{"orders", "nosuch"}}, `"nosuch"`},
		{TakeoverOptions{Ledgers: []string{"orders"}}, "RefuseUnsigned"},
	} {
		dir := copyDir(t, old)
		_, _, err := TakeoverWith(ctx, dir, replOptions(st, Replicated), c.to)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("takeover with %+v: %v, want ErrInvalid saying %s", c.to, err, c.want)
		}
		if n := readerLedger(t, dir, "orders").Count; n != 1 {
			t.Fatalf("a refused takeover (%+v) pulled into orders: %d events, want 1", c.to, n)
		}
	}

	refused := copyDir(t, old)
	_, _, err := TakeoverWith(ctx, refused, replOptions(st, Replicated), TakeoverOptions{Unsigned: RestoreUnsigned, Ledgers: []string{"cash"}})
	if !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("takeover pulling unsigned cash alone: %v, want orders refused (ErrNoCheckpoint)", err)
	}
	for _, want := range []string{ids["orders"].ID.String(), ckKey, "TakeoverOptions.Ledgers", "--ledger", `"cash"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if n := readerLedger(t, refused, "orders").Count; n != 1 {
		t.Fatalf("orders after the refused takeover: %d events, want 1 (nothing pulled)", n)
	}

	pulled := copyDir(t, old)
	db, res, err := TakeoverWith(ctx, pulled, replOptions(st, Replicated), TakeoverOptions{Unsigned: RestoreUnsigned, Ledgers: []string{strings.ToUpper(ids["orders"].ID.String())}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]TakeoverResult{
		"orders": {Local: 1, Pulled: 31, Signed: 1},
		"cash":   {Local: 1, Pulled: 31, Signed: 31},
	}
	for _, r := range res {
		w := want[r.Name]
		if r.Skipped != "" || r.Local != w.Local || r.Pulled != w.Pulled || r.Signed != w.Signed {
			t.Errorf("%s: %+v, want %+v", r.Name, r, w)
		}
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable after the takeover: %v", u)
	}
	for _, name := range []string{"cash", "orders"} {
		if next, err := appendOne(ctx, db, name, 100); err != nil || next.FirstSeq != 32 {
			t.Fatalf("append to %s after the pull: %+v, %v; want #32", name, next, err)
		}
	}
}
