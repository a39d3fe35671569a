package engine

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// mkRoot computes the RFC 9162 root of leaf hashes, independently of
// package tree: MTH(D[0..n)) = SHA-256(0x01 ‖ MTH(D[0..k)) ‖ MTH(D[k..n))),
// k the largest power of 2 below n.
func mkRoot(leaves []tree.Hash) tree.Hash {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := mkRoot(leaves[:k]), mkRoot(leaves[k:])
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// mkLeaves returns the leaf hashes of an export: SHA-256(0x00 ‖ line),
// each line without its "\n" (docs/format.md, section 9.1).
func mkLeaves(t *testing.T, export []byte) []tree.Hash {
	t.Helper()
	var out []tree.Hash
	for _, line := range bytes.SplitAfter(export, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[len(line)-1] != '\n' {
			t.Fatalf("export line without a newline: %q", line)
		}
		out = append(out, sha256.Sum256(append([]byte{0}, line[:len(line)-1]...)))
	}
	return out
}

// mkLedger creates a ledger and appends n events in batches of 1 to 5.
func mkLedger(t *testing.T, db *DB, name string, n int) LedgerInfo {
	t.Helper()
	ctx := context.Background()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, name, n, appendSpec{From: 0, Batch: mixedBatches})
	return info
}

func mkVerifier(t *testing.T, db *DB) note.Verifier {
	t.Helper()
	v, err := tree.NewVerifier(db.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mkCheckNote opens a signed checkpoint with the DB's public key and
// checks that it says what c says.
func mkCheckNote(t *testing.T, db *DB, c Checkpoint) {
	t.Helper()
	body, err := tree.OpenCheckpoint(c.Note, mkVerifier(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if body.Size != c.Size || body.Root != c.Root || body.Origin != c.Origin || !strings.HasSuffix(c.Origin, "/"+c.Ledger.String()) {
		t.Fatalf("checkpoint %+v, its note says %+v", c, body)
	}
}

// TestMerkleProofsOfEveryEvent: after appends, the checkpoint's root is
// the root of the export's lines computed independently, and the
// inclusion proof of every event, against the checkpoint and against
// trees of other sizes, verifies.
func TestMerkleProofsOfEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := mkLedger(t, db, "shop", 99)
	c, err := db.Checkpoint(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 100 || c.Ledger != info.ID {
		t.Fatalf("checkpoint %+v, want size 100", c)
	}
	mkCheckNote(t, db, c)
	if l, err := db.LatestCheckpoint("shop"); err != nil || !bytes.Equal(l.Note, c.Note) {
		t.Fatalf("LatestCheckpoint: %v %+v", err, l)
	}
	export, _ := exportBytes(t, db, "shop", ExportOptions{})
	leaves := mkLeaves(t, export)
	if got := mkRoot(leaves); got != c.Root {
		t.Fatalf("checkpoint root %s, the export's lines give %s", c.Root, got)
	}
	events := collect(t, db.Scan(ctx, "shop", ScanOptions{}))
	for i, ev := range events {
		seq := uint64(i + 1)
		p, err := db.ProveInclusion(ctx, ev.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seq != seq || p.TreeSize != c.Size || p.LeafHash != leaves[i] || !bytes.Equal(p.Checkpoint, c.Note) || p.ID != ev.ID || p.Ledger != info.ID {
			t.Fatalf("event #%d: proof %+v", seq, p)
		}
		if err := tree.VerifyInclusion(seq-1, p.TreeSize, leaves[i], p.Hashes, c.Root); err != nil {
			t.Fatalf("event #%d: %v", seq, err)
		}
		// Against a smaller tree, with its root computed from the lines.
		for _, n := range []uint64{seq, seq + 3, 77} {
			if n < seq || n > 100 {
				continue
			}
			p, err := db.ProveInclusion(ctx, ev.ID, n)
			if err != nil {
				t.Fatal(err)
			}
			if p.Checkpoint != nil || p.TreeSize != n {
				t.Fatalf("event #%d in tree %d: %+v", seq, n, p)
			}
			if err := tree.VerifyInclusion(seq-1, n, leaves[i], p.Hashes, mkRoot(leaves[:n])); err != nil {
				t.Fatalf("event #%d in tree %d: %v", seq, n, err)
			}
		}
	}
	// Errors: beyond the head, an unknown event, an unknown ledger, an
	// event after the tree.
	if _, err := db.ProveInclusion(ctx, events[0].ID, 101); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "101") {
		t.Fatalf("tree size beyond the head: %v", err)
	}
	unknown := eventid.MaxForLedger(info.ID)
	if _, err := db.ProveInclusion(ctx, unknown, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown event: %v", err)
	}
	if _, err := db.ProveInclusion(ctx, eventid.MaxForLedger(info.ID+1), 0); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("unknown ledger: %v", err)
	}
	if _, err := db.ProveInclusion(ctx, events[50].ID, 50); !errors.Is(err, ErrNotInTree) || errors.Is(err, ErrNotFound) {
		t.Fatalf("event #51 in the tree of size 50: %v, want ErrNotInTree (the event exists)", err)
	}
	if _, err := db.ProveConsistency(ctx, "shop", 5, 101); !errors.Is(err, ErrInvalid) {
		t.Fatalf("consistency beyond the head: %v", err)
	}
	if _, err := db.ProveConsistency(ctx, "shop", 0, 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("consistency from 0: %v", err)
	}
	if _, err := db.ProveConsistency(ctx, "nope", 1, 1); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("consistency of an unknown ledger: %v", err)
	}
	if _, err := db.Checkpoint(ctx, "nope"); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("checkpoint of an unknown ledger: %v", err)
	}
}

// TestMerkleConsistencyBetweenCheckpoints takes checkpoints at many sizes
// and proves every pair consistent, before and after a reopen; the
// checkpoints issued before the reopen are consistent with those after.
func TestMerkleConsistencyBetweenCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	mkLedger(t, db, "shop", 0)
	var cks []Checkpoint
	take := func() {
		c, err := db.Checkpoint(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		mkCheckNote(t, db, c)
		cks = append(cks, c)
	}
	take()
	for i := 0; i < 40; i++ {
		appendEvents(t, db, "shop", 1+i%4, appendSpec{From: i * 3, Batch: mixedBatches})
		take()
	}
	check := func(db *DB) {
		t.Helper()
		for i, a := range cks {
			for _, b := range cks[i:] {
				p, err := db.ProveConsistency(ctx, "shop", a.Size, b.Size)
				if err != nil {
					t.Fatal(err)
				}
				if p.OldRoot != a.Root || p.NewRoot != b.Root || p.OldSize != a.Size || p.NewSize != b.Size || p.Checkpoint != nil {
					t.Fatalf("%d -> %d: proof %+v, checkpoints %+v %+v", a.Size, b.Size, p, a, b)
				}
				if err := tree.VerifyConsistency(a.Size, b.Size, a.Root, b.Root, p.Hashes); err != nil {
					t.Fatalf("%d -> %d: %v", a.Size, b.Size, err)
				}
			}
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if r := db.TreeRebuilt(); len(r) != 0 {
		t.Fatalf("TreeRebuilt after a clean close: %v", r)
	}
	last, err := db.LatestCheckpoint("shop")
	if err != nil || !bytes.Equal(last.Note, cks[len(cks)-1].Note) {
		t.Fatalf("latest checkpoint after reopen: %v %+v", err, last)
	}
	check(db)
	appendEvents(t, db, "shop", 17, appendSpec{From: 1000, Batch: mixedBatches})
	take()
	check(db)
	// Against the latest checkpoint (newSize 0).
	p, err := db.ProveConsistency(ctx, "shop", cks[3].Size, 0)
	if err != nil || !bytes.Equal(p.Checkpoint, cks[len(cks)-1].Note) {
		t.Fatalf("consistency with the latest: %v %+v", err, p)
	}
}

// TestMerkleCloseIssuesCheckpoint: Close signs the head of every ledger
// that grew; a ledger that did not grow gets none.
func TestMerkleCloseIssuesCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	mkLedger(t, db, "a", 30)
	mkLedger(t, db, "b", 0)
	ckB, _ := os.ReadFile(filepath.Join(db.ledgerDir(mustLedger(t, db, "b").ID), checkpointFileName))
	idA := mustLedger(t, db, "a").ID
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.LatestCheckpoint("a")
	if err != nil || c.Size != 31 || c.Ledger != idA {
		t.Fatalf("after Close: %v %+v", err, c)
	}
	mkCheckNote(t, db, c)
	if got, _ := os.ReadFile(filepath.Join(db.ledgerDir(mustLedger(t, db, "b").ID), checkpointFileName)); !bytes.Equal(got, ckB) {
		t.Fatal("Close rewrote the checkpoint of a ledger that did not grow")
	}
}

func mustLedger(t *testing.T, db *DB, name string) LedgerInfo {
	t.Helper()
	info, err := db.Ledger(name)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestMerkleIntervalWriter: the background writer signs the ledgers that
// grew, and never an event that is not durable (appends with None).
func TestMerkleIntervalWriter(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), &Options{CheckpointInterval: 100 * time.Millisecond, Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mkLedger(t, db, "shop", 20)
	l, _ := db.ledger("shop")
	// None: nothing after the genesis event is durable, so nothing after
	// it is signed, however many ticks pass.
	time.Sleep(300 * time.Millisecond)
	if c, err := db.LatestCheckpoint("shop"); err != nil || c.Size > l.log.Durable().Seq {
		t.Fatalf("checkpoint %+v (%v) covers events that are not durable (durable: #%d)", c, err, l.log.Durable().Seq)
	}
	// Direct: the background path's checkpoint is of the durable head.
	c, err := l.issueCheckpoint(0)
	if err != nil || c.Size > l.log.Durable().Seq || c.Size >= 21 {
		t.Fatalf("checkpoint %+v (%v), durable #%d, head #21", c, err, l.log.Durable().Seq)
	}
	// Synced: the writer catches up.
	if err := l.log.Sync(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := db.LatestCheckpoint("shop")
		if err == nil && c.Size == 21 {
			mkCheckNote(t, db, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of size 21 after 30 s: %+v %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if db.checkpointsIssued.Load() == 0 {
		t.Fatal("the writer issued nothing")
	}
	// Nothing appended: no more checkpoints.
	n := db.checkpointsIssued.Load()
	time.Sleep(350 * time.Millisecond)
	if m := db.checkpointsIssued.Load(); m != n {
		t.Fatalf("%d checkpoints issued while nothing was appended", m-n)
	}
}

// TestMerkleCheckpointIntervalOption: the range of CheckpointInterval.
func TestMerkleCheckpointIntervalOption(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{time.Millisecond, 99 * time.Millisecond, 25 * time.Hour} {
		if _, err := Open(t.TempDir(), &Options{CheckpointInterval: d}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "CheckpointInterval") {
			t.Fatalf("CheckpointInterval %v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-1, 0, 100 * time.Millisecond, 24 * time.Hour} {
		db, err := Open(t.TempDir(), &Options{CheckpointInterval: d})
		if err != nil {
			t.Fatalf("CheckpointInterval %v: %v", d, err)
		}
		db.Close()
	}
}

// mkReopen closes db and opens dir again.
func mkReopen(t *testing.T, db *DB, dir string) *DB {
	t.Helper()
	if db != nil {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return openTest(t, dir)
}

// mkProveAll proves every event of the ledger against its latest
// checkpoint, whose root must be want.
func mkProveAll(t *testing.T, db *DB, name string, want tree.Hash) {
	t.Helper()
	ctx := context.Background()
	c, err := db.LatestCheckpoint(name)
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != want {
		t.Fatalf("root %s, want %s", c.Root, want)
	}
	export, _ := exportBytes(t, db, name, ExportOptions{})
	leaves := mkLeaves(t, export)
	for i, ev := range collect(t, db.Scan(ctx, name, ScanOptions{})) {
		if uint64(i) >= c.Size {
			break
		}
		p, err := db.ProveInclusion(ctx, ev.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.VerifyInclusion(uint64(i), c.Size, leaves[i], p.Hashes, c.Root); err != nil {
			t.Fatalf("event #%d: %v", i+1, err)
		}
	}
}

// TestMerkleTreeFileRebuilt: a tree file deleted, damaged (an interior
// hash that the root is made of, the header) or cut short is rebuilt from
// the segments at Open, with the same root, and said so in TreeRebuilt;
// the tree then proves every event.
func TestMerkleTreeFileRebuilt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, path string)
		why  string
	}{
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, "missing"},
		{"interior hash flipped", func(t *testing.T, path string) {
			// 25 events: the root at 25 is made of the stored hashes of
			// [0,16) (level 4), [16,24) (level 3) and leaf 24.
			mkFlip(t, path, tree.HeaderSize+32*tlog.StoredHashIndex(4, 0)+7)
		}, "gives the root"},
		{"leaf hash flipped", func(t *testing.T, path string) {
			mkFlip(t, path, tree.HeaderSize+32*tlog.StoredHashIndex(0, 24))
		}, "gives the root"},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, tree.HeaderSize+32*tlog.StoredHashCount(20)+5); err != nil {
				t.Fatal(err)
			}
		}, "holds 20 leaves"},
		{"header", func(t *testing.T, path string) {
			mkFlip(t, path, 2)
		}, "damaged"},
		{"header of another ledger", func(t *testing.T, path string) {
			mkFlip(t, path, 15)
		}, "damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir)
			info := mkLedger(t, db, "shop", 24)
			db = mkReopen(t, db, dir)
			want, err := db.LatestCheckpoint("shop")
			if err != nil || want.Size != 25 {
				t.Fatalf("%v %+v", err, want)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			tc.harm(t, filepath.Join(db.ledgerDir(info.ID), treeFileName))
			db = openTest(t, dir)
			defer db.Close()
			why := db.TreeRebuilt()["shop"]
			if why == nil || !strings.Contains(why.Error(), tc.why) {
				t.Fatalf("TreeRebuilt: %v, want a reason with %q", db.TreeRebuilt(), tc.why)
			}
			mkProveAll(t, db, "shop", want.Root)
			appendEvents(t, db, "shop", 9, appendSpec{From: 100, Batch: mixedBatches})
			c, err := db.Checkpoint(context.Background(), "shop")
			if err != nil || c.Size != 34 {
				t.Fatalf("%v %+v", err, c)
			}
			p, err := db.ProveConsistency(context.Background(), "shop", 25, 34)
			if err != nil {
				t.Fatal(err)
			}
			if err := tree.VerifyConsistency(25, 34, want.Root, c.Root, p.Hashes); err != nil {
				t.Fatal(err)
			}
			db = mkReopen(t, db, dir)
			if r := db.TreeRebuilt(); len(r) != 0 {
				t.Fatalf("rebuilt again: %v", r)
			}
		})
	}
}

func mkFlip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMerkleUnsyncedTailRecovered: leaves written after the last
// checkpoint (not trusted: unsynced) are cut and recomputed from the
// segments, even when they are wrong on disk.
func TestMerkleUnsyncedTailRecovered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	info := mkLedger(t, db, "shop", 10)
	c, err := db.Checkpoint(context.Background(), "shop")
	if err != nil || c.Size != 11 {
		t.Fatal(err, c.Size)
	}
	ckBytes := c.Note
	statePath := filepath.Join(dir, signingKeyFile+signerStateSuffix)
	state, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "shop", 10, appendSpec{From: 50, Batch: mixedBatches})
	db.Close()
	// Close signed 21; put the checkpoint of 11 back, and the signer's
	// state of then (a crash before Close's), and damage the leaves after
	// it.
	ldir := db.ledgerDir(info.ID)
	if err := os.WriteFile(filepath.Join(ldir, checkpointFileName), ckBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, state, 0o600); err != nil {
		t.Fatal(err)
	}
	mkFlip(t, filepath.Join(ldir, treeFileName), tree.HeaderSize+32*tlog.StoredHashIndex(0, 15))
	db = openTest(t, dir)
	defer db.Close()
	if r := db.TreeRebuilt(); len(r) != 0 {
		t.Fatalf("rebuilt: %v", r)
	}
	c2, err := db.Checkpoint(context.Background(), "shop")
	if err != nil || c2.Size != 21 {
		t.Fatal(err, c2.Size)
	}
	export, _ := exportBytes(t, db, "shop", ExportOptions{})
	if got := mkRoot(mkLeaves(t, export)); got != c2.Root {
		t.Fatalf("root %s, the lines give %s", c2.Root, got)
	}
	mkProveAll(t, db, "shop", c2.Root)
}

// TestMerkleNoCheckpointFile: a ledger of more than its genesis event
// whose checkpoint file is removed is refused (ErrUnsigned), its files
// left as they are, with the cure named; it is not signed again until the
// operator accepts it (AcceptLedger), which rebuilds a missing tree too.
func TestMerkleNoCheckpointFile(t *testing.T) {
	t.Parallel()
	for _, removeTree := range []bool{false, true} {
		dir := t.TempDir()
		db := openTest(t, dir)
		info := mkLedger(t, db, "shop", 12)
		mkLedger(t, db, "other", 1)
		c, err := db.Checkpoint(context.Background(), "shop")
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		ldir := db.ledgerDir(info.ID)
		os.Remove(filepath.Join(ldir, checkpointFileName))
		if removeTree {
			os.Remove(filepath.Join(ldir, treeFileName))
		}
		before := mkSnapshot(t, ldir)
		mkRefused(t, dir, []error{ErrUnsigned}, "no checkpoint file", "annal checkpoint --accept shop")
		if after := mkSnapshot(t, ldir); !mapsEqual(before, after) {
			t.Fatalf("the refused ledger's files changed: %v -> %v", keys(before), keys(after))
		}
		db = openTest(t, dir)
		c2, err := db.AcceptLedger(context.Background(), "shop")
		if err != nil || c2.Size != 13 || c2.Root != c.Root {
			t.Fatalf("%v %+v, want %+v", err, c2, c)
		}
		if why := db.TreeRebuilt()["shop"]; why == nil {
			t.Fatal("not reported in TreeRebuilt")
		}
		db.Close()
		db = openTest(t, dir)
		if c3, err := db.LatestCheckpoint("shop"); err != nil || !bytes.Equal(c3.Note, c2.Note) {
			t.Fatalf("reopened after AcceptLedger: %v %+v", err, c3)
		}
		db.Close()
	}
}

// mkRefused opens dir and checks that ledger "shop" is unavailable with
// an error matching each of want and naming each of names.
func mkRefused(t *testing.T, dir string, want []error, names ...string) {
	t.Helper()
	mkRefusedAs(t, dir, "shop", want, names...)
}

// mkRefusedAs is mkRefused for the ledger Unavailable names key.
func mkRefusedAs(t *testing.T, dir, key string, want []error, names ...string) {
	t.Helper()
	db := openTest(t, dir)
	defer db.Close()
	err := db.Unavailable()[key]
	if err == nil {
		t.Fatalf("ledger not refused (TreeRebuilt: %v)", db.TreeRebuilt())
	}
	for _, w := range append(want, ErrLedgerUnavailable) {
		if !errors.Is(err, w) {
			t.Fatalf("refused with %v, want %v", err, w)
		}
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("refused with %v, which does not say %q", err, n)
		}
	}
	if _, err := db.Ledger("other"); err != nil && !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("the other ledger: %v", err)
	}
}

