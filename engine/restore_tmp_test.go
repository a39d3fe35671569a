package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
)

// TestRestoreRemovesKilledRestoresTemporaryDirectories: the temporary
// directory of a restore that was killed (no process holds it any more)
// is removed by the next restore to the same target; a running restore's
// (held), a just-made one under its first name, and other targets' are
// left alone.
func TestRestoreRemovesKilledRestoresTemporaryDirectories(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	parent := t.TempDir()
	target := filepath.Join(parent, "restored")

	// A restore killed after it wrote part of a ledger: its flock died
	// with it.
	killed, err := makeRestoreTmp(target, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hold, err := holdRestore(killed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(killed, ledgersDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed, ledgersDir, "part"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if hold == nil {
		t.Skip("no flock on directories on this platform: a killed restore cannot be told from a running one")
	}
	hold.Close() // as the process's death does

	// A running restore's, held.
	running, err := makeRestoreTmp(target, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	runHold, err := holdRestore(running)
	if err != nil {
		t.Fatal(err)
	}
	defer runHold.Close()
	// One just made, not held yet; one that a restore killed at once
	// made long ago.
	fresh := filepath.Join(parent, ".restored"+restoreTmpMark+"1")
	old := filepath.Join(parent, ".restored"+restoreTmpMark+"2")
	other := filepath.Join(parent, ".other"+restoreTmpMark+"3")
	for _, d := range []string{fresh, old, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * restoreInitStale)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}

	if _, err := Restore(context.Background(), target, RestoreOptions{store: b.st, Options: s.opts}); err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, target, 1500, b.sealed)
	for _, d := range []string{killed, old} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the killed restore's %s is still there (%v)", filepath.Base(d), err)
		}
	}
	for _, d := range []string{running, fresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(d), err)
		}
	}
	// The running restore still holds its directory.
	if f, err := dirlock.Hold(filepath.Join(running, restoreHold)); err == nil {
		f.Close()
		t.Errorf("the running restore's directory is no longer held")
	}
}

// TestRestoreLeavesOtherDirectoriesBesideTarget: a restore to parent/a
// removes only what a killed restore to parent/a left (".a.restore-"
// and the digits os.MkdirTemp adds), not a killed restore's of the
// target "a.restore-1" beside it (".a.restore-1.restore-123", whose name
// begins as a's do) nor a directory of the operator's whose name begins
// so; the restore to a.restore-1 removes its own.
func TestRestoreLeavesOtherDirectoriesBesideTarget(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	parent := t.TempDir()
	ofOther := filepath.Join(parent, ".a"+restoreTmpMark+"1"+restoreTmpMark+"123")
	operators := filepath.Join(parent, ".a"+restoreTmpMark+"keep")
	long := time.Now().Add(-2 * restoreInitStale)
	for _, d := range []string{ofOther, operators} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "notes"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, long, long); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Restore(context.Background(), filepath.Join(parent, "a"), RestoreOptions{store: b.st, Options: s.opts}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ofOther, operators} {
		if _, err := os.Stat(filepath.Join(d, "notes")); err != nil {
			t.Errorf("the restore to a removed %s: %v", filepath.Base(d), err)
		}
	}
	if _, err := Restore(context.Background(), filepath.Join(parent, "a"+restoreTmpMark+"1"), RestoreOptions{store: b.st, Options: s.opts}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ofOther); !os.IsNotExist(err) {
		t.Errorf("the restore to a.restore-1 left its killed restore's %s (%v)", filepath.Base(ofOther), err)
	}
	if _, err := os.Stat(operators); err != nil {
		t.Errorf("the restore to a.restore-1 removed %s: %v", filepath.Base(operators), err)
	}
}

// TestRestoreThroughSymlinkedTarget: a target that is a symbolic link to
// an empty directory is restored into that directory (the link stays,
// the temporary directory is made beside the directory, on its file
// system); a link to nothing is refused before the bucket is read,
// naming it.
func TestRestoreThroughSymlinkedTarget(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	parent := t.TempDir()
	real := filepath.Join(parent, "disk", "annal")
	if err := os.MkdirAll(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "annal")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), link, RestoreOptions{store: b.st, Options: s.opts}); err != nil {
		t.Fatalf("restore through a symbolic link: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is no longer a link (%v)", err)
	}
	checkRestored(t, s, real, 1500, b.sealed)

	dangling := filepath.Join(parent, "dangling")
	if err := os.Symlink(filepath.Join(parent, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	down := newReplStore() // refuses every request: the bucket is not read
	down.down.Store(true)
	_, err := Restore(context.Background(), dangling, RestoreOptions{store: down, Options: s.opts})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), dangling) || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("restore to a link to nothing: %v", err)
	}
}

// TestRestoreHoldIsNeverTakenByAnother: a restore's .restoring
// subdirectory is never seen unheld while the restore runs, so that the
// next restore to its target, scanning for killed restores' directories
// at that moment, does not take it for one and remove the running
// restore's directory. One goroutine holds new temporary directories
// over and over as a restore does, another scans as the next restore
// does.
func TestRestoreHoldIsNeverTakenByAnother(t *testing.T) {
	parent := t.TempDir()
	stop, done := make(chan struct{}), make(chan struct{})
	scans := 0
	go func() {
		defer close(done)
		for ; ; scans++ {
			select {
			case <-stop:
				return
			default:
			}
			removeStaleRestores(parent, "restored", time.Now())
		}
	}()
	const rounds = 1000
	lost := 0
	for range rounds {
		tmp, err := os.MkdirTemp(parent, ".restored"+restoreTmpMark)
		if err != nil {
			t.Fatal(err)
		}
		hold, err := holdRestore(tmp)
		if hold == nil && err == nil {
			close(stop)
			<-done
			t.Skip("no flock on directories on this platform")
		}
		if _, serr := os.Stat(filepath.Join(tmp, restoreHold)); err != nil || serr != nil {
			lost++
		}
		if hold != nil {
			hold.Close()
		}
		os.RemoveAll(tmp)
	}
	close(stop)
	<-done
	t.Logf("%d rounds, %d scans", rounds, scans)
	if lost > 0 {
		t.Fatalf("%d of %d running restores' directories were taken by a scan for killed ones", lost, rounds)
	}
}
