package engine

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// mkOpen opens dir with opts, failing the test on an error.
func mkOpen(t *testing.T, dir string, opts *Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestSignerRefusesRollbackAndRewrite is the attack of someone who can
// rewrite the data directory but not read the key, kept outside it
// (Options.SigningKeyFile, with its state file beside it): the checkpoint
// file replaced by an older genuine one, the events after it re-chained
// (written by annal itself: CRCs and IDs recomputed), the tree file
// rebuilt to match and the metadata with it. The next Open refuses the
// ledger, leaving its files as they are, and the signer refuses the forged
// checkpoint at signing time: no second checkpoint of the same size is
// ever signed by the key.
func TestSignerRefusesRollbackAndRewrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "annal.key")
	genuine, forged := t.TempDir(), t.TempDir()
	withKey := &Options{SigningKeyFile: keyFile, CheckpointInterval: -1}

	db := mkOpen(t, genuine, withKey)
	info := mkLedger(t, db, "pay", 5)
	c1, err := db.Checkpoint(ctx, "pay")
	if err != nil || c1.Size != 6 {
		t.Fatal(err, c1.Size)
	}
	db.Close()
	if _, err := os.Stat(filepath.Join(genuine, signingKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key was created in the directory with SigningKeyFile: %v", err)
	}
	copyTree(t, genuine, forged) // the forger's starting point: a copy at size 6
	db = mkOpen(t, genuine, withKey)
	appendEvents(t, db, "pay", 5, appendSpec{From: 100, Batch: mixedBatches})
	c2, err := db.Checkpoint(ctx, "pay")
	if err != nil || c2.Size != 11 {
		t.Fatal(err, c2.Size)
	}
	db.Close()
	state, err := os.ReadFile(keyFile + signerStateSuffix)
	if err != nil || !strings.Contains(string(state), c2.Origin+" 11 "+c2.Root.String()+"\n") {
		t.Fatalf("the signer's state %q (%v) does not hold size 11", state, err)
	}

	// The forger, with the copy and without the key: events 7 to 11 of
	// other content, appended by annal under a key of the forger's own,
	// then the genuine checkpoint of size 6 put back and the forger's key
	// removed.
	ldir := filepath.Join(forged, ledgersDir, info.ID.String())
	os.Remove(filepath.Join(ldir, checkpointFileName))
	forgerKey := filepath.Join(t.TempDir(), "forger.key")
	f := mkOpen(t, forged, &Options{SigningKeyFile: forgerKey, CheckpointInterval: -1})
	if _, err := f.AcceptLedger(ctx, "pay"); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, f, "pay", 5, appendSpec{From: 900, Batch: mixedBatches})
	fc, err := f.Checkpoint(ctx, "pay")
	if err != nil || fc.Size != 11 || fc.Root == c2.Root {
		t.Fatalf("forged: %v, size %d, root %s (genuine %s)", err, fc.Size, fc.Root, c2.Root)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(ldir, checkpointFileName), c1.Note, 0o600); err != nil {
		t.Fatal(err)
	}
	forgedTree, err := tree.OpenFile(vfs.Default, filepath.Join(ldir, treeFileName), uint32(info.ID))
	if err != nil {
		t.Fatal(err)
	}
	proof, err := forgedTree.ConsistencyProof(6, 11)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := forgedTree.Root(6); r != c1.Root {
		t.Fatalf("the forged tree's root at 6 is %s, the genuine checkpoint's %s", r, c1.Root)
	}
	forgedTree.Close()

	// The next Open with the genuine key: refused, nothing changed.
	before := mkSnapshot(t, ldir)
	db = mkOpen(t, forged, withKey)
	why := db.Unavailable()["pay"]
	if !errors.Is(why, ErrUnsigned) || !errors.Is(why, ErrRewritten) || !errors.Is(why, ErrLedgerUnavailable) ||
		!strings.Contains(why.Error(), "signed the root "+c2.Root.String()+" at size 11") || !strings.Contains(why.Error(), "annal checkpoint --accept pay") {
		t.Fatalf("Open of the rolled back and rewritten ledger: %v", why)
	}
	if _, err := db.LatestCheckpoint("pay"); err == nil {
		t.Fatal("a checkpoint of the refused ledger is handed out")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if after := mkSnapshot(t, ldir); !mapsEqual(before, after) {
		t.Fatalf("the refused ledger's files changed: %v -> %v", keys(before), keys(after))
	}

	// At signing time: the key's signer refuses the forged checkpoint,
	// whether it is offered as an extension of the old checkpoint (with
	// a valid proof) or of the one it remembers.
	s, err := NewKeyFileSigner(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	body := func(c Checkpoint) tree.Checkpoint {
		return tree.Checkpoint{Origin: c.Origin, Size: c.Size, Root: c.Root}
	}
	if _, err := s.SignCheckpoint(body(c1), body(fc), proof); !errors.Is(err, ErrSignerRefused) || !strings.Contains(err.Error(), "size 11") {
		t.Fatalf("signing the forgery as an extension of size 6: %v", err)
	}
	if _, err := s.SignCheckpoint(body(c2), body(fc), nil); !errors.Is(err, ErrSignerRefused) {
		t.Fatalf("signing the forgery at the size signed: %v", err)
	}
	if after, _ := os.ReadFile(keyFile + signerStateSuffix); !bytes.Equal(after, state) {
		t.Fatalf("the signer's state changed: %q -> %q", state, after)
	}
	// The genuine ledger goes on.
	db = mkOpen(t, genuine, withKey)
	defer db.Close()
	appendEvents(t, db, "pay", 2, appendSpec{From: 200, Batch: mixedBatches})
	if c3, err := db.Checkpoint(ctx, "pay"); err != nil || c3.Size != 13 {
		t.Fatal(err, c3.Size)
	}
}

// TestCryptoSignerKeepsItsState: Options.Signer (a KMS) with its state in
// Options.SignerState outside the directory: an older backup of the whole
// directory put back (its metadata, index and checkpoint consistent with
// its segments) is refused as rolled back, and the explicit AcceptLedger
// signs it as it is; NewCryptoSigner reads the same state.
func TestCryptoSignerKeepsItsState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(t.TempDir(), "kms.state")
	opts := &Options{Signer: priv, SignerName: "kms", SignerState: statePath, CheckpointInterval: -1}
	dir, backup := t.TempDir(), t.TempDir()
	db := mkOpen(t, dir, opts)
	mkLedger(t, db, "pay", 3)
	db.Close() // signs size 4
	copyTree(t, dir, backup)
	db = mkOpen(t, dir, opts)
	appendEvents(t, db, "pay", 3, appendSpec{From: 10, Batch: mixedBatches})
	db.Close() // signs size 7

	db = mkOpen(t, backup, opts)
	defer db.Close()
	if why := db.Unavailable()["pay"]; !errors.Is(why, ErrUnsigned) || !strings.Contains(why.Error(), "signed a checkpoint of size 7") || !strings.Contains(why.Error(), "rolled back") {
		t.Fatalf("the older backup: %v", why)
	}
	c, err := db.AcceptLedger(ctx, "pay")
	if err != nil || c.Size != 4 {
		t.Fatalf("AcceptLedger: %v %+v", err, c)
	}
	s, err := NewCryptoSigner(priv, "kms", statePath)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Signed(c.Origin); !ok || got.Size != c.Size || got.Root != c.Root {
		t.Fatalf("the state after AcceptLedger: %+v %v", got, ok)
	}
}

