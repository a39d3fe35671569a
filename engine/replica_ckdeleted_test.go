package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
)

// TestCheckpointDeletedFromBucketIsStoredAgain: the bucket's checkpoint
// object is deleted (by an operator taking it for stale, or by anyone with
// write access) while the writer is down. Without it no restore is
// possible. The writer that opens next stores the ledger's latest
// checkpoint again, though no event is appended: after its Open and
// Close the bucket holds it and a restore gets every event.
func TestCheckpointDeletedFromBucketIsStoredAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	dir, o, info := closedReplicatedLedger(t, st, 5)
	ckKey := replica.CheckpointKey(info.ID)
	before, err := st.Get(ctx, ckKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, ckKey); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := st.Get(ctx, ckKey)
	if err != nil {
		t.Fatalf("the checkpoint after the writer's Open and Close: %v", err)
	}
	if !bytes.Equal(after.Data, before.Data) {
		t.Fatalf("the bucket's checkpoint is now\n%s\nwant the ledger's latest\n%s", after.Data, before.Data)
	}
	res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Options: &Options{SigningKeyFile: o.SigningKeyFile}})
	if err != nil || res[0].Events != 6 {
		t.Fatalf("restore: %+v, %v", res, err)
	}
}
