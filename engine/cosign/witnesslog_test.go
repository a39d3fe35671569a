package cosign

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/tree"
)

// cosignSizes has the witness w cosign l's checkpoints of each size in
// turn, each from the size before.
func cosignSizes(t *testing.T, w *Witness, l *testLog, sizes ...int64) {
	t.Helper()
	old := uint64(0)
	if c, ok := w.Cosigned(l.origin); ok {
		old = c.Size
	}
	for _, n := range sizes {
		for l.n < n {
			l.grow(t, "a", 1)
		}
		_, msg := l.checkpoint(t, n)
		proof := l.proof(n)
		var hashes []tree.Hash
		if old != 0 && old != uint64(n) {
			var err error
			if hashes, err = proof(old); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.AddCheckpoint(request(old, hashes, msg)); err != nil {
			t.Fatalf("cosign size %d from %d: %v", n, old, err)
		}
		old = uint64(n)
	}
}

// openLogWitness opens a witness on a new directory for a new log key,
// and returns the directory, the options, the witness and an empty
// history of the log.
func openLogWitness(t *testing.T) (string, WitnessOptions, *Witness, *testLog) {
	t.Helper()
	skey, vkey := newLogKey(t, "log.example")
	dir := t.TempDir()
	opts := WitnessOptions{Logs: []string{vkey}}
	w, err := OpenWitness(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return dir, opts, w, newTestLog(t, skey, vkey)
}

// TestWitnessRefusesStateOlderThanItsLog: the witness's state file put
// back alone from an old copy (the directory's backup restored over it,
// or the file replaced) would make the witness cosign a fork of what it
// cosigned since: from the old size, any history consistent with it.
// The log beside it (LogFile), written after the state, says what it
// cosigned last: the witness refuses to start, naming both files, the
// origin and the two sizes. The latest state put back, it starts.
func TestWitnessRefusesStateOlderThanItsLog(t *testing.T) {
	dir, opts, w, l := openLogWitness(t)
	cosignSizes(t, w, l, 5)
	state := filepath.Join(dir, StateFile)
	old := readFile(t, state)
	cosignSizes(t, w, l, 9, 12)
	w.Close()
	latest := readFile(t, state)
	if err := os.WriteFile(state, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if w, err := OpenWitness(dir, opts); err == nil {
		// What it would do: cosign, from size 5, a history that forks
		// after it.
		fork := &testLog{origin: l.origin, signer: l.signer, vkey: l.vkey}
		fork.grow(t, "a", 5)
		fork.grow(t, "b", 4)
		_, msg := fork.checkpoint(t, 9)
		p, _ := fork.proof(9)(5)
		_, cerr := w.AddCheckpoint(request(5, p, msg))
		w.Close()
		t.Fatalf("a witness opened with a state older than its log (and cosigned a fork of what it cosigned: %v)", cerr)
	} else if msg := err.Error(); !strings.Contains(msg, state) || !strings.Contains(msg, filepath.Join(dir, LogFile)) ||
		!strings.Contains(msg, l.origin) || !strings.Contains(msg, "size 5") || !strings.Contains(msg, "size 12") {
		t.Fatalf("a witness whose state is older than its log: %v, want an error naming both files, the origin and sizes 5 and 12", err)
	}
	if err := os.WriteFile(state, latest, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWitness(dir, opts)
	if err != nil {
		t.Fatalf("the latest state put back: %v", err)
	}
	defer w.Close()
	if c, _ := w.Cosigned(l.origin); c.Size != 12 {
		t.Fatalf("the witness holds size %d, want 12", c.Size)
	}
}

// TestWitnessLogCatchesUpWithState: a crash between the state's write
// and the log's append leaves the state one cosignature ahead (and
// perhaps a line cut short, never synced): the witness starts, and its
// log gets the state's line, so that the state is never found ahead of
// a log that it is not.
func TestWitnessLogCatchesUpWithState(t *testing.T) {
	dir, opts, w, l := openLogWitness(t)
	cosignSizes(t, w, l, 3, 7)
	w.Close()
	logPath := filepath.Join(dir, LogFile)
	full := readFile(t, logPath)
	lines := bytes.SplitAfter(full, []byte("\n"))
	if len(lines) != 3 || len(lines[2]) != 0 {
		t.Fatalf("the log after two cosignatures:\n%s", full)
	}
	// The last line lost, and the start of it written without its end.
	cut := append(append([]byte{}, lines[0]...), lines[1][:10]...)
	if err := os.WriteFile(logPath, cut, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWitness(dir, opts)
	if err != nil {
		t.Fatalf("a state one cosignature ahead of the log: %v", err)
	}
	cosignSizes(t, w, l, 11)
	w.Close()
	want := append(append([]byte{}, full...), readFile(t, filepath.Join(dir, StateFile))...)
	if got := readFile(t, logPath); !bytes.Equal(got, want) {
		t.Fatalf("the log:\n%s\nwant:\n%s", got, want)
	}
	if _, err := OpenWitness(dir, opts); err != nil {
		t.Fatal(err)
	}
}

// TestWitnessRefusesToStartWithoutItsLog: the log is created with the
// key; a state that holds origins without it beside is refused (deleted,
// or a directory of a witness from before the log: the error says how to
// make it from the state), and starts once it is made so.
func TestWitnessRefusesToStartWithoutItsLog(t *testing.T) {
	dir, opts, w, l := openLogWitness(t)
	if _, err := os.Stat(filepath.Join(dir, LogFile)); err != nil {
		t.Fatalf("a new witness's log: %v", err)
	}
	cosignSizes(t, w, l, 4)
	w.Close()
	logPath, state := filepath.Join(dir, LogFile), filepath.Join(dir, StateFile)
	if err := os.Remove(logPath); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWitness(dir, opts); err == nil || !strings.Contains(err.Error(), logPath) || !strings.Contains(err.Error(), "cp "+state+" "+logPath) {
		t.Fatalf("a witness without its log: %v, want an error naming it and how to make it", err)
	}
	if err := os.WriteFile(logPath, readFile(t, state), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWitness(dir, opts)
	if err != nil {
		t.Fatalf("the log made from the state: %v", err)
	}
	w.Close()
}
