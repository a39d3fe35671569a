//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package dirlock

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes the data directory dir for this process (see the package
// comment): an exclusive flock on a descriptor of dir, then DIR/LOCK,
// written with this process's description and fcntl-locked. It returns
// what releases both, and the directory's descriptor. A directory held by
// another descriptor gives a *HeldError.
func Lock(dir string) (io.Closer, *os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: open the data directory %s: %w", dir, describeErrno(err))
	}
	d := os.NewFile(uintptr(fd), dir)
	fi, err := d.Stat()
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	key := keyOf(fi)
	if err := flockSoon(fd, key); err != nil {
		d.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil, holderError(dir, fi)
		}
		return nil, nil, fmt.Errorf("engine: lock the data directory %s: %w", dir, err)
	}
	// From here on no other annal of this version has the directory.
	release := func() {
		d.Close() // drops the flock
	}
	info, err := openLockFile(Path(dir))
	if err != nil {
		release()
		return nil, nil, err
	}
	// The lock of an older annal, which locked DIR/LOCK alone.
	spec := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(info.Fd(), unix.F_SETLK, &spec); err != nil {
		defer release()
		defer info.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			q := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
			pid := 0
			if unix.FcntlFlock(info.Fd(), unix.F_GETLK, &q) == nil && q.Type != unix.F_UNLCK {
				pid = int(q.Pid)
			}
			return nil, nil, held(dir, pid, commandOf(pid), Path(dir)+"'s fcntl lock (an annal older than this one)")
		}
		return nil, nil, fmt.Errorf("engine: lock %s: %w", Path(dir), err)
	}
	// Informational: no sync, and a failure to write it is no reason to
	// refuse the directory (a refused Open then names no one).
	if info.Truncate(0) == nil {
		info.WriteAt([]byte(Info()), 0)
	}
	heldDirs.Lock()
	if heldDirs.m == nil {
		heldDirs.m = map[fileKey]bool{}
	}
	heldDirs.m[key] = true
	heldDirs.Unlock()
	return closerFunc(func() error {
		heldDirs.Lock()
		delete(heldDirs.m, key)
		heldDirs.Unlock()
		err := info.Close()
		return errors.Join(err, d.Close())
	}), d, nil
}

// heldWait bounds how long Lock waits for a flock held by no DB of this
// process (flockSoon).
const heldWait = 250 * time.Millisecond

// flockSoon takes an exclusive flock on fd, the descriptor of the file
// key names, waiting up to heldWait while it is held by no DB of this
// process. A DB's Close drops its flock when it closes its descriptor,
// unless a child process this process is starting holds a copy of it,
// between its fork and its exec (which closes it): for that moment the
// directory still reads as held, and a second Open right after a Close
// would be refused. A directory that a DB of this process holds is
// refused at once.
func flockSoon(fd int, key fileKey) error {
	deadline := time.Now().Add(heldWait)
	for {
		err := flock(fd)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		heldDirs.Lock()
		mine := heldDirs.m[key]
		heldDirs.Unlock()
		if mine {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flock takes an exclusive, non-blocking flock on fd.
func flock(fd int) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}

// openLockFile opens (creating it) DIR/LOCK, which must be a regular file.
func openLockFile(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	switch {
	case err == unix.ELOOP:
		return nil, fmt.Errorf("engine: %s is a symbolic link, not annal's lock file (a regular file): remove it (no other annal process has the directory open: this one holds its lock)", path)
	case err == unix.EISDIR:
		return nil, fmt.Errorf("engine: %s is a directory, not annal's lock file (a regular file): remove it (no other annal process has the directory open: this one holds its lock)", path)
	case err != nil:
		return nil, fmt.Errorf("engine: open the lock file %s: %w", path, describeErrno(err))
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		return nil, fmt.Errorf("engine: %s is a %v, not annal's lock file (a regular file): remove it", path, fi.Mode().Type())
	}
	return f, nil
}

// describeErrno adds to a permission error what it means here: not that
// the directory is in use.
func describeErrno(err error) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w (to uid %d; no sign that another process uses it)", err, os.Getuid())
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%w (annal opens a data directory for writing)", err)
	}
	return err
}

// holderError is the error for a directory whose flock another
// descriptor holds: it names the holder, from the kernel's table of locks
// if it has one (Linux), else from DIR/LOCK.
func holderError(dir string, fi os.FileInfo) error {
	key := keyOf(fi)
	heldDirs.Lock()
	mine := heldDirs.m[key]
	heldDirs.Unlock()
	if mine {
		return held(dir, os.Getpid(), "", "")
	}
	if pid := flockHolder(key); pid > 0 {
		return held(dir, pid, commandOf(pid), "")
	}
	b, err := readInfo(Path(dir))
	if err != nil {
		return held(dir, 0, "", "")
	}
	pid, command := parseInfo(b)
	if pid <= 0 {
		return held(dir, 0, "", "")
	}
	return held(dir, pid, command, Path(dir))
}

// readInfo reads the start of DIR/LOCK, if it is a regular file:
// anyone may have put anything there (a link to /dev/zero, a FIFO).
func readInfo(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}

// flockHolder returns the process holding a flock on the file key names,
// from /proc/locks (Linux), or 0.
func flockHolder(key fileKey) int {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(key.dev), unix.Minor(key.dev), key.ino)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter
		// has "->" after the number.
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// commandOf returns the command line of process pid, from /proc (Linux),
// or "".
func commandOf(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	args[0] = filepath.Base(args[0])
	return printable(strings.Join(args, " "), 200)
}

func keyOf(fi os.FileInfo) fileKey {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileKey{}
}

// Hold takes an exclusive, non-blocking flock on the directory dir and
// returns the descriptor that holds it (closing it releases the lock; so
// does the process's death). An error wrapping unix.EWOULDBLOCK means that
// another descriptor holds it.
func Hold(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	if err := flock(fd); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// LockFile takes an exclusive flock on the file at path (created,
// owner-only, if missing), waiting up to wait while another descriptor
// (another process, another signer) holds it. Closing what it returns
// releases the lock; so does the process's death.
func LockFile(path string, wait time.Duration) (io.Closer, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: describeErrno(err)}
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s is a %v, not a lock file (a regular file): remove it", path, fi.Mode().Type())
	}
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		err := flock(fd)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			who := ""
			if fi, serr := f.Stat(); serr == nil && errors.Is(err, unix.EWOULDBLOCK) {
				if pid := flockHolder(keyOf(fi)); pid > 0 {
					who = fmt.Sprintf(" (held by process %d %s)", pid, commandOf(pid))
				}
			}
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%s is locked by another signer for more than %v%s", path, wait, who)
			}
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		time.Sleep(pause)
	}
}