// mkSignWith signs a checkpoint body with s.
func mkSignWith(t *testing.T, s note.Signer, origin string, size uint64, root tree.Hash) []byte {
	t.Helper()
	msg, err := tree.Sign(tree.Checkpoint{Origin: origin, Size: size, Root: root}, s)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestMerkleForgedCheckpointRefused: a checkpoint signed by another key,
// one whose body was edited, one of another ledger, one of more events
// than the segments hold, and one whose root the segments do not give
// (the tree file removed, so that it is rebuilt) make Open refuse the
// ledger, and leave its files as they are; the other ledgers open.
func TestMerkleForgedCheckpointRefused(t *testing.T) {
	t.Parallel()
	otherKey, _, err := note.GenerateKey(rand.Reader, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := note.NewSigner(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		forge func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte
		want  []error
		says  []string
	}{
		{"another key", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			return mkSignWith(t, mallory, c.Origin, c.Size, c.Root)
		}, []error{tree.ErrCheckpoint, ErrUnsigned}, []string{"restore the key that signed it", "mallory+", checkpointFileName, "annal checkpoint --accept shop"}},
		{"body edited", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			return bytes.Replace(c.Note, []byte("\n10\n"), []byte("\n11\n"), 1)
		}, []error{tree.ErrCheckpoint, ErrUnsigned}, []string{"annal checkpoint --accept shop"}},
		{"garbage", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			return []byte("not a checkpoint\n")
		}, []error{tree.ErrCheckpoint, ErrUnsigned}, []string{"annal checkpoint --accept shop"}},
		{"another ledger", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			other, _ := db.LatestCheckpoint("other")
			return other.Note
		}, []error{tree.ErrCheckpoint, ErrUnsigned}, []string{"origin"}},
		{"larger than the segments", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			return mkSignWith(t, db.key.Signer, c.Origin, 15, c.Root)
		}, []error{ErrRewritten}, []string{"checkpoint signed for 15 events, the segments hold 10"}},
		{"another root, tree removed", func(t *testing.T, db *DB, c Checkpoint, ldir string) []byte {
			os.Remove(filepath.Join(ldir, treeFileName))
			return mkSignWith(t, db.key.Signer, c.Origin, 7, tree.Hash{1, 2, 3})
		}, []error{ErrRewritten}, []string{"the events differ from the checkpoint", checkpointFileName, "signed at size 7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir)
			info := mkLedger(t, db, "shop", 9)
			mkLedger(t, db, "other", 3)
			c, err := db.Checkpoint(context.Background(), "shop")
			if err != nil || c.Size != 10 {
				t.Fatal(err, c.Size)
			}
			ldir := db.ledgerDir(info.ID)
			forged := tc.forge(t, db, c, ldir)
			db.Close()
			if err := os.WriteFile(filepath.Join(ldir, checkpointFileName), forged, 0o600); err != nil {
				t.Fatal(err)
			}
			before := mkSnapshot(t, ldir)
			mkRefused(t, dir, tc.want, tc.says...)
			if after := mkSnapshot(t, ldir); !mapsEqual(before, after) {
				t.Fatalf("the refused ledger's files changed: %v -> %v", keys(before), keys(after))
			}
			// A checkpoint that the key did not sign is cured by the
			// operator's act: AcceptLedger signs the ledger as it is. A
			// checkpoint the key signed that the events contradict is
			// not: the file must be moved aside first (a deliberate act),
			// after which the ledger is refused for its missing
			// checkpoint, and accepted.
			db = openTest(t, dir)
			if !slices.Contains(tc.want, ErrUnsigned) {
				if _, err := db.AcceptLedger(context.Background(), "shop"); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrRewritten) {
					t.Fatalf("AcceptLedger of a ledger that contradicts its checkpoint: %v, want ErrInvalid and the refusal", err)
				}
				db.Close()
				if err := os.Rename(filepath.Join(ldir, checkpointFileName), filepath.Join(dir, "aside")); err != nil {
					t.Fatal(err)
				}
				mkRefused(t, dir, []error{ErrUnsigned}, "no checkpoint file", "annal checkpoint --accept shop")
				db = openTest(t, dir)
			}
			defer db.Close()
			got, err := db.AcceptLedger(context.Background(), "shop")
			if err != nil || got.Size != 10 || got.Root != c.Root {
				t.Fatalf("accepted: %v %+v", err, got)
			}
			if latest, err := db.LatestCheckpoint("shop"); err != nil || latest.Size != 10 || !bytes.Equal(latest.Note, got.Note) {
				t.Fatalf("LatestCheckpoint after AcceptLedger: %v %+v", err, latest)
			}
			appendEvents(t, db, "shop", 2, appendSpec{From: 100, Batch: mixedBatches})
		})
	}
}

func mkSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name()] = string(b)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMerkleRewrittenHistoryRefused: the segments of a ledger replaced by
// a history re-chained from the same genesis event (every ID and CRC
// valid: what someone without the key can make), with the tree file, the
// metadata and the index removed so that nothing else tells. The
// checkpoint signed before finds it: Open refuses the ledger with
// ErrRewritten, naming the checkpoint.
func TestMerkleRewrittenHistoryRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := openTest(t, dirA)
	info := mkLedger(t, a, "shop", 0)
	mkLedger(t, a, "other", 2)
	genesis, _ := exportBytes(t, a, "shop", ExportOptions{})
	appendEvents(t, a, "shop", 8, appendSpec{From: 0, Batch: mixedBatches})
	if _, err := a.Checkpoint(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := openTest(t, dirB)
	if got := importBytes(t, b, genesis, ImportOptions{}); got.ID != info.ID {
		t.Fatalf("imported ledger %s, want %s", got.ID, info.ID)
	}
	for i := 0; i < 8; i++ {
		ev := order(i)
		if i == 5 {
			ev.Data = []byte(`{"total": 999.50, "n": 5}`)
		}
		if _, err := b.Append(ctx, "shop", []EventInput{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	ldirA, ldirB := a.ledgerDir(info.ID), b.ledgerDir(info.ID)
	segs, _ := filepath.Glob(filepath.Join(ldirB, "*.seg"))
	oldSegs, _ := filepath.Glob(filepath.Join(ldirA, "*.seg"))
	for _, s := range oldSegs {
		os.Remove(s)
	}
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ldirA, filepath.Base(s)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(ldirA, treeFileName), filepath.Join(dirA, metaFile), filepath.Join(dirA, indexDir)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	// The metadata is gone: Unavailable names the ledger by the name its
	// NAME file gives it, which it keeps while it is refused.
	mkRefusedAs(t, dirA, "shop", []error{ErrRewritten}, filepath.Join(ldirA, checkpointFileName), "signed at size 9")
}

// TestMerkleImportBuildsTree: an imported ledger has the tree and the
// signed checkpoint of the ledger it was exported from, and proves its
// events; a reopen rebuilds nothing.
func TestMerkleImportBuildsTree(t *testing.T) {
	ctx := context.Background()
	smallBatches(t, 300) // several segment appends, several tree appends
	src := openTest(t, t.TempDir())
	defer src.Close()
	mkLedger(t, src, "shop", 200)
	want, err := src.Checkpoint(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	export, _ := exportBytes(t, src, "shop", ExportOptions{})
	dir := t.TempDir()
	db := openTest(t, dir)
	info := importBytes(t, db, export, ImportOptions{})
	got, err := db.LatestCheckpoint("shop")
	if err != nil || got.Size != 201 || got.Root != want.Root || got.Ledger != info.ID {
		t.Fatalf("imported: %v %+v, want root %s", err, got, want.Root)
	}
	mkCheckNote(t, db, got)
	if b, err := os.ReadFile(filepath.Join(db.ledgerDir(info.ID), checkpointFileName)); err != nil || !bytes.Equal(b, got.Note) {
		t.Fatalf("checkpoint file: %v", err)
	}
	mkProveAll(t, db, "shop", want.Root)
	db = mkReopen(t, db, dir)
	defer db.Close()
	if r := db.TreeRebuilt(); len(r) != 0 {
		t.Fatalf("rebuilt after import: %v", r)
	}
	mkProveAll(t, db, "shop", want.Root)
}

// TestMerkleExportCheckpoint: Export with a Checkpoint writer exports
// exactly the events the checkpoint covers and writes the signed note,
// which checks the file offline; with After or From it is ErrInvalid.
func TestMerkleExportCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(t.TempDir(), &Options{Durability: Interval, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mkLedger(t, db, "shop", 40)
	var out, ck bytes.Buffer
	n, err := db.Export(ctx, "shop", &out, ExportOptions{Checkpoint: &ck})
	if err != nil || n != 41 {
		t.Fatal(n, err)
	}
	c, err := tree.OpenCheckpoint(ck.Bytes(), mkVerifier(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 41 || c.Root != mkRoot(mkLeaves(t, out.Bytes())) {
		t.Fatalf("checkpoint %+v does not check the export", c)
	}
	l, _ := db.ledger("shop")
	if l.log.Durable().Seq < 41 {
		t.Fatal("the export's checkpoint covers events that are not durable")
	}
	for _, o := range []ExportOptions{{Checkpoint: &ck, From: time.Now()}, {Checkpoint: &ck, After: mustLedger(t, db, "shop").Genesis}} {
		if _, err := db.Export(ctx, "shop", &out, o); !errors.Is(err, ErrInvalid) {
			t.Fatalf("checkpoint with After or From: %v", err)
		}
	}
}

// TestMerkleSigner: Options.Signer (a crypto.Signer: an ed25519 private
// key here) signs the checkpoints, named by SignerName; no key file is
// created; a DB opened with another key refuses the ledger.
func TestMerkleSigner(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db, err := Open(dir, &Options{Signer: priv, SignerName: "hsm-key"})
	if err != nil {
		t.Fatal(err)
	}
	mkLedger(t, db, "shop", 5)
	mkLedger(t, db, "other", 1)
	c, err := db.Checkpoint(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(db.VerifierKey(), "hsm-key+") || !strings.HasPrefix(c.Origin, "hsm-key/") {
		t.Fatalf("verifier %q, origin %q", db.VerifierKey(), c.Origin)
	}
	v, err := note.NewEd25519VerifierKey("hsm-key", pub)
	if err != nil || v != db.VerifierKey() {
		t.Fatalf("verifier key %q, want %q (%v)", db.VerifierKey(), v, err)
	}
	mkCheckNote(t, db, c)
	db.Close()
	if _, err := os.Stat(filepath.Join(dir, signingKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key file was created with a Signer: %v", err)
	}
	// Without the Signer, the directory has no key: none is created while
	// checkpoints signed by the Signer are there.
	if _, err := Open(dir, &Options{CheckpointInterval: -1}); !errors.Is(err, ErrSigningKeyMissing) || !strings.Contains(err.Error(), "hsm-key+") {
		t.Fatalf("opened without the Signer: %v, want ErrSigningKeyMissing naming hsm-key", err)
	}
	if _, err := os.Stat(filepath.Join(dir, signingKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key file was created: %v", err)
	}
	if _, err := Open(t.TempDir(), &Options{Signer: badSigner{}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a signer that is not Ed25519: %v", err)
	}
}

// badSigner is a crypto.Signer without an Ed25519 key.
type badSigner struct{ ed25519.PrivateKey }

func (badSigner) Public() crypto.PublicKey { return "not a key" }

// TestMerkleProofJSON: the JSON forms of proofs (docs/format.md, section
// 9.4) read back as they were.
func TestMerkleProofJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := mkLedger(t, db, "shop", 6)
	c, err := db.Checkpoint(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := db.ProveInclusion(ctx, info.Genesis, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(ip)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{`"ledger":"` + info.ID.String() + `"`, `"eventId":"` + info.Genesis.String() + `"`, `"seq":1`, `"leafIndex":0`, `"treeSize":7`, `"leafHash":"` + ip.LeafHash.String() + `"`, `"inclusionPath":["`, `"checkpoint":`} {
		if !strings.Contains(string(b), m) {
			t.Fatalf("%s lacks %s", b, m)
		}
	}
	var ip2 InclusionProof
	if err := json.Unmarshal(b, &ip2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ip2) != fmt.Sprint(ip) {
		t.Fatalf("round trip: %+v, want %+v", ip2, ip)
	}
	cp, err := db.ProveConsistency(ctx, "shop", 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "checkpoint") || !strings.Contains(string(b), `"oldSize":3,"newSize":7,"oldRoot":"`) || !strings.Contains(string(b), `"newRoot":"`+c.Root.String()+`"`) {
		t.Fatalf("consistency JSON %s", b)
	}
	var cp2 ConsistencyProof
	if err := json.Unmarshal(b, &cp2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cp2) != fmt.Sprint(cp) {
		t.Fatalf("round trip: %+v, want %+v", cp2, cp)
	}
	// A one-leaf proof: an empty path is [], not null.
	single, err := db.ProveConsistency(ctx, "shop", 7, 7)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(single); !strings.Contains(string(b), `"consistencyPath":[]`) {
		t.Fatalf("empty path: %s", b)
	}
	for _, bad := range []string{`{"seq":2,"leafIndex":0}`, `{"seq":1,"leafIndex":0,"leafHash":"xx"}`} {
		if err := json.Unmarshal([]byte(bad), &ip2); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}

// TestMerkleConcurrent: appenders, provers and checkpointers at once, and
// Close in the middle: every call returns ErrClosed or a result that
// verifies. Run it with -race.
func TestMerkleConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mkLedger(t, db, "shop", 3)
	v := mkVerifier(t, db)
	var wg sync.WaitGroup
	var appended, proved, checked atomic.Int64
	errc := make(chan error, 100)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	closedOK := func(err error) bool { return errors.Is(err, ErrClosed) }
	stop := make(chan struct{})
	var ids sync.Map // eventid.ID -> struct{}
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := db.Append(ctx, "shop", []EventInput{order(i), order(i + g)}, nil)
				if closedOK(err) {
					return
				}
				if err != nil {
					fail(err)
					return
				}
				for _, id := range res.IDs {
					ids.Store(id, struct{}{})
				}
				appended.Add(2)
			}
		}()
	}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := db.Checkpoint(ctx, "shop")
				if closedOK(err) {
					return
				}
				if err != nil {
					fail(err)
					return
				}
				body, err := tree.OpenCheckpoint(c.Note, v)
				if err != nil || body.Root != c.Root || body.Size != c.Size {
					fail(fmt.Errorf("checkpoint %+v: %v", c, err))
					return
				}
				checked.Add(1)
				var id eventid.ID
				ids.Range(func(k, _ any) bool { id = k.(eventid.ID); return g%2 == 0 })
				if id.IsZero() {
					continue
				}
				p, err := db.ProveInclusion(ctx, id, c.Size)
				if closedOK(err) {
					return
				}
				if errors.Is(err, ErrNotInTree) {
					continue // appended after the checkpoint's size
				}
				if err != nil {
					fail(err)
					return
				}
				if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, p.LeafHash, p.Hashes, c.Root); err != nil {
					fail(fmt.Errorf("inclusion of %s: %v", id, err))
					return
				}
				old := uint64(1 + int(c.Size)/3)
				cp, err := db.ProveConsistency(ctx, "shop", old, c.Size)
				if closedOK(err) {
					return
				}
				if err != nil {
					fail(err)
					return
				}
				if cp.NewRoot != c.Root {
					fail(fmt.Errorf("consistency proof to %d: root %s, checkpoint %s", c.Size, cp.NewRoot, c.Root))
					return
				}
				if err := tree.VerifyConsistency(old, c.Size, cp.OldRoot, c.Root, cp.Hashes); err != nil {
					fail(err)
					return
				}
				proved.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for (proved.Load() < 20 || appended.Load() < 400) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	closeErr := db.Close()
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if closeErr != nil {
		t.Fatal(closeErr)
	}
	t.Logf("%d appended, %d checkpoints, %d proved", appended.Load(), checked.Load(), proved.Load())
	// Every acknowledged event is in the tree the reopen recovers, and the
	// last checkpoint is of the head.
	db = openTest(t, dir)
	defer db.Close()
	if r := db.TreeRebuilt(); len(r) != 0 {
		t.Fatalf("rebuilt: %v", r)
	}
	c, err := db.LatestCheckpoint("shop")
	info := mustLedger(t, db, "shop")
	if err != nil || c.Size != info.Count {
		t.Fatalf("latest checkpoint %+v (%v), head #%d", c, err, info.Count)
	}
	export, _ := exportBytes(t, db, "shop", ExportOptions{})
	if got := mkRoot(mkLeaves(t, export)); got != c.Root {
		t.Fatalf("root %s, the lines give %s", c.Root, got)
	}
}

// TestProveInclusionAfterLatestCheckpoint: a proof asked of an event
// that comes after the latest checkpoint is ErrNotInTree, not
// ErrNotFound (the event exists), and says how to get one; once a
// checkpoint covers it, the proof is given.
func TestProveInclusionAfterLatestCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(t.TempDir(), &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "shop"}); err != nil {
		t.Fatal(err)
	}
	res, err := db.Append(ctx, "shop", []EventInput{{Entity: "order", Key: "o1", Event: "placed", Data: []byte(`{}`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ProveInclusion(ctx, res.IDs[0], 0)
	if !errors.Is(err, ErrNotInTree) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "DB.Checkpoint") {
		t.Fatalf("an event after the latest checkpoint: %v, want ErrNotInTree naming DB.Checkpoint", err)
	}
	if _, err := db.Checkpoint(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ProveInclusion(ctx, res.IDs[0], 0); err != nil {
		t.Fatalf("after a checkpoint that covers it: %v", err)
	}
}
