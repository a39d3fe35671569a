package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// runAnnal runs the annal binary bin with args and --dir dir, stdin as
// its standard input, and returns its exit code and output.
func runAnnal(t *testing.T, bin, dir, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--dir", dir)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// startAppend starts "annal append LEDGER --dir dir" from bin, with pipes
// to its standard input and from its standard output (one ID a line), and
// its standard error kept in a buffer.
func startAppend(t *testing.T, bin, dir, ledger string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser, stderr *bytes.Buffer) {
	t.Helper()
	cmd = exec.Command(bin, "append", ledger, "--dir", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	stderr = new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, stderr
}

// TestSecondWriterNeverGetsIn is a second writer started while
// the first runs, with two real annal processes: process 1 runs "annal append
// acct" reading NDJSON from a pipe; with DIR/LOCK removed, and then
// DIR/meta.db too, process 2's "annal append acct --entity e --key k
// --event B…" must fail, print no ID and name process 1. Process 1 then
// appends more or fails cleanly; every ID it printed is there afterwards,
// and the directory verifies.
func TestSecondWriterNeverGetsIn(t *testing.T) {
	bin, err := exec.LookPath("annal") // the test binary, put in $PATH by TestMain
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	annalProc := func(stdin string, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		return runAnnal(t, bin, dir, stdin, args...)
	}
	if code, _, errOut := annalProc("", "create", "acct"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}

	// Process 1.
	p1, in, stdout, p1Err := startAppend(t, bin, dir, "acct")
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			p1.Process.Kill() // a hung process 1 fails the test, not the run
		}
	}()
	ids := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ids <- sc.Text()
		}
		close(ids)
	}()
	var printed []string
	appendP1 := func(event string) bool {
		t.Helper()
		if _, err := fmt.Fprintf(in, `{"entity":"e","key":"k","event":%q}`+"\n", event); err != nil {
			return false // process 1 has stopped
		}
		id, ok := <-ids
		if ok {
			printed = append(printed, id)
		}
		return ok
	}
	if !appendP1("A0") {
		t.Fatalf("process 1 printed no ID; stderr: %s", p1Err.String())
	}

	// Process 2, with LOCK and then meta.db gone.
	pid := fmt.Sprintf("process %d", p1.Process.Pid)
	for i, file := range []string{"LOCK", "meta.db"} {
		if err := os.Remove(filepath.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
		event := fmt.Sprintf("B%d", i)
		code, out, errOut := annalProc("", "append", "acct", "--entity", "e", "--key", "k", "--event", event)
		if code != 1 || out != "" {
			t.Fatalf("process 2 (--event %s) with %s removed: exit %d, stdout %q, stderr %q; want exit 1 and no ID", event, file, code, out, errOut)
		}
		t.Logf("process 2 with %s removed: exit %d: %s", file, code, errOut)
		if !strings.Contains(errOut, "in use by "+pid) {
			t.Fatalf("process 2 with %s removed: stderr %q, want it to name %s", file, errOut, pid)
		}
	}

	// Process 1 goes on, or stops with a clear error.
	time.Sleep(300 * time.Millisecond) // more than the engine's check interval
	more := appendP1("A1")
	in.Close()
	for id := range ids {
		printed = append(printed, id)
	}
	err = p1.Wait()
	t.Logf("process 1: more appended: %v; exit: %v; stderr: %s", more, err, p1Err.String())
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 || !strings.Contains(p1Err.String(), "changed under the running DB") {
			t.Fatalf("process 1: %v, stderr %q; want exit 0, or 1 saying that its directory changed", err, p1Err.String())
		}
	}

	// Every ID process 1 printed is there; no B event is; it verifies.
	for _, id := range printed {
		if _, err := eventid.Parse(id); err != nil {
			t.Fatalf("process 1 printed %q: %v", id, err)
		}
		if code, out, errOut := annalProc("", "get", id); code != 0 || !strings.Contains(out, id) {
			t.Fatalf("get %s (printed by process 1): exit %d, stdout %q, stderr %q", id, code, out, errOut)
		}
	}
	code, out, errOut := annalProc("", "scan", "acct", "--format", "ndjson")
	if code != 0 {
		t.Fatalf("scan: exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 1+len(printed) {
		t.Fatalf("scan: %d events, want the genesis and the %d process 1 printed:\n%s", n, len(printed), out)
	}
	for _, b := range []string{`"B0"`, `"B1"`} {
		if strings.Contains(out, b) {
			t.Fatalf("scan shows process 2's event %s:\n%s", b, out)
		}
	}
	if code, _, errOut := annalProc("", "verify", "--full"); code != 0 {
		t.Fatalf("verify --full: exit %d: %s", code, errOut)
	}
}
