package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// A backup (DB.Backup) is a copy of the data directory as of one head per
// ledger, made while the DB runs, that opens as it is: every piece of
// evidence in it (the durable witness in meta.db, each checkpoint, the
// signer's state) is at or before the head of the segments copied, as
// after a crash of the writer, so the copy's Open refuses nothing and
// notes nothing. The order of the copy is what makes it so:
//
//  1. meta.db, through a bbolt read transaction (Tx.WriteTo), with no
//     ledger being created: its witnesses and consumer positions were
//     durable then, so they are at or before what step 3 copies;
//  2. with every ledger's checkpoint lock held, so that no checkpoint is
//     signed meanwhile: each ledger's checkpoint file, DIR/signing.key and
//     its state file (written before each checkpoint: together they agree);
//  3. each ledger, once its log is synced: its durable head H, at or after
//     every checkpoint copied (a checkpoint covers only durable events);
//     its sealed segments before H's segment (hard links where the target
//     is on the same file system, else copies), H's segment up to H's end
//     (a copy: the copy's Open writes its last segment), the first H
//     leaves of its tree file (at least the checkpoint's), and its NAME.
//
// The index is left out: it is derived from the segments, and the copy's
// first Open rebuilds it from them, verifying every record from the
// first (see docs/decisions/backups.md). Everything is written under
// a temporary name beside the target, synced, and renamed to it last: a
// backup that fails, is cancelled or is killed leaves no directory under
// the target's name.

// BackupResult says what DB.Backup copied.
type BackupResult struct {
	Dir     string         // the backup's directory, as given
	Ledgers []BackupLedger // the ledgers copied, by name
	// Unavailable names the ledgers that Open refused (see
	// DB.Unavailable), whose files were copied as they are: the copy
	// refuses them too, for the same reason.
	Unavailable []string
	Linked      int   // files hard-linked (sealed segments)
	Copied      int   // files copied
	Bytes       int64 // bytes copied (hard links not counted)
}

// BackupLedger is a ledger as DB.Backup copied it.
type BackupLedger struct {
	Name  string
	ID    eventid.LedgerID
	Count uint64     // events copied: every event up to Head
	Head  eventid.ID // the last event copied
	// Checkpoint is the size of the signed checkpoint copied (0: the
	// ledger had none).
	Checkpoint uint64
}

// linkFile makes a hard link (os.Link; a test's stands for another file
// system).
var linkFile = os.Link

// backupTmpMark is in the name of a backup's temporary directory.
const backupTmpMark = ".annal-backup-incomplete-"

