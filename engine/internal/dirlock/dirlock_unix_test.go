//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package dirlock

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLockWaitsForDescriptorCopyOfClosedHolder: a data directory's flock
// held for a moment by a descriptor that is no DB's (what a child process
// between its fork and its exec keeps of a DB's descriptor, after the DB
// closed it) is waited for: Lock takes the directory once it is let go.
// Held for longer than that moment, the directory is refused
// (*HeldError); held by a DB of this process, it is refused at once.
func TestLockWaitsForDescriptorCopyOfClosedHolder(t *testing.T) {
	dir := t.TempDir()
	other := func() *os.File {
		t.Helper()
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		return f
	}

	brief := other()
	time.AfterFunc(30*time.Millisecond, func() { brief.Close() })
	c, _, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock while another descriptor holds the directory for 30 ms: %v, want it taken once let go", err)
	}

	var h *HeldError
	if c2, _, err := Lock(dir); !errors.As(err, &h) {
		if err == nil {
			c2.Close()
		}
		t.Fatalf("a second Lock while a DB of this process holds the directory: %v, want *HeldError", err)
	}
	c.Close()

	kept := other()
	defer kept.Close()
	if c3, _, err := Lock(dir); !errors.As(err, &h) {
		if err == nil {
			c3.Close()
		}
		t.Fatalf("Lock while another descriptor keeps the directory: %v, want *HeldError", err)
	}
}
