package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain is also the follower process of the lag runs (-follower),
// which start this binary again with followChildEnv set.
func TestMain(m *testing.M) {
	if spec := os.Getenv(followChildEnv); spec != "" {
		if err := runFollowChild(spec, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "replbench follower:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFollowerLagPrintsEveryFigure runs -follower, briefly: a follower
// process gets every event the writer appended (a run fails otherwise),
// and the output holds the run's row and the summary.
func TestFollowerLagPrintsEveryFigure(t *testing.T) {
	var buf bytes.Buffer
	out = &buf
	defer func() { out = os.Stdout }()
	if err := runLag(1, 500*time.Millisecond, t.TempDir(), "", true, []time.Duration{100 * time.Millisecond}, 1000, 20*time.Millisecond); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	got := buf.String()
	for _, want := range []string{"  1     100ms ", "follower lag at 100ms: p50 "} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestRunAllPrintsEveryFigure runs the whole harness, briefly, against
// its own versitygw: every configuration runs and stores what it
// appends (an append that fails fails the run), and the restore gets
// back every event; the output holds every row the report is read from.
func TestRunAllPrintsEveryFigure(t *testing.T) {
	var buf bytes.Buffer
	out = &buf
	defer func() { out = os.Stdout }()
	if err := runAll(1, 300*time.Millisecond, 3000, t.TempDir(), "", true); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	got := buf.String()
	for _, want := range []string{
		"  repl1 ", "  repl64 ", "  ship64 ", "  repl100 ", "  ship100 ", "  idle ",
		"  1     local64 ", "  1     repl64 ", "  1     ship64 ", "  1     local1 ", "  1     repl1 ",
		"  1     PUT ", "  1     fsync ", "  1     PUT x4 ",
		"Replicated 64 / local Sync 64 (>= 0.5)",
		"Shipped 64 / local Sync 64 (>= 0.9)",
		"Replicated 1 p50 / (PUT p50 + fsync p50) (<= 1.5)",
		"restore: a ledger of 3000 events",
		"  restore 5: ",
		"restore events/s (>= 300000): median ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
