package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"

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
	dir := db.dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	if a, err := filepath.Abs(dir); err == nil {
		dir = a
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return filepath.Join(db.opts.CacheDir, sub, hex.EncodeToString(sum[:16]))
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
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(text)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), p) != nil {
		os.Remove(tmp.Name())
	}
}
