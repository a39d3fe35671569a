package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// annalBinary builds the annal command from the repository's root module.
func annalBinary(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	bin := filepath.Join(t.TempDir(), "annal")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/annal")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/annal: %v\n%s", err, out)
	}
	return bin
}

// runBin runs the annal binary and returns its exit code and output.
func runBin(t *testing.T, bin, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("annal %v: %v", args, err)
	return 0, "", ""
}

// TestVersityGWCommandTakeover: the command against versitygw. A copy of
// the directory taken before more appends is behind the bucket: replica
// status shows a negative lag, an append to it exits 5, naming the cures;
// annal takeover pulls the bucket's events into it and makes it the
// writer: its appends succeed, the first directory is then behind in its
// turn (exit 5), and replica status shows the copy at the bucket's head.
func TestVersityGWCommandTakeover(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	url := fmt.Sprintf("s3://%s/cmd%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	t.Setenv("ANNAL_REPLICA", url)
	dir := filepath.Join(t.TempDir(), "a")
	old := filepath.Join(t.TempDir(), "b")
	must := func(code int, out, errOut string) string {
		t.Helper()
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		return out
	}
	must(runBin(t, bin, "", "--dir", dir, "create", "cash"))
	if err := os.CopyFS(old, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(old, "signing.key"), 0o600)
	events := strings.Repeat(`{"entity":"acct","key":"a1","event":"credited","data":{"n":1}}`+"\n", 3)
	must(runBin(t, bin, events, "--dir", dir, "append", "cash"))

	out := must(runBin(t, bin, "", "--format", "ndjson", "replica", "status", old))
	if !strings.Contains(out, `"stored":4`) || !strings.Contains(out, `"local":1`) || !strings.Contains(out, `"lag":-3`) {
		t.Fatalf("replica status of the old copy: %s", out)
	}
	code, _, errOut := runBin(t, bin, events, "--dir", old, "append", "cash")
	if code != 5 || !strings.Contains(errOut, "annal takeover") || !strings.Contains(errOut, "annal restore") {
		t.Fatalf("append to a directory behind its bucket: exit %d, %s; want 5 naming the cures", code, errOut)
	}
	out = must(runBin(t, bin, "", "takeover", url, old))
	if !strings.Contains(out, "1 events before\t4 now") {
		t.Fatalf("takeover: %s", out)
	}
	must(runBin(t, bin, events, "--dir", old, "append", "cash"))
	// The first directory is now behind in its turn.
	if code, _, errOut := runBin(t, bin, events, "--dir", dir, "append", "cash"); code != 5 || !strings.Contains(errOut, "#7") {
		t.Fatalf("append to the directory the takeover passed: exit %d, %s; want 5, the bucket at #7", code, errOut)
	}
	out = must(runBin(t, bin, "", "--format", "ndjson", "replica", "status", old))
	if !strings.Contains(out, `"stored":7`) || !strings.Contains(out, `"local":7`) || strings.Contains(out, `"lag":-`) {
		t.Fatalf("replica status after the takeover: %s", out)
	}
	// Without a directory: every ledger of the bucket, from its manifest.
	t.Setenv("ANNAL_DIR", "")
	out = must(runBin(t, bin, "", "--format", "ndjson", "replica", "status"))
	if !strings.Contains(out, `"name":"cash"`) || !strings.Contains(out, `"stored":7`) || strings.Contains(out, `"lag"`) {
		t.Fatalf("replica status of the bucket alone: %s", out)
	}
}

// deleteCheckpoint deletes the checkpoint object of the ledger name of
// the data directory dir from the bucket's prefix, and returns the
// ledger's ID.
func deleteCheckpoint(t *testing.T, bin, dir, prefix, name string) string {
	t.Helper()
	code, out, errOut := runBin(t, bin, "", "--format", "ndjson", "--dir", dir, "ledgers")
	if code != 0 {
		t.Fatalf("ledgers: exit %d: %s%s", code, out, errOut)
	}
	var id string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, `"name":"`+name+`"`) {
			_, rest, _ := strings.Cut(line, `"id":"`)
			id, _, _ = strings.Cut(rest, `"`)
		}
	}
	if id == "" {
		t.Fatalf("no ID of %s in %s", name, out)
	}
	if err := openPrefix(t, prefix).Delete(context.Background(), "ledgers/"+id+"/checkpoint"); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestVersityGWCommandRestoreUnsigned: annal restore of a bucket that
