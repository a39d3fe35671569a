package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyFileUnvouchedEventsFail: a file with events after those its
// checkpoint covers fails verify-file --checkpoint (exit 3), saying how
// many events are vouched for; --prefix passes it, saying the same; a
// file the checkpoint covers whole says "N of N". (It passed with exit 0:
// the events after the checkpoint were vouched for by nothing.)
func TestVerifyFileUnvouchedEventsFail(t *testing.T) {
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
