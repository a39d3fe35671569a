package replica

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/segment"
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
