package faultfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MountTmpfs mounts a tmpfs of the given size ("8m", say) on a new
// directory and returns it: a real file system that fills up, for the
// tests of a full disk that a fault injected through an [FS] cannot stand
// for (a Pebble or bbolt that writes through the OS, a child process). It
// is unmounted when the test ends, before its temporary directory is
// removed. Without the right to mount (not root, or in a container that
// forbids it) the test is skipped, saying why.
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("not root / mount not permitted: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
			exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// FillUp writes a file at path until the file system holding it is full.
func FillUp(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		return // not even a new file fits
	}
	buf := []byte(strings.Repeat("f", 4<<10))
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
}
