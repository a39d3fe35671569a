package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ledgerFolder returns the folder of the ledger named orders in dir.
func ledgerFolder(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "ledgers", "*", "NAME"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m {
		b, _ := os.ReadFile(n)
		if string(b) == "orders" {
			return filepath.Dir(n)
		}
	}
	t.Fatalf("no ledger orders in %s", dir)
	return ""
}

// TestCheckpointAcceptIsExplicit: a ledger whose checkpoint file was
// removed is refused by every writer command, which names the cure, and
// signs nothing; annal checkpoint --accept signs it as it is, after which
// the commands work.
func TestCheckpointAcceptIsExplicit(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	mustAnnal(t, `{"entity":"o","key":"1","event":"placed","data":{}}`+"\n", "--dir", dir, "append", "orders")
	ck := filepath.Join(ledgerFolder(t, dir), "checkpoint")
	if err := os.Remove(ck); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		wantExit(t, 3, []string{"no checkpoint file", "annal checkpoint --accept orders"}, "--dir", dir, "checkpoint", "orders", "--new")
		if _, err := os.Stat(ck); !os.IsNotExist(err) {
			t.Fatalf("a refused ledger was signed: %v", err)
		}
	}
	wantExit(t, 2, []string{"--accept and --new"}, "--dir", dir, "checkpoint", "orders", "--accept", "--new")
	out, errOut := wantExit(t, 0, []string{"ledger orders accepted as it is: signed at size 2"}, "--dir", dir, "--format", "table", "checkpoint", "orders", "--accept")
	if !strings.Contains(out, "\n2\n") {
		t.Fatalf("accept printed %q (%s)", out, errOut)
	}
	if _, err := os.Stat(ck); err != nil {
		t.Fatal(err)
	}
	wantExit(t, 1, []string{"available: nothing to accept"}, "--dir", dir, "checkpoint", "orders", "--accept")
	mustAnnal(t, `{"entity":"o","key":"2","event":"placed","data":{}}`+"\n", "--dir", dir, "append", "orders")
}

// TestSigningKeyOutsideTheDirectory: --signing-key FILE (and
// ANNAL_SIGNING_KEY) signs with a key file outside the data directory,
// created on first use with its state file FILE.state beside it; no key
// is made in the directory. Without it, the directory (whose checkpoints
// that key signed) has no key, and the command says to restore it or give
// it, without creating one.
func TestSigningKeyOutsideTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	key := filepath.Join(t.TempDir(), "annal.key")
	mustAnnal(t, "", "--dir", dir, "--signing-key", key, "create", "orders")
	for _, p := range []string{key, key + ".state"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "signing.key")); !os.IsNotExist(err) {
		t.Fatalf("a key was created in the directory: %v", err)
	}
	pub := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "--signing-key", key, "key", "--format", "table"))
	t.Setenv("ANNAL_SIGNING_KEY", key)
	mustAnnal(t, `{"entity":"o","key":"1","event":"placed","data":{}}`+"\n", "--dir", dir, "append", "orders")
	state, err := os.ReadFile(key + ".state")
	if err != nil || !strings.Contains(string(state), "/"+filepath.Base(ledgerFolder(t, dir))+" 2 ") {
		t.Fatalf("the key's state %q (%v) does not hold size 2", state, err)
	}
	t.Setenv("ANNAL_SIGNING_KEY", "")
	name := pub[:strings.IndexByte(pub, '+')]
	wantExit(t, 1, []string{"signing.key does not exist", name + "+", "restore", "--signing-key"}, "--dir", dir, "checkpoint", "orders", "--new")
	if _, err := os.Stat(filepath.Join(dir, "signing.key")); !os.IsNotExist(err) {
		t.Fatalf("a key was created in the directory: %v", err)
	}
}

// TestTreeRebuiltIsNoted: another ledger's tree file copied over this
// one's is rebuilt from the segments by the next writer open, which says
// so on stderr.
func TestTreeRebuiltIsNoted(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	mustAnnal(t, "", "--dir", dir, "create", "other")
	folder := ledgerFolder(t, dir)
	others, _ := filepath.Glob(filepath.Join(dir, "ledgers", "*", "tree"))
	for _, o := range others {
		if filepath.Dir(o) != folder {
			b, err := os.ReadFile(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(folder, "tree"), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, errOut := wantExit(t, 0, []string{"annal: note: ledger orders: ", "was rebuilt from the segments", "the tree file", "ledger"}, "--dir", dir, "checkpoint", "orders", "--new")
	if strings.Count(errOut, "rebuilt") != 1 {
		t.Fatalf("stderr: %s", errOut)
	}
	_, errOut = wantExit(t, 0, nil, "--dir", dir, "checkpoint", "orders", "--new")
	if errOut != "" {
		t.Fatalf("the second open: %s", errOut)
	}
}
