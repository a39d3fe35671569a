package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBucketCheckpointWithoutCosignaturesReplaced: a writer with tlog
// witnesses (Options.TlogWitnesses) publishes only cosigned checkpoints.
// Someone with write access to the bucket strips the witness's
// cosignature from the ledger's checkpoint object while the writer is
// down (or puts there the checkpoint the log signed before asking the
// witnesses, which every witness is sent): signed by the ledger's key,
// its root the ledger's, of the latest size. The writer that opens next
// does not keep it as its own (a verifier asking for the witness's
// cosignature would refuse the bucket's checkpoint until the ledger grew):
// it stores the cosigned checkpoint in its place and reports it in
// ReplicaStatus.Damage.
func TestBucketCheckpointWithoutCosignaturesReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	ws := startTlogWitness(t, vkey)
	policy, err := cosign.NewPolicy([]string{ws.w.VerifierKey()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	st := newReplStore()
	dir := t.TempDir()
	o := replOptions(st, Replicated)
	o.SigningKeyFile = keyFile
	o.TlogWitnesses = []cosign.WitnessConfig{ws.config()}
	db := mkOpen(t, dir, o)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ckKey := replica.CheckpointKey(info.ID)
	good, err := st.Get(ctx, ckKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Check(good.Data); err != nil {
		t.Fatalf("the bucket's checkpoint after Close: %v", err)
	}
	// The log's signature alone: the text, the empty line, its first
	// signature line.
	end := bytes.Index(good.Data, []byte("\n\n")) + 2
	stripped := good.Data[:end+bytes.IndexByte(good.Data[end:], '\n')+1]
	if _, err := policy.Check(stripped); err == nil {
		t.Fatalf("the stripped checkpoint still passes the policy:\n%s", stripped)
	}
	if _, err := st.Put(ctx, ckKey, stripped, store.ReplaceIf(good.ETag)); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitCheckpointObject(t, st, ckKey, func(data []byte) error {
		_, err := policy.Check(data)
		return err
	})
	s, err := db.ReplicaStatus("cash")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Damage, ErrCorruption) || !strings.Contains(s.Damage.Error(), ckKey) || !strings.Contains(s.Damage.Error(), "tlog witnesses") {
		t.Fatalf("ReplicaStatus.Damage: %v; want ErrCorruption naming %s and the tlog witnesses", s.Damage, ckKey)
	}
}

// TestBucketCheckpointBeforeTlogWitnessesNotDamage: a ledger whose last
// checkpoint was signed before the directory took tlog witnesses: the
// writer opened with them finds in the bucket the checkpoint it holds
// itself (the same bytes, without cosignatures). That is not damage: the
// object is not replaced (by the same bytes, reported each Open until
// the ledger grows).
func TestBucketCheckpointBeforeTlogWitnessesNotDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &checkpointPuts{Store: newReplStore()}
	dir, o, info := closedReplicatedLedger(t, st, 5)
	if _, err := st.Get(ctx, replica.CheckpointKey(info.ID)); err != nil {
		t.Fatal(err)
	}
	k, _, err := tree.LoadOrCreateKey(vfs.Default, o.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ws := startTlogWitness(t, k.Verifier)
	o.TlogWitnesses = []cosign.WitnessConfig{ws.config()}
	st.n.Store(0)
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	// Close waits for the checkpoint given at the open to be stored or
	// judged kept.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.n.Load(); n != 0 {
		t.Fatalf("the bucket's checkpoint, the writer's own, was replaced %d times", n)
	}
}

// checkpointPuts counts the Puts of checkpoint objects.
type checkpointPuts struct {
	store.Store
	n atomic.Int64
}

func (s *checkpointPuts) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if strings.HasSuffix(key, "/checkpoint") {
		s.n.Add(1)
	}
	return s.Store.Put(ctx, key, data, cond)
}
