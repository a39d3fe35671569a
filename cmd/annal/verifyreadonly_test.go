package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
)

// hashDir returns the SHA-256 of every file under root, and every
// directory (as a zero hash), by path.
func hashDir(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[path+"/"] = [32]byte{}
			return nil
		}
		b, err := os.ReadFile(path)
		out[path] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffHashes says which paths differ between two hashDir results.
func diffHashes(a, b map[string][32]byte) string {
	var d []string
	for p, h := range a {
		if g, ok := b[p]; !ok {
			d = append(d, p+" removed")
		} else if g != h {
			d = append(d, p+" changed")
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p+" added")
		}
	}
	slices.Sort(d)
	return strings.Join(d, "; ")
}

// TestVerifyWritesNothing: verify changes nothing in the directory. When
// it opened the directory read-write, it cut a torn tail, rebuilt
// a missing index, metadata file and tree file, and signed a checkpoint
// for a ledger whose checkpoint file was missing, then reported that it
// had checked "the latest signed checkpoint" (the one it had just made).
// Now every form (quick, --full, --checkpoint) changes no byte of the
// directory and reports each state: the torn tail (not cut), the missing
// index, metadata file and tree file (not rebuilt), and the ledger whose
// checkpoint is missing (refused, exit 3, the cure named).
func TestVerifyWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := newDir(t)
	db, err := engine.Open(dir, &engine.Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, name := range []string{"acct", "other", "third"} {
		info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = info.ID.String()
		for i := range 20 {
			ev := engine.EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
			if _, err := db.Append(ctx, name, []engine.EventInput{ev}, &engine.AppendOptions{Durability: engine.Sync}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A checkpoint of acct kept outside, for verify --checkpoint.
	ckFile := filepath.Join(t.TempDir(), "acct.checkpoint")
	ck, err := os.ReadFile(filepath.Join(dir, "ledgers", ids["acct"], "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ckFile, ck, 0o600); err != nil {
		t.Fatal(err)
	}
	ledgerFile := func(name, file string) string { return filepath.Join(dir, "ledgers", ids[name], file) }
	// The states: a torn tail on acct, the index and meta.db missing, the
	// checkpoint of other missing, the tree file of third missing.
	segs, err := filepath.Glob(ledgerFile("acct", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatal(segs, err)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0, 0, 0, 90, 1, 2, 3, 4, 5}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []string{filepath.Join(dir, "index"), filepath.Join(dir, "meta.db"), ledgerFile("other", "checkpoint"), ledgerFile("third", "tree")} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	before := hashDir(t, dir)
	for _, args := range [][]string{{"verify"}, {"verify", "--full"}, {"verify", "--full", "--format", "table"}, {"verify", "acct", "--checkpoint", ckFile, "--full"}} {
		code, out, errOut := annal(t, "", append([]string{"--dir", dir}, args...)...)
		if d := diffHashes(before, hashDir(t, dir)); d != "" {
			t.Fatalf("%v changed the data directory: %s\nstdout:\n%s\nstderr:\n%s", args, d, out, errOut)
		}
		wants := []string{
			"ledger acct: the last 9 bytes of its last segment are not verified and not cut",
			"the metadata file " + filepath.Join(dir, "meta.db") + " is missing: the next writer's open rebuilds it",
			"the index " + filepath.Join(dir, "index") + " is missing: the next writer's open rebuilds it",
			"ledger third: its Merkle tree file " + ledgerFile("third", "tree") + " is missing",
		}
		want := exitVerification
		if len(args) > 1 && args[1] == "acct" {
			want = 0 // other, refused, is not verified
		} else {
			// By its name, though meta.db is missing: its NAME file
			// gives it, and it keeps it while it is refused.
			wants = append(wants, "annal: verify other:", "ledger "+ids["other"], "annal checkpoint --accept other")
		}
		if code != want {
			t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, out, errOut)
		}
		for _, w := range wants {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: standard error does not say %q:\n%s", args, w, errOut)
			}
		}
		if strings.Contains(out, `"name":"acct"`) && !strings.Contains(out, `"name":"acct","id":"`+ids["acct"]+`","ok":true`) {
			t.Errorf("%v: acct did not verify:\n%s", args, out)
		}
	}
}
