package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyProof: annal verify-proof checks, without the data directory,
// an inclusion proof that annal prove wrote: a good proof passes (with the
// event's line, given as text or @FILE; with the key as text or @FILE;
// from standard input; against a checkpoint file given with --checkpoint),
// and each of these fails with exit 3 and a message that says what
// differs: a changed hash in the path, a changed byte in the signed note
// it carries, a wrong key, another event's line, the event's line with
// other content, a checkpoint of another ledger (carried or given), a
// checkpoint of another size. A proof without a checkpoint, a consistency
// proof, and no --key are usage errors (exit 2).
func TestVerifyProof(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	dir := filepath.Join(work, "data")
	file := func(name string) string { return filepath.Join(work, name) }
	write := func(name, text string) string {
		t.Helper()
		if err := os.WriteFile(file(name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return file(name)
	}
	mustAnnal(t, "", "--dir", dir, "create", "orders")
	mustAnnal(t, "", "--dir", dir, "create", "other")
	for _, k := range []string{"o-1", "o-2", "o-3", "o-4", "o-5"} {
		mustAnnal(t, "", "--dir", dir, "append", "orders", "--entity", "order", "--key", k, "--event", "placed", "--data", `{"total":12.5}`)
		if k == "o-4" {
			mustAnnal(t, "", "--dir", dir, "checkpoint", "orders", "--new", "-o", file("orders5.checkpoint"))
		}
	}
	mustAnnal(t, "", "--dir", dir, "append", "other", "--entity", "x", "--key", "y", "--event", "z")
	mustAnnal(t, "", "--dir", dir, "checkpoint", "orders", "--new", "-o", file("orders.checkpoint"))
	mustAnnal(t, "", "--dir", dir, "checkpoint", "other", "--new", "-o", file("other.checkpoint"))
	proof := write("proof.json", mustAnnal(t, "", "--dir", dir, "--format", "json", "prove", "orders#4"))
	sized := write("sized.json", mustAnnal(t, "", "--dir", dir, "--format", "json", "prove", "orders#4", "--size", "5"))
	vkey := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "--format", "table", "key"))
	pub := write("annal.pub", vkey+"\n")
	event := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "--format", "ndjson", "get", "orders#4"))
	eventFile := write("event.ndjson", event+"\n")
	otherEvent := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "--format", "ndjson", "get", "orders#3"))
	// The data directory is gone: verify-proof needs none.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{proof, "--key", "@" + pub, "--event", "@" + eventFile},
		{proof, "--key", vkey, "--event", event},
		{proof, "--key", vkey, "--checkpoint", file("orders.checkpoint"), "--event", event},
		{sized, "--key", vkey, "--checkpoint", file("orders5.checkpoint"), "--event", event},
	} {
		out := mustAnnal(t, "", append([]string{"verify-proof"}, args...)...)
		for _, want := range []string{"ok: checkpoint ", "origin " + strings.SplitN(vkey, "+", 2)[0] + "/", "is signed by key " + vkey,
			"ok: event #4 ", "is leaf 3 of that tree", "ok: the --event line is that event"} {
			if !strings.Contains(out, want) {
				t.Fatalf("verify-proof %s: the output does not say %q:\n%s", strings.Join(args, " "), want, out)
			}
		}
	}
	// Without --event: only the claimed leaf hash is checked, and it says so.
	b, err := os.ReadFile(proof)
	if err != nil {
		t.Fatal(err)
	}
	out := mustAnnal(t, string(b), "verify-proof", "-", "--key", vkey)
	if !strings.Contains(out, "ok: event #4 ") || !strings.Contains(out, "the event itself was not checked") {
		t.Fatalf("verify-proof without --event:\n%s", out)
	}

	// Edits of the proof's JSON.
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	edited := func(name string, edit func(p map[string]any)) string {
		t.Helper()
		q := map[string]any{}
		for k, v := range p {
			q[k] = v
		}
		edit(q)
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, string(b))
	}
	flipHash := func(s string) string {
		h, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		h[7] ^= 1
		return base64.StdEncoding.EncodeToString(h)
	}
	path := p["inclusionPath"].([]any)
	if len(path) < 2 {
		t.Fatalf("the proof's path has %d hashes, want at least 2 (a tree of 6)", len(path))
	}
	changedPath := edited("changed-path.json", func(q map[string]any) {
		c := append([]any{}, path...)
		c[1] = flipHash(c[1].(string))
		q["inclusionPath"] = c
	})
	note := p["checkpoint"].(string)
	changedNote := edited("changed-note.json", func(q map[string]any) {
		// A byte of the root in the note's body: the signature fails.
		lines := strings.SplitN(note, "\n", 4)
		lines[2] = flipHash(lines[2])
		q["checkpoint"] = strings.Join(lines, "\n")
	})
	otherCheckpoint, err := os.ReadFile(file("other.checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	anotherLedger := edited("another-ledger.json", func(q map[string]any) { q["checkpoint"] = string(otherCheckpoint) })
	changedContent := strings.Replace(event, `"total":12.5`, `"total":13.5`, 1)
	if changedContent == event {
		t.Fatalf("the event line has no total to change: %s", event)
	}
	mustAnnal(t, "", "create", "--dir", filepath.Join(work, "data2"), "x")
	otherKey := strings.TrimSpace(mustAnnal(t, "", "--dir", filepath.Join(work, "data2"), "--format", "table", "key"))

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"a changed hash in the path", []string{changedPath, "--key", vkey, "--event", event},
			[]string{`proof "` + changedPath + `": its path (3 hashes) does not lead from the leaf hash`, "of event #4 to the root", "tree: proof does not verify"}},
		{"a changed byte in the carried note", []string{changedNote, "--key", vkey},
			[]string{"its checkpoint member", "not a checkpoint signed by key " + vkey}},
		{"another data directory's key", []string{proof, "--key", otherKey, "--event", event},
			[]string{"not a checkpoint signed by key " + otherKey, "signed by: " + strings.Join(strings.SplitN(vkey, "+", 3)[:2], "+")}},
		{"another event's line", []string{proof, "--key", vkey, "--event", otherEvent},
			[]string{"it is of event " + p["eventId"].(string) + ", and the --event line is event ", "another event"}},
		{"the event's line with other content", []string{proof, "--key", vkey, "--event", changedContent},
			[]string{"its leaf hash is", "the line's content differs from the event the proof is of"}},
		{"a carried checkpoint of another ledger", []string{anotherLedger, "--key", vkey},
			[]string{"it is of ledger " + p["ledger"].(string) + `, and checkpoint "`, "is not of ledger " + p["ledger"].(string) + ": its origin is"}},
		{"a given checkpoint of another ledger", []string{sized, "--key", vkey, "--checkpoint", file("other.checkpoint")},
			[]string{`checkpoint "` + file("other.checkpoint") + `" is not of ledger ` + p["ledger"].(string)}},
		{"a checkpoint of another tree size", []string{sized, "--key", vkey, "--checkpoint", file("orders.checkpoint")},
			[]string{"it is for the tree of size 5, and checkpoint", "covers 6 events"}},
		{"a given checkpoint other than the carried one", []string{proof, "--key", vkey, "--checkpoint", file("orders5.checkpoint")},
			[]string{"it carries the checkpoint of origin", "size 6", `not checkpoint "` + file("orders5.checkpoint") + `"`, "size 5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _ := wantExit(t, exitVerification, c.want, append([]string{"verify-proof"}, c.args...)...)
			if strings.Contains(out, "ok:") {
				t.Fatalf("a failed check printed ok:\n%s", out)
			}
		})
	}

	consistency := write("consistency.json", `{"ledger":"`+p["ledger"].(string)+`","oldSize":1,"newSize":6,"oldRoot":"","newRoot":"","consistencyPath":[]}`)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a proof without a checkpoint", []string{sized, "--key", vkey}, "carries no checkpoint"},
		{"a consistency proof", []string{consistency, "--key", vkey}, "is a consistency proof"},
		{"no key", []string{proof}, "--key is required"},
		{"a key that is not one", []string{proof, "--key", "nokey"}, "is not a verifier key"},
		{"two event lines", []string{proof, "--key", vkey, "--event", otherEvent + "\n" + event}, "--event: the --event value holds 2 lines"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantExit(t, exitUsage, []string{c.want}, append([]string{"verify-proof"}, c.args...)...)
		})
	}
	wantExit(t, exitVerification, []string{"is not an inclusion proof as annal prove --format json writes it"}, "verify-proof", write("garbage.json", "{not json"), "--key", vkey)
	wantExit(t, exitError, []string{"no such file"}, "verify-proof", file("missing.json"), "--key", vkey)
}