// holds a ledger's events without a signed checkpoint of it fails
// (exit 3) naming --unsigned; --unsigned skip restores the other ledger
// and names the skipped one on stderr; --unsigned restore restores both,
// and the restored directory verifies in full.
func TestVersityGWCommandRestoreUnsigned(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	prefix := fmt.Sprintf("cmd%d", prefixes.Add(1))
	url := bucketURL(endpoint, prefix)
	dir := filepath.Join(t.TempDir(), "a")
	must := func(code int, out, errOut string) string {
		t.Helper()
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		return out
	}
	events := strings.Repeat(`{"entity":"acct","key":"a1","event":"credited","data":{"n":1}}`+"\n", 3)
	for _, name := range []string{"cash", "orders"} {
		must(runBin(t, bin, "", "--replica", url, "--dir", dir, "create", name))
		must(runBin(t, bin, events, "--replica", url, "--dir", dir, "append", name))
	}
	orders := deleteCheckpoint(t, bin, dir, prefix, "orders")
	key := filepath.Join(dir, "signing.key")

	code, _, errOut := runBin(t, bin, "", "--signing-key", key, "restore", url, filepath.Join(t.TempDir(), "r"))
	if code != 3 || !strings.Contains(errOut, orders) || !strings.Contains(errOut, "--unsigned skip") {
		t.Fatalf("restore of a bucket with a ledger without checkpoint: exit %d, %s; want 3 naming the ledger and --unsigned", code, errOut)
	}
	skipped := filepath.Join(t.TempDir(), "r")
	code, out, errOut := runBin(t, bin, "", "--signing-key", key, "restore", url, skipped, "--unsigned", "skip")
	if code != 0 || !strings.Contains(out, "1 ledger") || !strings.Contains(errOut, "orders") || !strings.Contains(errOut, "NOT restored") {
		t.Fatalf("restore --unsigned skip: exit %d, %s%s", code, out, errOut)
	}
	all := filepath.Join(t.TempDir(), "r")
	out = must(runBin(t, bin, "", "--signing-key", key, "restore", url, all, "--unsigned", "restore"))
	if !strings.Contains(out, "2 ledgers") || !strings.Contains(out, "signed anew") {
		t.Fatalf("restore --unsigned restore: %s", out)
	}
	for _, d := range []string{skipped, all} {
		must(runBin(t, bin, "", "--signing-key", key, "--dir", d, "verify", "--full"))
	}
}

// TestVersityGWCommandTakeoverUnsigned: annal takeover of a copy behind
// a bucket that lost one ledger's checkpoint object fails (exit 3)
// naming the ledger and --unsigned; --unsigned skip takes the other
// ledger and names the skipped one on stderr (exit 0); --unsigned pull
// takes both, and the directory appends after the pulled events and
// verifies in full.
func TestVersityGWCommandTakeoverUnsigned(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	prefix := fmt.Sprintf("cmd%d", prefixes.Add(1))
	url := bucketURL(endpoint, prefix)
	t.Setenv("ANNAL_REPLICA", url)
	dir := filepath.Join(t.TempDir(), "a")
	must := func(code int, out, errOut string) string {
		t.Helper()
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		return out
	}
	copyOf := func(from string) string {
		t.Helper()
		to := filepath.Join(t.TempDir(), "copy")
		if err := os.CopyFS(to, os.DirFS(from)); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(to, "signing.key"), 0o600)
		return to
	}
	events := strings.Repeat(`{"entity":"acct","key":"a1","event":"credited","data":{"n":1}}`+"\n", 3)
	for _, name := range []string{"cash", "orders"} {
		must(runBin(t, bin, "", "--dir", dir, "create", name))
	}
	old := copyOf(dir)
	for _, name := range []string{"cash", "orders"} {
		must(runBin(t, bin, events, "--dir", dir, "append", name))
	}
	orders := deleteCheckpoint(t, bin, dir, prefix, "orders")
	copies := []string{old, copyOf(old), copyOf(old)}

	code, _, errOut := runBin(t, bin, "", "takeover", url, copies[0])
	if code != 3 || !strings.Contains(errOut, orders) || !strings.Contains(errOut, "--unsigned skip") {
		t.Fatalf("takeover with a ledger whose bucket has no checkpoint: exit %d, %s; want 3 naming the ledger and --unsigned", code, errOut)
	}
	code, out, errOut := runBin(t, bin, "", "takeover", url, copies[1], "--unsigned", "skip")
	if code != 0 || !strings.Contains(out, "1 ledger") || !strings.Contains(out, "cash") || !strings.Contains(errOut, "orders") || !strings.Contains(errOut, "NOT taken") {
		t.Fatalf("takeover --unsigned skip: exit %d, %s%s", code, out, errOut)
	}
	out = must(runBin(t, bin, "", "takeover", url, copies[2], "--unsigned", "pull"))
	if !strings.Contains(out, "2 ledgers") || !strings.Contains(out, "1 events before\t4 now") {
		t.Fatalf("takeover --unsigned pull: %s", out)
	}
	must(runBin(t, bin, events, "--dir", copies[2], "append", "orders"))
	must(runBin(t, bin, "", "--dir", copies[2], "verify", "--full"))
}
