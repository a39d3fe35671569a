package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadersBesideWriter: while "annal append acct" has the
// directory open, another process lists, scans, gets and tails the
// ledger; tail prints the events the writer appends after it started;
// a second writer still refuses.
func TestReadersBesideWriter(t *testing.T) {
	bin, err := exec.LookPath("annal") // the test binary, put in $PATH by TestMain
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		return runAnnal(t, bin, dir, "", args...)
	}
	if code, _, errOut := run("create", "acct"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}

	// The writer: one ID a line for each NDJSON event it reads.
	w, in, wout, wErr := startAppend(t, bin, dir, "acct")
	defer w.Process.Kill()
	ids := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(wout)
		for sc.Scan() {
			ids <- sc.Text()
		}
		close(ids)
	}()
	appendOne := func(event string) string {
		t.Helper()
		if _, err := fmt.Fprintf(in, `{"entity":"e","key":"k","event":%q}`+"\n", event); err != nil {
			t.Fatal(err)
		}
		select {
		case id, ok := <-ids:
			if !ok {
				t.Fatalf("the writer stopped: %s", wErr.String())
			}
			return id
		case <-time.After(time.Minute):
			t.Fatal("the writer printed no ID")
		}
		return ""
	}
	first := []string{appendOne("A0"), appendOne("A1")}

	code, out, errOut := run("ledgers", "--format", "ndjson")
	if code != 0 || !strings.Contains(out, `"name":"acct"`) || !strings.Contains(out, `"count":3`) {
		t.Fatalf("ledgers beside the writer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run("scan", "acct", "--format", "ndjson")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, first[1]) {
		t.Fatalf("scan beside the writer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run("get", first[0], "--format", "ndjson")
	if code != 0 || !strings.Contains(out, first[0]) {
		t.Fatalf("get beside the writer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run("append", "acct", "--entity", "e", "--key", "k", "--event", "B")
	if code != 1 || out != "" || !strings.Contains(errOut, fmt.Sprintf("in use by process %d", w.Process.Pid)) {
		t.Fatalf("a second writer: exit %d, stdout %q, stderr %q; want exit 1 naming the writer", code, out, errOut)
	}

	// tail follows: it prints what the writer appends next. It starts
	// after A1, so that A2 is printed however late it opens; A3 is
	// appended once tail has printed A2, so it is open by then and must
	// follow the writer to print it.
	tail := exec.Command(bin, "tail", "acct", "--after", first[1], "--format", "ndjson", "--dir", dir)
	tout, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var tErr bytes.Buffer
	tail.Stderr = &tErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer tail.Process.Kill()
	// tailFailed stops tail before reading its stderr, which its copier
	// writes while it runs.
	tailFailed := func(format string, args ...any) {
		t.Helper()
		tail.Process.Kill()
		tail.Wait()
		t.Fatalf(format+"; tail's stderr %q", append(args, tErr.String())...)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(tout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for _, name := range []string{"A2", "A3"} {
		id := appendOne(name)
		select {
		case line, ok := <-lines:
			if !ok || !strings.Contains(line, id) {
				tailFailed("tail printed %q (open: %v), want the event %s", line, ok, id)
			}
		case <-time.After(30 * time.Second):
			tailFailed("tail did not print %s", id)
		}
	}
	if err := tail.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	tail.Wait()
	if st, ok := tail.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		t.Fatalf("tail did not stop on SIGINT cleanly: %v", st)
	}
	in.Close()
	if err := w.Wait(); err != nil {
		t.Fatalf("the writer: %v: %s", err, wErr.String())
	}
}

// TestTailEndsWhenLedgerDirectoryRemoved: annal tail, following a ledger
// whose directory is then removed (rm -rf), exits non-zero saying that
// the ledger's directory was removed, instead of waiting for ever on the
// deleted files.
func TestTailEndsWhenLedgerDirectoryRemoved(t *testing.T) {
	bin, err := exec.LookPath("annal")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, errOut := runAnnal(t, bin, dir, "", "create", "acct"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	ldirs, err := filepath.Glob(filepath.Join(dir, "ledgers", "*"))
	if err != nil || len(ldirs) != 1 {
		t.Fatalf("the ledger's directory: %v %v", ldirs, err)
	}
	tail := exec.Command(bin, "tail", "acct", "--from-start", "--format", "ndjson", "--dir", dir)
	tail.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	tout, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var tErr bytes.Buffer
	tail.Stderr = &tErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer tail.Process.Kill()
	sc := bufio.NewScanner(tout)
	if !sc.Scan() {
		tail.Process.Kill()
		tail.Wait()
		t.Fatalf("tail printed nothing: %s", tErr.String())
	}
	// The genesis event is printed: tail follows. Then the directory goes.
	if err := os.RemoveAll(ldirs[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- tail.Wait()
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		tail.Process.Kill()
		<-done
		t.Fatalf("tail still follows a ledger whose directory was removed; stderr %q", tErr.String())
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 || !strings.Contains(tErr.String(), ldirs[0]) || !strings.Contains(tErr.String(), "removed") {
		t.Fatalf("tail of a ledger whose directory was removed: %v, stderr %q; want exit 1 naming the directory removed", err, tErr.String())
	}
}
