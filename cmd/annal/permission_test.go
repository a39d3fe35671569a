package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// childArgs, in a child's environment, is the command line (separated by US, 0x1f)
// that a test run as another user (runAsNobody) runs.
const childArgs = "ANNAL_TEST_CHILD_ARGS"

// nobody is the user a root test runs a command as: file permissions do
// not stop root.
const nobody = 65534

// runChild runs the command of childArgs, if this process is such a child
// (of runInChild): it prints the command's output and "exit N", and ends
// the process. TestMain calls it first.
func runChild() {
	args := os.Getenv(childArgs)
	if args == "" {
		return
	}
	code := run(strings.Split(args, "\x1f"), strings.NewReader(""), os.Stdout, os.Stdout)
	fmt.Printf("\nexit %d\n", code)
	os.Exit(0)
}

// runAsNobody runs the command args (with --dir dir) as user nobody, in a
// child process of a copy of the test binary (runInChild). The data
// directory dir is given to nobody, except for the paths under it in
// rootOwned, which stay root's (what `sudo annal …` leaves). It returns the command's exit code and output (stdout and
// stderr together). The test runs as root.
func runAsNobody(t *testing.T, test, dir string, rootOwned []string, args ...string) (int, string) {
	t.Helper()
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		for _, r := range rootOwned {
			if p == r || strings.HasPrefix(p, r+string(filepath.Separator)) {
				return nil
			}
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	// The child must reach the directory and run a copy of the test binary.
	for p := filepath.Dir(dir); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return runInChild(t, test, filepath.Dir(dir), &syscall.Credential{Uid: nobody, Gid: nobody}, append([]string{"--dir", dir}, args...)...)
}

// runInChild runs the command args in a child process of a copy of the
// test binary (made in binDir; its TestMain runs the command: runChild),
// with the credentials cred (nil: this process's). A command whose
// failure leaves something behind in the process (Pebble, after an open
// that failed on a full disk, holds the index's files) is run so. It
// returns the command's exit code and output (stdout and stderr
// together).
func runInChild(t *testing.T, test, binDir string, cred *syscall.Credential, args ...string) (int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "annal.test")
	if _, err := os.Stat(bin); err != nil {
		copyFile(t, self, bin, 0o755)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
	cmd.Dir = binDir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	text := strings.TrimSpace(string(out))
	i := strings.LastIndex(text, "exit ")
	code, err := strconv.Atoi(strings.TrimSpace(text[max(i, 0)+len("exit "):]))
	if i < 0 || err != nil {
		t.Fatalf("the child said no exit code:\n%s", out)
	}
	t.Logf("annal %s in a child:\n%s", strings.Join(args, " "), out)
	return code, text
}

// TestPermissionErrorNamesOwner: an index left to root by `sudo annal …`
// (its files root's, mode 0700/0600), then a writer's command (annal
// checkpoint --new; verify reads without the index) as the user who owns
// the rest: exit 1, naming the file's owner, the user annal runs as
// and the cure (chown -R USER DIR). It said "permission denied" on a
// MANIFEST and nothing more. Permissions do not stop root: run as root
// (CI's containers), the test runs the command as user nobody
// (runAsNobody); otherwise the index is made unreadable (mode 000), and
// the message names the mode.
func TestPermissionErrorNamesOwner(t *testing.T) {
	dir := newDir(t)
	mustAnnal(t, `{"entity":"order","key":"o-1","event":"placed","data":{}}`, "--dir", dir, "append", "orders")
	if os.Geteuid() != 0 {
		index := filepath.Join(dir, "index")
		if err := os.Chmod(index, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(index, 0o700)
		wantExit(t, exitError, []string{"permission denied", "but its mode forbids it: chmod"}, "--dir", dir, "checkpoint", "orders", "--new")
		return
	}
	code, out := runAsNobody(t, "TestPermissionErrorNamesOwner", dir, []string{filepath.Join(dir, "index")}, "checkpoint", "orders", "--new")
	name := fmt.Sprint(nobody)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	for _, want := range []string{"permission denied", "belongs to user root (uid 0)", "chown -R " + name + " " + dir} {
		if code != exitError || !strings.Contains(out, want) {
			t.Fatalf("checkpoint --new as uid %d of an index that root owns: exit %d\n%s\nwant exit 1 saying %q", nobody, code, out, want)
		}
	}
}

// copyFile copies the file src to dst, with mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
