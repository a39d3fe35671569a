//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// The lock tests: one writer whatever is deleted.
//
// Environment, set by the parent test for its child process (the test
// binary again):
//
//	ANNAL_LOCK_CHILD=db:<dir>      open <dir>, print "ready", then for each
//	                               line "append" of stdin append one event
//	                               and print "ok ID" or "err changed|other
//	                               MESSAGE"; at EOF close and print "closed"
//	                               or "close-err changed|other MESSAGE"
//	ANNAL_LOCK_CHILD=fcntl:<file>  take vfs.Default's fcntl lock on <file>
//	                               (the lock Pebble and annal before this
//	                               change take), print "ready", hold it
//	                               until EOF on stdin
const lockChildEnv = "ANNAL_LOCK_CHILD"

// TestLockChild is the child process of the lock tests; it returns at
// once unless ANNAL_LOCK_CHILD is set.
func TestLockChild(t *testing.T) {
	mode, arg, ok := strings.Cut(os.Getenv(lockChildEnv), ":")
	if !ok {
		return
	}
	if err := lockChild(mode, arg); err != nil {
		fmt.Println("fatal", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func lockChild(mode, arg string) error {
	in := bufio.NewScanner(os.Stdin)
	switch mode {
	case "fcntl":
		c, err := vfs.Default.Lock(arg)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		for in.Scan() {
		}
		return c.Close()
	case "db":
		db, err := Open(arg, nil)
		if err != nil {
			return err
		}
		ctx := context.Background()
		if _, err := db.Ledger("l"); err != nil {
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		for i := 0; in.Scan(); i++ {
			ids, err := idsOf(db.Append(ctx, "l", []EventInput{{Entity: "e", Key: "k", Event: "A", Meta: []byte(`{}`), Data: []byte(fmt.Sprint(i))}}, nil))
			if err != nil {
				fmt.Println("err", lockChangedOrOther(err), lockOneLine(err))
				continue
			}
			fmt.Println("ok", ids[0])
		}
		if err := db.Close(); err != nil {
			fmt.Println("close-err", lockChangedOrOther(err), lockOneLine(err))
			return nil
		}
		fmt.Println("closed")
		return nil
	case "ro":
		// arg is "DIR|TEMPDIR": a read-only DB whose private directory
		// the parent asks for ("dir"), kept open until stdin closes.
		dir, temp, _ := strings.Cut(arg, "|")
		db, err := OpenReadOnly(dir, &Options{TempDir: temp})
		if err != nil {
			return err
		}
		fmt.Println("ready")
		for in.Scan() {
			fmt.Println(db.ro.temp)
		}
		return db.Close()
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func lockOneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func lockChangedOrOther(err error) string {
	if errors.Is(err, ErrDirectoryChanged) {
		return "changed"
	}
	return "other"
}

// lockChildProc is a running child of TestLockChild.
type lockChildProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startLockChild(t *testing.T, mode, arg string) *lockChildProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+mode+":"+arg)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &lockChildProc{t: t, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		c.stdin.Close()
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
	if got := c.line(); got != "ready" {
		t.Fatalf("child: %q, want ready", got)
	}
	return c
}

// line returns the child's next line of output.
func (c *lockChildProc) line() string {
	c.t.Helper()
	if !c.out.Scan() {
		c.t.Fatalf("child ended: %v", c.out.Err())
	}
	return c.out.Text()
}

// do sends a line to the child and returns its answer.
func (c *lockChildProc) do(cmd string) string {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatal(err)
	}
	return c.line()
}

// finish closes the child's stdin and returns its last line, after it
// exits.
func (c *lockChildProc) finish() string {
	c.t.Helper()
	c.stdin.Close()
	last := ""
	for c.out.Scan() {
		last = c.out.Text()
	}
	if err := c.cmd.Wait(); err != nil {
		c.t.Fatalf("child: %v (last line %q)", err, last)
	}
	return last
}

// lockTestTree describes every file and directory under dir (name, kind, size,
// modification time), to show that something changed nothing; of
// DIR/LOCK and DIR/index/LOCK, only that they exist if lockInfo (an Open
// that took the directory writes its description into the one, and
// Pebble truncates the other as it tries to lock it).
func lockTestTree(t *testing.T, dir string, lockInfo bool) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		size := fi.Size()
		if fi.IsDir() {
			size = 0
		}
		if lockInfo && filepath.Base(rel) == lockFile {
			fmt.Fprintf(&b, "%s\n", rel)
			return nil
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", rel, fi.Mode(), size, fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// wantLocked checks that Open(dir) fails with ErrLocked naming pid (0:
// any) and changes nothing in dir.
func wantLocked(t *testing.T, dir string, pid int) { t.Helper(); wantLockedIn(t, dir, pid, false) }

// wantLockedIn is wantLocked, but when lockInfo, for a conflict found
// after Open took the directory, lets DIR/LOCK say who tried.
func wantLockedIn(t *testing.T, dir string, pid int, lockInfo bool) {
	t.Helper()
	before := lockTestTree(t, dir, lockInfo)
	db, err := Open(dir, nil)
	if err == nil {
		db.Close()
		t.Fatalf("second Open succeeded, want ErrLocked")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	var le *LockedError
	if pid != 0 && runtime.GOOS == "linux" {
		if !errors.As(err, &le) || le.PID != pid || !strings.Contains(err.Error(), fmt.Sprintf("process %d", pid)) {
			t.Fatalf("second Open: %v, want it to name process %d", err, pid)
		}
	}
	if after := lockTestTree(t, dir, lockInfo); after != before {
		t.Fatalf("the refused Open changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(filepath.Join(dir, indexDir+".broken")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("index.broken: %v, want none (a lock conflict is not damage)", err)
	}
}

func lockAppendOne(t *testing.T, db *DB, data string) (eventid.ID, error) {
	t.Helper()
	ids, err := idsOf(db.Append(context.Background(), "l", []EventInput{{Entity: "e", Key: "k", Event: "A", Meta: []byte(`{}`), Data: []byte(`"` + data + `"`)}}, nil))
	if err != nil {
		return eventid.ID{}, err
	}
	return ids[0], nil
}

// TestLockSecondOpenInProcess: a second DB in the same process is
// refused, with or without DIR/LOCK, and names this process.
func TestLockSecondOpenInProcess(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	wantLocked(t, dir, os.Getpid())
	if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
		t.Fatal(err)
	}
	wantLocked(t, dir, os.Getpid())
}

// TestLockRemovedFiles: with a writer running, removing or replacing
// DIR/LOCK, DIR/meta.db or DIR/index lets no second DB in, changes
// nothing when one tries, and stops the writer's appends with
// ErrDirectoryChanged while its reads go on; its Close reports it and
// writes nothing into the replaced file. The next Open has every event.
func TestLockRemovedFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		replace bool // put another file in its place
	}{
		{"LOCK removed", lockFile, false},
		{"LOCK replaced", lockFile, true},
		{"meta.db removed", metaFile, false},
		{"meta.db replaced", metaFile, true},
		{"index removed", indexDir, false},
		{"ledgers replaced", ledgersDir, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			db := openTest(t, dir)
			closed := false
			defer func() {
				if !closed {
					db.Close()
				}
			}()
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
				t.Fatal(err)
			}
			first, err := lockAppendOne(t, db, "first")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			var replacement []byte
			if tc.replace {
				// A copy, as an operator restoring a file would make.
				aside := filepath.Join(t.TempDir(), "aside")
				if err := os.Rename(path, aside); err != nil {
					t.Fatal(err)
				}
				if fi, _ := os.Stat(aside); fi.IsDir() {
					if err := os.Mkdir(path, 0o700); err != nil {
						t.Fatal(err)
					}
				} else {
					b, err := os.ReadFile(aside)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, b, 0o600); err != nil {
						t.Fatal(err)
					}
					replacement = b
				}
			} else if err := os.RemoveAll(path); err != nil {
				t.Fatal(err)
			}

			wantLocked(t, dir, os.Getpid())

			time.Sleep(watchInterval + 20*time.Millisecond)
			if _, err := lockAppendOne(t, db, "after"); !errors.Is(err, ErrDirectoryChanged) || !strings.Contains(err.Error(), path) {
				t.Fatalf("append after %s: %v, want ErrDirectoryChanged naming %s", tc.name, err, path)
			}
			if _, err := lockAppendOne(t, db, "again"); !errors.Is(err, ErrDirectoryChanged) {
				t.Fatalf("second append after %s: %v, want ErrDirectoryChanged", tc.name, err)
			}
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "m"}); !errors.Is(err, ErrDirectoryChanged) {
				t.Fatalf("CreateLedger after %s: %v, want ErrDirectoryChanged", tc.name, err)
			}
			if tc.file != indexDir && tc.file != ledgersDir {
				if ev, err := db.Get(ctx, first); err != nil || ev.ID != first {
					t.Fatalf("read after %s: %v, want the event", tc.name, err)
				}
			}
			closed = true
			if err := db.Close(); !errors.Is(err, ErrDirectoryChanged) {
				t.Fatalf("Close after %s: %v, want ErrDirectoryChanged", tc.name, err)
			}
			if replacement != nil {
				if b, _ := os.ReadFile(path); string(b) != string(replacement) {
					t.Fatalf("Close wrote into the replacement %s", path)
				}
			}
			if tc.file == ledgersDir {
				return // its events are in the directory moved aside
			}
			db2, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			if ev, err := db2.Get(ctx, first); err != nil || ev.ID != first {
				t.Fatalf("after reopening: %v, want the event", err)
			}
			if info, err := db2.Ledger("l"); err != nil || info.Count != 2 {
				t.Fatalf("after reopening: %+v, %v, want 2 events", info, err)
			}
			if wantRebuilt := tc.file == metaFile && !tc.replace; (db2.MetaRebuilt() != nil) != wantRebuilt {
				t.Fatalf("MetaRebuilt: %v, want an error: %v", db2.MetaRebuilt(), wantRebuilt)
			}
		})
	}
}

