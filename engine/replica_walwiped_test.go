package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
)

// TestReopenAfterWALDeleted: an operator deletes every wal/ object of a
// replicated ledger, taking them for stale (the sealed segments are under
// seg/). The directory, which holds every event, opens as the writer
// again: the chunks it writes then must be where a reader looks for
// them, from the newest manifest's GC boundary (not from chunk 1, below
// it, where a restore does not look and GC deletes them), so that a
// restore gets every event it acknowledged.
func TestReopenAfterWALDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	dir, o, info := closedReplicatedLedger(t, st, 600)
	r := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: info.ID})
	m, _, err := r.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.GC <= 1 || m.Segments == 0 {
		t.Fatalf("newest manifest %+v: want sealed segments and a GC boundary above 1", m)
	}
	wal := listAll(t, st, replica.LedgerPrefix(info.ID)+"wal/")
	for _, k := range wal {
		if err := st.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("reopen after the wal/ objects were deleted: %v", u)
	}
	for i := range 20 {
		if _, err := appendOne(ctx, db, "cash", 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range listAll(t, st, replica.LedgerPrefix(info.ID)+"wal/") {
		if n, _ := replica.ParseNumber(k); n < m.GC {
			t.Fatalf("chunk %s written below the GC boundary %d", k, m.GC)
		}
	}
	res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Options: &Options{SigningKeyFile: o.SigningKeyFile}})
	if err != nil {
		t.Fatalf("restore after the reopen: %v", err)
	}
	if res[0].Events != 621 || !strings.EqualFold(res[0].Name, "cash") {
		t.Fatalf("restored %+v, want 621 events", res)
	}
}