// TestOpenRefusesSecondSignatureLine: a checkpoint file with a bogus
// second signature line by the directory's key (which note.Open skips)
// makes Open refuse the ledger; nothing hands that checkpoint out.
func TestOpenRefusesSecondSignatureLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	info := mkLedger(t, db, "shop", 4)
	mkLedger(t, db, "other", 1)
	c, err := db.Checkpoint(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	sigLine := c.Note[bytes.LastIndex(c.Note[:len(c.Note)-1], []byte("\n"))+1:]
	bogus := bytes.Clone(sigLine)
	// Another base64 digit of the signature (a digit of a whole group:
	// the bytes change, the line stays well formed).
	if i := len(bogus) - 6; bogus[i] == 'A' {
		bogus[i] = 'B'
	} else {
		bogus[i] = 'A'
	}
	path := filepath.Join(db.ledgerDir(info.ID), checkpointFileName)
	if err := os.WriteFile(path, append(bytes.Clone(c.Note), bogus...), 0o600); err != nil {
		t.Fatal(err)
	}
	mkRefused(t, dir, []error{tree.ErrCheckpoint, ErrUnsigned}, "signature line 2", path)
}

// TestSignerStateFile: the state file a signer writes reads back (as a
// read-only open reads it, for judgeEvidence); a malformed one is refused
// naming the file and the line; a rolled back ledger is judged so from
// the file alone.
func TestSignerStateFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	info := mkLedger(t, db, "shop", 3)
	c1, err := db.Checkpoint(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "shop", 2, appendSpec{From: 10, Batch: mixedBatches})
	db.Close() // signs size 6
	path := filepath.Join(dir, signingKeyFile+signerStateSuffix)
	state, err := readSignerState(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	v := mkVerifier(t, db)
	signed := signedFor(stateLookup(state), v, info.ID)
	if signed == nil || signed.Size != 6 {
		t.Fatalf("the state holds %+v for the ledger", signed)
	}
	leaves := func(n uint64) (tree.Hash, error) {
		if n == c1.Size {
			return c1.Root, nil
		}
		return tree.Hash{}, errors.New("only the events of the old checkpoint")
	}
	_, err = judgeEvidence(ledgerEvidence{Ledger: info.ID, Name: "shop", Path: "checkpoint", Note: c1.Note, Verifier: v, Signed: signed, Head: c1.Size, RootAt: leaves})
	if !errors.Is(err, ErrUnsigned) || !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), "signed a checkpoint of size 6") {
		t.Fatalf("judged from the state file: %v", err)
	}
	if c, err := judgeEvidence(ledgerEvidence{Ledger: info.ID, Path: "checkpoint", Note: c1.Note, Verifier: v, Head: c1.Size, RootAt: leaves}); err != nil || c.Size != c1.Size {
		t.Fatalf("without a state: %+v %v", c, err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(string(good), "\n")
	for name, bad := range map[string]string{
		"no newline":  line,
		"two fields":  line[:strings.LastIndexByte(line, ' ')] + "\n",
		"size 0":      strings.Replace(line, " 6 ", " 0 ", 1) + "\n",
		"bad root":    line[:len(line)-2] + "\n",
		"not sorted":  "zzz 1 " + c1.Root.String() + "\n" + line + "\n",
		"repeated":    line + "\n" + line + "\n",
		"empty line":  line + "\n\n",
		"space first": " " + line + "\n",
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readSignerState(vfs.Default, path); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line ") {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := Open(dir, &Options{CheckpointInterval: -1}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: Open: %v", name, err)
		}
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := readSignerState(vfs.Default, path); err != nil || len(s) != 0 {
		t.Fatalf("an empty state file: %v %v", s, err)
	}
}

