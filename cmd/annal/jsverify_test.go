package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// The tests in this file run testdata/jsverify/verify.mjs, a verifier of
// exports, signed checkpoints and proofs written in JavaScript from
// docs/format.md alone (section 9, and 3 to 5 for the Event IDs), on what
// annal produced: the examples ledger imported, a ledger grown from 1 to
// 300 events (every tree shape up to 300 leaves), what the commands write
// for an auditor, format.md's own worked example, and copies of them with
// one byte changed, which it must refuse. Each test runs node once on a
// manifest of cases (see verify.mjs). They need node (v18 or later);
// without it they skip, except on CI, where they fail.

// nodePath returns the node executable, or skips the test (fails it on CI).
// The JavaScript verifier (testdata/jsverify) and ledger writer
// (testdata/jsledger) run on it.
func nodePath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is required on CI (the independent JavaScript verifier and ledger writer run on it): %v", err)
		}
		t.Skipf("node is required to run the independent JavaScript verifier and ledger writer, and it is not on PATH: %v", err)
	}
	return p
}

func jsVerifierPath(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "jsverify", "verify.mjs")
}

// jsCase is one case of a verify.mjs manifest (see the comment at the top
// of verify.mjs). Paths are relative to the manifest's directory.
type jsCase struct {
	Name        string   `json:"name"`
	Export      string   `json:"export"`
	Checkpoint  string   `json:"checkpoint"`
	Notes       []string `json:"notes,omitempty"`
	Inclusion   []string `json:"inclusion,omitempty"`
	Consistency []string `json:"consistency,omitempty"`
	IDs         bool     `json:"ids,omitempty"`
	Evently     bool     `json:"evently,omitempty"`
	Expect      string   `json:"expect,omitempty"` // "ok" (default) or "fail"
	FailMatch   string   `json:"failMatch,omitempty"`
}

// jsFixtures is a directory of files for verify.mjs and the manifest of
// what to check.
type jsFixtures struct {
	t     *testing.T
	dir   string
	key   string
	cases []jsCase
	files int
}

func newJSFixtures(t *testing.T, key string) *jsFixtures {
	return &jsFixtures{t: t, dir: t.TempDir(), key: key}
}

// write stores data in a new file of the fixture directory and returns its
// name there.
func (f *jsFixtures) write(prefix string, data []byte) string {
	f.t.Helper()
	f.files++
	name := fmt.Sprintf("%s-%d", prefix, f.files)
	if err := os.WriteFile(filepath.Join(f.dir, name), data, 0o644); err != nil {
		f.t.Fatal(err)
	}
	return name
}

func (f *jsFixtures) read(name string) []byte {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *jsFixtures) add(c jsCase) { f.cases = append(f.cases, c) }

// run runs verify.mjs on the manifest in one node process and fails the
// test unless every case ended as expected; it returns node's output.
func (f *jsFixtures) run() string {
	t := f.t
	t.Helper()
	m, err := json.Marshal(map[string]any{"key": f.key, "cases": f.cases})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(f.dir, "manifest.json")
	if err := os.WriteFile(manifest, m, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nodePath(t), jsVerifierPath(t), "--manifest", manifest)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	text := string(out)
	if err != nil {
		var bad []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "FAIL") {
				bad = append(bad, l)
			}
		}
		if len(bad) > 20 {
			bad = append(bad[:20], fmt.Sprintf("... and %d more", len(bad)-20))
		}
		t.Fatalf("verify.mjs: %v; cases not as expected:\n%s\n(last line: %s)", err, strings.Join(bad, "\n"), lastLine(text))
	}
	// Every case printed its line, and the count is the manifest's.
	if n := strings.Count(text, "\nok ") + boolInt(strings.HasPrefix(text, "ok ")); n != len(f.cases) {
		t.Fatalf("verify.mjs printed %d ok lines for %d cases:\n%s", n, len(f.cases), text)
	}
	t.Logf("verify.mjs (node ran %v): %s", took.Round(time.Millisecond), lastLine(text))
	if os.Getenv("JSVERIFY_LOG") != "" {
		t.Log(text)
	}
	return text
}

// runCLI runs verify.mjs with arguments (file names relative to the
// fixture directory after --export, --checkpoint, --note, --inclusion,
// --consistency) and returns its exit code and output.
func (f *jsFixtures) runCLI(args ...string) (int, string) {
	f.t.Helper()
	cmd := exec.Command(nodePath(f.t), append([]string{jsVerifierPath(f.t)}, args...)...)
	cmd.Dir = f.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		f.t.Fatalf("node: %v", err)
	}
	return 0, string(out)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// exportLedger returns the ledger's export.
func exportLedger(t *testing.T, db *engine.DB, ledger string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := db.Export(context.Background(), ledger, &b, engine.ExportOptions{}); err != nil {
		t.Fatalf("export %s: %v", ledger, err)
	}
	return b.Bytes()
}

// exportWithCheckpoint returns the ledger's export written with
// ExportOptions.Checkpoint, and the signed checkpoint written beside it.
func exportWithCheckpoint(t *testing.T, db *engine.DB, ledger string) (export, note []byte) {
	t.Helper()
	var b, cp bytes.Buffer
	if _, err := db.Export(context.Background(), ledger, &b, engine.ExportOptions{Checkpoint: &cp}); err != nil {
		t.Fatalf("export %s with its checkpoint: %v", ledger, err)
	}
	return b.Bytes(), cp.Bytes()
}

