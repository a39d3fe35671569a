package engine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	mkAppend(t, db, "pay", 100, 5)
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
	mkAppend(t, f, "pay", 900, 5)
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
	mkAppend(t, db, "pay", 200, 2)
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
	mkAppend(t, db, "pay", 10, 3)
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
	bogus[len(bogus)-6] ^= 1 // a base64 digit of the signature
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
	dir := t.TempDir()
	db := openTest(t, dir)
	info := mkLedger(t, db, "shop", 3)
	c1, err := db.Checkpoint(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	mkAppend(t, db, "shop", 10, 2)
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

// TestSignerRefusalStopsTheLedger: a checkpoint that the signer refuses
// while the writer runs (not a consistent extension of what its key
// signed for the ledger: the tree or the signer's memory is not what the
// writer signed from) is no mere warning at Close. From the refusal on,
// appends to the ledger fail with ErrSignerRefused (events appended then
// could never be signed), and so do its checkpoints; other ledgers go
// on; Close returns the refusal, whether it came during the run or at
// Close's own checkpoint.
func TestSignerRefusalStopsTheLedger(t *testing.T) {
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
			appendN(t, db, "acct", 3)
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
