package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestScripts runs testdata/script/*.txtar, with $VECTORS naming the
// shared test vectors. Besides the standard commands they have:
//
//	status N CMD ARGS...   run CMD and require exit code N (0 too); its
//	                       stdout and stderr are then checked as usual
//	capture VAR [N [RE]]   set $VAR to line N (from 1; negative from the
//	                       end; default 1) of the last stdout, or to RE's
//	                       first group in that line
//	corrupt FILE OFFSET    flip the bits of the byte at OFFSET (negative:
//	                       from the end) of FILE, which may be a glob
//	                       matching one file
//	lock DIR               open the data directory DIR in the test process
//	                       and hold it until the script ends
func TestScripts(t *testing.T) {
	vectors := filepath.Dir(vectorPath(t, "evently-examples-ledger.ndjson"))
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			// $VECTORS: the shared test vectors (real Evently ledgers).
			env.Setenv("VECTORS", vectors)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":  cmdStatus,
			"capture": cmdCapture,
			"corrupt": cmdCorrupt,
			"lock":    cmdLock,
		},
	})
}

func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status N CMD ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 3 {
		ts.Fatalf("usage: capture VAR [N [RE]]")
	}
	lines := strings.Split(strings.TrimSuffix(ts.ReadFile("stdout"), "\n"), "\n")
	n := 1
	if len(args) > 1 {
		var err error
		n, err = strconv.Atoi(args[1])
		ts.Check(err)
	}
	if n < 0 {
		n += len(lines) + 1
	}
	if n < 1 || n > len(lines) {
		ts.Fatalf("capture: stdout has %d lines, no line %s", len(lines), args[1])
	}
	v := strings.TrimSpace(lines[n-1])
	if len(args) == 3 {
		m := regexp.MustCompile(args[2]).FindStringSubmatch(v)
		if len(m) < 2 {
			ts.Fatalf("capture: %q does not match %s", v, args[2])
		}
		v = m[1]
	}
	ts.Setenv(args[0], v)
}

func cmdCorrupt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: corrupt FILE OFFSET")
	}
	files, err := filepath.Glob(ts.MkAbs(args[0]))
	ts.Check(err)
	if len(files) != 1 {
		ts.Fatalf("corrupt: %s matches %d files, want 1", args[0], len(files))
	}
	b, err := os.ReadFile(files[0])
	ts.Check(err)
	off, err := strconv.Atoi(args[1])
	ts.Check(err)
	if off < 0 {
		off += len(b)
	}
	if off < 0 || off >= len(b) {
		ts.Fatalf("corrupt: offset %s is outside %s (%d bytes)", args[1], files[0], len(b))
	}
	b[off] ^= 0xff
	ts.Check(os.WriteFile(files[0], b, 0o600))
}

func cmdLock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: lock DIR")
	}
	db, err := engine.Open(ts.MkAbs(args[0]), nil)
	ts.Check(err)
	ts.Defer(func() { db.Close() })
}
