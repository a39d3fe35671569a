package main

import (
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMeterShowsNoRateBeforeHalfASecond: the bar draws nothing, and so no
// rate, before the operation has run for half a second, and its first rate
// is the bytes over the whole run (the first sample once
// showed "602-869 GB/s", the bytes of a first burst over the microseconds
// since the bar was first drawn). Sizes are in IEC units.
func TestMeterShowsNoRateBeforeHalfASecond(t *testing.T) {
	t.Parallel()
	var w lockedBuffer
	m := newMeter(&w, "verify", 1<<30, meterBytes)
	m.set(600 << 20) // a first burst, at once
	if s := w.String(); s != "" {
		t.Fatalf("the bar drew %q before half a second", s)
	}
	time.Sleep(600 * time.Millisecond)
	m.set(700 << 20)
	s := w.String()
	// 700 MiB over at least 0.6 s: at most 1.14 GiB/s, however loaded
	// the machine (a load can only lengthen the run).
	match := regexp.MustCompile(`([0-9.]+) (B|KiB|MiB|GiB|TiB)/s`).FindStringSubmatch(s)
	if match == nil || strings.Contains(s, " MB") || strings.Contains(s, " GB") {
		t.Fatalf("the bar drew %q: want a rate in IEC units", s)
	}
	v, _ := strconv.ParseFloat(match[1], 64)
	unit := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[match[2]]
	if rate := v * unit; rate > (700<<20)/0.6*1.01 {
		t.Fatalf("the bar drew %q: a rate of %.0f B/s, more than 700 MiB over 0.6 s", s, rate)
	}
	m.finish()
}

// TestMeterPhase: a phase replaces the bar with its name and the time it
// has taken, at once, and the bar comes back after it; at its total the
// bar stays drawn (the library clears a bar that reaches it).
func TestMeterPhase(t *testing.T) {
	t.Parallel()
	var w lockedBuffer
	m := newMeter(&w, "verify a", 100, meterBytes)
	m.delay = 0
	m.set(100)
	if m.bar.IsFinished() {
		t.Fatal("the bar ended at its total: it vanishes until the command ends")
	}
	m.showPhase("verify a: checking the index")
	if s := w.String(); !regexp.MustCompile(`verify a: checking the index… +\[0s\]`).MatchString(s) {
		t.Fatalf("the phase drew %q", s)
	}
	m.set(100) // recorded, not drawn
	m.describe("verify b")
	m.set(100)
	m.finish()
	m.set(100) // nothing after the end
	m.showPhase("late")
	if s := w.String(); strings.Contains(s, "late") {
		t.Fatalf("drawn after finish: %q", s)
	}
	var none *meter // draws nothing, and every method works
	none.set(1)
	none.describe("x")
	none.showPhase("x")
	none.finish()
}

// TestImportShowsItsLastPhase: once the input is read, import says that it
// writes, syncs and indexes the ledger (the bar once
// vanished at 92% for the 6 s that takes for a large ledger).
func TestImportShowsItsLastPhase(t *testing.T) {
	defer func(f func(w io.Writer) io.Writer) { progressTo = f }(progressTo)
	progressTo = func(w io.Writer) io.Writer { return w } // as on a terminal
	dir := t.TempDir()
	var out, errOut lockedBuffer
	code := run([]string{"--dir", dir, "import", vectorPath(t, "evently-examples-ledger.ndjson")}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut.String())
	}
	if s := errOut.String(); !strings.Contains(s, "import: input read; writing, syncing and indexing the ledger…") {
		t.Fatalf("import drew %q", s)
	}
	// And verify --full says that it checks the index.
	errOut = lockedBuffer{}
	if code := run([]string{"--dir", dir, "verify", "--full"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("verify: exit %d: %s", code, errOut.String())
	}
	if s := errOut.String(); !strings.Contains(s, ": segments ok; checking the index against them…") {
		t.Fatalf("verify --full drew %q", s)
	}
}
