// Package dirlock holds an annal data directory for one writer.
//
// One writer. A DB holds its data directory with an exclusive flock(2) on
// a descriptor of the directory itself (dirlock_unix.go): a lock on an
// inode that the holder keeps open, which no rm, mv or chmod of a file in
// the directory can take away, and which the kernel releases when the
// holder ends, however it ends. flock locks belong to an open file
// description, so a second DB in the same process conflicts too.
//
// DIR/LOCK is informational: the holder writes into it its PID, command,
// host and start time, so that a refused Open can name it. (The holder
// also takes an fcntl lock on it, the lock annal used before, so that an
// older annal is kept out and keeps a newer one out.) Deleting it lets no
// one in.
//
// The same flock holds other things for a while: a directory (Hold: a
// read-only DB's private copy, an evidence directory) and a file, waiting
// for it (LockFile: a signer's state). The package knows nothing of a DB:
// the engine turns a HeldError into its own LockedError.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
)

// File is the name of the lock file in a data directory: DIR/LOCK.
const File = "LOCK"

// Path is DIR/LOCK.
func Path(dir string) string { return filepath.Join(dir, File) }

// Info is what DIR/LOCK says of the process holding the directory: its
// PID, command, host and start time, one a line.
func Info() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("pid %d\ncommand %s\nhost %s\nstarted %s\n", os.Getpid(), printable(strings.Join(os.Args, " "), 200),
		printable(host, 100), time.Now().UTC().Format(time.RFC3339))
}

// parseInfo reads the PID and command out of what Info wrote.
func parseInfo(b []byte) (pid int, command string) {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			pid, _ = strconv.Atoi(v)
		case "command":
			command = printable(v, 200)
		}
	}
	return pid, command
}

// printable returns s with control, format and invalid characters
// replaced by '?', cut to at most max bytes: it comes from another
// process's command line or a file anyone may have written, and goes into
// an error message.
func printable(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			r = '?'
		}
		if b.Len()+len(string(r)) > max {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// heldDirs: the data directories this process holds, by device and
// inode, so that a second Open in this process names this process
// without opening DIR/LOCK (closing any descriptor of a file drops the
// process's fcntl locks on it).
var heldDirs struct {
	sync.Mutex
	m map[fileKey]bool
}

type fileKey struct{ dev, ino uint64 }

// held returns the error for a data directory held by another: pid 0
// when the holder is unknown.
func held(dir string, pid int, command, source string) error {
	return &HeldError{Dir: dir, PID: pid, Command: command, Source: source}
}

// HeldError says that a data directory is held by another descriptor, and
// by which process if that can be found. The engine turns it into its
// LockedError.
type HeldError struct {
	Dir     string
	PID     int    // the holder's process ID; 0 if unknown
	Command string // its command line, if known
	Source  string // where PID comes from, when not the kernel's lock table
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by %s", e.Dir, Holder(e.PID, e.Command, e.Source))
}

// Holder describes the process holding a directory: "process 1234
// (annal append acct)", "this process", or "another process". pid is 0
// when the holder is unknown; source, if not empty, is where pid comes
// from when not the kernel's lock table.
func Holder(pid int, command, source string) string {
	switch {
	case pid == 0:
		return "another process"
	case pid == os.Getpid():
		return fmt.Sprintf("process %d (this process: another DB in it has the directory open)", pid)
	}
	s := fmt.Sprintf("process %d", pid)
	if command != "" {
		s += " (" + command + ")"
	}
	if source != "" {
		s += ", as " + source + " says"
	}
	return s
}

// Held reports whether an error of vfs.FS.Lock (fcntl F_SETLK) means
// that the lock is held (by another process: EAGAIN; by this one: Pebble's
// own registry) rather than that locking failed. EACCES is not taken for
// a holder: it is what opening a file without permission gives.
func Held(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held by current process")
}

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }
