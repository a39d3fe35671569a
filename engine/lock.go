package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// One writer. A DB holds its data directory with an exclusive flock(2) on
// a descriptor of the directory itself (lock_unix.go): a lock on an
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
// A writer also notices when its files are taken from under it (dirWatch):
// it records the identity (device and inode) of DIR, DIR/LOCK, DIR/meta.db,
// DIR/index and DIR/ledgers at Open, and of each ledger's own files
// (watch.go), and checks them at most every watchInterval on the append
// path (before an append, and after its group is synced, before it
// returns), and at Close before it writes anything. A file removed or
// replaced stops every later append, CreateLedger and Import with
// ErrDirectoryChanged; reads go on.

// lockInfo is what DIR/LOCK says of the process holding the directory.
func lockInfo() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("pid %d\ncommand %s\nhost %s\nstarted %s\n", os.Getpid(), printable(strings.Join(os.Args, " "), 200),
		printable(host, 100), time.Now().UTC().Format(time.RFC3339))
}

// parseLockInfo reads the PID and command out of what lockInfo wrote.
func parseLockInfo(b []byte) (pid int, command string) {
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

// lockedError returns the error for a data directory held by another:
// pid 0 when the holder is unknown.
func lockedError(dir string, pid int, command, source string) error {
	return &LockedError{Dir: dir, PID: pid, Command: command, source: source}
}

// LockedError says that a data directory is held by another DB, and by
// which process if that can be found. It matches ErrLocked.
type LockedError struct {
	Dir     string
	PID     int    // the holder's process ID; 0 if unknown
	Command string // its command line, if known
	source  string // where PID comes from, when not the kernel's lock table
}

// Holder describes the process holding the directory: "process 1234
// (annal append acct)", "this process", or "another process".
func (e *LockedError) Holder() string {
	switch {
	case e.PID == 0:
		return "another process"
	case e.PID == os.Getpid():
		return fmt.Sprintf("process %d (this process: another DB in it has the directory open)", e.PID)
	}
	s := fmt.Sprintf("process %d", e.PID)
	if e.Command != "" {
		s += " (" + e.Command + ")"
	}
	if e.source != "" {
		s += ", as " + e.source + " says"
	}
	return s
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%v: %s is held by %s", ErrLocked, e.Dir, e.Holder())
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// watchInterval: how often, at most, a writer checks that its files are
// still its own (dirWatch.check): the window in which appends may still
// succeed after one was removed or replaced.
const watchInterval = 100 * time.Millisecond

// dirWatch holds the identity of the files a DB has open by path, and
// the error that stopped writes once one of them changed.
type dirWatch struct {
	files []watchedFile
	// ledgers, if not nil, checks the ledgers' own files after these
	// (DB.checkLedgerFiles), returning ErrDirectoryChanged wrapped.
	ledgers func() error
	start   time.Time
	last    atomic.Int64 // when the last check ran, in ns since start
	mu      sync.Mutex   // serializes checks
	err     atomic.Pointer[error]
}

type watchedFile struct {
	path string
	fi   os.FileInfo
}

// newDirWatch records the identity of each path now. The first is the
// data directory, taken from dir, the descriptor that holds its lock.
func newDirWatch(dir *os.File, paths ...string) (*dirWatch, error) {
	w := &dirWatch{start: time.Now()}
	for i, p := range paths {
		var fi os.FileInfo
		var err error
		if i == 0 && dir != nil {
			fi, err = dir.Stat()
		} else {
			fi, err = os.Lstat(p)
		}
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		w.files = append(w.files, watchedFile{p, fi})
	}
	return w, nil
}

// check returns ErrDirectoryChanged (wrapped, saying which file) if a
// file was removed or replaced since Open, now or at an earlier check.
// Unless force, it looks at the files at most every watchInterval, and
// otherwise costs a clock read.
func (w *dirWatch) check(force bool) error {
	if w == nil {
		return nil
	}
	if p := w.err.Load(); p != nil {
		return *p
	}
	now := int64(time.Since(w.start))
	if last := w.last.Load(); !force && (now-last < int64(watchInterval) || !w.last.CompareAndSwap(last, now)) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.err.Load(); p != nil {
		return *p
	}
	for i, f := range w.files {
		var fi os.FileInfo
		var err error
		if i == 0 {
			fi, err = os.Stat(f.path) // the directory may be reached through a symbolic link
		} else {
			fi, err = os.Lstat(f.path)
		}
		var what string
		switch {
		case errors.Is(err, os.ErrNotExist):
			what = "was removed"
		case err != nil:
			what = fmt.Sprintf("cannot be checked (%v)", err)
		case !os.SameFile(fi, f.fi):
			what = "was replaced by another file"
		default:
			continue
		}
		err = fmt.Errorf("%w: %s %s while this process had it open; appends stop (reads go on): close the DB and restart the process, whose Open checks the directory and rebuilds what is derived", ErrDirectoryChanged, f.path, what)
		w.err.Store(&err)
		return err
	}
	if w.ledgers != nil {
		if err := w.ledgers(); err != nil {
			w.err.Store(&err)
			return err
		}
	}
	return nil
}

// fired returns the error that stopped the writer's writes, or nil while
// its files are its own (as of the last check).
func (w *dirWatch) fired() error {
	if w == nil {
		return nil
	}
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// checkDir is the writers' check: see dirWatch.check.
func (db *DB) checkDir(force bool) error {
	if err := db.readOnlyErr("the DB does not write"); err != nil {
		return err
	}
	return db.watch.check(force)
}

// MetaRebuilt returns why the metadata file was rebuilt from the
// segments (it was missing or empty while ledgers were present), matching
// ErrPositionsLost, or nil. The segments hold every ledger's name,
// description and events, so no event is lost; the positions of named
// consumers (DB.Consumer) were only in it. The rebuilt file records the
// loss, so every later Open, in any process, reports it too, and every
// consumer call fails with the same error, until AcceptLostPositions
// accepts it: a service is never left to take a lost position for a new
// consumer. The error is also for the operator, who may want to know who
// removed the file.
func (db *DB) MetaRebuilt() error { return db.positionsErr() }

// metaMissing reports whether the metadata file at path is "missing" or
// "empty" (bbolt makes an empty file a new one: it holds nothing either),
// or "" if neither.
func metaMissing(path string) string {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "missing"
	case err == nil && fi.Mode().IsRegular() && fi.Size() == 0:
		return "empty"
	}
	return ""
}

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// lockPath is DIR/LOCK.
func lockPath(dir string) string { return filepath.Join(dir, lockFile) }
