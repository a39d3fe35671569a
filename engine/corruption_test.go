package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolterrors "go.etcd.io/bbolt/errors"
)

// TestErrCorruptionMatchesEveryLayer: an error that says stored data is
// damaged or rewritten matches ErrCorruption, whichever layer found it
// (the segments, the index, the Merkle tree, the metadata file, the
// events against their tree), and still matches its own sentinel; an
// error that says nothing of the data (a lock held, a missing event, a
// permission, a ledger refused for its checkpoint evidence alone) does
// not. Each error comes from a real store, damaged as the case says.
func TestErrCorruptionMatchesEveryLayer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		err     func(t *testing.T) error
		matches []error // what it matched before ErrCorruption existed
		corrupt bool
	}{
		{"segment: a record's byte flipped", segmentRecordFlipped, []error{ErrLedgerUnavailable, segment.ErrCorruption}, true},
		{"segment: an older copy restored over the tail", segmentTailLost, []error{ErrLedgerUnavailable, segment.ErrCorruption, segment.ErrAcknowledgedLost}, true},
		{"index: a table's block damaged, Verify", func(t *testing.T) error { return indexTableDamaged(t, false) }, []error{ErrIndexDamaged}, true},
		{"index: a table's block damaged, the index's read", func(t *testing.T) error { return indexTableDamaged(t, true) }, []error{index.ErrCorruption}, true},
		{"tree: a stored hash flipped", treeHashFlipped, []error{ErrTreeDamaged}, true},
		{"tree: a tree file's header damaged", treeHeaderDamaged, []error{tree.ErrCorrupt}, true},
		{"meta.db: a record's CRC", func(t *testing.T) error { return metaDamaged(t, "record") }, []error{ErrMetaDamaged}, true},
		{"meta.db: its meta pages zeroed", func(t *testing.T) error { return metaDamaged(t, "meta pages") }, []error{ErrMetaDamaged, bolterrors.ErrInvalid}, true},
		{"events: an event forged in place", eventForged, []error{ErrRewritten}, true},

		{"a second Open of the directory", dirOpenTwice, []error{ErrLocked}, false},
		{"an event that is not there", getMissingEvent, []error{ErrNotFound}, false},
		{"a segment this process may not open", segmentPermissionDenied, []error{ErrLedgerUnavailable, os.ErrPermission}, false},
		{"a checkpoint file removed", checkpointRemoved, []error{ErrLedgerUnavailable, ErrUnsigned}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err(t)
			t.Logf("%v", err)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range c.matches {
				if !errors.Is(err, want) {
					t.Errorf("the error does not match %q", want)
				}
			}
			if got := errors.Is(err, ErrCorruption); got != c.corrupt {
				t.Errorf("errors.Is(err, ErrCorruption) = %v, want %v", got, c.corrupt)
			}
		})
	}
}

// corruptionLedger creates, in a new directory, a ledger "l" of its
// genesis and n events, closes the DB and returns the directory and the
// ledger's ID.
func corruptionLedger(t *testing.T, n int) (string, eventid.LedgerID) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, info.ID
}

// firstSegment is the path of the first segment of ledger id in dir.
func firstSegment(dir string, id eventid.LedgerID) string {
	return filepath.Join(dir, ledgersDir, id.String(), "00000000000000000001.seg")
}

// openErr opens dir and returns the error of ledger "l" (nil if it is
// available), closing the DB.
func openErr(t *testing.T, dir string, opts *Options) error {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Ledger("l")
	return err
}

// segmentRecordFlipped: a byte of a record in the middle of the segment
// flipped, found by the full verification of Open.
func segmentRecordFlipped(t *testing.T) error {
	dir, id := corruptionLedger(t, 2)
	seg := firstSegment(dir, id)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[200] ^= 0x20
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return openErr(t, dir, &Options{FullVerifyOnOpen: true})
}

