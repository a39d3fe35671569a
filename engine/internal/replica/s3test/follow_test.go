package s3test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVersityGWCommandFollow: annal follow against versitygw, in its own
// process beside the writer's (annal append processes): the read
// commands on its directory, run beside it, see the events the writer
// appended, and refuse nothing but writes; SIGTERM ends it with exit 0.
func TestVersityGWCommandFollow(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	url := fmt.Sprintf("s3://%s/follow%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	dir := filepath.Join(t.TempDir(), "writer")
	copyDir := filepath.Join(t.TempDir(), "copy")
	must := func(code int, out, errOut string) string {
		t.Helper()
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		return out
	}
	w := []string{"--dir", dir, "--replica", url}
	must(runBin(t, bin, "", append(w, "create", "cash")...))
	key := strings.TrimSpace(must(runBin(t, bin, "", "--dir", dir, "key")))
	events := strings.Repeat(`{"entity":"acct","key":"a1","event":"credited","data":{"n":1}}`+"\n", 10)
	must(runBin(t, bin, events, append(w, "append", "cash")...))

	follow := exec.Command(bin, "follow", url, copyDir, "--key", key, "--interval", "50ms")
	var out, errOut bytes.Buffer
	follow.Stdout, follow.Stderr = &out, &errOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	defer func() {
		follow.Process.Kill()
		<-done
	}()
	// The read commands beside the follower, until they see all 21
	// events (the first 11 copied at its start, 10 appended after).
	count := func() int {
		code, o, _ := runBin(t, bin, "", "--dir", copyDir, "--format", "ndjson", "scan", "cash")
		if code != 0 {
			return -1
		}
		return strings.Count(o, "\n")
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() < 11 {
		if time.Now().After(deadline) {
			t.Fatalf("the follower's copy: %d events, want 11; follow: %s%s", count(), out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(runBin(t, bin, events, append(w, "append", "cash")...))
	for count() < 21 {
		if time.Now().After(deadline) {
			t.Fatalf("the follower's copy: %d events, want 21; follow: %s%s", count(), out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(runBin(t, bin, "", "--dir", copyDir, "verify"))
	if code, _, e := runBin(t, bin, events, "--dir", copyDir, "append", "cash"); code == 0 {
		t.Fatalf("an append to the follower's directory succeeded: %s", e)
	}
	if err := follow.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("follow after SIGTERM: %v: %s%s", err, out.String(), errOut.String())
	}
	done <- nil
	if !strings.Contains(out.String(), "cash\t") {
		t.Fatalf("follow printed no line for the ledger: %q", out.String())
	}
	t.Logf("follow printed: %s", out.String())
}
