package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lostTailDir makes a data directory whose ledger "orders" lost its tail:
// the older copy of its segment restored over the newer one after three
// more appends. It returns the directory and the ledger's ID.
func lostTailDir(t *testing.T) (dir, id string) {
	t.Helper()
	dir = newDir(t)
	entries, err := os.ReadDir(filepath.Join(dir, "ledgers"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledgers: %v %v", entries, err)
	}
	id = entries[0].Name()
	seg := filepath.Join(dir, "ledgers", id, "00000000000000000001.seg")
	older, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	mustAnnal(t, strings.Repeat(`{"entity":"order","key":"o-1","event":"placed","data":{}}`+"\n", 3), "--dir", dir, "append", "orders")
	if err := os.WriteFile(seg, older, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, id
}

// TestVerifyFindsRefusedLedgerByID: a ledger refused at open (a lost
// tail) is known by its name; `annal verify ID` finds it by its ID too and
// reports its failure, exit 3, as `annal verify NAME` does. (It said "no
// ledger" and exited 1.)
func TestVerifyFindsRefusedLedgerByID(t *testing.T) {
	t.Parallel()
	dir, id := lostTailDir(t)
	for _, arg := range []string{"orders", id} {
		out, _ := wantExit(t, exitVerification, []string{"acknowledged events lost", "restore the ledger's segment files", "verification failed: 1 of 1 ledgers"},
			"--dir", dir, "verify", arg, "--format", "ndjson")
		if !strings.Contains(out, `"name":"orders","id":"`+id+`"`) {
			t.Fatalf("verify %s: %s", arg, out)
		}
	}
}

// TestVerifyEnvironmentErrorIsExit1: a ledger that cannot be checked for a
// reason of the system (its folder may not be read: permission denied) is
// exit 1, saying it could not be checked, not exit 3 "verification failed",
// which says that data failed. Run as root, the command runs as user
// nobody with the ledger's folder root's (runAsNobody); otherwise the
// folder is made mode 000.
func TestVerifyEnvironmentErrorIsExit1(t *testing.T) {
	dir := newDir(t)
	entries, err := os.ReadDir(filepath.Join(dir, "ledgers"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledgers: %v %v", entries, err)
	}
	ledger := filepath.Join(dir, "ledgers", entries[0].Name())
	want := []string{"permission denied", "could not be checked (an error of the system, not of the data"}
	if os.Geteuid() != 0 {
		if err := os.Chmod(ledger, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(ledger, 0o700)
		_, errOut := wantExit(t, exitError, want, "--dir", dir, "verify")
		if strings.Contains(errOut, "verification failed") {
			t.Fatalf("verify: %s", errOut)
		}
		return
	}
	code, out := runAsNobody(t, "TestVerifyEnvironmentErrorIsExit1", dir, []string{ledger}, "verify")
	want = append(want, `"id":"`+entries[0].Name()+`"`, "belongs to user root (uid 0)", "chown -R ")
	for _, w := range want {
		if code != exitError || !strings.Contains(out, w) || strings.Contains(out, "verification failed") {
			t.Fatalf("verify as uid %d of a ledger folder that root owns: exit %d\n%s\nwant exit 1 saying %q", nobody, code, out, w)
		}
	}
}

// TestCheckpointJSONEnvelopeAccepted: `annal checkpoint NAME > FILE` in a
// pipe writes the JSON object ({"ledger","origin","size","root","note"});
// verify --checkpoint, prove --consistency and verify-file --checkpoint
// take it as the signed note it holds. (verify exited 3, "malformed note":
// a false tamper alarm.) An envelope whose fields do not describe its note
// is exit 3; JSON without a note is a usage error (exit 2).
func TestCheckpointJSONEnvelopeAccepted(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	mustAnnal(t, `{"entity":"order","key":"o-1","event":"placed","data":{}}`, "--dir", dir, "append", "orders")
	work := t.TempDir()
	env := mustAnnal(t, "", "--dir", dir, "checkpoint", "orders", "--new")
	if !strings.HasPrefix(env, `{"ledger":`) {
		t.Fatalf("checkpoint in a pipe: %s, want the JSON object", env)
	}
	cp := filepath.Join(work, "orders.checkpoint.json")
	if err := os.WriteFile(cp, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAnnal(t, "", "--dir", dir, "verify", "--checkpoint", cp)
	mustAnnal(t, "", "--dir", dir, "verify", "orders", "--checkpoint", cp, "--full")
	mustAnnal(t, "", "--dir", dir, "prove", "--consistency", cp)
	key := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "key", "--format", "table"))
	exported := filepath.Join(work, "orders.ndjson")
	mustAnnal(t, "", "--dir", dir, "export", "orders", "-o", exported)
	mustAnnal(t, "", "verify-file", exported, "--checkpoint", cp, "--key", key)

	edited := filepath.Join(work, "edited.json")
	if err := os.WriteFile(edited, []byte(strings.Replace(env, `"size":2`, `"size":7`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(env, `"size":2`) {
		t.Fatalf("the envelope: %s", env)
	}
	wantExit(t, exitVerification, []string{"do not describe the signed note", "the file was edited"}, "--dir", dir, "verify", "--checkpoint", edited)
	noNote := filepath.Join(work, "nonote.json")
	if err := os.WriteFile(noNote, []byte(`{"ledger":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantExit(t, exitUsage, []string{"is JSON but not the object annal checkpoint prints", "-o FILE"}, "--dir", dir, "verify", "--checkpoint", noNote)
	wantExit(t, exitUsage, []string{"is JSON but not the object"}, "verify-file", exported, "--checkpoint", noNote, "--key", key)
}
