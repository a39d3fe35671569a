package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/segment/forge"
)

// TestVerifyFileUnvouchedEventsFail: a file with events after those its
// checkpoint covers fails verify-file --checkpoint (exit 3), saying how
// many events are vouched for; --prefix passes it, saying the same; a
// file the checkpoint covers whole says "N of N". (It passed with exit 0:
// the events after the checkpoint were vouched for by nothing.)
func TestVerifyFileUnvouchedEventsFail(t *testing.T) {
	t.Parallel()
	dir := payments(t)
	work := t.TempDir()
	exported, cpFile := filepath.Join(work, "pay.ndjson"), filepath.Join(work, "pay.checkpoint")
	mustAnnal(t, "", "--dir", dir, "export", "pay", "-o", exported, "--checkpoint", cpFile)
	key := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "key", "--format", "table"))
	out := mustAnnal(t, "", "verify-file", exported, "--checkpoint", cpFile, "--key", key)
	if !strings.Contains(out, "6 of 6 events vouched for") {
		t.Fatalf("a file the checkpoint covers whole: %s", out)
	}
	for range 3 {
		mustAnnal(t, `{"entity":"account","key":"acct-9","event":"paid","data":{"amount":1}}`, "--dir", dir, "append", "pay")
	}
	longer := filepath.Join(work, "longer.ndjson")
	mustAnnal(t, "", "--dir", dir, "export", "pay", "-o", longer)
	wantExit(t, exitVerification, []string{"6 of 9 events vouched for", "the 3 after them are covered by no checkpoint", "--prefix"},
		"verify-file", longer, "--checkpoint", cpFile, "--key", key)
	out = mustAnnal(t, "", "verify-file", longer, "--checkpoint", cpFile, "--key", key, "--prefix")
	if !strings.Contains(out, "6 of 9 events vouched for") {
		t.Fatalf("--prefix: %s", out)
	}
	wantExit(t, exitUsage, []string{"--prefix goes with --checkpoint"}, "verify-file", longer, "--prefix")
}

// TestExportCheckpointOfForgedLedgerFails: an event of the ledger changed
// in place in its segment, its CRC32C and Event ID kept (segment/forge):
// `annal export -o F --checkpoint C` exits 3, saying that the ledger was
// rewritten (its open reads the changed segment again and refuses the
// ledger; the export's own comparison of the leaves before it signs is
// engine's TestExportCheckpointRefusesForgedEvents), and leaves neither C
// nor F (nor a temporary file) behind. (It wrote C, signed, beside the
// forged events.)
func TestExportCheckpointOfForgedLedgerFails(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	var in strings.Builder
	for i, amount := range []int{20, 100, 7} {
		fmt.Fprintf(&in, `{"entity":"payment","key":"p-%d","event":"paid","data":{"amount":%d,"memo":"refund approved by desk 7, ticket 4711"}}`+"\n", i, amount)
	}
	mustAnnal(t, in.String(), "--dir", dir, "append", "orders")
	entries, err := os.ReadDir(filepath.Join(dir, "ledgers"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledgers: %v %v", entries, err)
	}
	if _, err := forge.Event(filepath.Join(dir, "ledgers", entries[0].Name()), 3, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(testSeed(t), 5))); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	out, cp := filepath.Join(work, "orders.ndjson"), filepath.Join(work, "orders.checkpoint")
	wantExit(t, exitVerification, []string{"rewritten", `ledger "orders" cannot be read`}, "--dir", dir, "export", "orders", "-o", out, "--checkpoint", cp)
	if left, _ := os.ReadDir(work); len(left) != 0 {
		t.Fatalf("export of a forged ledger left %v behind", left)
	}
}