// TestSharedSigningKeyKeepsEveryLedgersMemory: one outside key file
// (Options.SigningKeyFile) signs for two data directories open at once.
// Each signer must keep what the other signed in the shared state file
// (it re-reads and merges it under a lock at every signature): a
// rollback of the first directory's ledger, after the second signed last,
// is still refused.
func TestSharedSigningKeyKeepsEveryLedgersMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := filepath.Join(t.TempDir(), "k")
	dir1, dir2 := filepath.Join(t.TempDir(), "d1"), filepath.Join(t.TempDir(), "d2")
	opts := func() *Options { return &Options{SigningKeyFile: key} }
	// The key is created by a first Open.
	db1, err := Open(dir1, opts())
	if err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir2, opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db1.CreateLedger(ctx, LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db1, "a", 10, appendSpec{Event: placed, Batch: batchesOf(7)})
	if _, err := db1.Checkpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	older := filepath.Join(t.TempDir(), "older")
	copyTree(t, dir1, older) // a copy of a's files at 11 events (LOCK and all)
	appendEvents(t, db1, "a", 10, appendSpec{Event: placed, Batch: batchesOf(7)})
	if err := db1.Close(); err != nil {
		t.Fatal(err)
	}
	// db2 signs after db1's last signature.
	if _, err := db2.CreateLedger(ctx, LedgerSpec{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := db2.Close(); err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(key + ".state")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s.state after both closed:\n%s", key, state)
	// The rollback: dir1's ledger directory put back from the copy at 11.
	replaceTree(t, filepath.Join(dir1, "ledgers"), filepath.Join(older, "ledgers"))
	for _, f := range []string{"meta.db"} {
		b, err := os.ReadFile(filepath.Join(older, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir1, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir1, "index")); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir1, opts())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable()["a"]; !errors.Is(u, ErrUnsigned) {
		info, _ := db.Ledger("a")
		t.Errorf("ledger a rolled back from 21 to %d events with the outside key: %v; want it refused (ErrUnsigned): the key signed 21", info.Count, u)
	}
}

// TestSharedSigningKeySignsNoFork: a data directory and its copy, both
// open with the same outside key, append different events to the same
// ledger: the key must not sign two roots at the same size (a fork under
// the genuine key): the second checkpoint is refused (ErrSignerRefused).
func TestSharedSigningKeySignsNoFork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := filepath.Join(t.TempDir(), "k")
	dir1 := filepath.Join(t.TempDir(), "d1")
	db, err := Open(dir1, &Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "acct"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "acct", 5, appendSpec{Event: placed, Batch: batchesOf(7)})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "d2")
	copyTree(t, dir1, dir2)

	db1, err := Open(dir1, &Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db1.Close()
	db2, err := Open(dir2, &Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if _, err := db1.Append(ctx, "acct", []EventInput{order(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db2.Append(ctx, "acct", []EventInput{order(2)}, nil); err != nil {
		t.Fatal(err)
	}
	c1, err1 := db1.Checkpoint(ctx, "acct")
	c2, err2 := db2.Checkpoint(ctx, "acct")
	if err1 == nil && err2 == nil {
		t.Errorf("the key signed two histories of ledger acct at size %d/%d: roots %s and %s (want the second refused, ErrSignerRefused)", c1.Size, c2.Size, c1.Root, c2.Root)
	}
	if err1 != nil {
		t.Fatalf("the first signature: %v", err1)
	}
	if !errors.Is(err2, ErrSignerRefused) {
		t.Errorf("the second directory's checkpoint at size %d: %v; want ErrSignerRefused", c1.Size, err2)
	}
	// The key's memory is the first directory's history.
	state, err := readSignerState(vfs.Default, key+signerStateSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if got := state[c1.Origin]; got.Size != c1.Size || got.Root != c1.Root {
		t.Errorf("the state holds size %d root %s for %s; want the first signature's, size %d root %s", got.Size, got.Root, c1.Origin, c1.Size, c1.Root)
	}
}

// TestSharedSigningKeyConcurrentSigners: two DBs signing at the same time
// with one outside key, each for its own ledger: every signature re-reads
// and merges the state under its lock, so the state keeps the last
// checkpoint of both ledgers, and no signature is lost or refused.
func TestSharedSigningKeyConcurrentSigners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := filepath.Join(t.TempDir(), "k")
	dbs := []*DB{
		mkOpen(t, filepath.Join(t.TempDir(), "d1"), &Options{SigningKeyFile: key}),
		mkOpen(t, filepath.Join(t.TempDir(), "d2"), &Options{SigningKeyFile: key}),
	}
	last := make([]Checkpoint, len(dbs))
	errs := make(chan error, len(dbs))
	for i, db := range dbs {
		defer db.Close()
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for j := range 8 {
				if _, err := db.Append(ctx, "l", []EventInput{order(j)}, nil); err != nil {
					errs <- err
					return
				}
				c, err := db.Checkpoint(ctx, "l")
				if err != nil {
					errs <- err
					return
				}
				last[i] = c
			}
			errs <- nil
		}()
	}
	for range dbs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	state, err := readSignerState(vfs.Default, key+signerStateSuffix)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range last {
		if got := state[c.Origin]; got.Size != c.Size || got.Root != c.Root {
			t.Errorf("DB %d's ledger: the state holds size %d root %s; its last checkpoint is size %d root %s", i+1, got.Size, got.Root, c.Size, c.Root)
		}
	}
}

// TestWriterKeepsVerifierFile: the writer keeps its key's verifier (public)
// key in a file readers may read: DIR/signing.pub for DIR/signing.key,
// KEY.pub (".key" replaced) for Options.SigningKeyFile, rewritten when it
// does not hold the key's verifier. A reader that may not read the private
// key checks the checkpoints with it; one that does not match the key that
// signed them (replaced) refuses the ledgers (ErrUnsigned), as a
// checkpoint signed by another key is refused.
func TestWriterKeepsVerifierFile(t *testing.T) {
	t.Parallel()
	dir, _ := checkpointLedger(t)
	pub := filepath.Join(dir, signingPubFile)
	db := mkOpen(t, dir, nil)
	want := db.VerifierKey() + "\n"
	db.Close()
	if b, err := os.ReadFile(pub); err != nil || string(b) != want {
		t.Fatalf("%s: %q, %v; want %q", pub, b, err, want)
	}
	reader := func() (string, map[string]error) {
		t.Helper()
		ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), fs: denyKeyFS{vfs.Default}})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		return ro.VerifierKey(), ro.Unavailable()
	}
	if v, u := reader(); len(u) > 0 || v+"\n" != want {
		t.Fatalf("a reader without the private key: verifier key %q (want %q), refused %v", v, want, u)
	}
	// Another key's verifier put in its place.
	_, sk, _ := ed25519.GenerateKey(rand.Reader)
	other, err := tree.SignerKey(sk, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pub, []byte(other.Verifier+"\n"))
	if _, u := reader(); !errors.Is(u["acct"], ErrUnsigned) {
		t.Errorf("a reader with another key's signing.pub: ledger acct %v; want ErrUnsigned", u)
	}
	db = mkOpen(t, dir, nil)
	db.Close()
	if b, err := os.ReadFile(pub); err != nil || string(b) != want {
		t.Errorf("%s after the writer's Open: %q, %v; want %q (rewritten)", pub, b, err, want)
	}
	if _, u := reader(); len(u) > 0 {
		t.Errorf("a reader without the private key, signing.pub rewritten: %v", u)
	}
	// An outside key: its .pub beside it.
	key := filepath.Join(t.TempDir(), "outside.key")
	db = mkOpen(t, t.TempDir(), &Options{SigningKeyFile: key})
	want = db.VerifierKey() + "\n"
	db.Close()
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(key), "outside.pub")); err != nil || string(b) != want {
		t.Errorf("outside.pub: %q, %v; want %q", b, err, want)
	}
}

