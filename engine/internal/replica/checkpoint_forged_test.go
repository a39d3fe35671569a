package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
)

// TestForgedLargerCheckpointIsReplaced: someone with write access to the
// bucket replaces the checkpoint with one that claims far more events
// than the bucket holds (no writer stores a checkpoint before its
// records). The Writer, which holds every stored record, does not take
// it for a newer checkpoint and stop storing its own (the bucket would
// stay without a checkpoint that a restore accepts): it replaces it with
// its next one and says what it found (Status.LastError).
func TestForgedLargerCheckpointIsReplaced(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	w := openTake(t, testConfig(st, tl, Replicated), tl)
	last := tl.append(4)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	w.Checkpoint(testCheckpoint(tl, last), last)
	eventually(t, "the first checkpoint is stored", func() bool { return checkpointIn(t, st) == last })
	o, err := st.Get(ctx, CheckpointKey(testLedgerID()))
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(fmt.Sprintf("test/%08x\n%d\nAAAA\n\n— not a signature\n", uint32(testLedgerID()), uint64(1)<<40))
	if _, err := st.Put(ctx, CheckpointKey(testLedgerID()), forged, store.ReplaceIf(o.ETag)); err != nil {
		t.Fatal(err)
	}
	last = tl.append(3)
	if err := w.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	w.Checkpoint(testCheckpoint(tl, last), last)
	eventually(t, "the writer's checkpoint replaces the forged one", func() bool { return checkpointIn(t, st) == last })
	if e := w.Status().LastError; e == nil || !strings.Contains(e.Error(), CheckpointKey(testLedgerID())) {
		t.Fatalf("status's last error: %v, want one naming %s", e, CheckpointKey(testLedgerID()))
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBucketCheckpointJudgedBeforeKept: the Writer keeps the bucket's
// checkpoint instead of storing a smaller one of its own only when it is
// a checkpoint of the ledger signed by its key (Config.OpenCheckpoint)
// whose root is the ledger's at its size. Each case puts an object in
// the checkpoint's place that claims the records stored (more than the
// writer's next checkpoint covers, so that a Writer that believed it
// would keep it); the Writer replaces every bad one with its own,
// reports it (Status.Damage, matching corruption.Err and naming the
// object) and keeps the good one. A valid checkpoint older than one the
// writer stored before (the bucket restored from an old copy) is
// replaced and reported too.
func TestBucketCheckpointJudgedBeforeKept(t *testing.T) {
	t.Parallel()
	origin := fmt.Sprintf("test/%08x", uint32(testLedgerID()))
	key := CheckpointKey(testLedgerID())
	for _, tc := range []struct {
		name string
		// object is what replaces the bucket's checkpoint, once the
		// writer stored size 4 and the bucket holds records 1 to 10.
		object func(tl *testLog) []byte
		kept   bool   // the writer keeps it (no damage)
		why    string // in Status.Damage
	}{
		{"signed by another key", func(tl *testLog) []byte {
			c := tree.Checkpoint{Origin: origin, Size: 10, Root: tree.Hash(tl.root(10))}
			return append(append(c.Text(), '\n'), "— another key\n"...)
		}, false, "not signed by the test key"},
		{"another history", func(tl *testLog) []byte {
			c := tree.Checkpoint{Origin: origin, Size: 10, Root: tree.Hash(tl.root(9))}
			return append(append(c.Text(), '\n'), testSignature...)
		}, false, "another history"},
		{"not a checkpoint", func(*testLog) []byte { return []byte("garbage\n") }, false, "not signed by the test key"},
		{"more events than stored", func(tl *testLog) []byte {
			c := tree.Checkpoint{Origin: origin, Size: 1000, Root: tree.Hash(tl.root(10))}
			return append(append(c.Text(), '\n'), testSignature...)
		}, false, "claims 1000 events, the bucket holds 10"},
		{"older than one stored", func(tl *testLog) []byte { return testCheckpoint(tl, 2) }, false, "stored one of 4 before"},
		{"valid and larger", func(tl *testLog) []byte { return testCheckpoint(tl, 10) }, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tl := newTestLog(t, 1<<20, segment.Sync)
			st := store.NewMemory()
			ctx := context.Background()
			w := openTake(t, testConfig(st, tl, Replicated), tl)
			tl.append(3)
			if err := w.Wait(ctx, 4); err != nil {
				t.Fatal(err)
			}
			w.Checkpoint(testCheckpoint(tl, 4), 4)
			if err := w.WaitCheckpoint(ctx, 4); err != nil {
				t.Fatal(err)
			}
			last := tl.append(6)
			if err := w.Wait(ctx, last); err != nil {
				t.Fatal(err)
			}
			o, err := st.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			object := tc.object(tl)
			if _, err := st.Put(ctx, key, object, store.ReplaceIf(o.ETag)); err != nil {
				t.Fatal(err)
			}
			mine := testCheckpoint(tl, 7)
			w.Checkpoint(mine, 7)
			if err := w.WaitCheckpoint(ctx, 7); err != nil {
				t.Fatal(err)
			}
			o, err = st.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			s := w.Status()
			if tc.kept {
				if !bytes.Equal(o.Data, object) || s.Damage != nil {
					t.Fatalf("the bucket's checkpoint:\n%s\nwant the valid larger one kept:\n%s\ndamage: %v", o.Data, object, s.Damage)
				}
				return
			}
			if !bytes.Equal(o.Data, mine) {
				t.Fatalf("the bucket's checkpoint:\n%s\nwant the writer's of size 7:\n%s", o.Data, mine)
			}
			if !errors.Is(s.Damage, corruption.Err) || !strings.Contains(s.Damage.Error(), key) || !strings.Contains(s.Damage.Error(), tc.why) {
				t.Fatalf("Status.Damage: %v; want corruption naming %s and saying %q", s.Damage, key, tc.why)
			}
		})
	}
}

// TestFencedWriterLeavesBadCheckpoint: a checkpoint object this writer
// cannot build on is replaced only by the ledger's writer: a Writer that
// another took the ledger from learns it (ErrFenced) before it would,
// and leaves the object to the new writer.
func TestFencedWriterLeavesBadCheckpoint(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20, segment.Sync)
	st := store.NewMemory()
	ctx := context.Background()
	cfg := testConfig(st, tl, Replicated)
	cfg.GCGrace = time.Hour // no re-read of the manifest before a Wait returns
	a := openTake(t, cfg, tl)
	last := tl.append(5)
	if err := a.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	takeLedger(t, testConfig(st, tl, Replicated))
	object := []byte("another writer's, with another key\n")
	if _, err := st.Put(ctx, CheckpointKey(testLedgerID()), object, store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	a.Checkpoint(testCheckpoint(tl, last), last)
	if err := a.WaitCheckpoint(ctx, last); !errors.Is(err, ErrFenced) {
		t.Fatalf("the fenced writer's checkpoint: %v, want ErrFenced", err)
	}
	o, err := st.Get(ctx, CheckpointKey(testLedgerID()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Data, object) {
		t.Fatalf("the fenced writer replaced the bucket's checkpoint with:\n%s", o.Data)
	}
}