// TestLockHeldByChildProcess: another process holds the directory; the
// second Open names it, also once DIR/LOCK, DIR/meta.db and DIR/index are
// gone, and changes nothing; the holder's appends then stop; every event
// it acknowledged is there afterwards.
func TestLockHeldByChildProcess(t *testing.T) {
	dir := t.TempDir()
	child := startLockChild(t, "db", dir)
	pid := child.cmd.Process.Pid
	var acked []eventid.ID
	ack := func(line string) {
		if id, ok := strings.CutPrefix(line, "ok "); ok {
			v, err := eventid.Parse(id)
			if err != nil {
				t.Fatal(err)
			}
			acked = append(acked, v)
		}
	}
	if l := child.do("append"); !strings.HasPrefix(l, "ok ") {
		t.Fatalf("child append: %q", l)
	} else {
		ack(l)
	}
	wantLocked(t, dir, pid)
	for _, f := range []string{lockFile, metaFile, indexDir} {
		if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
		wantLocked(t, dir, pid)
	}
	time.Sleep(watchInterval + 20*time.Millisecond)
	l := child.do("append")
	ack(l)
	if !strings.HasPrefix(l, "err changed ") {
		t.Fatalf("child append with its files gone: %q, want ErrDirectoryChanged", l)
	}
	if l := child.finish(); !strings.HasPrefix(l, "close-err changed ") {
		t.Fatalf("child Close: %q, want ErrDirectoryChanged", l)
	}
	db := openTest(t, dir)
	defer db.Close()
	for _, id := range acked {
		if _, err := db.Get(context.Background(), id); err != nil {
			t.Fatalf("acknowledged event %s: %v", id, err)
		}
	}
	if db.MetaRebuilt() == nil {
		t.Fatal("MetaRebuilt is nil after meta.db was removed")
	}
	if _, err := db.Verify(context.Background(), "l", nil); err != nil {
		t.Fatal(err)
	}
}