// TestReaderKeyMissingIsNotDataFailure: with the signing key removed (and
// its signing.pub still there), a reader refuses every ledger with a
// checkpoint, as the writer's Open refuses the directory, for the same
// reason: ErrSigningKeyMissing, saying the cure, and not as data that
// failed its checks (ErrUnsigned, tree.ErrCheckpoint: annal exits 1, not
// 3).
func TestReaderKeyMissingIsNotDataFailure(t *testing.T) {
	t.Parallel()
	dir, _ := checkpointLedger(t)
	if err := os.Remove(filepath.Join(dir, signingKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrSigningKeyMissing) {
		t.Fatalf("the writer's Open: %v; want ErrSigningKeyMissing", err)
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	u := ro.Unavailable()["acct"]
	switch {
	case !errors.Is(u, ErrSigningKeyMissing) || !errors.Is(u, ErrLedgerUnavailable):
		t.Errorf("ledger acct: %v; want ErrLedgerUnavailable, ErrSigningKeyMissing", u)
	case errors.Is(u, ErrUnsigned) || errors.Is(u, tree.ErrCheckpoint):
		t.Errorf("ledger acct: %v: a data failure (ErrUnsigned, tree.ErrCheckpoint) for a missing key", u)
	case !strings.Contains(u.Error(), "restore that key"):
		t.Errorf("ledger acct: %v: does not say the cure", u)
	}
}

// TestSignerRefusalStopsTheLedger: a checkpoint that the signer refuses
// while the writer runs (not a consistent extension of what its key
// signed for the ledger: the tree or the signer's memory is not what the
// writer signed from) is no mere warning at Close. From the refusal on,
// appends to the ledger fail with ErrSignerRefused (events appended then
// could never be signed), and so do its checkpoints; other ledgers go
// on; Close returns the refusal, whether it came during the run or at
// Close's own checkpoint.
func TestSignerRefusalStopsTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, when := range []string{"during the run", "at Close"} {
		t.Run(when, func(t *testing.T) {
			db, err := Open(t.TempDir(), &Options{CheckpointInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					db.Close()
				}
			}()
			for _, name := range []string{"acct", "other"} {
				if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			appendEvents(t, db, "acct", 3, appendSpec{Event: placed, Batch: batchesOf(7)})
			// The signer remembers, for acct, a checkpoint that this
			// writer's tree does not extend (another history signed by
			// the key).
			l, err := db.ledger("acct")
			if err != nil {
				t.Fatal(err)
			}
			origin := l.latest.Load().Origin
			db.signer.mu.Lock()
			db.signer.state[origin] = tree.Checkpoint{Origin: origin, Size: 2, Root: tree.Hash{1}}
			db.signer.mu.Unlock()
			if when == "during the run" {
				if _, err := db.Checkpoint(ctx, "acct"); !errors.Is(err, ErrSignerRefused) {
					t.Fatalf("Checkpoint: %v, want ErrSignerRefused", err)
				}
				if _, err := db.Append(ctx, "acct", []EventInput{order(1)}, nil); !errors.Is(err, ErrSignerRefused) || !strings.Contains(err.Error(), "acct") {
					t.Fatalf("append to acct after the refusal: %v, want ErrSignerRefused naming the ledger", err)
				}
				if _, err := db.Checkpoint(ctx, "acct"); !errors.Is(err, ErrSignerRefused) {
					t.Fatalf("second Checkpoint: %v, want ErrSignerRefused", err)
				}
			}
			if _, err := db.Append(ctx, "other", []EventInput{order(1)}, nil); err != nil {
				t.Fatalf("append to another ledger: %v", err)
			}
			closed = true
			if err := db.Close(); !errors.Is(err, ErrSignerRefused) || !strings.Contains(err.Error(), "acct") {
				t.Fatalf("Close: %v, want ErrSignerRefused naming ledger acct", err)
			}
		})
	}
}

// failSigner is an Ed25519 crypto.Signer whose Sign fails while fail is set.
type failSigner struct {
	k    ed25519.PrivateKey
	fail atomic.Bool
}

func (s *failSigner) Public() crypto.PublicKey { return s.k.Public() }

func (s *failSigner) Sign(r io.Reader, d []byte, o crypto.SignerOpts) ([]byte, error) {
	if s.fail.Load() {
		return nil, errors.New("kms unavailable")
	}
	return s.k.Sign(r, d, o)
}

// TestFailingSignerFailsOnlyCheckpoints: an Options.Signer that fails makes
// Checkpoint fail with its error (appends go on, the latest checkpoint
// stays the old one), a tiny CheckpointInterval with the failing signer
// does not stop appends or Close, and checkpoints work again once the
// signer does.
func TestFailingSignerFailsOnlyCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := &failSigner{k: priv}
	db, err := Open(t.TempDir(), &Options{Signer: s, CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mkLedger(t, db, "a", 5)
	c1, err := db.Checkpoint(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	s.fail.Store(true)
	appendEvents(t, db, "a", 5, appendSpec{From: 5, Batch: mixedBatches})
	if _, err := db.Checkpoint(ctx, "a"); err == nil || !strings.Contains(err.Error(), "kms unavailable") {
		t.Errorf("Checkpoint with a failing signer: %v", err)
	}
	time.Sleep(250 * time.Millisecond)
	appendEvents(t, db, "a", 5, appendSpec{From: 10, Batch: mixedBatches})
	if ck, err := db.LatestCheckpoint("a"); err != nil || ck.Size != c1.Size {
		t.Errorf("latest after failures: size %d (want %d), %v", ck.Size, c1.Size, err)
	}
	s.fail.Store(false)
	c2, err := db.Checkpoint(ctx, "a")
	if err != nil || c2.Size <= c1.Size {
		t.Fatalf("Checkpoint after recovery: %+v %v", c2.Size, err)
	}
	if err := db.VerifyCheckpoint(ctx, "a", c1.Note, db.VerifierKey()); err != nil {
		t.Errorf("old checkpoint: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