// Backup writes a consistent copy of the data directory to dir while the
// DB runs: appends, reads and checkpoints go on meanwhile (only
// CreateLedger and Import wait, for the copy of meta.db). The copy holds
// every event acknowledged before Backup was called, and of each ledger a
// prefix of its events; it opens with Open (or OpenReadOnly) as it is and
// passes Verify. Open it with the same signer: the copy holds
// DIR/signing.key, its state file and DIR/signing.pub, but not a key given
// by Options.Signer.
//
// dir must not exist or be an empty directory, and must not be the data
// directory or inside it (ErrInvalid). Its parent is created if missing.
// The copy is written under a temporary name beside dir (".NAME" +
// ".annal-backup-incomplete-*") and renamed to dir once it is complete and
// synced: a Backup that fails, whose ctx ends or which Close interrupts
// removes it, and one killed midway leaves it (never dir).
//
// Sealed segments are hard links to the DB's own files where dir is on
// the same file system (they are never written again), other files
// copies; the index is not copied: the copy's first Open rebuilds it
// from the segments (as annal reindex does, verifying every record).
//
// A DB opened with OpenReadOnly makes one too, beside a writer in another
// process, with reads only (see backup_readonly.go): it blocks nothing
// and writes nothing in the data directory. Its copy holds, of each
// ledger it shows, the events the writer had written when the backup
// reached the ledger (every event acknowledged before Backup was called,
// and perhaps later ones, not yet synced), after the evidence copied
// before them, which it checks as OpenReadOnly does; a ledger that fails
// that check, or that the read-only open refused, is copied as it is and
// named in BackupResult.Unavailable.
func (db *DB) Backup(ctx context.Context, dir string) (BackupResult, error) {
	if err := ctx.Err(); err != nil {
		return BackupResult{}, err
	}
	if err := db.enterRead(); err != nil {
		return BackupResult{}, err
	}
	defer db.exitRead()
	ctx, cancel := db.untilClosing(ctx)
	defer cancel()
	if db.ro == nil {
		if err := db.checkDir(true); err != nil {
			return BackupResult{}, fmt.Errorf("engine: backup: %w", err)
		}
	}
	target, err := db.backupTarget(dir)
	if err != nil {
		return BackupResult{}, err
	}
	b := &backup{db: db, ctx: ctx, dst: privateFS{vfs.Default}, link: db.opts.fs == nil, res: BackupResult{Dir: dir}}
	if b.tmp, err = os.MkdirTemp(filepath.Dir(target), "."+filepath.Base(target)+backupTmpMark); err != nil {
		return BackupResult{}, fmt.Errorf("engine: backup to %s: create its temporary directory: %w", dir, err)
	}
	run := b.run
	if db.ro != nil {
		run = b.runReadOnly
	}
	if err := run(); err != nil {
		os.RemoveAll(b.tmp)
		if !errors.Is(err, ErrClosed) && db.stopped(context.Background()) != nil {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return BackupResult{}, fmt.Errorf("engine: backup to %s (nothing was left there): %w", dir, err)
	}
	// What was copied must be what the DB holds: a file replaced under
	// it meanwhile would have been copied instead.
	if db.ro == nil {
		if err := db.checkDir(true); err != nil {
			os.RemoveAll(b.tmp)
			return BackupResult{}, fmt.Errorf("engine: backup to %s (nothing was left there): %w", dir, err)
		}
	}
	// An empty target directory makes way (os.Rename does not replace a
	// directory); one that is no longer empty stays, and the copy is
	// removed.
	if fi, err := os.Lstat(target); err == nil {
		if !fi.IsDir() {
			os.RemoveAll(b.tmp)
			return BackupResult{}, invalid("backup to %s: something else was made there meanwhile (nothing was left there)", dir)
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(b.tmp)
			return BackupResult{}, fmt.Errorf("%w: backup to %s: the target is no longer an empty directory (nothing was left there): %w", ErrInvalid, dir, err)
		}
	}
	if err := os.Rename(b.tmp, target); err != nil {
		os.RemoveAll(b.tmp)
		return BackupResult{}, fmt.Errorf("engine: backup to %s: rename the complete copy %s to it (the target must be a new or empty directory on the file system of its parent): %w", dir, b.tmp, err)
	}
	if err := segment.SyncDir(b.dst, filepath.Dir(target)); err != nil {
		return b.res, fmt.Errorf("engine: backup to %s: the copy is complete, but syncing its parent directory failed (a crash could take the name back): %w", dir, err)
	}
	return b.res, nil
}

// backupTarget checks the target directory of a backup and returns its
// absolute path, its parent created if missing.
func (db *DB) backupTarget(dir string) (string, error) {
	if dir == "" {
		return "", invalid("backup: no target directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("engine: backup to %s: %w", dir, err)
	}
	data, err := os.Stat(db.dir)
	if err != nil {
		return "", fmt.Errorf("engine: backup: the data directory %s: %w", db.dir, err)
	}
	// The deepest directory of the path that exists, as the system
	// resolves it (links, mounts), and each directory above it, compared
	// with the data directory as a file: before anything is created.
	existing := abs
	for {
		if _, err := os.Stat(existing); err == nil || filepath.Dir(existing) == existing {
			break
		}
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("engine: backup to %s: %w", dir, err)
	}
	for d := real; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && os.SameFile(fi, data) {
			if d == real && existing == abs {
				return "", invalid("backup to %s: that is the data directory itself; give a new directory outside it", dir)
			}
			return "", invalid("backup to %s: it is inside the data directory %s, where a copy would be taken for the directory's own files; give a new directory outside it", dir, db.dir)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	parent := filepath.Dir(abs)
	if err := mkdirSynced(privateFS{vfs.Default}, parent); err != nil {
		return "", fmt.Errorf("engine: backup to %s: create its parent directory: %w", dir, err)
	}
	if real, err = filepath.EvalSymlinks(parent); err != nil {
		return "", fmt.Errorf("engine: backup to %s: %w", dir, err)
	}
	target := filepath.Join(real, filepath.Base(abs))
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return target, nil
	case err != nil:
		return "", fmt.Errorf("engine: backup to %s: %w", dir, err)
	case !fi.IsDir():
		return "", invalid("backup to %s: it exists and is not a directory; give a new or empty directory", dir)
	}
	names, err := os.ReadDir(target)
	if err != nil {
		return "", fmt.Errorf("engine: backup to %s: %w", dir, err)
	}
	if len(names) > 0 {
		sample := make([]string, 0, 3)
		for _, n := range names[:min(3, len(names))] {
			sample = append(sample, fmt.Sprintf("%q", n.Name()))
		}
		if len(names) > len(sample) {
			sample = append(sample, "…")
		}
		return "", invalid("backup to %s: the directory is not empty (it has %s): a backup is written only to a new or empty directory, never over another", dir, strings.Join(sample, ", "))
	}
	return target, nil
}

// backup is one DB.Backup in progress.
type backup struct {
	db   *DB
	ctx  context.Context
	dst  vfs.FS // the target's file system
	link bool   // sealed segments may be hard-linked (the DB's files are the OS's)
	tmp  string // the temporary directory
	res  BackupResult
}

func (b *backup) run() error {
	db := b.db
	if err := b.dst.MkdirAll(filepath.Join(b.tmp, ledgersDir), 0o700); err != nil {
		return err
	}
	// 1. meta.db, and which ledgers there are, with no ledger being
	// created or imported: a ledger has its record iff it is registered.
	db.creating.Lock()
	err := b.copyMeta()
	db.mu.RLock()
	ls := make([]*ledger, 0, len(db.byID))
	for _, l := range db.byID {
		ls = append(ls, l)
	}
	refused := db.refusedLedgers()
	db.mu.RUnlock()
	db.creating.Unlock()
	if err != nil {
		return err
	}
	slices.SortFunc(ls, func(a, c *ledger) int { return strings.Compare(a.meta.Name, c.meta.Name) })

	// 2. The checkpoints, the key and its state, with no checkpoint
	// being signed (the state is written before each checkpoint).
	cks, err := b.copyCheckpoints(ls)
	if err != nil {
		return err
	}

	// 3. Each ledger's files, up to its durable head.
	for i, l := range ls {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		bl, err := b.copyLedger(l, cks[i])
		if err != nil {
			return fmt.Errorf("ledger %s: %w", l.meta.Name, err)
		}
		b.res.Ledgers = append(b.res.Ledgers, bl)
	}
	return b.finishLedgers(refused)
}

// refusedLedger is a ledger the DB refused (DB.Unavailable): the key it
// is refused under (its name, or its ID) and its ID.
type refusedLedger struct {
	name string
	id   eventid.LedgerID
}

// refusedLedgers returns the ledgers the DB refused, by name; db.mu held.
func (db *DB) refusedLedgers() []refusedLedger {
	var out []refusedLedger
	for id, name := range db.brokenIDs {
		if _, ok := db.broken[name]; ok {
			out = append(out, refusedLedger{name, id})
		}
	}
	slices.SortFunc(out, func(a, c refusedLedger) int { return strings.Compare(a.name, c.name) })
	return out
}

// finishLedgers copies the refused ledgers' files as they are (the copy
// refuses them too) and syncs the copy's directories.
func (b *backup) finishLedgers(refused []refusedLedger) error {
	for _, r := range refused {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		if err := b.copyRefused(r.id); err != nil {
			return fmt.Errorf("refused ledger %s: %w", r.name, err)
		}
		b.res.Unavailable = append(b.res.Unavailable, r.name)
	}
	if err := segment.SyncDir(b.dst, filepath.Join(b.tmp, ledgersDir)); err != nil {
		return err
	}
	return segment.SyncDir(b.dst, b.tmp)
}

// copyMeta writes meta.db through a bbolt read transaction: a consistent
// copy of the file as of the transaction.
func (b *backup) copyMeta() error {
	path := filepath.Join(b.tmp, metaFile)
	f, err := b.dst.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	var n int64
	err = meta.Tx(b.db.meta, false, func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(f)
		return err
	})
	if err != nil {
		err = fmt.Errorf("copy the metadata file %s: %w", b.db.meta.Path(), err)
	}
	return b.finishFile(f, path, n, err)
}

// finishFile syncs and closes f, a file of n bytes the backup wrote at
// path, unless err (the write's) is set, and counts it.
func (b *backup) finishFile(f vfs.File, path string, n int64, err error) error {
	if err == nil {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("sync %s: %w", path, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	if err != nil {
		return err
	}
	b.res.Copied++
	b.res.Bytes += n
	return b.done(path)
}

// done is called after each file is written: the backup stops there if
// its context ended or Close began.
func (b *backup) done(path string) error {
	if h := b.db.test.backup; h != nil {
		if err := h(path); err != nil {
			return err
		}
	}
	return b.db.stopped(b.ctx)
}

// copyCheckpoints copies, with the checkpoint lock of every ledger of ls
// held, each one's checkpoint file, and the signing key, its state file
// and its verifier file (DIR/signing.pub) if the data directory has them. It returns the size of each
// ledger's checkpoint copied (0: none).
func (b *backup) copyCheckpoints(ls []*ledger) ([]uint64, error) {
	byID := slices.Clone(ls)
	slices.SortFunc(byID, func(a, c *ledger) int { return cmp.Compare(a.meta.ID, c.meta.ID) })
	for _, l := range byID {
		l.ckMu.Lock()
	}
	defer func() {
		for _, l := range byID {
			l.ckMu.Unlock()
		}
	}()
	db := b.db
	for _, name := range []string{signingKeyFile, signingKeyFile + ".state", signingPubFile} {
		if _, err := b.copyFile(filepath.Join(db.dir, name), filepath.Join(b.tmp, name), -1, true); err != nil {
			return nil, err
		}
	}
	sizes := make([]uint64, len(ls))
	for i, l := range ls {
		dir := filepath.Join(b.tmp, ledgersDir, l.meta.ID.String())
		if err := b.dst.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		ckPath := filepath.Join(l.log.Dir(), checkpointFileName)
		found, err := b.copyFile(ckPath, filepath.Join(dir, checkpointFileName), -1, true)
		if err != nil {
			return nil, err
		}
		if c := l.latest.Load(); found && c != nil {
			// The latest checkpoint issued, which is the file's: both
			// are written under the lock held (or read by Open).
			sizes[i] = c.Size
		}
	}
	return sizes, nil
}

// copyLedger copies a ledger's segments up to its durable head, a prefix
// of its tree file and its NAME file into the backup.
func (b *backup) copyLedger(l *ledger, ck uint64) (BackupLedger, error) {
	// Synced first: every event acknowledged so far is durable, in every
	// durability mode, and the head copied is at or after every
	// checkpoint and witness copied before.
	if err := l.log.Sync(); err != nil {
		return BackupLedger{}, fmt.Errorf("sync: %w", err)
	}
	h := l.log.Durable()
	if h.Seq == 0 || h.Loc.Segment == 0 || h.Seq < ck {
		return BackupLedger{}, fmt.Errorf("no durable head to copy up to (#%d in segment %d; checkpoint at %d)", h.Seq, h.Loc.Segment, ck)
	}
	src, dst := l.log.Dir(), filepath.Join(b.tmp, ledgersDir, l.meta.ID.String())
	if _, err := b.copyFile(filepath.Join(src, nameFile), filepath.Join(dst, nameFile), -1, true); err != nil {
		return BackupLedger{}, err
	}
	if err := b.copySegments(src, dst, h); err != nil {
		return BackupLedger{}, err
	}
	// The tree's first leaves: those written (readTree), up to the head.
	// They include the checkpoint's, whose root the copy's Open checks.
	_, leaves, err := l.readTree()
	if err != nil {
		return BackupLedger{}, err
	}
	if err := b.copyTree(src, dst, min(leaves, h.Seq), ck); err != nil {
		return BackupLedger{}, err
	}
	if err := segment.SyncDir(b.dst, dst); err != nil {
		return BackupLedger{}, err
	}
	return BackupLedger{Name: l.meta.Name, ID: l.meta.ID, Count: h.Seq, Head: h.ID, Checkpoint: ck}, nil
}

// copyRefused copies the files of a ledger that the DB refused as they
// are, if its directory exists.
func (b *backup) copyRefused(id eventid.LedgerID) error {
	src, dst := b.db.ledgerDir(id), filepath.Join(b.tmp, ledgersDir, id.String())
	names, err := b.db.fs.List(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.dst.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		if fi, err := b.db.fs.Stat(filepath.Join(src, n)); err != nil || fi.IsDir() {
			continue
		}
		if _, err := b.copyFile(filepath.Join(src, n), filepath.Join(dst, n), -1, true); err != nil {
			return err
		}
	}
	return segment.SyncDir(b.dst, dst)
}

// copySegments copies a ledger's segments from src to dst up to the
// head h: the sealed segments before h's whole (hard links where
// possible: they are never written again), h's segment up to the end of
// h's record, a copy, never a link (the copy's Open writes its last
// segment).
func (b *backup) copySegments(src, dst string, h segment.Head) error {
	for n := uint64(1); n <= h.Loc.Segment; n++ {
		name := segment.FileName(n)
		if n < h.Loc.Segment {
			if err := b.linkOrCopy(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
				return err
			}
			continue
		}
		found, err := b.copyFile(filepath.Join(src, name), filepath.Join(dst, name), h.Loc.End(), false)
		if err == nil && !found {
			err = fmt.Errorf("%s: %w", filepath.Join(src, name), os.ErrNotExist)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the first leaves leaves of a ledger's tree file from
// src to dst: at least those of its checkpoint (of size ck), whose root
// the copy's Open checks; the copy's Open extends it from the segments.
func (b *backup) copyTree(src, dst string, leaves, ck uint64) error {
	if leaves < ck {
		return fmt.Errorf("the tree holds %d leaves, fewer than the checkpoint's %d", leaves, ck)
	}
	_, err := b.copyFile(filepath.Join(src, treeFileName), filepath.Join(dst, treeFileName), tree.FileLen(leaves), false)
	return err
}

// linkOrCopy hard-links src to dst, or copies it when it cannot (another
// file system, a file system without links, a DB on a test file system).
func (b *backup) linkOrCopy(src, dst string) error {
	if b.link {
		if err := linkFile(src, dst); err == nil {
			b.res.Linked++
			return b.done(dst)
		}
	}
	found, err := b.copyFile(src, dst, -1, false)
	if err == nil && !found {
		err = fmt.Errorf("%s: %w", src, os.ErrNotExist)
	}
	return err
}

// copyFile copies the first n bytes of src (all of it if n < 0) to dst,
// synced. A missing src is no error if optional (found false); with n >= 0
// a src shorter than n is.
func (b *backup) copyFile(src, dst string, n int64, optional bool) (found bool, err error) {
	if err := regularFile(b.db.fs, src); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err // a named pipe would block the open for ever
	}
	in, err := b.db.fs.Open(src)
	if errors.Is(err, os.ErrNotExist) && optional {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := b.dst.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return true, fmt.Errorf("create %s: %w", dst, err)
	}
	var r io.Reader = in
	if n >= 0 {
		r = io.LimitReader(in, n)
	}
	w, err := io.Copy(ctxWriter{b.ctx, out}, r)
	switch {
	case err != nil:
		err = fmt.Errorf("copy %s to %s: %w", src, dst, err)
	case n >= 0 && w < n:
		err = fmt.Errorf("copy %s: %w: it ends at byte %d, the copy needs %d", src, io.ErrUnexpectedEOF, w, n)
	}
	return true, b.finishFile(out, dst, w, err)
}

// ctxWriter is a writer that fails once its context ends, so that a
// large copy stops when the backup is cancelled.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
