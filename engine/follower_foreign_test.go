package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFollowerServesNoLedgerItDoesNotFollow: a whole ledger folder put
// into a follower's directory while it was stopped, of a ledger the
// bucket does not hold (here another bucket's, signed by the same key,
// with one more event than its signed checkpoint, which the follower
// cannot verify against anything), is not served by the follower's DB:
// the follower neither laid nor verified any of it.
func TestFollowerServesNoLedgerItDoesNotFollow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vkey, info, forkDir, forged := forkedRecord(t, newReplStore())

	dir := t.TempDir()
	fw := openTestFollower(t, dir, newReplStore(), vkey) // a bucket without ledgers
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, ledgersDir, info.ID.String())
	if err := os.CopyFS(to, os.DirFS(filepath.Join(forkDir, ledgersDir, info.ID.String()))); err != nil {
		t.Fatal(err)
	}
	fw = openTestFollower(t, dir, newReplStore(), vkey)
	defer fw.Close()
	un := fw.DB().Unavailable()
	t.Logf("unavailable: %v", un)
	if why := un["cash"]; why == nil || !strings.Contains(why.Error(), "does not follow") {
		t.Fatalf("the follower's DB's unavailable ledgers: %v; want cash (%s), saying the follower does not follow it", un, info.ID)
	}
	for range 20 {
		if ev, err := fw.DB().Get(ctx, forged); err == nil {
			t.Fatalf("the follower's DB serves event %d %q of ledger %s, which it does not follow", ev.Seq, ev.Event, info.ID)
		}
		for ev, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
			if err == nil {
				t.Fatalf("the follower's DB serves event %d %q of ledger %s, which it does not follow", ev.Seq, ev.Event, info.ID)
			}
			break
		}
	}
}
