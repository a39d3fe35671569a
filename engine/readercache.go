package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// A read-only DB given Options.CacheDir keeps there the stamps of the
// sealed segments it verified whole, one file per data directory and
// ledger: CacheDir/verified/DIRKEY/LEDGER, DIRKEY the first 16 bytes, in
// hex, of the SHA-256 of the data directory's absolute path with its
// symbolic links resolved. A later read-only open of the same ledger is
// given them with the writer's (readStamps), and skips the segments that
// are as they were stamped: a stamp is of a file's identity (device,
// inode, size, change and modification times), so a segment written,
// replaced or restored since is read again. Like the writer's stamps,
// they are a cache of a verification, not evidence (docs/decisions/
// reads-cost-what-they-read.md).
const readerCacheSub = "verified"

// readerIndexSub: a read-only DB given Options.CacheDir that cannot read
// the writer's index (a writer holds the directory) keeps its private
// index in CacheDir/index/DIRKEY, between opens, and extends it from
// where it stopped (openCachedIndex).
const readerIndexSub = "index"

// readerCachePath returns the file of the reader's stamps of ledger id,
// or "" without Options.CacheDir (or a test's file system).
func (db *DB) readerCachePath(id eventid.LedgerID) string {
	if p := db.readerCacheDir(readerCacheSub); p != "" {
		return filepath.Join(p, id.String())
	}
	return ""
}

// readerCacheDir returns CacheDir/sub/DIRKEY, or "" without
// Options.CacheDir (or a test's file system).
func (db *DB) readerCacheDir(sub string) string {
	if db.opts.CacheDir == "" || db.opts.fs != nil {
		return ""
	}
	key, _ := db.readerCacheKey()
	return filepath.Join(db.opts.CacheDir, sub, key)
}

// readerCacheKey returns DIRKEY, and the path it is of: the data
// directory's absolute path with its symbolic links resolved.
func (db *DB) readerCacheKey() (key, dir string) {
	dir = db.dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	if a, err := filepath.Abs(dir); err == nil {
		dir = a
	}
	dir = filepath.Clean(dir)
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:16]), dir
}

// The reader's caches are pruned, so that reading many data directories
// (a test suite's, a CI machine's) does not fill the user's cache
// directory with indexes of directories long gone. Each read-only open
// that keeps a cache writes the data directory's path to
// CacheDir/dirs/DIRKEY (its modification time is the open's), and at most
// once every readerPruneEvery (the modification time of CacheDir/pruned)
// removes the caches of the data directories that no longer exist, and
// of those no read-only open used for readerCacheIdle. It never removes
// its own directory's, nor an index another reader has open (Pebble's
// lock on it). A cache removed is made again by the next read that wants
// it: the cost is one read of what the writer did not stamp.
const (
	readerDirsSub    = "dirs"
	readerPruneMark  = "pruned"
	readerPruneEvery = time.Hour
	readerCacheIdle  = 30 * 24 * time.Hour
)

// noteReaderCache records that this DB uses the reader's caches of its
// data directory, then prunes the others' if it is time.
func (db *DB) noteReaderCache() {
	if db.opts.CacheDir == "" || db.opts.fs != nil {
		return
	}
	key, dir := db.readerCacheKey()
	p := filepath.Join(db.opts.CacheDir, readerDirsSub, key)
	now := time.Now()
	if b, err := os.ReadFile(p); err == nil && string(b) == dir {
		os.Chtimes(p, now, now)
	} else {
		writeCacheFile(p, []byte(dir))
	}
	pruneReaderCache(db.opts.CacheDir, key, now)
}