// segmentTailLost: an older copy of the segment restored over it, which
// the durable witness in meta.db says lost acknowledged events.
func segmentTailLost(t *testing.T) error {
	dir, id := corruptionLedger(t, 3)
	older, err := os.ReadFile(firstSegment(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	db := openTest(t, dir)
	if _, err := db.Append(context.Background(), "l", []EventInput{order(3), order(4)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(firstSegment(dir, id), older, 0o600); err != nil {
		t.Fatal(err)
	}
	return openErr(t, dir, nil)
}

// indexTableDamaged: bytes in the middle of the index's largest table
// flipped, where Open does not read (as TestVerifyIndexDamaged does).
// It returns Verify's error, or with read that of the index's read of
// the entity stream, which reaches the damage.
func indexTableDamaged(t *testing.T, read bool) error {
	ctx := context.Background()
	dir := t.TempDir()
	damageIndexTable(t, dir, "acct")
	db := openTest(t, dir)
	defer db.Close()
	if err := db.IndexRebuilt(); err != nil {
		t.Fatalf("Open found the damage (%v): the test must damage what only Verify reads", err)
	}
	if !read {
		_, err := db.Verify(ctx, "acct", nil)
		return err
	}
	for _, err := range db.idx.Entity(ctx, db.byName["acct"].meta.ID, []byte("order"), 0) {
		if err != nil {
			return err
		}
	}
	t.Fatal("the read of the entity stream did not reach the damaged block")
	return nil
}

// treeHashFlipped: a leaf hash of the tree file flipped under an open DB,
// the events intact and signed (damageTreeHash).
func treeHashFlipped(t *testing.T) error {
	ctx := context.Background()
	db := treeTestDB(t, t.TempDir(), 40)
	defer db.Close()
	if _, err := db.Checkpoint(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	damageTreeHash(t, db, "t", 0, 5)
	_, err := db.Verify(ctx, "t", nil)
	return err
}

// treeHeaderDamaged: a byte of the tree file's magic flipped, found by
// the tree package when it opens the file.
func treeHeaderDamaged(t *testing.T) error {
	dir, id := corruptionLedger(t, 3)
	path := filepath.Join(dir, ledgersDir, id.String(), "tree")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := tree.OpenFile(vfs.Default, path, uint32(id))
	if err == nil {
		f.Close()
	}
	return err
}

// metaDamaged: meta.db with a record whose CRC does not match
// (TestMetaDamageNamesCure), or with both of bbolt's meta pages zeroed,
// which bbolt refuses (bolterrors.ErrInvalid): Open's error.
func metaDamaged(t *testing.T, what string) error {
	dir, id := corruptionLedger(t, 1)
	path := filepath.Join(dir, metaFile)
	switch what {
	case "record":
		v := bytes.Clone(rawMeta(t, path)[id.String()])
		v[len(v)-1] ^= 0x01 // the CRC itself
		putRawMeta(t, path, id.String(), v)
	case "meta pages":
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		clear(b[:2*4096])
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Open(dir, nil)
	return err
}

// eventForged: an event changed in place with its CRC32C kept
// (forgeEvent), which Verify finds with the Merkle tree.
func eventForged(t *testing.T) error {
	dir := t.TempDir()
	seq, _ := forgeryLedger(t, dir)
	forgeEvent(t, ledgerSegDir(t, dir, "pay"), seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(rand.Uint64(), 26)))
	db := openTest(t, dir)
	defer db.Close()
	_, err := db.Verify(context.Background(), "pay", nil)
	return err
}

// dirOpenTwice: a second Open of a directory a DB has open.
func dirOpenTwice(t *testing.T) error {
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	db2, err := Open(dir, nil)
	if err == nil {
		db2.Close()
	}
	return err
}

// getMissingEvent: Get of an ID no event has.
func getMissingEvent(t *testing.T) error {
	dir, id := corruptionLedger(t, 1)
	db := openTest(t, dir)
	defer db.Close()
	_, err := db.Get(context.Background(), eventid.New(1, 1, id))
	return err
}

// denySegmentFS is a file system on which opening a segment is
// "permission denied", as for a user other than the files' owner: what
// permission bits cannot do to root.
type denySegmentFS struct{ vfs.FS }

func (f denySegmentFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if strings.HasSuffix(name, ".seg") {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrPermission}
	}
	return f.FS.Open(name, opts...)
}

func (f denySegmentFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if strings.HasSuffix(name, ".seg") {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrPermission}
	}
	return f.FS.OpenReadWrite(name, category, opts...)
}

// segmentPermissionDenied: a ledger whose segment cannot be opened for lack of
// permission.
func segmentPermissionDenied(t *testing.T) error {
	dir, _ := corruptionLedger(t, 1)
	return openErr(t, dir, &Options{fs: denySegmentFS{vfs.Default}})
}

// checkpointRemoved: a ledger's checkpoint file removed: the ledger is
// refused for its evidence (ErrUnsigned), which the operator cures by
// restoring the file or accepting the ledger; nothing says the events
// are damaged.
func checkpointRemoved(t *testing.T) error {
	dir, id := corruptionLedger(t, 3)
	if err := os.Remove(filepath.Join(dir, ledgersDir, id.String(), "checkpoint")); err != nil {
		t.Fatal(err)
	}
	return openErr(t, dir, nil)
}
