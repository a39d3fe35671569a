package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/eventid"
)

// TestRestoreOfLedgerWithoutCheckpoint: a bucket that holds a ledger's
// events but no signed checkpoint of it (what a Shipped ledger lost
// before its first checkpoint was stored leaves, or a deleted
// checkpoint) fails the restore by default, naming the ledger and both
// cures; SkipUnsigned restores the other ledgers and says which one it
// skipped; RestoreUnsigned restores it too, signed anew by the restored
// directory, vouched for by no checkpoint of the bucket, at a point in
// time too.
func TestRestoreOfLedgerWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, key, ids := bucketWithoutCheckpoint(t, 40)
	orders := ids["orders"]
	restore := func(u Unsigned) (string, []RestoredLedger, error) {
		dir := filepath.Join(t.TempDir(), "restored")
		res, err := Restore(ctx, dir, RestoreOptions{store: st, Unsigned: u, Options: &Options{SigningKeyFile: key}})
		return dir, res, err
	}

	// Refused by default: nothing restored, the ledger and the cures named.
	dir, _, err := restore(RefuseUnsigned)
	if !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("restore of a bucket with a ledger without checkpoint: %v", err)
	}
	for _, want := range []string{orders.String(), `"orders"`, replica.CheckpointKey(orders), "SkipUnsigned", "--unsigned skip", "--unsigned restore"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if names, _ := os.ReadDir(dir); len(names) > 0 {
		t.Fatalf("the refused restore left %d entries in its target", len(names))
	}

	// Skipped: the other ledger restored whole.
	dir, res, err := restore(SkipUnsigned)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("restored %+v", res)
	}
	for _, rl := range res {
		switch rl.Name {
		case "cash":
			if rl.Skipped != "" || rl.Events != 41 || rl.Signed != 41 || rl.Resigned {
				t.Fatalf("cash restored as %+v", rl)
			}
		case "orders":
			if rl.Skipped == "" || !strings.Contains(rl.Skipped, "no signed checkpoint") || rl.Events != 0 {
				t.Fatalf("orders, without checkpoint, as %+v", rl)
			}
		default:
			t.Fatalf("restored %+v", rl)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ledgersDir, orders.String())); !os.IsNotExist(err) {
		t.Fatalf("the skipped ledger's folder is in the restored directory (%v)", err)
	}
	checkRestoredLedgers(t, dir, key, map[string]uint64{"cash": 41})

	// Restored: signed anew, vouched for by no checkpoint of the bucket.
	dir, res, err = restore(RestoreUnsigned)
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range res {
		if rl.Name == "orders" && (rl.Skipped != "" || rl.Events != 41 || rl.Signed != 0 || !rl.Resigned) {
			t.Fatalf("orders, without checkpoint, restored as %+v", rl)
		}
	}
	checkRestoredLedgers(t, dir, key, map[string]uint64{"cash": 41, "orders": 41})

	// A point in time of it: its first 20 events, signed anew.
	dir = filepath.Join(t.TempDir(), "restored")
	res, err = Restore(ctx, dir, RestoreOptions{store: st, Seq: 20, Unsigned: RestoreUnsigned, Options: &Options{SigningKeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range res {
		if rl.Events != 20 || !rl.Resigned || rl.Name == "orders" && rl.Signed != 0 || rl.Name == "cash" && rl.Signed != 20 {
			t.Fatalf("%s, --seq 20, restored as %+v", rl.Name, rl)
		}
	}
	checkRestoredLedgers(t, dir, key, map[string]uint64{"cash": 20, "orders": 20})
}

// bucketWithoutCheckpoint makes, through a Replicated data directory
// whose key is key, a bucket holding the ledgers cash and orders of
// events+1 events each (their genesis), and deletes orders' signed
// checkpoint from it. It returns the bucket, the key file and the
// ledgers' IDs by name.
func bucketWithoutCheckpoint(t *testing.T, events int) (*replStore, string, map[string]eventid.LedgerID) {
	t.Helper()
	ctx := context.Background()
	st := newReplStore()
	key := filepath.Join(t.TempDir(), "shared.key")
	o := replOptions(st, Replicated)
	o.SigningKeyFile = key
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]eventid.LedgerID{}
	for _, name := range []string{"cash", "orders"} {
		info, err := db.CreateLedger(ctx, LedgerSpec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = info.ID
		for i := range events {
			if _, err := appendOne(ctx, db, name, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, replica.CheckpointKey(ids["orders"])); err != nil {
		t.Fatal(err)
	}
	return st, key, ids
}

// checkRestoredLedgers opens the data directory dir with the signing key key and
// checks that it holds exactly the ledgers want, each of its number of
// events, available and verifying in full.
func checkRestoredLedgers(t *testing.T, dir, key string, want map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(dir, &Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable: %v", u)
	}
	got := db.Ledgers()
	if len(got) != len(want) {
		t.Fatalf("the directory holds %d ledgers, want %v", len(got), want)
	}
	for _, l := range got {
		if n, ok := want[l.Name]; !ok || l.Count != n {
			t.Fatalf("ledger %s holds %d events, want %v", l.Name, l.Count, want)
		}
		if _, err := db.Verify(ctx, l.Name, nil); err != nil {
			t.Fatalf("verify %s: %v", l.Name, err)
		}
	}
}

// TestRestoreSkipsEveryLedger: SkipUnsigned where every ledger to
// restore has no signed checkpoint (the one --ledger names, or every
// ledger of the bucket) restores nothing: the restore fails as the
// refusal does (ErrNoCheckpoint, matching ErrCorruption: annal restore
// exits 3), naming the ledger and the way on, and leaves nothing.
func TestRestoreSkipsEveryLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, key, ids := bucketWithoutCheckpoint(t, 1)
	dir := filepath.Join(t.TempDir(), "restored")
	_, err := Restore(ctx, dir, RestoreOptions{store: st, Ledger: "orders", Unsigned: SkipUnsigned, Options: &Options{SigningKeyFile: key}})
	if !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("restore of the one ledger, unsigned, skipped: %v", err)
	}
	for _, want := range []string{ids["orders"].String(), `"orders"`, "--unsigned restore"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if names, _ := os.ReadDir(dir); len(names) > 0 {
		t.Fatalf("the failed restore left %d entries in its target", len(names))
	}

	// A bucket whose every ledger has no signed checkpoint.
	if err := st.Delete(ctx, replica.CheckpointKey(ids["cash"])); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(ctx, dir, RestoreOptions{store: st, Unsigned: SkipUnsigned, Options: &Options{SigningKeyFile: key}})
	if !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("restore of a bucket of unsigned ledgers only, skipped: %v", err)
	}
	for _, want := range []string{ids["orders"].String(), ids["cash"].String(), `"cash"`, "--unsigned restore"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if names, _ := os.ReadDir(dir); len(names) > 0 {
		t.Fatalf("the failed restore left %d entries in its target", len(names))
	}
}

// TestRestoreWritesNothingToBucket: a restore whose Options name the
// bucket as the restored directory's replica (annal restore passes
// --replica, or $ANNAL_REPLICA, so) opens its temporary directory
// without it: it writes nothing to the bucket. Opened as a writer, it
// took every ledger from the live writer (a manifest of the next epoch,
// a fence chunk) and stored the checkpoint its own key signed, of the
// ledger without one too: a signature in the bucket for events that
// nothing signed vouched for.
func TestRestoreWritesNothingToBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, key, _ := bucketWithoutCheckpoint(t, 10)
	objects := func() map[string]string {
		p, err := st.List(ctx, "", "", 100000)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, o := range p.Objects {
			m[o.Key] = o.ETag
		}
		return m
	}
	before := objects()
	for _, u := range []Unsigned{SkipUnsigned, RestoreUnsigned} {
		o := replOptions(st, Replicated)
		o.SigningKeyFile = filepath.Join(t.TempDir(), "restore.key") // another key: the ledgers are signed anew
		dir := filepath.Join(t.TempDir(), "restored")
		res, err := Restore(ctx, dir, RestoreOptions{store: st, Unsigned: u, VerifierKey: mustKey(t, key).Verifier, Options: o})
		if err != nil {
			t.Fatal(err)
		}
		after := objects()
		for k, etag := range after {
			if before[k] != etag {
				t.Errorf("restore (Unsigned %d) wrote %s to the bucket", u, k)
			}
		}
		if len(after) != len(before) {
			t.Errorf("restore (Unsigned %d): the bucket holds %d objects, %d before", u, len(after), len(before))
		}
		want := map[string]uint64{"cash": 11}
		if u == RestoreUnsigned {
			want["orders"] = 11
		}
		if len(res) != 2 {
			t.Fatalf("restored %+v", res)
		}
		checkRestoredLedgers(t, dir, o.SigningKeyFile, want)
	}
}