// pruneReaderCache removes from cacheDir the caches of data directories
// that no longer exist or were not used for readerCacheIdle, but keep's,
// if the last prune was readerPruneEvery ago or more. It returns the
// DIRKEYs it removed. Failures are not reported: a cache is only a cache.
func pruneReaderCache(cacheDir, keep string, now time.Time) (removed []string) {
	mark := filepath.Join(cacheDir, readerPruneMark)
	if fi, err := os.Stat(mark); err == nil && now.Sub(fi.ModTime()) < readerPruneEvery {
		return nil
	}
	if !writeCacheFile(mark, nil) {
		return nil
	}
	keys := map[string]bool{}
	for _, sub := range []string{readerDirsSub, readerIndexSub, readerCacheSub} {
		ents, _ := os.ReadDir(filepath.Join(cacheDir, sub))
		for _, e := range ents {
			if len(e.Name()) == 32 && !strings.HasPrefix(e.Name(), ".") {
				keys[e.Name()] = true
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		if key == keep {
			continue
		}
		gone, used := false, time.Time{}
		if fi, err := os.Stat(filepath.Join(cacheDir, readerDirsSub, key)); err == nil {
			used = fi.ModTime()
			if b, err := os.ReadFile(filepath.Join(cacheDir, readerDirsSub, key)); err == nil && len(b) > 0 {
				_, err := os.Lstat(string(b))
				gone = errors.Is(err, fs.ErrNotExist)
			}
		} else {
			// A cache written before the dirs/ entries: its own time.
			for _, sub := range []string{readerIndexSub, readerCacheSub} {
				if fi, err := os.Stat(filepath.Join(cacheDir, sub, key)); err == nil && fi.ModTime().After(used) {
					used = fi.ModTime()
				}
			}
		}
		if !gone && now.Sub(used) < readerCacheIdle {
			continue
		}
		idx := filepath.Join(cacheDir, readerIndexSub, key)
		if _, err := os.Stat(idx); err == nil {
			lock, err := vfs.Default.Lock(filepath.Join(idx, "LOCK"))
			if err != nil {
				continue // a reader has it open
			}
			err = os.RemoveAll(idx)
			lock.Close()
			if err != nil {
				continue
			}
		}
		os.RemoveAll(filepath.Join(cacheDir, readerCacheSub, key))
		os.Remove(filepath.Join(cacheDir, readerDirsSub, key))
		removed = append(removed, key)
	}
	return removed
}

// writeCacheFile writes data to the file p (its directory made if
// missing) by renaming a temporary file over it, and says whether it did.
func writeCacheFile(p string, data []byte) bool {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return false
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), p) != nil {
		os.Remove(tmp.Name())
		return false
	}
	return true
}

// openCachedIndex opens the reader's index kept in Options.CacheDir for
// this data directory (made if missing), or returns nil: no CacheDir, or
// the index cannot be opened (another reader has it open: Pebble's lock;
// damaged), and the caller makes a private one. Each ledger's progress
// marker there is taken as what is indexed only if the segments, as this
// DB verified and shows them, hold the marker's record at its location
// (the same event, the same sequence number): the entries before it are
// of the same events then, the chain linking each to the one before. A
// ledger whose marker is past what the DB shows, or not there (the
// ledger was restored, rewritten, replaced), is indexed again from its
// first event, its earlier entries deleted first (catchUp from the zero
// head), and so is one without a marker.
func (db *DB) openCachedIndex() *index.Index {
	p := db.readerCacheDir(readerIndexSub)
	if p == "" {
		return nil
	}
	if err := os.MkdirAll(p, 0o700); err != nil {
		return nil
	}
	x, err := index.Open(p, index.Options{CacheSize: db.opts.CacheSize})
	if err != nil {
		return nil
	}
	for _, l := range db.byID {
		m, ok, err := x.Progress(l.meta.ID)
		if err != nil {
			x.Close()
			return nil
		}
		if !ok || m.Seq == 0 || m.Seq > l.log.Head().Seq {
			continue
		}
		r, err := l.log.ReadAt(m.Loc)
		if err != nil || r.ID != m.ID || r.Seq != m.Seq {
			continue
		}
		l.idxMu.Lock()
		l.indexed, l.idxHead = m.Seq, m
		l.idxMu.Unlock()
	}
	return x
}

// readerStamps returns the stamps ledger id's segments may be opened with
// read-only: the writer's (in the ledger's folder) and the reader's own
// (readerCachePath), the writer's first.
func (db *DB) readerStamps(id eventid.LedgerID) []segment.Stamp {
	stamps := writerStamps(db.fs, db.ledgerDir(id))
	if p := db.readerCachePath(id); p != "" {
		if b, err := readSmallFile(db.fs, p, maxStampsFile); err == nil {
			if own, err := segment.UnmarshalStamps(b); err == nil {
				stamps = append(stamps, own...)
			}
		}
	}
	return stamps
}

// keepReaderStamps writes to the reader's cache the stamps of ledger l's
// sealed segments that its read-only open verified or skipped, once the
// ledger passed every check of the open, if they are not all stamped by
// the writer already. A write that fails is not reported: the next open
// reads those segments again.
func (db *DB) keepReaderStamps(l *ledger) {
	p := db.readerCachePath(l.meta.ID)
	if p == "" {
		return
	}
	now := l.log.Stamps()
	writer := writerStamps(db.fs, l.log.Dir())
	if len(now) == 0 || !slices.ContainsFunc(now, func(s segment.Stamp) bool { return !slices.Contains(writer, s) }) {
		return
	}
	text := segment.MarshalStamps(now)
	if old, err := os.ReadFile(p); err == nil && string(old) == string(text) {
		return
	}
	writeCacheFile(p, text)
}
