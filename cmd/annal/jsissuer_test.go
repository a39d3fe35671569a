package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
	"golang.org/x/mod/sumdb/note"
)

// jsIssuer issues, through the engine's API, the checkpoints and proofs
// that verify.mjs checks: DB.Checkpoint, DB.ProveInclusion,
// DB.ProveConsistency, and json.Marshal of the proofs (format.md 9.4's
// JSON). One Ed25519 key signs in every directory a test opens
// (Options.Signer), so that checkpoints of a ledger's prefixes imported
// into other directories verify with the same verifier key.
type jsIssuer struct {
	t   *testing.T
	key ed25519.PrivateKey
}

// newJSIssuer returns an issuer with a fixed key chosen so that its
// verifier key's base64 holds a "+" (as about half of all keys' do): a
// verifier must split "name+hash+base64" at its first two "+" only.
func newJSIssuer(t *testing.T) *jsIssuer {
	for i := range 256 {
		seed := sha256.Sum256([]byte(fmt.Sprintf("annal jsverify key %d", i)))
		priv := ed25519.NewKeyFromSeed(seed[:])
		pub := append([]byte{0x01}, priv.Public().(ed25519.PublicKey)...)
		if strings.Contains(base64.StdEncoding.EncodeToString(pub), "+") {
			return &jsIssuer{t: t, key: priv}
		}
	}
	t.Fatal("no key with a + in its base64 among 256")
	return nil
}

// sign signs body (a checkpoint body the engine would not write) with the
// issuer's key, as the DB whose verifier key is vkey signs: the test holds
// the key, as an insider would.
func (iss *jsIssuer) sign(vkey, body string) []byte {
	iss.t.Helper()
	name, _, _ := strings.Cut(vkey, "+")
	seed := append([]byte{0x01}, iss.key.Seed()...)
	pub := append([]byte{0x01}, iss.key.Public().(ed25519.PublicKey)...)
	h := sha256.Sum256(append([]byte(name+"\n"), pub...))
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%x+%s", name, h[:4], base64.StdEncoding.EncodeToString(seed))
	s, err := note.NewSigner(skey)
	if err != nil {
		iss.t.Fatal(err)
	}
	msg, err := note.Sign(&note.Note{Text: body}, s)
	if err != nil {
		iss.t.Fatal(err)
	}
	return msg
}

// options returns the options of a DB signed by the issuer's key, with no
// background checkpoints (the tests issue them).
func (iss *jsIssuer) options(o *engine.Options) *engine.Options {
	if o == nil {
		o = &engine.Options{}
	}
	o.Signer = iss.key
	o.CheckpointInterval = -1
	return o
}

func (iss *jsIssuer) verifierKey(db *engine.DB) string { return db.VerifierKey() }

// checkpoint issues a checkpoint of the ledger and returns its signed note
// and size.
func (iss *jsIssuer) checkpoint(ctx context.Context, db *engine.DB, ledger string) ([]byte, uint64) {
	iss.t.Helper()
	cp, err := db.Checkpoint(ctx, ledger)
	if err != nil {
		iss.t.Fatalf("checkpoint of %s: %v", ledger, err)
	}
	return cp.Note, cp.Size
}

// inclusion returns the JSON of the inclusion proof of leaf (sequence
// number leaf+1) in the tree of size treeSize (0: the latest checkpoint's,
// and the proof carries it).
func (iss *jsIssuer) inclusion(ctx context.Context, db *engine.DB, ledger string, leaf int, treeSize uint64) []byte {
	iss.t.Helper()
	ev, err := db.GetSeq(ctx, ledger, uint64(leaf)+1)
	if err != nil {
		iss.t.Fatalf("event #%d of %s: %v", leaf+1, ledger, err)
	}
	p, err := db.ProveInclusion(ctx, ev.ID, treeSize)
	if err != nil {
		iss.t.Fatalf("inclusion proof of #%d (%s) in the tree of size %d: %v", leaf+1, ev.ID, treeSize, err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		iss.t.Fatal(err)
	}
	return b
}

// consistency returns the JSON of the consistency proof between the trees
// of sizes oldSize and newSize (0: the latest checkpoint's, and the proof
// carries it).
func (iss *jsIssuer) consistency(ctx context.Context, db *engine.DB, ledger string, oldSize, newSize uint64) []byte {
	iss.t.Helper()
	p, err := db.ProveConsistency(ctx, ledger, oldSize, newSize)
	if err != nil {
		iss.t.Fatalf("consistency proof of %s from %d to %d: %v", ledger, oldSize, newSize, err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		iss.t.Fatal(err)
	}
	return b
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeB64Hash(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err == nil && len(b) != 32 {
		err = fmt.Errorf("hash %q is %d bytes", s, len(b))
	}
	return b, err
}