// exportLines splits an export into its lines, without their "\n".
func exportLines(export []byte) [][]byte {
	return bytes.Split(bytes.TrimSuffix(export, []byte("\n")), []byte("\n"))
}

// flipByte returns a copy of b with the byte at i changed (xor 0x01, which
// keeps base64 and hex digits, and the digits, such).
func flipByte(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

// mutateJSON decodes a proof's JSON, lets edit change it, and encodes it.
func mutateJSON(t *testing.T, proof []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(proof))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("proof JSON: %v\n%s", err, proof)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flipHash changes one bit of the i-th hash of the list member.
func flipHash(t *testing.T, m map[string]any, member string, i int) {
	t.Helper()
	list, ok := m[member].([]any)
	if !ok || len(list) <= i {
		t.Fatalf("proof has no %s[%d]: %v", member, i, m)
	}
	h, err := decodeB64Hash(list[i].(string))
	if err != nil {
		t.Fatal(err)
	}
	h[len(h)-1] ^= 0x80
	list[i] = encodeB64(h)
}

func addInt(m map[string]any, member string, d int64) {
	n, err := m[member].(json.Number).Int64()
	if err != nil {
		panic(fmt.Sprintf("%s: %v", member, err))
	}
	m[member] = n + d
}

// changeSigChar replaces the base64 character at offset off (from the
// start of the signature's base64) of the note's last signature line by
// another base64 character, which changes the bytes it decodes to.
func changeSigChar(note []byte, off int) []byte {
	i := bytes.LastIndex(note, []byte(" ")) + 1 + off
	c := bytes.Clone(note)
	if c[i] == 'A' {
		c[i] = 'B'
	} else {
		c[i] = 'A'
	}
	return c
}

// rechainData returns the export with line k's data replaced and every Event ID
// from line k on recomputed, as a forger without the signing key would do
// (export, edit, recompute the IDs, import elsewhere): every ID verifies.
func rechainData(t *testing.T, export []byte, k int, data []byte) []byte {
	t.Helper()
	r := ndjson.NewReader(bytes.NewReader(export))
	var out []byte
	var ledger eventid.LedgerID
	var prev eventid.ID
	for i := 1; ; i++ {
		e, err := r.Next()
		if err != nil {
			break
		}
		ev := *e
		if i == 1 {
			c := ev.Content()
			ledger = c.LedgerID()
			prev = eventid.MinForLedger(ledger)
		}
		if i == k {
			ev.Data = data
		}
		if i >= k {
			c := ev.Content()
			ev.ID = c.ID(ledger, ev.Micros, prev)
		}
		prev = ev.ID
		out = ndjson.AppendEvent(out, &ev)
	}
	if bytes.Equal(out, export) || len(exportLines(out)) != len(exportLines(export)) {
		t.Fatalf("rechainData did not rewrite the export")
	}
	return out
}

// growEvent is event i (i >= 2) of the grown ledger: names and values with
// what JSON must escape or must not (quotes, backslashes, control
// characters, "/", "<", U+2028, non-ASCII, astral characters), keys that
// JavaScript orders specially (array indices, UTF-16 order), numbers that
// canonical JSON rewrites, and data of every JSON type.
func growEvent(i int) engine.EventInput {
	entities := []string{"order", "📒", `quote"back\slash`, "ü/ñ<>&", "刅"}
	datas := []string{
		fmt.Sprintf(`{"n":%d,"s":"tab\t nl\n ctl\u0001\u001f quote\" back\\ \u2028 </script> & 📒","f":1.50,"e":1e21,"z":-0,"small":1e-7}`, i),
		fmt.Sprintf(`{"10":"idx","2":"idx2","～":1,"📒":2,"b":[1,"2",{"y":1,"x":2}],"a":null,"__proto__":{"b":1,"a":2},"i":%d}`, i),
		fmt.Sprintf(`"just a string %d \u00e9\ud83d\udcd2"`, i),
		fmt.Sprintf(`%d.25e-3`, i),
		fmt.Sprintf(`[%d,true,false,null,{},[]]`, i),
		`null`,
	}
	return engine.EventInput{
		Entity: entities[i%len(entities)],
		Key:    fmt.Sprintf("key-%d-\u00e9/\"x\"", i),
		Event:  fmt.Sprintf("happened %d", i%7),
		Meta:   []byte(fmt.Sprintf(`{"actor":"tester \"%d\"","seq":%d}`, i%3, i)),
		Data:   []byte(datas[i%len(datas)]),
	}
}

// TestJSVerifierEveryTreeShape: one ledger grown from 1 to 300 events with
// a checkpoint at every size. A growing ledger gives the same bytes as
// separate ledgers of each size would: a ledger only appends, so its first
// n events (and so its export's first n lines, the leaves of its tree at
// size n) are exactly its events when it had n, and its checkpoint at
// size n is the checkpoint of a ledger of n events. verify.mjs checks, in
// one node run: for every n in 1..300, the final export's first n lines
// against the checkpoint of size n (it takes the size from the
// checkpoint), with every Event ID; inclusion proofs of every leaf in the
// trees of every size up to 40 and of a sample of leaves in a spread of
// larger trees; consistency proofs between all sizes m <= n <= 40 and a
// sample above; and copies with one byte changed, which it must refuse.
func TestJSVerifierEveryTreeShape(t *testing.T) {
	nodePath(t)
	ctx := context.Background()
	const total = 300
	iss := newJSIssuer(t)
	db, err := engine.Open(filepath.Join(t.TempDir(), "data"), iss.options(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.CreateLedger(ctx, engine.LedgerSpec{Name: "shapes", Description: "every tree shape", Actor: "jsverify"})
	if err != nil {
		t.Fatal(err)
	}
	f := newJSFixtures(t, iss.verifierKey(db))
	checkpoints := make([]string, total+1) // by size
	latestProofs := map[int][]string{}     // inclusion proofs against the latest checkpoint, by size
	for n := 1; n <= total; n++ {
		if n > 1 {
			if _, err := db.Append(ctx, "shapes", []engine.EventInput{growEvent(n)}, nil); err != nil {
				t.Fatalf("append event %d: %v", n, err)
			}
		}
		note, size := iss.checkpoint(ctx, db, "shapes")
		if size != uint64(n) {
			t.Fatalf("checkpoint at %d events has size %d", n, size)
		}
		checkpoints[n] = f.write(fmt.Sprintf("cp%d", n), note)
		// A proof against the latest checkpoint carries it, for a spread
		// of sizes: the first and last leaves and one in the middle.
		if n%37 == 0 || n == total || n == 64 || n == 65 {
			for _, leaf := range []int{0, n / 2, n - 1} {
				p := iss.inclusion(ctx, db, "shapes", leaf, 0)
				latestProofs[n] = append(latestProofs[n], f.write(fmt.Sprintf("inc%d-%d-latest", n, leaf), p))
			}
		}
	}
	export, exportNote := exportWithCheckpoint(t, db, "shapes")
	if got := len(exportLines(export)); got != total {
		t.Fatalf("export has %d lines, want %d", got, total)
	}
	exportName := f.write("shapes.ndjson", export)
	f.add(jsCase{Name: "export with its checkpoint", Export: exportName, Checkpoint: f.write("cp-export", exportNote), IDs: true})

	rng := rand.New(rand.NewPCG(14, 300))
	sampleLarge := func(n int) bool { return n <= 40 || n%16 == 0 || n%16 == 1 || n%16 == 15 || n == total || n%29 == 0 }
	inclusions, consistencies := 0, 0
	var incByKey = map[[2]int]string{}
	var conByKey = map[[2]int]string{}
	for n := 1; n <= total; n++ {
		c := jsCase{Name: fmt.Sprintf("size %d", n), Export: exportName, Checkpoint: checkpoints[n], IDs: true}
		c.Inclusion = append(c.Inclusion, latestProofs[n]...)
		inclusions += len(latestProofs[n])
		if sampleLarge(n) {
			leaves := map[int]bool{}
			if n <= 40 {
				for i := range n {
					leaves[i] = true
				}
			} else {
				for _, i := range []int{0, 1, n / 2, n - 2, n - 1, rng.IntN(n), rng.IntN(n)} {
					leaves[i] = true
				}
			}
			for i := range n {
				if !leaves[i] {
					continue
				}
				name := f.write(fmt.Sprintf("inc%d-%d", n, i), iss.inclusion(ctx, db, "shapes", i, uint64(n)))
				incByKey[[2]int{i, n}] = name
				c.Inclusion = append(c.Inclusion, name)
				inclusions++
			}
			olds := map[int]bool{}
			if n <= 40 {
				for m := 1; m <= n; m++ {
					olds[m] = true
				}
			} else {
				for _, m := range []int{1, 2, 31, 32, 33, n / 2, n - 1, n, 1 + rng.IntN(n)} {
					olds[m] = true
				}
			}
			for m := 1; m <= n; m++ {
				if !olds[m] {
					continue
				}
				name := f.write(fmt.Sprintf("con%d-%d", m, n), iss.consistency(ctx, db, "shapes", uint64(m), uint64(n)))
				conByKey[[2]int{m, n}] = name
				c.Consistency = append(c.Consistency, name)
				consistencies++
			}
		}
		f.add(c)
	}

	// One byte changed, anywhere it matters: refused.
	lines := exportLines(export)
	lineStart := func(k int) int { // offset of line k (1-based) in the export
		off := 0
		for _, l := range lines[:k-1] {
			off += len(l) + 1
		}
		return off
	}
	for _, k := range []int{2, 3, 100, 256, 299, 300} {
		// A byte in the data of line k: with the Event IDs checked, the ID
		// does not verify; without, the root differs.
		at := lineStart(k) + bytes.Index(lines[k-1], []byte(`"data":`)) + 8
		bad := f.write(fmt.Sprintf("shapes-flip%d.ndjson", k), flipByte(export, at))
		f.add(jsCase{Name: fmt.Sprintf("line %d changed, root", k), Export: bad, Checkpoint: checkpoints[total], Expect: "fail", FailMatch: "the root of its first"})
		f.add(jsCase{Name: fmt.Sprintf("line %d changed, IDs", k), Export: bad, Checkpoint: checkpoints[total], IDs: true, Expect: "fail", FailMatch: fmt.Sprintf("line %d", k)})
		// The checkpoints of the sizes before it do not cover it.
		f.add(jsCase{Name: fmt.Sprintf("line %d changed, checkpoint %d", k, k-1), Export: bad, Checkpoint: checkpoints[k-1]})
	}
	// Every byte of the signed checkpoints of sizes 1 and 300, and 200
	// bytes of the export anywhere in it (a "\n" too), each changed alone:
	// refused. (Nothing in a signed note or in the export's lines is
	// outside what the signature and the root cover, and the base64 must
	// be canonical, so no change is harmless.)
	for _, n := range []int{1, total} {
		note := f.read(checkpoints[n])
		for at := range note {
			f.add(jsCase{Name: fmt.Sprintf("checkpoint %d, byte %d of %d changed", n, at, len(note)), Export: exportName,
				Checkpoint: f.write("cpbyte", flipByte(note, at)), Expect: "fail"})
		}
	}
	for range 200 {
		at := rng.IntN(len(export))
		f.add(jsCase{Name: fmt.Sprintf("export byte %d changed", at), Export: f.write("exbyte.ndjson", flipByte(export, at)),
			Checkpoint: checkpoints[total], Expect: "fail"})
	}
	for _, n := range []int{1, 2, 7, 64, 300} {
		note := f.read(checkpoints[n])
		body := bytes.Index(note, []byte("\n\n"))
		for _, at := range []int{0, bytes.IndexByte(note, '\n') + 1, body - 3, body} {
			// origin, size, root, the body's last "\n": the signature fails
			f.add(jsCase{Name: fmt.Sprintf("checkpoint %d body byte %d", n, at), Export: exportName, Checkpoint: f.write("cpflip", flipByte(note, at)), Expect: "fail"})
		}
		f.add(jsCase{Name: fmt.Sprintf("checkpoint %d signature", n), Export: exportName, Checkpoint: f.write("cpsig", changeSigChar(note, 20)), Expect: "fail", FailMatch: "does not verify"})
		f.add(jsCase{Name: fmt.Sprintf("checkpoint %d key hash", n), Export: exportName, Checkpoint: f.write("cpkh", changeSigChar(note, 1)), Expect: "fail", FailMatch: "no signature by"})
		f.add(jsCase{Name: fmt.Sprintf("export shorter than checkpoint %d", n), Export: f.write("short", joinLines(lines[:n-1])), Checkpoint: checkpoints[n], Expect: "fail"})
	}
	for _, key := range [][2]int{{0, 1}, {0, 2}, {1, 2}, {5, 8}, {12, 13}, {38, 40}, {0, total}, {150, total}, {total - 1, total}} {
		i, n := key[0], key[1]
		p := f.read(incByKey[key])
		edits := map[string]func(map[string]any){
			"leafIndex+1": func(m map[string]any) { addInt(m, "leafIndex", 1) },
			"treeSize-1":  func(m map[string]any) { addInt(m, "treeSize", -1) },
			"treeSize+1":  func(m map[string]any) { addInt(m, "treeSize", 1) },
		}
		if n > 1 {
			edits["another leaf"] = func(m map[string]any) {
				j := (i + 1) % n
				m["leafIndex"], m["seq"], m["eventId"] = j, j+1, string(parseLineID(t, lines[j]))
				delete(m, "leafHash")
			}
			edits["path hash 0"] = func(m map[string]any) { flipHash(t, m, "inclusionPath", 0) }
			edits["last path hash"] = func(m map[string]any) {
				flipHash(t, m, "inclusionPath", len(m["inclusionPath"].([]any))-1)
			}
			edits["path shortened"] = func(m map[string]any) {
				m["inclusionPath"] = m["inclusionPath"].([]any)[1:]
			}
		}
		for what, edit := range edits {
			f.add(jsCase{Name: fmt.Sprintf("inclusion %d in %d, %s", i, n, what), Export: exportName, Checkpoint: checkpoints[n],
				Inclusion: []string{f.write("incbad", mutateJSON(t, p, edit))}, Expect: "fail"})
		}
		// The proof's bytes, one flipped in the middle of its first hash.
		if n > 1 {
			at := bytes.Index(p, []byte(`"inclusionPath":["`)) + len(`"inclusionPath":["`) + 10
			f.add(jsCase{Name: fmt.Sprintf("inclusion %d in %d, byte %d", i, n, at), Export: exportName, Checkpoint: checkpoints[n],
				Inclusion: []string{f.write("incflip", flipByte(p, at))}, Expect: "fail"})
		}
	}
	for _, key := range [][2]int{{1, 2}, {2, 3}, {3, 7}, {4, 8}, {5, 40}, {31, 33}, {33, 300}, {150, 300}, {299, 300}} {
		m, n := key[0], key[1]
		p := f.read(conByKey[key])
		edits := map[string]func(map[string]any){
			"path hash 0":    func(j map[string]any) { flipHash(t, j, "consistencyPath", 0) },
			"last path hash": func(j map[string]any) { flipHash(t, j, "consistencyPath", len(j["consistencyPath"].([]any))-1) },
			"oldSize-1":      func(j map[string]any) { addInt(j, "oldSize", -1); delete(j, "oldRoot") },
			"oldSize+1":      func(j map[string]any) { addInt(j, "oldSize", 1); delete(j, "oldRoot") },
			"newSize-1":      func(j map[string]any) { addInt(j, "newSize", -1); delete(j, "newRoot") },
			"path shortened": func(j map[string]any) { j["consistencyPath"] = j["consistencyPath"].([]any)[1:] },
		}
		if m == 1 {
			delete(edits, "oldSize-1")
		}
		for what, edit := range edits {
			f.add(jsCase{Name: fmt.Sprintf("consistency %d to %d, %s", m, n, what), Export: exportName, Checkpoint: checkpoints[n],
				Consistency: []string{f.write("conbad", mutateJSON(t, p, edit))}, Expect: "fail"})
		}
	}
	// Signed notes the engine does not write, signed with its key: with
	// an extension line (ignored), cosigned by another key (its line
	// skipped), signed by another key only, with a size written with a
	// leading zero, and an insider's checkpoint of another root.
	cp300 := f.read(checkpoints[total])
	body300, sig300, _ := bytes.Cut(cp300, []byte("\n\n"))
	bodyLines := strings.SplitAfter(string(body300)+"\n", "\n")
	origin, root300 := strings.TrimSuffix(bodyLines[0], "\n"), strings.TrimSuffix(bodyLines[2], "\n")
	witness := "\u2014 witness-1 " + encodeB64(bytes.Repeat([]byte{7}, 68)) + "\n"
	f.add(jsCase{Name: "checkpoint with an extension line", Export: exportName, Checkpoint: f.write("cp-ext",
		iss.sign(f.key, fmt.Sprintf("%s\n%d\n%s\nsome extension\n", origin, total, root300)))})
	f.add(jsCase{Name: "checkpoint cosigned by a witness", Export: exportName, Checkpoint: f.write("cp-cosigned",
		[]byte(string(body300)+"\n\n"+witness+string(sig300)))})
	f.add(jsCase{Name: "checkpoint signed by another key only", Export: exportName, Checkpoint: f.write("cp-other",
		[]byte(string(body300)+"\n\n"+witness)), Expect: "fail", FailMatch: "no signature by"})
	f.add(jsCase{Name: "checkpoint size with a leading zero", Export: exportName, Checkpoint: f.write("cp-zero",
		iss.sign(f.key, fmt.Sprintf("%s\n0%d\n%s\n", origin, total, root300))), Expect: "fail", FailMatch: "leading zeros"})
	f.add(jsCase{Name: "insider's checkpoint of another root", Export: exportName, Checkpoint: f.write("cp-insider",
		iss.sign(f.key, fmt.Sprintf("%s\n%d\n%s\n", origin, total, encodeB64(bytes.Repeat([]byte{1}, 32))))), Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "insider's checkpoint of another root, as a note", Export: exportName, Checkpoint: checkpoints[total],
		Notes:  []string{f.write("cp-insider", iss.sign(f.key, fmt.Sprintf("%s\n%d\n%s\n", origin, 7, encodeB64(bytes.Repeat([]byte{1}, 32)))))},
		Expect: "fail", FailMatch: "but the export's first 7 lines have root"})

	// A checkpoint of another ledger's tree (the two-event ledger's) and an
	// export of another ledger.
	other, err := db.Import(ctx, bytes.NewReader(mustRead(t, vectorPath(t, "evently-cli-two-events.ndjson"))), engine.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherNote, _ := iss.checkpoint(ctx, db, other.Name)
	otherExport := f.write("two.ndjson", exportLedger(t, db, other.Name))
	twoNote := f.write("cp-two", otherNote)
	f.add(jsCase{Name: "two-event ledger", Export: otherExport, Checkpoint: twoNote, IDs: true})
	// format.md 9.2's worked example.
	if got, want := noteRootHex(t, otherNote), "24f35e80d8f859c04d60726d0360c4ebc34055b96bc190c71e6e10269d513b01"; got != want {
		t.Errorf("two-event ledger: root %s, format.md 9.2 says %s", got, want)
	}
	// As Evently wrote it, with CRLF line ends (format.md 5: a "\r" before
	// the "\n" is ignored).
	crlf := bytes.ReplaceAll(mustRead(t, vectorPath(t, "evently-cli-two-events.ndjson")), []byte("\n"), []byte("\r\n"))
	f.add(jsCase{Name: "two-event ledger as Evently wrote it, CRLF", Export: f.write("two-crlf.ndjson", crlf), Checkpoint: twoNote, Evently: true})
	f.add(jsCase{Name: "checkpoint of another ledger", Export: exportName, Checkpoint: f.write("cp-two", otherNote), Expect: "fail", FailMatch: "origin"})
	f.add(jsCase{Name: "export of another ledger", Export: otherExport, Checkpoint: checkpoints[2], Expect: "fail", FailMatch: "origin"})
	// A re-chained forgery: every Event ID verifies, the root does not.
	forged := f.write("forged.ndjson", rechainData(t, export, 150, []byte(`{"amount":999}`)))
	f.add(jsCase{Name: "re-chained forgery, checkpoint 300", Export: forged, Checkpoint: checkpoints[total], IDs: true, Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "re-chained forgery, checkpoint 150", Export: forged, Checkpoint: checkpoints[150], IDs: true, Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "re-chained forgery, checkpoint 149", Export: forged, Checkpoint: checkpoints[149], IDs: true})

	// A fork: another directory, signed by the same key, holds the same
	// ledger's first 20 events and then others. A client holding the
	// checkpoint of size 21 of the real ledger must refuse the fork's
	// consistency proof from 21 to its latest checkpoint, even when the
	// proof claims the client's old root: only the old root recomputed
	// from the path (RFC 9162's fr) differs.
	fork, err := engine.Open(filepath.Join(t.TempDir(), "data"), iss.options(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close()
	if _, err := fork.Import(ctx, bytes.NewReader(joinLines(lines[:20])), engine.ImportOptions{Name: "shapes"}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := fork.Append(ctx, "shapes", []engine.EventInput{growEvent(1000 + i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	forkNote, forkSize := iss.checkpoint(ctx, fork, "shapes")
	forkProof := iss.consistency(ctx, fork, "shapes", 21, 0)
	first21 := f.write("first21.ndjson", joinLines(lines[:21]))
	f.add(jsCase{Name: "fork, its own export", Export: f.write("fork.ndjson", exportLedger(t, fork, "shapes")), Checkpoint: f.write("cp-fork", forkNote),
		Consistency: []string{f.write("con-fork", forkProof)}})
	consistencies++
	f.add(jsCase{Name: "fork, against the checkpoint of size 21", Export: first21, Checkpoint: checkpoints[21],
		Consistency: []string{f.write("con-fork", forkProof)}, Expect: "fail", FailMatch: "oldRoot"})
	realRoot21 := encodeB64(mustHex(t, noteRootHex(t, f.read(checkpoints[21]))))
	f.add(jsCase{Name: "fork, against the checkpoint of size 21, claiming its root", Export: first21, Checkpoint: checkpoints[21],
		Consistency: []string{f.write("con-fork", mutateJSON(t, forkProof, func(m map[string]any) { m["oldRoot"] = realRoot21 }))},
		Expect:      "fail", FailMatch: "consistency path leads to old root"})
	if forkSize != 50 {
		t.Fatalf("fork checkpoint size %d, want 50", forkSize)
	}

	out := f.run()
	if want := fmt.Sprintf("(%d inclusion, %d consistency proofs)", inclusions, consistencies); !strings.Contains(out, want) {
		t.Fatalf("verify.mjs did not verify %s: %s", want, lastLine(out))
	}

	// The command line: exit 0 on a good case, non-zero with the failure
	// named on a changed byte.
	if code, out := f.runCLI("--key", f.key, "--export", exportName, "--checkpoint", checkpoints[total], "--ids",
		"--inclusion", incByKey[[2]int{150, total}], "--consistency", conByKey[[2]int{33, total}]); code != 0 {
		t.Fatalf("verify.mjs on a good export: exit %d: %s", code, out)
	}
	for _, args := range [][]string{
		{"--export", f.write("cli-flip.ndjson", flipByte(export, lineStart(200)+len(lines[199])/2)), "--checkpoint", checkpoints[total]},
		{"--export", exportName, "--checkpoint", f.write("cli-sig", changeSigChar(f.read(checkpoints[total]), 30))},
		{"--export", exportName, "--checkpoint", checkpoints[total], "--inclusion", f.write("cli-inc", mutateJSON(t, f.read(incByKey[[2]int{150, total}]), func(m map[string]any) { flipHash(t, m, "inclusionPath", 3) }))},
		{"--export", exportName, "--checkpoint", checkpoints[40], "--consistency", f.write("cli-con", mutateJSON(t, f.read(conByKey[[2]int{5, 40}]), func(m map[string]any) { addInt(m, "newSize", -1); delete(m, "newRoot") }))},
	} {
		code, out := f.runCLI(append([]string{"--key", f.key}, args...)...)
		if code == 0 || !strings.HasPrefix(out, "FAIL: ") {
			t.Errorf("verify.mjs %s: exit %d, want a failure: %s", strings.Join(args, " "), code, out)
		}
	}
}

func parseLineID(t *testing.T, line []byte) []byte {
	t.Helper()
	var v struct {
		EventID string `json:"eventId"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		t.Fatal(err)
	}
	return []byte(v.EventID)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJSVerifierExamplesLedger: the examples ledger (11,550 events)
// imported, exported and checkpointed; checkpoints of earlier sizes from
// the same ledger imported up to that size into other directories signed
// by the same key (a ledger's first n events are the ledger at size n).
// verify.mjs checks the export with every Event ID against each
// checkpoint, inclusion proofs of the first, last, powers of two and
// their neighbours and random leaves, and consistency proofs between the
// sizes; the roots are format.md's table's.
func TestJSVerifierExamplesLedger(t *testing.T) {
	nodePath(t)
	ctx := context.Background()
	full := mustRead(t, vectorPath(t, "evently-examples-ledger.ndjson"))
	srcLines := exportLines(full)
	total := len(srcLines)
	iss := newJSIssuer(t)
	open := func(prefix int) (*engine.DB, string) {
		db, err := engine.Open(filepath.Join(t.TempDir(), "data"), iss.options(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		in := joinLines(srcLines[:prefix])
		info, err := db.Import(ctx, bytes.NewReader(in), engine.ImportOptions{})
		if err != nil {
			t.Fatalf("import %d lines: %v", prefix, err)
		}
		return db, info.Name
	}
	db, ledger := open(total)
	f := newJSFixtures(t, iss.verifierKey(db))
	export, note := exportWithCheckpoint(t, db, ledger)
	cpFull := f.write("cp-full", note)
	exportName := f.write("examples.ndjson", export)

	// format.md 9.2's table.
	docRoots := map[int]string{
		1:     "3e3c7c51ab7b7ba78c32d0abc06ee58d3479bcd051c1baf31a9c3d0d441219be",
		2:     "fd016e61f915d29746c28219dea832b8df8642c16c42ad4e2b9f0bda52131b3c",
		3:     "822eb389c11074bad47c13859115ffbcd5dc9a606dd86c15307786a2ca3fc216",
		7:     "665f3df0464ba681f3200f55b97492fc8d05b21c8b4d2b224e40676119e2a698",
		11550: "67e6b6aee55c3b0e74d1ae421b34565f66220fb397f8a65f00afb371e8508780",
	}
	sizes := []int{1, 2, 3, 7, 8, 1000, 1024, 4096, 8191, 11549}
	prefixNotes := map[int]string{}
	var notes []string
	for _, n := range sizes {
		pdb, pledger := open(n)
		note, size := iss.checkpoint(ctx, pdb, pledger)
		if size != uint64(n) {
			t.Fatalf("prefix checkpoint size %d, want %d", size, n)
		}
		prefixNotes[n] = f.write(fmt.Sprintf("cp%d", n), note)
		notes = append(notes, prefixNotes[n])
		if err := pdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for n, want := range docRoots {
		name := cpFull
		if n != total {
			name = prefixNotes[n]
		}
		if got := noteRootHex(t, f.read(name)); got != want {
			t.Errorf("checkpoint of size %d: root %s, format.md's table says %s", n, got, want)
		}
	}

	var inc []string
	leaves := []int{0, 1, total - 2, total - 1}
	for p := 2; p < total; p *= 2 {
		leaves = append(leaves, p-1, p, p+1)
	}
	rng := rand.New(rand.NewPCG(14, 11550))
	for range 20 {
		leaves = append(leaves, rng.IntN(total))
	}
	for _, i := range leaves {
		inc = append(inc, f.write(fmt.Sprintf("inc-%d", i), iss.inclusion(ctx, db, ledger, i, 0)))
		for _, n := range sizes {
			if i < n && (i%3 == 0 || i+1 == n) {
				inc = append(inc, f.write(fmt.Sprintf("inc-%d-%d", i, n), iss.inclusion(ctx, db, ledger, i, uint64(n))))
			}
		}
	}
	var con []string
	for a, m := range sizes {
		con = append(con, f.write(fmt.Sprintf("con-%d", m), iss.consistency(ctx, db, ledger, uint64(m), 0)))
		for _, n := range sizes[a:] {
			con = append(con, f.write(fmt.Sprintf("con-%d-%d", m, n), iss.consistency(ctx, db, ledger, uint64(m), uint64(n))))
		}
	}
	f.add(jsCase{Name: "examples", Export: exportName, Checkpoint: cpFull, Notes: notes, Inclusion: inc, Consistency: con, IDs: true})
	for _, n := range sizes {
		f.add(jsCase{Name: fmt.Sprintf("examples at size %d", n), Export: exportName, Checkpoint: prefixNotes[n]})
	}
	// The file as Evently wrote it (3 fraction digits, data keys in
	// another order): its leaf bytes are its lines rewritten in annal's
	// form (format.md 9.1).
	evently := f.write("evently.ndjson", full)
	f.add(jsCase{Name: "examples as Evently wrote them", Export: evently, Checkpoint: cpFull, Evently: true, Inclusion: inc[:5]})
	f.add(jsCase{Name: "examples as Evently wrote them, lines as leaves", Export: evently, Checkpoint: cpFull, Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "examples as Evently wrote them, IDs checked, lines as leaves", Export: evently, Checkpoint: cpFull, IDs: true, Expect: "fail", FailMatch: "line 1 is not written as annal writes it"})
	// Changed bytes: a line, the checkpoint, a proof.
	lines := exportLines(export)
	at := len(export) - len(lines[total-1]) - 1 - len(lines[total-2])/2
	f.add(jsCase{Name: "examples, line 11549 changed", Export: f.write("exflip.ndjson", flipByte(export, at)), Checkpoint: cpFull, Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "examples, line 11549 changed, checkpoint 11549", Export: f.write("exflip.ndjson", flipByte(export, at)), Checkpoint: prefixNotes[11549], Expect: "fail", FailMatch: "the root of its first"})
	f.add(jsCase{Name: "examples, line 11549 changed, checkpoint 8191", Export: f.write("exflip.ndjson", flipByte(export, at)), Checkpoint: prefixNotes[8191]})
	f.add(jsCase{Name: "examples, checkpoint signature", Export: exportName, Checkpoint: f.write("cpsig", changeSigChar(note, 40)), Expect: "fail", FailMatch: "does not verify"})
	f.add(jsCase{Name: "examples, inclusion path", Export: exportName, Checkpoint: cpFull,
		Inclusion: []string{f.write("incbad", mutateJSON(t, f.read(inc[len(inc)-1]), func(m map[string]any) { flipHash(t, m, "inclusionPath", 5) }))}, Expect: "fail", FailMatch: "inclusion path leads to root"})
	f.add(jsCase{Name: "examples, consistency path", Export: exportName, Checkpoint: cpFull,
		Consistency: []string{f.write("conbad", mutateJSON(t, f.read(con[0]), func(m map[string]any) { flipHash(t, m, "consistencyPath", 2) }))}, Expect: "fail"})
	forged := rechainData(t, export, 5000, []byte(`{"amount":999}`))
	f.add(jsCase{Name: "examples, re-chained at line 5000", Export: f.write("forged.ndjson", forged), Checkpoint: cpFull, IDs: true, Expect: "fail", FailMatch: "the root of its first"})
	f.run()
}

func noteRootHex(t *testing.T, note []byte) string {
	t.Helper()
	lines := strings.Split(string(note), "\n")
	if len(lines) < 3 {
		t.Fatalf("checkpoint note: %q", note)
	}
	h, err := decodeB64Hash(lines[2])
	if err != nil {
		t.Fatalf("checkpoint root %q: %v", lines[2], err)
	}
	return hex.EncodeToString(h)
}

// joinLines writes lines as an export: each ends in "\n".
func joinLines(lines [][]byte) []byte {
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	return b
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJSVerifierCommands: what the commands write for an auditor
// (annal key, annal checkpoint -o, annal export --checkpoint, annal prove
// --format json, annal prove --consistency --format json, with and
// without --size) verifies with verify.mjs, which knows only
// docs/format.md.
func TestJSVerifierCommands(t *testing.T) {
	nodePath(t)
	dir := newDir(t) // the ledger "orders", its genesis event only
	f := newJSFixtures(t, "")
	cli := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := annal(t, stdin, append([]string{"--dir", dir}, args...)...)
		if code != 0 {
			t.Fatalf("annal %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	appendEvents := func(from, to int) {
		var in strings.Builder
		for i := from; i <= to; i++ {
			e := growEvent(i)
			fmt.Fprintf(&in, `{"entity":%q,"key":%q,"event":%q,"meta":%s,"data":%s}`+"\n", e.Entity, e.Key, e.Event, e.Meta, e.Data)
		}
		cli(in.String(), "append", "orders")
	}
	appendEvents(2, 13)
	old := filepath.Join(f.dir, "old.checkpoint")
	cli("", "checkpoint", "orders", "--new", "-o", old)
	appendEvents(14, 37)
	f.key = strings.TrimSpace(cli("", "key", "--format", "table"))
	export, cp := filepath.Join(f.dir, "orders.ndjson"), filepath.Join(f.dir, "orders.checkpoint")
	cli("", "export", "orders", "-o", export, "--checkpoint", cp)
	var inc, con []string
	for _, seq := range []int{1, 2, 13, 14, 20, 37} {
		inc = append(inc, f.write("inc", []byte(cli("", "prove", fmt.Sprintf("orders#%d", seq), "--format", "json"))))
		if seq <= 13 {
			inc = append(inc, f.write("inc13", []byte(cli("", "prove", fmt.Sprintf("orders#%d", seq), "--size", "13", "--format", "json"))))
		}
	}
	con = append(con, f.write("con", []byte(cli("", "prove", "--consistency", old, "--format", "json"))))
	con = append(con, f.write("con20", []byte(cli("", "prove", "--consistency", old, "--size", "20", "--format", "json"))))
	f.add(jsCase{Name: "annal export --checkpoint, prove", Export: "orders.ndjson", Checkpoint: "orders.checkpoint", Notes: []string{"old.checkpoint"},
		Inclusion: inc, Consistency: con, IDs: true})
	f.add(jsCase{Name: "annal checkpoint -o", Export: "orders.ndjson", Checkpoint: "old.checkpoint", IDs: true})
	f.add(jsCase{Name: "annal prove --consistency, a changed path hash", Export: "orders.ndjson", Checkpoint: "orders.checkpoint", Notes: []string{"old.checkpoint"},
		Consistency: []string{f.write("conbad", mutateJSON(t, f.read(con[0]), func(m map[string]any) { flipHash(t, m, "consistencyPath", 0) }))}, Expect: "fail", FailMatch: "consistency path leads to"})
	if out := f.run(); !strings.Contains(out, fmt.Sprintf("(%d inclusion, %d consistency proofs)", len(inc), len(con))) {
		t.Fatalf("verify.mjs did not verify every proof: %s", lastLine(out))
	}
}

// TestJSVerifierFormatExample: format.md 9.3's worked example, the signed
// checkpoint of the two-event ledger and its verifier key, taken from the
// page, verifies with verify.mjs against the ledger as Evently wrote it
// and as annal exports it; the same note with a changed byte does not.
func TestJSVerifierFormatExample(t *testing.T) {
	nodePath(t)
	_, file, _, _ := runtime.Caller(0)
	page := string(mustRead(t, filepath.Join(filepath.Dir(file), "..", "..", "docs", "format.md")))
	key := regexp.MustCompile("(?m)^```\n(annal-[0-9a-f]{8}\\+[0-9a-f]{8}\\+[A-Za-z0-9+/=]+)\n```$").FindStringSubmatch(page)
	note := regexp.MustCompile("(?m)^```\n(annal-[0-9a-f]{8}/e95bff80\n2\n[A-Za-z0-9+/=]+\n\n\u2014 [^\n]+\n)```$").FindStringSubmatch(page)
	if key == nil || note == nil {
		t.Fatalf("format.md 9.3's worked example not found (verifier key found: %v, signed note found: %v)", key != nil, note != nil)
	}
	f := newJSFixtures(t, key[1])
	two := mustRead(t, vectorPath(t, "evently-cli-two-events.ndjson"))
	db, err := engine.Open(filepath.Join(t.TempDir(), "data"), &engine.Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.Import(context.Background(), bytes.NewReader(two), engine.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp := f.write("example.checkpoint", []byte(note[1]))
	f.add(jsCase{Name: "format.md 9.3, the file as Evently wrote it", Export: f.write("two.ndjson", two), Checkpoint: cp, Evently: true})
	f.add(jsCase{Name: "format.md 9.3, annal's export", Export: f.write("two-annal.ndjson", exportLedger(t, db, info.Name)), Checkpoint: cp, IDs: true})
	f.add(jsCase{Name: "format.md 9.3, a changed signature", Export: f.write("two.ndjson", two), Evently: true,
		Checkpoint: f.write("bad.checkpoint", changeSigChar([]byte(note[1]), 50)), Expect: "fail", FailMatch: "does not verify"})
	f.run()
}
