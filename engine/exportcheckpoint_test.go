package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestExportCheckpointRefusesForgedEvents: an event changed in place with
// its CRCs kept (forgeEvent) passes every CRC check, but an export with a
// checkpoint compares the exported events' leaf hashes with the tree that
// the checkpoint signs: ErrRewritten, and not a byte of checkpoint is
// written. (It wrote the checkpoint beside the forged events, and only an
// auditor's verify-file noticed.) The events are forged under the
// running DB: an Open after the forgery refuses the ledger.
func TestExportCheckpointRefusesForgedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	segDir := ledgerSegDir(t, dir, "pay")
	db := openTest(t, dir)
	defer db.Close()
	f := forgeEvent(t, segDir, seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(testSeed(t), 14)))
	var out, cp bytes.Buffer
	_, err := db.Export(ctx, "pay", &out, ExportOptions{Checkpoint: &cp})
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), "the checkpoint is not written") {
		t.Fatalf("export with a checkpoint of a forged ledger: %v, want ErrRewritten", err)
	}
	if cp.Len() != 0 {
		t.Fatalf("export wrote a checkpoint for the forged events (#%d %s):\n%s", f.Seq, f.ID, cp.Bytes())
	}
	// Without the forgery, the same export writes the checkpoint.
	dir2 := t.TempDir()
	forgeryLedger(t, dir2)
	db2 := openTest(t, dir2)
	defer db2.Close()
	out.Reset()
	n, err := db2.Export(ctx, "pay", &out, ExportOptions{Checkpoint: &cp})
	if err != nil || n != int64(len(ids)) || cp.Len() == 0 {
		t.Fatalf("export of the whole ledger: %d events, %v, checkpoint of %d bytes", n, err, cp.Len())
	}
}
