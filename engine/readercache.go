package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"

	"github.com/annal-db/annal/eventid"
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

// readerCachePath returns the file of the reader's stamps of ledger id,
// or "" without Options.CacheDir (or a test's file system).
func (db *DB) readerCachePath(id eventid.LedgerID) string {
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
	return filepath.Join(db.opts.CacheDir, readerCacheSub, hex.EncodeToString(sum[:16]), id.String())
}

// readerStamps returns the stamps ledger id's segments may be opened with
// read-only: the writer's (in the ledger's folder) and the reader's own
// (readerCachePath), the writer's first.
func (db *DB) readerStamps(id eventid.LedgerID) []segment.Stamp {
	stamps := readStamps(db.fs, db.ledgerDir(id))
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
	writer := readStamps(db.fs, l.log.Dir())
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
