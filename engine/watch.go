package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/segment"
)

// The directory's files. A writer notices when its files are taken from
// under it (dirWatch): it records the identity (device and inode) of DIR,
// DIR/LOCK, DIR/meta.db, DIR/index and DIR/ledgers at Open, and of each
// ledger's own files (below), and checks them at most every watchInterval on the append
// path (before an append, and after its group is synced, before it
// returns), and at Close before it writes anything. A file removed or
// replaced stops every later append, CreateLedger and Import with
// ErrDirectoryChanged; reads go on.

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

// A writer's ledgers' files. Beside the directory's own files (dirWatch,
// above), the writer's watch looks at every writable ledger's files: its
// directory and segments (segment.Log.CheckFiles: removed, moved,
// replaced, cut, an older copy written over the active segment in
// place) and the files the engine keeps in it, NAME, tree and
// checkpoint (ledgerFiles: removed or replaced; the tree and the
// checkpoint written over in place too, by the tree's header and size
// and the checkpoint's bytes). Once one changed, the whole writer stops
// (ErrDirectoryChanged): its appends would be acknowledged and lost. A
// ledger whose segments changed is stopped too (segment.Log.Fail: its
// Close writes nothing more into them).

// ledgerFiles is the identity of the files of a writable ledger that the
// engine keeps in its directory, taken when the ledger became reachable
// (watchFiles); nil for a file that was not there (not watched). The
// checkpoint file is replaced by the ledger's own checkpoints (issueCheckpoint):
// its identity follows them (checkFiles).
type ledgerFiles struct {
	name, tree, checkpoint os.FileInfo
	// ckBytes: the checkpoint file's bytes as the writer last wrote or
	// read them (under ckMu): a checkpoint file written over in place
	// (the same inode) is told by its bytes.
	ckBytes []byte
}

// watchFiles records the identity of the ledger's NAME, tree and
// checkpoint files, for checkFiles. Called where the ledger becomes
// reachable as a writable ledger (register, registerLedgers), when its files are as the
// writer made or found them.
func (l *ledger) watchFiles() {
	if l.db.opts.fs != nil || l.db.ro != nil {
		return // a test's file system, or a read-only DB: not watched
	}
	dir := l.log.Dir()
	l.files.name, _ = os.Lstat(filepath.Join(dir, nameFile))
	l.files.tree, _ = os.Lstat(filepath.Join(dir, treeFileName))
	l.files.checkpoint, _ = os.Lstat(filepath.Join(dir, checkpointFileName))
	if l.files.checkpoint != nil {
		l.files.ckBytes, _ = readSmallFile(l.db.fs, filepath.Join(dir, checkpointFileName), maxCheckpointFile)
	}
}

// checkFiles reports whether a file of the ledger was removed or
// replaced since it became reachable: its directory or a segment (see
// segment.Log.CheckFiles), its NAME, tree or checkpoint file. Called by
// the writer's watch only (dirWatch.check, which serializes the calls).
func (l *ledger) checkFiles() error {
	if err := l.log.CheckFiles(); err != nil {
		return err
	}
	dir := l.log.Dir()
	for _, f := range []struct {
		name string
		fi   os.FileInfo
	}{{nameFile, l.files.name}, {treeFileName, l.files.tree}} {
		if f.fi == nil {
			continue
		}
		path := filepath.Join(dir, f.name)
		if what := fileChanged(path, f.fi); what != "" {
			return fmt.Errorf("%s %s", path, what)
		}
	}
	if l.files.tree != nil {
		// Written over in place (the same inode: cp OTHER tree): its
		// header, and its size against what was written to it.
		l.idxMu.Lock()
		l.waitTreeLocked() // its write in progress, done: its size is what was written
		t := l.tree
		l.idxMu.Unlock()
		if t != nil {
			if err := t.CheckFile(); err != nil {
				return err
			}
		}
	}
	return l.checkCheckpointFile()
}

// checkCheckpointFile reports whether the checkpoint file was removed,
// replaced by another than the ledger's own latest checkpoint, or
// written over in place (the same file, other bytes: cp OTHER
// checkpoint). Its own checkpoints replace the file (issueCheckpoint,
// under ckMu): a file whose bytes are not those the writer last wrote or
// read is taken for the ledger's if it holds its latest checkpoint, and
// recorded. The file is small: its bytes are read at each look. While a
// checkpoint is being written (ckMu held), the file is looked at the
// next time.
func (l *ledger) checkCheckpointFile() error {
	path := filepath.Join(l.log.Dir(), checkpointFileName)
	if !l.ckMu.TryLock() {
		return nil
	}
	defer l.ckMu.Unlock()
	was := l.files.checkpoint
	now, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && was == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s was removed or moved", path)
	case err != nil:
		return fmt.Errorf("%s cannot be checked (%v)", path, err)
	}
	same := was != nil && os.SameFile(now, was)
	b, err := readSmallFile(l.db.fs, path, maxCheckpointFile)
	if err == nil && same && bytes.Equal(b, l.files.ckBytes) {
		return nil
	}
	if c := l.latest.Load(); err == nil && c != nil && bytes.Equal(b, c.Note) {
		// The ledger's own latest checkpoint (a new file whose inode
		// may be that of one it replaced before).
		l.files.checkpoint, l.files.ckBytes = now, b
		return nil
	}
	if same {
		return fmt.Errorf("%s was written over in place (its bytes are not the checkpoint this writer last wrote or read)", path)
	}
	return fmt.Errorf("%s was replaced by another file (not the ledger's latest checkpoint)", path)
}

// fileChanged says how the file at path differs from fi ("was removed or
// moved", "was replaced by another file"), or "" if it is the same file.
func fileChanged(path string, fi os.FileInfo) string {
	now, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "was removed or moved"
	case err != nil:
		return fmt.Sprintf("cannot be checked (%v)", err)
	case !os.SameFile(now, fi):
		return "was replaced by another file"
	}
	return ""
}

// checkLedgerFiles is the writer's watch of its ledgers' files
// (dirWatch.ledgers): the error of the first ledger whose files changed
// is returned, wrapping ErrDirectoryChanged (the watch then stops every
// append). If its directory or segments changed, its log is stopped too
// (segment.Log.Fail), so that its Close writes nothing into them.
func (db *DB) checkLedgerFiles() error {
	db.mu.RLock()
	ls := make([]*ledger, 0, len(db.byID))
	for _, l := range db.byID {
		ls = append(ls, l)
	}
	db.mu.RUnlock()
	for _, l := range ls {
		if err := l.checkFiles(); err != nil {
			segs := errors.Is(err, segment.ErrFileChanged)
			err = fmt.Errorf("%w: ledger %s: %w, while this process had it open; appends stop (reads go on): close the DB and restart the process, whose Open checks the ledger (and says if events acknowledged since were lost with the file)", ErrDirectoryChanged, l.meta.Name, err)
			if segs {
				// Its segments are no longer its own: its Close must not
				// sync or cut what is there now.
				l.log.Fail(err)
			}
			return err
		}
	}
	return nil
}

// dropTreePending forgets the leaves not yet written to the tree file,
// so that closing it writes nothing: for Close once the watch found the
// directory changed (the tree is derived: the next Open extends it from
// the segments).
func (l *ledger) dropTreePending() {
	l.idxMu.Lock()
	l.waitTreeLocked() // a write in progress ends first
	l.treePend = nil
	l.idxMu.Unlock()
}
