package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// treeTestDB opens a DB in dir that issues checkpoints only when asked
// (and on Close), with a ledger "t" of n events (the genesis included).
func treeTestDB(t *testing.T, dir string, n int) *DB {
	t.Helper()
	db, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := db.Ledger("t"); err != nil {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	appendEvents(t, db, "t", n-1, appendSpec{Event: placed, Batch: batchesOf(7)})
	return db
}

// treeFilePath returns the path of a ledger's tree file.
func treeFilePath(db *DB, ledger string) string {
	info, err := db.Ledger(ledger)
	if err != nil {
		panic(err)
	}
	return filepath.Join(db.dir, ledgersDir, info.ID.String(), "tree")
}

// damageTreeHash flips a bit of stored hash number StoredHashIndex(level,
// i) of the ledger's tree file, in place, under the open DB (the leaves
// waiting in memory written to the file first).
func damageTreeHash(t *testing.T, db *DB, ledger string, level int, i int64) {
	t.Helper()
	l, err := db.ledger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.readTree(); err != nil {
		t.Fatal(err)
	}
	path := treeFilePath(db, ledger)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := int64(tree.HeaderSize) + 32*tlog.StoredHashIndex(level, i) + 5
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// eventsRoot computes the root of the first n events of a ledger from a
// Scan and the export line of each, as an auditor would (not with the
// engine's helpers).
func eventsRoot(t *testing.T, db *DB, ledger string, n uint64) tree.Hash {
	t.Helper()
	var b tree.Builder
	for ev, err := range db.Scan(context.Background(), ledger, ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if b.Size() == n {
			break
		}
		line := ndjson.AppendLine(nil, ev.ID, ev.ID.Micros(), ev.Entity, ev.Key, ev.Event, ev.Meta, ev.Data)
		b.Add(tree.LeafHash(line[:len(line)-1]))
	}
	if b.Size() != n {
		t.Fatalf("ledger %s has %d events, not %d", ledger, b.Size(), n)
	}
	return b.Root()
}

// TestVerifyTreeReport: Verify checks the tree and says so: the tree
// size, and the latest checkpoint's size and origin.
func TestVerifyTreeReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := treeTestDB(t, t.TempDir(), 20)
	defer db.Close()
	cp, err := db.Checkpoint(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "t", 5, appendSpec{Event: placed, Batch: batchesOf(7)})
	rep, err := db.Verify(ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := db.Ledger("t")
	if rep.Events != 25 || rep.TreeSize != 25 || rep.CheckpointSize != cp.Size || cp.Size != 20 || rep.CheckpointOrigin != cp.Origin || !strings.HasSuffix(cp.Origin, "/"+info.ID.String()) {
		t.Fatalf("report %+v, checkpoint %d %q", rep, cp.Size, cp.Origin)
	}
	if cp.Root != eventsRoot(t, db, "t", 20) {
		t.Fatal("the checkpoint's root is not the events' root")
	}
}

// TestVerifyTreeFileDamaged damages the tree file (not the events) under
// an open DB: a leaf or an interior hash covered by the signed checkpoint
// is ErrTreeDamaged (the events give the signed root), never ErrRewritten;
// the report still says what was checked.
func TestVerifyTreeFileDamaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		level int
		i     int64
	}{{"leaf 5", 0, 5}, {"leaf 0", 0, 0}, {"level 2 hash", 2, 1}, {"level 4 hash", 4, 0}} {
		t.Run(c.name, func(t *testing.T) {
			db := treeTestDB(t, t.TempDir(), 40)
			defer db.Close()
			if _, err := db.Checkpoint(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			damageTreeHash(t, db, "t", c.level, c.i)
			rep, err := db.Verify(ctx, "t", nil)
			if !errors.Is(err, ErrTreeDamaged) || errors.Is(err, ErrRewritten) {
				t.Fatalf("verify: %v, want ErrTreeDamaged", err)
			}
			if rep.Events != 40 || rep.CheckpointSize != 40 {
				t.Fatalf("report %+v", rep)
			}
			t.Log(err)
		})
	}
}

// TestVerifyTreeLeafBeyondCheckpoint: a leaf that differs after the
// latest checkpoint's size, or when there is no checkpoint, cannot be
// told from a changed event: ErrRewritten naming the event, saying so.
func TestVerifyTreeLeafBeyondCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("after the checkpoint", func(t *testing.T) {
		db := treeTestDB(t, t.TempDir(), 10)
		defer db.Close()
		if _, err := db.Checkpoint(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		appendEvents(t, db, "t", 6, appendSpec{Event: placed, Batch: batchesOf(7)})
		damageTreeHash(t, db, "t", 0, 12)
		_, err := db.Verify(ctx, "t", nil)
		if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), "event #13 (") || !strings.Contains(err.Error(), "covers events #1 to #10 only") {
			t.Fatalf("verify: %v", err)
		}
		t.Log(err)
	})
	t.Run("no checkpoint", func(t *testing.T) {
		db := treeTestDB(t, t.TempDir(), 10)
		defer db.Close()
		// CreateLedger and Open sign a checkpoint of every ledger: a
		// ledger without one is set up by forgetting it.
		l, err := db.ledger("t")
		if err != nil {
			t.Fatal(err)
		}
		l.latest.Store(nil)
		if _, err := db.LatestCheckpoint("t"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("latest checkpoint: %v", err)
		}
		damageTreeHash(t, db, "t", 0, 3)
		_, err = db.Verify(ctx, "t", nil)
		if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), "event #4 (") || !strings.Contains(err.Error(), "no checkpoint") {
			t.Fatalf("verify: %v", err)
		}
		t.Log(err)
	})
}

