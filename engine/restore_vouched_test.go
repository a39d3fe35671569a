package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestRestoreSaysWhatTheCheckpointVouchesFor: someone with write access
// to the bucket puts back an older checkpoint, signed by the right key.
// The events after it are checked only for what anyone can recompute
// (frames, CRC32C chains, the chunks' hash chain and Merkle roots), and
// a restore cannot refuse them (a writer acknowledges events before it
// stores their checkpoint): it says how many events the signed checkpoint
// vouches for (RestoredLedger.Signed), and so does a takeover that pulls
// them (TakeoverResult.Signed).
func TestRestoreSaysWhatTheCheckpointVouchesFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	src := t.TempDir()
	key := filepath.Join(t.TempDir(), "shared.key")
	o := replOptions(st, Replicated)
	o.SigningKeyFile = key
	db, err := Open(src, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	ck, err := db.Checkpoint(ctx, "cash")
	if err != nil {
		t.Fatal(err)
	}
	ckKey := replica.CheckpointKey(info.ID)
	var old store.Object
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if old, err = st.Get(ctx, ckKey); err == nil && bytes.Equal(old.Data, ck.Note) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint of %d events is not in the bucket after 5 s: %v", ck.Size, err)
		}
	}
	for i := range 10 {
		if _, err := appendOne(ctx, db, "cash", 10+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, ckKey, old.Data, store.Condition{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(ctx, dir, RestoreOptions{store: st, Options: &Options{SigningKeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Events != 21 || res[0].Signed != 11 {
		t.Fatalf("restored %+v, want 21 events of which the signed checkpoint vouches for 11", res)
	}
}
