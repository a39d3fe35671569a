package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// TestBucketCheckpointOfAnotherKeyReplaced: while the writer is down,
// someone with write access to the bucket replaces the ledger's
// checkpoint object with one of the same tree (size and root) signed by
// another key, which no restore with the ledger's key accepts. The
// writer that opens next does not take it for its own (it is as large as
// the ledger's latest checkpoint, so a writer that read only its size
// kept it): it stores the ledger's checkpoint in its place, reports it
// in ReplicaStatus.Damage (ErrCorruption, naming the object), and a
// restore with the ledger's key gets every event.
func TestBucketCheckpointOfAnotherKeyReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	dir, o, info := closedReplicatedLedger(t, st, 5)
	ckKey := replica.CheckpointKey(info.ID)
	good, err := st.Get(ctx, ckKey)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := tree.LoadOrCreateKey(vfs.Default, filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	text := good.Data[:bytes.Index(good.Data, []byte("\n\n"))+1]
	forged, err := note.Sign(&note.Note{Text: string(text)}, other.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, ckKey, forged, store.ReplaceIf(good.ETag)); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitCheckpointObject(t, st, ckKey, func(data []byte) error {
		if !bytes.Equal(data, good.Data) {
			return fmt.Errorf("want the ledger's\n%s", good.Data)
		}
		return nil
	})
	s, err := db.ReplicaStatus("cash")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Damage, ErrCorruption) || !strings.Contains(s.Damage.Error(), ckKey) || !strings.Contains(s.Damage.Error(), "not signed by this directory's key") {
		t.Fatalf("ReplicaStatus.Damage: %v; want ErrCorruption naming %s", s.Damage, ckKey)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(ctx, filepath.Join(t.TempDir(), "restored"), RestoreOptions{store: st, Options: &Options{SigningKeyFile: o.SigningKeyFile}})
	if err != nil || res[0].Events != 6 || res[0].Resigned {
		t.Fatalf("restore: %+v, %v", res, err)
	}
}

// waitCheckpointObject waits until the bucket's checkpoint object key
// is what ok accepts (its error says what is wanted).
func waitCheckpointObject(t *testing.T, st store.Store, key string, ok func(data []byte) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now, err := st.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		err = ok(now.Data)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket's checkpoint is still\n%s\n%v", now.Data, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