// TestVerifyCheckpointOutcomes covers every outcome of VerifyCheckpoint
// but the rewrite (see the forgery tests).
func TestVerifyCheckpointOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := treeTestDB(t, dir, 30)
	cp, err := db.Checkpoint(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "t", 9, appendSpec{Event: placed, Batch: batchesOf(7)})

	// Extended: the checkpoint verifies, with the DB's key named or not.
	if err := db.VerifyCheckpoint(ctx, "t", cp.Note, ""); err != nil {
		t.Fatalf("the ledger extends its checkpoint: %v", err)
	}
	if err := db.VerifyCheckpoint(ctx, "t", cp.Note, db.VerifierKey()); err != nil {
		t.Fatalf("with the key named: %v", err)
	}

	// Another key: the signature does not verify.
	_, vkey, err := note.GenerateKey(rand.Reader, "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.VerifyCheckpoint(ctx, "t", cp.Note, vkey); !errors.Is(err, tree.ErrCheckpoint) || errors.Is(err, ErrRewritten) {
		t.Fatalf("another key: %v", err)
	}
	// A changed byte of the note.
	bad := []byte(strings.Replace(string(cp.Note), "\n30\n", "\n31\n", 1))
	if err := db.VerifyCheckpoint(ctx, "t", bad, ""); !errors.Is(err, tree.ErrCheckpoint) {
		t.Fatalf("a changed size: %v", err)
	}
	// Another ledger's checkpoint, well signed: its origin names it.
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "u"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "u", 30, appendSpec{Event: placed, Batch: batchesOf(7)})
	cpU, err := db.Checkpoint(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.VerifyCheckpoint(ctx, "t", cpU.Note, ""); !errors.Is(err, tree.ErrCheckpoint) || !strings.Contains(err.Error(), "origin") {
		t.Fatalf("the checkpoint of another ledger: %v", err)
	}

	// The tree file no longer consistent with a checkpoint the events
	// agree with: ErrTreeDamaged. The whole tree's top stored hash (39
	// leaves: levels 0..5; the hash of leaves 0..31 at level 5).
	damageTreeHash(t, db, "t", 5, 0)
	if err := db.VerifyCheckpoint(ctx, "t", cp.Note, ""); !errors.Is(err, ErrTreeDamaged) || errors.Is(err, ErrRewritten) {
		t.Fatalf("a damaged tree file: %v", err)
	}
	damageTreeHash(t, db, "t", 5, 0) // back
	if err := db.VerifyCheckpoint(ctx, "t", cp.Note, ""); err != nil {
		t.Fatalf("the tree file repaired: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCheckpointRollback: a directory restored from a copy taken
// before later events were checkpointed (a rollback) fails
// VerifyCheckpoint of the later checkpoint: ErrRewritten, truncated.
func TestVerifyCheckpointRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := treeTestDB(t, dir, 12)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := t.TempDir()
	if err := os.CopyFS(old, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	db = treeTestDB(t, dir, 0)
	appendEvents(t, db, "t", 8, appendSpec{Event: placed, Batch: batchesOf(7)})
	cp, err := db.Checkpoint(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if cp.Size != 20 {
		t.Fatalf("checkpoint of size %d", cp.Size)
	}
	// Keep the copy's key file mode (CopyFS writes 0644 or so).
	if err := os.Chmod(filepath.Join(old, "signing.key"), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	db, err = Open(old, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.VerifyCheckpoint(ctx, "t", cp.Note, "")
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), "truncated or rolled back: the checkpoint covers 20 events, the ledger has 12") {
		t.Fatalf("rolled back: %v", err)
	}
}

// TestTreeDamageOffTheRootPath: a damaged leaf hash is not on the path of
// the root that the tree file gives at the signed checkpoint's size. A
// reopen that reads the leaf's event (the active segment is read at each
// Open, and checked against the tree with the hashes before it) finds the
// tree file wrong, rebuilds it beside the old one and says why
// (TreeRebuilt); the ledger then verifies. Had the leaf been in a sealed
// segment that the reopen need not read, Verify would say ErrTreeDamaged,
// naming annal reindex (Options.RebuildIndex), which rebuilds every tree
// file.
func TestTreeDamageOffTheRootPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := treeTestDB(t, dir, 40)
	if _, err := db.Checkpoint(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	damageTreeHash(t, db, "t", 0, 5)
	if _, err := db.Verify(ctx, "t", nil); !errors.Is(err, ErrTreeDamaged) || !strings.Contains(err.Error(), "annal reindex") {
		t.Fatalf("verify of the damaged tree: %v, want ErrTreeDamaged naming annal reindex", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if why := db.TreeRebuilt()["t"]; why == nil || !strings.Contains(why.Error(), "leaf 5 (event #6)") {
		t.Fatalf("TreeRebuilt after a reopen: %v, want the leaf of event #6 named", db.TreeRebuilt())
	}
	if _, err := db.Verify(ctx, "t", nil); err != nil {
		t.Fatalf("verify after the reopen rebuilt the tree: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, &Options{CheckpointInterval: -1, RebuildIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if why := db.TreeRebuilt()["t"]; why == nil || !strings.Contains(why.Error(), "RebuildIndex") {
		t.Fatalf("TreeRebuilt: %v", db.TreeRebuilt())
	}
	if _, err := db.Verify(ctx, "t", nil); err != nil {
		t.Fatalf("verify after RebuildIndex: %v", err)
	}
}

// TestSigningKeyLostCreatesNoKey: with DIR/signing.key deleted, Open
// creates no new key while checkpoints signed by the old one are in the
// directory: every Open (not only the first) refuses, naming the key that
// signed them and saying to restore DIR/signing.key or give the key; the
// key restored, the ledger opens.
func TestSigningKeyLostCreatesNoKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := treeTestDB(t, dir, 5)
	vkey := db.VerifierKey()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "signing.key")
	key, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	signer := vkey[:strings.IndexByte(vkey[strings.IndexByte(vkey, '+')+1:], '+')+strings.IndexByte(vkey, '+')+1]
	for range 2 {
		_, err := Open(dir, &Options{CheckpointInterval: -1})
		if !errors.Is(err, ErrSigningKeyMissing) || !strings.Contains(err.Error(), "restore "+keyPath) || !strings.Contains(err.Error(), signer) || !strings.Contains(err.Error(), "--signing-key") {
			t.Fatalf("opened without the key: %v, want ErrSigningKeyMissing naming %s, the cure", err, signer)
		}
		if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a new key was created: %v", err)
		}
	}
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if len(db.Unavailable()) != 0 {
		t.Fatalf("unavailable with the key restored: %v", db.Unavailable())
	}
}
