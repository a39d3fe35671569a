package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/annal-db/annal/engine"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// jsIssuer issues the checkpoints and proofs that verify.mjs checks.
// INTERIM: until the engine's checkpoint API lands (branch t14-eng), it
// computes them with golang.org/x/mod/sumdb/tlog and note from the
// ledger's export, in format.md 9.3 and 9.4's forms.
type jsIssuer struct {
	t      *testing.T
	name   string
	signer note.Signer
	vkey   string
	trees  map[string]*jsTree
}

type jsTree struct {
	hashes []tlog.Hash // tlog's stored hashes
	n      int64
	ids    []string
	latest []byte // the latest checkpoint note
	size   int64
}

func newJSIssuer(t *testing.T) *jsIssuer {
	skey, vkey, err := note.GenerateKey(rand.Reader, "annal-jstest")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return &jsIssuer{t: t, name: "annal-jstest", signer: s, vkey: vkey, trees: map[string]*jsTree{}}
}

func (iss *jsIssuer) options(o *engine.Options) *engine.Options {
	if o == nil {
		o = &engine.Options{}
	}
	return o
}

func (iss *jsIssuer) verifierKey(*engine.DB) string { return iss.vkey }

func (iss *jsIssuer) tree(db *engine.DB, ledger string) *jsTree {
	t := iss.t
	k := fmt.Sprintf("%p/%s", db, ledger)
	tr := iss.trees[k]
	if tr == nil {
		tr = &jsTree{}
		iss.trees[k] = tr
	}
	info, err := db.Ledger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.Count) == tr.n {
		return tr
	}
	lines := exportLines(exportLedger(t, db, ledger))
	for int64(len(lines)) > tr.n {
		line := lines[tr.n]
		hs, err := tlog.StoredHashes(tr.n, line, tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(idx))
			for i, x := range idx {
				out[i] = tr.hashes[x]
			}
			return out, nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		tr.hashes = append(tr.hashes, hs...)
		tr.ids = append(tr.ids, string(parseLineID(t, line)))
		tr.n++
	}
	return tr
}

func (tr *jsTree) reader() tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = tr.hashes[x]
		}
		return out, nil
	})
}

func (iss *jsIssuer) checkpoint(_ context.Context, db *engine.DB, ledger string) ([]byte, uint64) {
	t := iss.t
	tr := iss.tree(db, ledger)
	root, err := tlog.TreeHash(tr.n, tr.reader())
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.Ledger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("%s/%s\n%d\n%s\n", iss.name, info.ID, tr.n, base64.StdEncoding.EncodeToString(root[:]))
	msg, err := note.Sign(&note.Note{Text: body}, iss.signer)
	if err != nil {
		t.Fatal(err)
	}
	tr.latest, tr.size = msg, tr.n
	return msg, uint64(tr.n)
}

func (iss *jsIssuer) inclusion(_ context.Context, db *engine.DB, ledger string, leaf int, treeSize uint64) []byte {
	t := iss.t
	tr := iss.tree(db, ledger)
	info, _ := db.Ledger(ledger)
	n := int64(treeSize)
	m := map[string]any{}
	if n == 0 {
		n = tr.size
		m["checkpoint"] = string(tr.latest)
	}
	p, err := tlog.ProveRecord(n, int64(leaf), tr.reader())
	if err != nil {
		t.Fatal(err)
	}
	m["ledger"], m["eventId"], m["seq"], m["leafIndex"], m["treeSize"] = info.ID.String(), tr.ids[leaf], leaf+1, leaf, n
	m["leafHash"] = encodeB64(tr.hashes[tlog.StoredHashIndex(0, int64(leaf))][:])
	m["inclusionPath"] = b64List(p)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (iss *jsIssuer) consistency(_ context.Context, db *engine.DB, ledger string, oldSize, newSize uint64) []byte {
	t := iss.t
	tr := iss.tree(db, ledger)
	info, _ := db.Ledger(ledger)
	n := int64(newSize)
	m := map[string]any{}
	if n == 0 {
		n = tr.size
		m["checkpoint"] = string(tr.latest)
	}
	p, err := tlog.ProveTree(n, int64(oldSize), tr.reader())
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := tlog.TreeHash(int64(oldSize), tr.reader())
	r2, _ := tlog.TreeHash(n, tr.reader())
	m["ledger"], m["oldSize"], m["newSize"] = info.ID.String(), oldSize, n
	m["oldRoot"], m["newRoot"] = encodeB64(r1[:]), encodeB64(r2[:])
	m["consistencyPath"] = b64List(p)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64List(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = encodeB64(h[:])
	}
	return out
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeB64Hash(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err == nil && len(b) != 32 {
		err = fmt.Errorf("hash %q is %d bytes", s, len(b))
	}
	return b, err
}
