package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runningRestore is an annal restore process.
type runningRestore struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error // its Wait's result
	tmp  string     // its temporary directory beside the target
}

// restoreTmps lists the temporary directories of restores to target.
func restoreTmps(target string) []string {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".restore-*"))
	return m
}

// startRestore starts annal restore url target and returns once its
// temporary directory (one not among those beside target before) holds
// .restoring: the restore holds it and reads the bucket. If ended is
// not nil, a restore that ends first is returned too (tmp ""), and
// *ended says so; else it fails the test.
func startRestore(t *testing.T, bin, key, url, target string, ended *bool) *runningRestore {
	t.Helper()
	before := map[string]bool{}
	for _, d := range restoreTmps(target) {
		before[d] = true
	}
	r := &runningRestore{cmd: exec.Command(bin, "--signing-key", key, "restore", url, target), done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	for {
		for _, d := range restoreTmps(target) {
			if _, err := os.Stat(filepath.Join(d, ".restoring")); err == nil && !before[d] {
				r.tmp = d
				return r
			}
		}
		select {
		case err := <-r.done:
			if ended != nil {
				*ended, r.done = true, make(chan error, 1)
				r.done <- err
				return r
			}
			t.Fatalf("the restore ended (%v) before it was seen at work: %s", err, r.out.String())
		case <-time.After(time.Millisecond):
		}
	}
}

// exitCode waits for the restore and returns its exit code.
func (r *runningRestore) exitCode(t *testing.T) int {
	t.Helper()
	err := <-r.done
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return 0
}

// TestVersityGWCommandRestoreKilled: annal restore processes against
// versitygw. A restore killed (SIGKILL) while it reads the bucket leaves
// its temporary directory beside the target; the next restore to the
// target removes it. Two restores to one target at once: neither
// removes the other's directory; one is renamed into place, the other
// fails (exit 2: the target is no longer empty) and leaves nothing; the
// restored directory verifies in full, and nothing else is left beside
// it.
func TestVersityGWCommandRestoreKilled(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	l := makeLedger(t, 20000, 64<<10)
	prefix := fmt.Sprintf("killed%d", prefixes.Add(1))
	objects := upload(t, openPrefix(t, prefix), l, 5)
	url := bucketURL(endpoint, prefix)
	key := l.opts.SigningKeyFile
	target := filepath.Join(t.TempDir(), "r")

	killed := startRestore(t, bin, key, url, target, nil)
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := killed.exitCode(t); code != -1 {
		t.Fatalf("the killed restore exited %d: %s", code, killed.out.String())
	}
	if _, err := os.Stat(filepath.Join(killed.tmp, ".restoring")); err != nil {
		t.Fatalf("the killed restore left no temporary directory: %v", err)
	}

	// Two at once: the first is seen at work, then the second starts (and
	// is seen at work too, unless the first was done before it read the
	// target: it then fails at once, as the last step of the other).
	var ended bool
	first := startRestore(t, bin, key, url, target, nil)
	second := startRestore(t, bin, key, url, target, &ended)
	codes := []int{first.exitCode(t), second.exitCode(t)}
	t.Logf("%d objects; exits %v; both at work at once: %v", objects, codes, !ended)
	loser := map[[2]int]*runningRestore{{0, 2}: second, {2, 0}: first}[[2]int(codes)]
	if loser == nil {
		t.Fatalf("two restores at once exited %v, want one 0 and one 2:\n%s\n%s", codes, first.out.String(), second.out.String())
	}
	if !strings.Contains(loser.out.String(), "no longer an empty directory") && !strings.Contains(loser.out.String(), "not empty") {
		t.Fatalf("the second restore to finish failed for another cause than the first's: %s", loser.out.String())
	}
	if left := restoreTmps(target); len(left) > 0 {
		t.Fatalf("left beside the target: %v", left)
	}
	code, out, errOut := runBin(t, bin, "", "--signing-key", key, "--dir", target, "verify", "--full")
	if code != 0 {
		t.Fatalf("verify --full of the restored directory: exit %d, %s%s", code, out, errOut)
	}
}

// TestVersityGWCommandRestoreWritesNothing: annal restore with
// $ANNAL_REPLICA naming the bucket it restores (an operator's
// environment) writes nothing to it: every object keeps its ETag, and
// no object is added.
func TestVersityGWCommandRestoreWritesNothing(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	l := makeLedger(t, 2000, 64<<10)
	prefix := fmt.Sprintf("untouched%d", prefixes.Add(1))
	st := openPrefix(t, prefix)
	upload(t, st, l, 50)
	url := bucketURL(endpoint, prefix)
	objects := func() map[string]string {
		m := map[string]string{}
		for after := ""; ; {
			p, err := st.List(context.Background(), "", after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range p.Objects {
				m[o.Key] = o.ETag
				after = o.Key
			}
			if len(p.Objects) < 1000 {
				return m
			}
		}
	}
	before := objects()
	t.Setenv("ANNAL_REPLICA", url)
	target := filepath.Join(t.TempDir(), "r")
	code, out, errOut := runBin(t, bin, "", "--signing-key", l.opts.SigningKeyFile, "restore", url, target)
	if code != 0 {
		t.Fatalf("restore: exit %d, %s%s", code, out, errOut)
	}
	after := objects()
	for k, etag := range after {
		if before[k] != etag {
			t.Errorf("the restore wrote %s to the bucket", k)
		}
	}
	if len(after) != len(before) {
		t.Fatalf("the bucket holds %d objects after the restore, %d before", len(after), len(before))
	}
}
