package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
)

// TestVerifyLostTail: a ledger of 300 Sync events in 4 KiB segments,
// closed cleanly, loses its last segment; "annal verify --full" (and
// without --full) reports the ledger as failed, naming it, with the
// corruption, and exits 3; the other ledger verifies. (Issue 12, finding
// 2: it said "ok".)
func TestVerifyLostTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := newDir(t)
	db, err := engine.Open(dir, &engine.Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "acct"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 299 {
		ev := engine.EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"i":%d,"pad":"%040d"}`, i, i))}
		if _, err := db.Append(ctx, "acct", []engine.EventInput{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "ledgers", info.ID.String(), "*.seg"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify", "--full"}, {"verify"}, {"verify", "--full", "acct"}} {
		code, out, errOut := annal(t, "", append([]string{"--dir", dir}, args...)...)
		if code != exitVerification {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, exitVerification, out, errOut)
		}
		for _, want := range []string{"annal: verify acct:", "acknowledged events lost", info.ID.String(), "#300"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: standard error does not say %q:\n%s", args, want, errOut)
			}
		}
	}
}
