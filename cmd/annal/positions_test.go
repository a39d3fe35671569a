package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLostPositionsNotedUntilAccepted: meta.db removed; `annal verify`
// rebuilds it and notes the lost consumer positions; every later command
// (a writer's open and a reader's) notes it again, naming the cure, until
// `annal accept-lost-positions`; then no command notes it. (Only the
// terminal of the rebuilding command was told.)
func TestLostPositionsNotedUntilAccepted(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	mustAnnal(t, `{"entity":"order","key":"o-1","event":"placed","data":{}}`, "--dir", dir, "append", "orders")
	if err := os.Remove(filepath.Join(dir, "meta.db")); err != nil {
		t.Fatal(err)
	}
	// The first writer's open rebuilds meta.db (verify and ledgers only
	// read: they say it is missing); every command after it notes the loss.
	for _, args := range [][]string{{"checkpoint", "orders", "--new"}, {"verify"}, {"ledgers"}} {
		_, errOut := wantExit(t, exitOK, []string{"annal: note: ", "consumer positions lost", "annal accept-lost-positions"}, append([]string{"--dir", dir}, args...)...)
		if !strings.Contains(errOut, "was missing") {
			t.Fatalf("%s: the note does not say what happened: %s", args, errOut)
		}
	}
	if out := mustAnnal(t, "", "--dir", dir, "accept-lost-positions"); !strings.HasPrefix(out, "accepted: ") {
		t.Fatalf("accept-lost-positions: %s", out)
	}
	for _, args := range [][]string{{"verify"}, {"ledgers"}} {
		if _, errOut := wantExit(t, exitOK, nil, append([]string{"--dir", dir}, args...)...); errOut != "" {
			t.Fatalf("%s after the loss was accepted: %s", args, errOut)
		}
	}
	if out := mustAnnal(t, "", "--dir", dir, "accept-lost-positions"); !strings.Contains(out, "nothing to accept") {
		t.Fatalf("accept-lost-positions again: %s", out)
	}
}
