package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"golang.org/x/mod/sumdb/note"
)

// mustAnnal runs the command and fails the test unless it exits 0.
func mustAnnal(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errOut := annal(t, stdin, args...)
	if code != 0 {
		t.Fatalf("annal %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// wantExit runs the command and fails the test unless it exits code and
// its standard error contains every one of want.
func wantExit(t *testing.T, code int, want []string, args ...string) (stdout, stderr string) {
	t.Helper()
	got, out, errOut := annal(t, "", args...)
	if got != code {
		t.Fatalf("annal %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Fatalf("annal %s: stderr does not say %q:\n%s", strings.Join(args, " "), w, errOut)
		}
	}
	return out, errOut
}

// merkleRoot computes the RFC 9162 tree hash of leaves (leaf bytes, not
// hashes) from its definition (docs/format.md 9.2), independently of
// package tree, for the tests to check what the command reports.
func merkleRoot(leaves [][]byte) [32]byte {
	if len(leaves) == 1 {
		return sha256.Sum256(append([]byte{0}, leaves[0]...))
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := merkleRoot(leaves[:k]), merkleRoot(leaves[k:])
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// fileLeaves returns the lines of an export written by annal (its leaves)
// without their newlines.
func fileLeaves(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// rechain returns the export text with edit applied to line n (from 1)
// and the Event IDs of that line and every later one recomputed from
// their content, their timestamp and the ID before, as a forger with the
// export and no key would do it: the result verifies line by line.
func rechain(t *testing.T, export []byte, n int, edit func(line []byte) []byte) []byte {
	t.Helper()
	var out []byte
	var ledger eventid.LedgerID
	var prev eventid.ID
	sc := bufio.NewScanner(bytes.NewReader(export))
	sc.Buffer(nil, 1<<20)
	for i := 1; sc.Scan(); i++ {
		line := sc.Bytes()
		if i == n {
			edited := edit(bytes.Clone(line))
			if bytes.Equal(edited, line) {
				t.Fatalf("rechain: the edit does not change line %d: %s", n, line)
			}
			line = edited
		}
		ev, err := ndjson.NewReader(bytes.NewReader(line)).Next()
		if err != nil {
			t.Fatalf("rechain: line %d: %v", i, err)
		}
		c := ev.Content()
		if i == 1 {
			ledger = c.LedgerID()
			prev = eventid.Genesis(ledger)
		}
		if i >= n {
			ev.ID = c.ID(ledger, ev.Micros, prev)
		}
		prev = ev.ID
		out = ndjson.AppendEvent(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// payments makes a data directory with ledger "pay": a genesis event and
// five payments, the third of amount 100.
func payments(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	mustAnnal(t, "", "--dir", dir, "create", "pay")
	var in strings.Builder
	for i, amount := range []int{20, 35, 100, 7, 64} {
		fmt.Fprintf(&in, `{"entity":"account","key":"acct-%d","event":"paid","data":{"amount":%d,"memo":"invoice %d"}}`+"\n", i, amount, i)
	}
	mustAnnal(t, in.String(), "--dir", dir, "append", "pay")
	return dir
}

// TestRechainedForgery: an amount
// changed in an export and every Event ID from it on recomputed passes
// every check the CRC32C chain can make (verify-file, import), and fails
// verify-file --checkpoint against a checkpoint issued before the edit,
// also once imported into a fresh directory and exported again.
func TestRechainedForgery(t *testing.T) {
	t.Parallel()
	dir := payments(t)
	work := t.TempDir()
	exported, cpFile := filepath.Join(work, "pay.ndjson"), filepath.Join(work, "pay.checkpoint")
	mustAnnal(t, "", "--dir", dir, "export", "pay", "-o", exported, "--checkpoint", cpFile)
	key := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "key", "--format", "table"))
	keyFile := filepath.Join(work, "annal.pub")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cpFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("checkpoint file: %v, %v; want mode 0644 (it is public)", fi, err)
	}
	cpNote, err := os.ReadFile(cpFile)
	if err != nil {
		t.Fatal(err)
	}
	cpLines := strings.Split(string(cpNote), "\n")
	if len(cpLines) < 5 || cpLines[1] != "6" {
		t.Fatalf("checkpoint:\n%s\nwant a signed note of size 6", cpNote)
	}
	signedRoot := cpLines[2]

	// The untouched export passes, with the key and with @FILE.
	out := mustAnnal(t, "", "verify-file", exported, "--checkpoint", cpFile, "--key", key)
	if !strings.Contains(out, "ok: 6 events, ledger ") || !strings.Contains(out, "size 6, root "+signedRoot+") is signed by key "+key+" and matches its 6 events") {
		t.Fatalf("untouched export: %s", out)
	}
	mustAnnal(t, "", "verify-file", exported, "--checkpoint", cpFile, "--key", "@"+keyFile)

	// The forgery: payment #3 (line 4) from 100 to 999, re-chained.
	export, err := os.ReadFile(exported)
	if err != nil {
		t.Fatal(err)
	}
	forgedText := rechain(t, export, 4, func(line []byte) []byte {
		return bytes.Replace(line, []byte(`"amount":100,`), []byte(`"amount":999,`), 1)
	})
	forged := filepath.Join(work, "forged.ndjson")
	if err := os.WriteFile(forged, forgedText, 0o644); err != nil {
		t.Fatal(err)
	}
	forgedRoot := merkleRoot(fileLeaves(t, forged))
	forgedRootB64 := base64.StdEncoding.EncodeToString(forgedRoot[:])
	if forgedRootB64 == signedRoot {
		t.Fatal("the forgery has the signed root")
	}

	// What CRC32C sees: nothing.
	out = mustAnnal(t, "", "verify-file", forged)
	if !strings.HasPrefix(out, "ok: 6 events, ") {
		t.Fatalf("verify-file of the forgery without a checkpoint: %s", out)
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	mustAnnal(t, "", "--dir", fresh, "import", forged)

	// What the checkpoint sees.
	want := []string{"rewritten", `"` + cpFile + `"`, signedRoot, forgedRootB64, "first 6 events"}
	wantExit(t, exitVerification, want, "verify-file", forged, "--checkpoint", cpFile, "--key", key)
	reexported := filepath.Join(work, "reexported.ndjson")
	mustAnnal(t, "", "--dir", fresh, "export", "pay", "-o", reexported)
	if b, _ := os.ReadFile(reexported); !bytes.Equal(b, forgedText) {
		t.Fatalf("the re-export differs from the forgery it imported")
	}
	wantExit(t, exitVerification, want, "verify-file", reexported, "--checkpoint", cpFile, "--key", "@"+keyFile)
	// The directory the forgery was imported into does not extend C
	// either: verify --checkpoint and prove --consistency say so.
	_, errOut := wantExit(t, exitVerification, []string{"rewritten", signedRoot, forgedRootB64}, "--dir", fresh, "verify", "--checkpoint", cpFile, "--key", key)
	if !strings.Contains(errOut, `checkpoint "`+cpFile+`"`) {
		t.Fatalf("verify --checkpoint does not name the checkpoint: %s", errOut)
	}
	wantExit(t, exitVerification, []string{"rewritten", signedRoot, forgedRootB64, cpFile}, "--dir", fresh, "prove", "--consistency", cpFile, "--key", "@"+keyFile)
	out, _ = wantExit(t, exitVerification, nil, "--dir", fresh, "verify", "--checkpoint", cpFile, "--key", key, "--full", "--format", "table")
	if !regexp.MustCompile(`(?m)^pay +[0-9a-f]{8} +6 +[0-9a-f]{32} +all +REWRITTEN +ok +ok +FAILED$`).MatchString(out) {
		t.Fatalf("verify --checkpoint of the forgery, table:\n%s", out)
	}
	// And the fresh directory's own checkpoint of the forgery is signed
	// by another key: refused with the original one.
	freshCP := filepath.Join(work, "fresh.checkpoint")
	mustAnnal(t, "", "--dir", fresh, "checkpoint", "pay", "--new", "-o", freshCP)
	wantExit(t, exitVerification, []string{"not a checkpoint signed by key " + key}, "verify-file", reexported, "--checkpoint", freshCP, "--key", key)
}

// TestVerifyFileCheckpointRefused checks that verify-file refuses a
// checkpoint that was edited (size, root, origin, signature) or signed by
// another key, that it checks the origin, the size and the root of a
// checkpoint that is properly signed, and that the right key with an
// untouched file passes.
func TestVerifyFileCheckpointRefused(t *testing.T) {
	t.Parallel()
	dir := payments(t)
	work := t.TempDir()
	exported, cpFile := filepath.Join(work, "pay.ndjson"), filepath.Join(work, "pay.checkpoint")
	mustAnnal(t, "", "--dir", dir, "export", "pay", "-o", exported, "--checkpoint", cpFile)
	key := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "key", "--format", "table"))
	cpNote, err := os.ReadFile(cpFile)
	if err != nil {
		t.Fatal(err)
	}
	mustAnnal(t, "", "verify-file", exported, "--checkpoint", cpFile, "--key", key)
	body, sig, ok := strings.Cut(string(cpNote), "\n\n")
	if !ok {
		t.Fatalf("checkpoint:\n%s", cpNote)
	}
	lines := strings.SplitN(body, "\n", 3) // origin, size, root + "\n"
	origin, size, root := lines[0], lines[1], strings.TrimSuffix(lines[2], "\n")
	ledger := origin[strings.LastIndexByte(origin, '/')+1:]
	otherRoot := merkleRoot([][]byte{[]byte("another leaf")})
	otherRootB64 := base64.StdEncoding.EncodeToString(otherRoot[:])
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Edited notes: the signature no longer verifies.
	sigBytes := []byte(sig)
	i := bytes.LastIndexByte(sigBytes, ' ') + 5
	sigBytes[i] ^= 1 // a bit of the base64 signature, past the key hash
	for name, text := range map[string]string{
		"size":      origin + "\n5\n" + root + "\n\n" + sig,
		"root":      origin + "\n" + size + "\n" + otherRootB64 + "\n\n" + sig,
		"origin":    strings.TrimSuffix(origin, ledger) + "00000001\n" + size + "\n" + root + "\n\n" + sig,
		"signature": body + "\n\n" + string(sigBytes),
		"unsigned":  body + "\n",
		"garbage":   "not a checkpoint\n",
	} {
		p := write("edited-"+name, text)
		wantExit(t, exitVerification, []string{"checkpoint \"" + p + "\": not a checkpoint signed by key " + key}, "verify-file", exported, "--checkpoint", p, "--key", key)
	}

	// Another key, even one with the same name, signing the true body:
	// refused with the directory's key, accepted with its own.
	name := keyName(key)
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(text string) string {
		t.Helper()
		msg, err := note.Sign(&note.Note{Text: text}, signer)
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	impostor := write("impostor", sign(body+"\n"))
	wantExit(t, exitVerification, []string{"not a checkpoint signed by key " + key}, "verify-file", exported, "--checkpoint", impostor, "--key", key)
	mustAnnal(t, "", "verify-file", exported, "--checkpoint", impostor, "--key", vkey)

	// Properly signed (by the other key) but not this file's: the origin,
	// the size and the root are checked.
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"other-ledger", strings.TrimSuffix(origin, ledger) + "00000001\n" + size + "\n" + root + "\n",
			[]string{"is not of ledger " + ledger, "00000001"}},
		{"no-ledger", "annal\n" + size + "\n" + root + "\n",
			[]string{"is not of ledger " + ledger}},
		{"longer", origin + "\n7\n" + root + "\n",
			[]string{"truncated: the checkpoint covers 7 events, the file has 6"}},
		{"other-root", origin + "\n" + size + "\n" + otherRootB64 + "\n",
			[]string{"rewritten", otherRootB64, root}},
		{"shorter-same-root", origin + "\n5\n" + root + "\n",
			[]string{"rewritten", "first 5 events"}},
	} {
		p := write(c.name, sign(c.text))
		wantExit(t, exitVerification, c.want, "verify-file", exported, "--checkpoint", p, "--key", vkey)
	}

	// A file longer than the checkpoint: with --prefix, the first N
	// checked (TestVerifyFileUnvouchedEventsFail: without, it fails).
	mustAnnal(t, `{"entity":"account","key":"acct-9","event":"paid","data":{"amount":1}}`, "--dir", dir, "append", "pay")
	longer := filepath.Join(work, "longer.ndjson")
	mustAnnal(t, "", "--dir", dir, "export", "pay", "-o", longer)
	out := mustAnnal(t, "", "verify-file", longer, "--checkpoint", cpFile, "--key", key, "--prefix")
	if !strings.Contains(out, "ok: 7 events") || !strings.Contains(out, "matches its first 6 events (the 1 after them are not covered by it): 6 of 7 events vouched for") {
		t.Fatalf("a longer file: %s", out)
	}
	// A shorter one is truncated.
	short := write("short.ndjson", string(bytes.Join(fileLeaves(t, exported)[:4], []byte("\n")))+"\n")
	wantExit(t, exitVerification, []string{"truncated: the checkpoint covers 6 events, the file has 4", cpFile}, "verify-file", short, "--checkpoint", cpFile, "--key", key)

	// Usage: both flags or neither; a key that is not one.
	wantExit(t, exitUsage, []string{"--checkpoint and --key go together"}, "verify-file", exported, "--checkpoint", cpFile)
	wantExit(t, exitUsage, []string{"--checkpoint and --key go together"}, "verify-file", exported, "--key", key)
	wantExit(t, exitUsage, []string{"--key: ", "is not a verifier key"}, "verify-file", exported, "--checkpoint", cpFile, "--key", "annal+nothex+AAAA")
	wantExit(t, exitUsage, []string{"holds no key"}, "verify-file", exported, "--checkpoint", cpFile, "--key", "@"+write("empty.pub", "\n"))
	wantExit(t, exitError, []string{"missing.pub"}, "verify-file", exported, "--checkpoint", cpFile, "--key", "@"+filepath.Join(work, "missing.pub"))
	wantExit(t, exitError, []string{"missing.checkpoint"}, "verify-file", exported, "--checkpoint", filepath.Join(work, "missing.checkpoint"), "--key", key)
}

// TestVerifyFileEventlySpelling checks verify-file --checkpoint on the
// reference ledgers as Evently wrote them (3 fraction digits, keys in
// another order), against checkpoints of the roots docs/format.md gives
// (section 9.2), signed here with a key of the test's own: the leaves are
// the lines rewritten in annal's form, so these files verify as they are.
func TestVerifyFileEventlySpelling(t *testing.T) {
	t.Parallel()
	skey, vkey, err := note.GenerateKey(rand.Reader, "auditor")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	checkpoint := func(ledger string, size int, rootHex string) string {
		t.Helper()
		root, err := hex.DecodeString(rootHex)
		if err != nil || len(root) != 32 {
			t.Fatalf("root %q: %v", rootHex, err)
		}
		msg, err := note.Sign(&note.Note{Text: fmt.Sprintf("auditor/%s\n%d\n%s\n", ledger, size, base64.StdEncoding.EncodeToString(root[:]))}, signer)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(work, fmt.Sprintf("%s-%d.checkpoint", ledger, size))
		if err := os.WriteFile(p, msg, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		file, ledger string
		size         int
		root         string
		want         string
	}{
		{"evently-cli-two-events.ndjson", "e95bff80", 2, "24f35e80d8f859c04d60726d0360c4ebc34055b96bc190c71e6e10269d513b01", "matches its 2 events"},
		{"evently-examples-ledger.ndjson", "9e961c04", 11550, "67e6b6aee55c3b0e74d1ae421b34565f66220fb397f8a65f00afb371e8508780", "matches its 11550 events"},
		{"evently-examples-ledger.ndjson", "9e961c04", 7, "665f3df0464ba681f3200f55b97492fc8d05b21c8b4d2b224e40676119e2a698", "matches its first 7 events (the 11543 after them"},
		{"evently-examples-ledger.ndjson", "9e961c04", 1, "3e3c7c51ab7b7ba78c32d0abc06ee58d3479bcd051c1baf31a9c3d0d441219be", "matches its first 1 events"},
	} {
		cp := checkpoint(c.ledger, c.size, c.root)
		// The prefix checks need --prefix (TestVerifyFileUnvouchedEventsFail).
		out := mustAnnal(t, "", "verify-file", vectorPath(t, c.file), "--checkpoint", cp, "--key", vkey, "--prefix")
		if !strings.Contains(out, c.want) {
			t.Fatalf("%s at size %d: %s", c.file, c.size, out)
		}
	}
	// The root of size 3 at size 7: another root.
	cp := checkpoint("9e961c04", 7, "822eb389c11074bad47c13859115ffbcd5dc9a606dd86c15307786a2ca3fc216")
	wantExit(t, exitVerification, []string{"rewritten"}, "verify-file", vectorPath(t, "evently-examples-ledger.ndjson"), "--checkpoint", cp, "--key", vkey)
}
