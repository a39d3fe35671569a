package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// permissionChildDir, in a child's environment, is the data directory the
// child (TestPermissionErrorNamesOwner run as another user) verifies.
const permissionChildDir = "ANNAL_TEST_PERMISSION_DIR"

// TestPermissionErrorNamesOwner: an index left to root by `sudo annal …`
// (its files root's, mode 0700/0600), then `annal verify` as the user who
// owns the rest: exit 1, naming the file's owner, the user annal runs as
// and the cure (chown -R USER DIR). It said "permission denied" on a
// MANIFEST and nothing more. Permissions do not stop root: run as root
// (CI's containers), the test runs the command in a child process of the
// test binary as user nobody (uid 65534) on a directory given to it;
// otherwise the index is made unreadable (mode 000), and the message
// names the mode.
func TestPermissionErrorNamesOwner(t *testing.T) {
	if dir := os.Getenv(permissionChildDir); dir != "" {
		code := run([]string{"--dir", dir, "verify"}, strings.NewReader(""), os.Stdout, os.Stdout)
		fmt.Printf("\nexit %d\n", code)
		os.Exit(0)
	}
	dir := newDir(t)
	mustAnnal(t, `{"entity":"order","key":"o-1","event":"placed","data":{}}`, "--dir", dir, "append", "orders")
	if os.Geteuid() != 0 {
		index := filepath.Join(dir, "index")
		if err := os.Chmod(index, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(index, 0o700)
		wantExit(t, exitError, []string{"permission denied", "but its mode forbids it: chmod"}, "--dir", dir, "verify")
		return
	}
	const nobody = 65534
	// What `sudo annal` leaves: the directory the user's, its index root's.
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(p, filepath.Join(dir, "index")) {
			return nil
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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(dir), "annal.test")
	copyFile(t, self, bin, 0o755)
	cmd := exec.Command(bin, "-test.run=^TestPermissionErrorNamesOwner$", "-test.count=1")
	cmd.Env = append(os.Environ(), permissionChildDir+"="+dir)
	cmd.Dir = filepath.Dir(dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child as uid %d: %v\n%s", nobody, err, out)
	}
	t.Logf("verify as uid %d:\n%s", nobody, out)
	name := fmt.Sprint(nobody)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	for _, want := range []string{"\nexit 1\n", "permission denied", "belongs to user root (uid 0)", "chown -R " + name + " " + dir} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("verify as uid %d of an index that root owns:\n%s\nwant it to say %q", nobody, out, want)
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
