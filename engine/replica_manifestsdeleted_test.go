package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
)

// TestRestoreAfterManifestsDeleted: an operator deletes the manifests of
// a replicated ledger (taking them for stale) after GC deleted the chunks
// below the newest one's boundary. The writer that opens next writes
// manifests that know no boundary (or an older one), below which no
// chunk is left. A restore then still gets every event: the chunks
// listed from the boundary need not begin at it, as long as their events
// follow the sealed segments' without a gap.
func TestRestoreAfterManifestsDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	dir := t.TempDir()
	key := filepath.Join(t.TempDir(), "shared.key")
	o := replOptions(st, Replicated)
	o.SigningKeyFile = key
	o.StoreTimeout = time.Second
	o.GCGrace = 2100 * time.Millisecond // just above twice StoreTimeout
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	wal := replica.LedgerPrefix(info.ID) + "wal/"
	first := func() uint64 {
		keys := listAll(t, st, wal)
		if len(keys) == 0 {
			return 0
		}
		n, _ := replica.ParseNumber(keys[0])
		return n
	}
	i := 0
	for deadline := time.Now().Add(20 * time.Second); first() <= 1; i++ {
		if time.Now().After(deadline) {
			t.Fatal("GC deleted no chunk in 20 s")
		}
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
		if i > 600 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range listAll(t, st, replica.LedgerPrefix(info.ID)+"manifest/") {
		if err := st.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	db, err = Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("reopen after the manifests were deleted: %v", u)
	}
	if _, err := appendOne(ctx, db, "cash", i); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Options: &Options{SigningKeyFile: key}})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if want := uint64(i + 2); res[0].Events != want {
		t.Fatalf("restored %d events, want %d", res[0].Events, want)
	}
}