// TestLockOlderAnnal: a process holding the fcntl lock on DIR/LOCK, as
// annal did before it locked the directory, keeps a DB out; and a DB
// keeps such a process out.
func TestLockOlderAnnal(t *testing.T) {
	dir := t.TempDir()
	openTest(t, dir).Close()
	child := startLockChild(t, "fcntl", filepath.Join(dir, lockFile))
	wantLocked(t, dir, child.cmd.Process.Pid)
	child.finish()

	db := openTest(t, dir)
	defer db.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"=fcntl:"+filepath.Join(dir, lockFile))
	out, _ := cmd.Output() // stdin is /dev/null: a child that got the lock lets it go at once
	if !strings.HasPrefix(string(out), "fatal ") || !strings.Contains(string(out), "resource temporarily unavailable") {
		t.Fatalf("an older annal's lock while a DB has the directory: %q, want EAGAIN", out)
	}
}

// TestLockDirectoryMoved: a data directory moved aside (and another made
// in its place) under a running writer stops its appends.
func TestLockDirectoryMoved(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	db := openTest(t, dir)
	defer db.Close()
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	// Another directory in its place. (Not opened here: Pebble's lock
	// registry, by path, would take it for the moved index, which this
	// process still holds.)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchInterval + 20*time.Millisecond)
	if _, err := lockAppendOne(t, db, "x"); !errors.Is(err, ErrDirectoryChanged) || !strings.Contains(err.Error(), dir+" was replaced") {
		t.Fatalf("append after the directory was moved: %v, want ErrDirectoryChanged naming %s", err, dir)
	}
}

