//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package dirlock

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInfo: what DIR/LOCK says is read back (the holder's name where
// the kernel's lock table is not available), and reading it is safe
// whatever was put in its place.
func TestInfo(t *testing.T) {
	pid, command := parseInfo([]byte(Info()))
	if pid != os.Getpid() || !strings.Contains(command, filepath.Base(os.Args[0])) {
		t.Fatalf("parseInfo(Info()) = %d, %q", pid, command)
	}
	if _, command := parseInfo([]byte("pid 12\ncommand a\x1b[2Jb\u202e\n")); command != "a?[2Jb?" {
		t.Fatalf("control characters in LOCK: %q", command)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if _, err := readInfo(link); err == nil {
		t.Fatal("readInfo followed a link")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readInfo(fifo); err == nil {
		t.Fatal("readInfo read a FIFO")
	}
}

// TestLockFileExcludesOtherDescriptors: the signer's state lock
// (LockFile on KEY.state.lock) is a flock, which another descriptor of
// the same file (another process, or another signer of this one) cannot
// take while it is held: it waits, then gives up naming the file; once
// released it is taken at once.
func TestLockFileExcludesOtherDescriptors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.state.lock")
	held, err := LockFile(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := LockFile(path, 20*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("a second descriptor took the signer's state lock while the first held it")
	} else if !strings.Contains(err.Error(), path) {
		t.Errorf("the refusal does not name %s: %v", path, err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := LockFile(path, 10*time.Second)
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the lock, released, was not taken by the waiter: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the lock file: %v, %v; want mode 0600", fi, err)
	}
}