// TestLockIndexConflictIsNotDamage: a lock on DIR/index/LOCK held by
// another process (EAGAIN) or by this one (Pebble's registry) is ErrLocked;
// the index is not moved to index.broken and rebuilt.
func TestLockIndexConflictIsNotDamage(t *testing.T) {
	indexLock := func(dir string) string { return filepath.Join(dir, indexDir, lockFile) }
	t.Run("another process", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, dir).Close()
		child := startLockChild(t, "fcntl", indexLock(dir))
		wantLockedIn(t, dir, 0, true)
		child.finish()
		openTest(t, dir).Close()
	})
	t.Run("this process", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, dir).Close()
		c, err := vfs.Default.Lock(indexLock(dir))
		if err != nil {
			t.Fatal(err)
		}
		wantLockedIn(t, dir, 0, true)
		c.Close()
		openTest(t, dir).Close()
	})
}

// TestLockMetaConflict: a lock on meta.db (bbolt's flock) held elsewhere
// is ErrLocked, not damage.
func TestLockMetaConflict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openTest(t, dir).Close()
	b, err := bolt.Open(filepath.Join(dir, metaFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wantLockedIn(t, dir, 0, true)
}

// TestLockFileKinds: DIR/LOCK a directory or a symbolic link is a clear
// error, not "in use", and Open follows no link. (These work as root.)
func TestLockFileKinds(t *testing.T) {
	t.Parallel()
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, lockFile), 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, nil)
		t.Log(err)
		if err == nil || errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "is a directory") {
			t.Fatalf("Open with LOCK a directory: %v", err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "elsewhere")
		if err := os.Symlink(target, filepath.Join(dir, lockFile)); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, nil)
		t.Log(err)
		if err == nil || errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("Open with LOCK a symbolic link: %v", err)
		}
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open created the link's target: %v", err)
		}
	})
}

// TestLockPermissions: a LOCK file or a directory this user may not
// write is a permission error, not "in use".
func TestLockPermissions(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("running as root, which file permissions do not stop: chmod cannot make the case (TestLockFileKinds covers LOCK's other failures as root)")
	}
	t.Run("LOCK mode 000", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, dir).Close()
		if err := os.Chmod(filepath.Join(dir, lockFile), 0); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, nil)
		t.Log(err)
		if err == nil || errors.Is(err, ErrLocked) || !errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "in use") {
			t.Fatalf("Open with LOCK mode 000: %v, want a permission error", err)
		}
	})
	t.Run("directory mode 500 without LOCK", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, dir).Close()
		if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		_, err := Open(dir, nil)
		t.Log(err)
		if err == nil || errors.Is(err, ErrLocked) || !errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "in use") {
			t.Fatalf("Open of a directory mode 500 without LOCK: %v, want a permission error", err)
		}
	})
	t.Run("directory mode 500", func(t *testing.T) {
		// Every file it needs is there and writable: it opens.
		dir := t.TempDir()
		openTest(t, dir).Close()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		openTest(t, dir).Close()
	})
}
