package cosign

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/engine/tree"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// testLog is a log's history: its leaves' stored hashes in memory, and
// the log's signing key.
type testLog struct {
	origin string
	signer note.Signer
	vkey   string
	hashes []tlog.Hash // tlog's stored hashes
	n      int64
}

// newLogKey returns a log signing key named name (skey, vkey).
func newLogKey(t *testing.T, name string) (string, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	return skey, vkey
}

// newTestLog returns an empty history of the ledger 0000abcd of the log
// key skey/vkey.
func newTestLog(t *testing.T, skey, vkey string) *testLog {
	t.Helper()
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{origin: s.Name() + "/0000abcd", signer: s, vkey: vkey}
}

func (l *testLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = l.hashes[x]
	}
	return out, nil
}

// grow appends n leaves, each "prefix i".
func (l *testLog) grow(t *testing.T, prefix string, n int) {
	t.Helper()
	for range n {
		hs, err := tlog.StoredHashes(l.n, []byte(fmt.Sprintf("%s %d", prefix, l.n)), l)
		if err != nil {
			t.Fatal(err)
		}
		l.hashes = append(l.hashes, hs...)
		l.n++
	}
}

// checkpoint returns the body and signed note of the tree of size n.
func (l *testLog) checkpoint(t *testing.T, n int64) (tree.Checkpoint, []byte) {
	t.Helper()
	root, err := tlog.TreeHash(n, l)
	if err != nil {
		t.Fatal(err)
	}
	c := tree.Checkpoint{Origin: l.origin, Size: uint64(n), Root: root}
	msg, err := tree.Sign(c, l.signer)
	if err != nil {
		t.Fatal(err)
	}
	return c, msg
}

// proof returns the consistency proof from size m to size n.
func (l *testLog) proof(n int64) func(m uint64) ([]tree.Hash, error) {
	return func(m uint64) ([]tree.Hash, error) {
		p, err := tlog.ProveTree(n, int64(m), l)
		return p, err
	}
}

// startWitness opens a witness on dir for the log keys and serves it.
func startWitness(t *testing.T, dir string, logs ...string) (*Witness, *httptest.Server) {
	t.Helper()
	w, err := OpenWitness(dir, WitnessOptions{Logs: logs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w)
	t.Cleanup(func() {
		srv.Close()
		w.Close()
	})
	return w, srv
}

// witnessFixture is a log key and a witness trusting it, served over
// HTTP from its directory.
type witnessFixture struct {
	skey, vkey, dir string
	w               *Witness
	srv             *httptest.Server
	cfg             WitnessConfig
}

func serveWitness(t *testing.T) *witnessFixture {
	t.Helper()
	f := &witnessFixture{dir: t.TempDir()}
	f.skey, f.vkey = newLogKey(t, "log.example")
	f.w, f.srv = startWitness(t, f.dir, f.vkey)
	f.cfg = WitnessConfig{URL: f.srv.URL, VKey: f.w.VerifierKey()}
	return f
}

// request returns an add-checkpoint body.
func request(old uint64, proof []tree.Hash, msg []byte) []byte {
	req := fmt.Appendf(nil, "old %d\n", old)
	for _, h := range proof {
		req = append(req, b64(h)+"\n"...)
	}
	return append(append(req, '\n'), msg...)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cosignedNote returns a new witness key named witness.example/w1, a
// checkpoint body, and the note of that body signed by the key alone.
func cosignedNote(t *testing.T) (*Key, string, []byte) {
	t.Helper()
	k, err := GenerateKey("witness.example/w1")
	if err != nil {
		t.Fatal(err)
	}
	text := "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
	msg, err := note.Sign(&note.Note{Text: text}, k)
	if err != nil {
		t.Fatal(err)
	}
	return k, text, msg
}

// TestCosignatureVerifies: a cosignature/v1 line verifies with the
// witness's vkey through note.Open, and fails once its time or the
// checkpoint changes; a private key line reads back as the same key.
func TestCosignatureVerifies(t *testing.T) {
	k, text, msg := cosignedNote(t)
	k2, err := ParseKey(k.PrivateKey())
	if err != nil || k2.VerifierKey() != k.VerifierKey() {
		t.Fatalf("ParseKey(PrivateKey()) = %v, %v; want the same key", k2, err)
	}
	v, err := NewVerifier(k.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(msg, note.VerifierList(v)); err != nil {
		t.Fatalf("note.Open of a cosigned note: %v", err)
	}
	_, sigs, err := splitNote(msg)
	if err != nil {
		t.Fatal(err)
	}
	sig := bytes.Clone(sigs[0].sig)
	sig[7]++ // another second
	if v.Verify([]byte(text), sig) {
		t.Error("a cosignature with its time changed verifies")
	}
	if v.Verify([]byte(strings.Replace(text, "5", "6", 1)), sigs[0].sig) {
		t.Error("a cosignature verifies for another checkpoint")
	}
	if _, err := NewVerifier(strings.Replace(k.VerifierKey(), "+", "x+", 1)); !errors.Is(err, ErrKey) {
		t.Errorf("a vkey under another name: %v, want ErrKey (the key ID does not match)", err)
	}
	_, logKey := newLogKey(t, "log.example")
	if _, err := NewVerifier(logKey); !errors.Is(err, ErrKey) {
		t.Errorf("a log's Ed25519 (0x01) vkey as a witness key: %v, want ErrKey", err)
	}
}

// TestWitnessCosignsConsistentExtensions: a witness cosigns the first
// checkpoint of an origin, then each consistent extension (the client
// learning the old size from the 409), and the same tree again; its state
// file holds the last size and root; the policy counts the cosignature.
func TestWitnessCosignsConsistentExtensions(t *testing.T) {
	f := serveWitness(t)
	skey, vkey, dir, w, srv, cfg := f.skey, f.vkey, f.dir, f.w, f.srv, f.cfg
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", 3)
	var last uint64
	for _, n := range []int64{3, 7, 7, 20, 21} {
		l.grow(t, "a", int(n-l.n))
		c, msg := l.checkpoint(t, n)
		line, from, err := cfg.Cosign(context.Background(), srv.Client(), msg, 0, l.proof(n))
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if from != last {
			t.Errorf("size %d: asked from size %d, the witness had %d", n, from, last)
		}
		last = c.Size
		p, err := NewPolicy([]string{cfg.VKey}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if found, err := p.Check(AddCosignatures(msg, line)); err != nil || len(found) != 1 {
			t.Fatalf("size %d: the policy: %v, %v", n, found, err)
		}
		if _, err := p.Check(msg); !errors.Is(err, ErrQuorum) || !strings.Contains(err.Error(), "0 of the 1") {
			t.Fatalf("size %d: the policy on the checkpoint without the cosignature: %v, want ErrQuorum, 0 of 1", n, err)
		}
		if got, ok := w.Cosigned(l.origin); !ok || got != c {
			t.Fatalf("size %d: the witness holds %+v, want %+v", n, got, c)
		}
		want := fmt.Sprintf("%s %d %s\n", c.Origin, c.Size, b64(c.Root))
		if got := string(readFile(t, filepath.Join(dir, StateFile))); got != want {
			t.Fatalf("size %d: the state file holds %q, want %q", n, got, want)
		}
	}
}

// TestWitnessRefusesRewrittenHistory: a log that signs, with its own key,
// another history of the same origin is refused by the witness, larger
// (422: the proof does not verify) or of the same size (422), and the
// witness's state, in memory and on disk, is unchanged; a cosignature of
// the first history pasted onto the rewritten checkpoint does not count.
func TestWitnessRefusesRewrittenHistory(t *testing.T) {
	f := serveWitness(t)
	skey, vkey, dir, w, srv, cfg := f.skey, f.vkey, f.dir, f.w, f.srv, f.cfg
	honest := newTestLog(t, skey, vkey)
	honest.grow(t, "a", 5)
	good, msg := honest.checkpoint(t, 5)
	goodLine, _, err := cfg.Cosign(context.Background(), srv.Client(), msg, 0, honest.proof(5))
	if err != nil {
		t.Fatal(err)
	}
	state := readFile(t, filepath.Join(dir, StateFile))

	forged := newTestLog(t, skey, vkey)
	forged.grow(t, "b", 8)
	for _, n := range []int64{8, 5} {
		_, fmsg := forged.checkpoint(t, n)
		_, from, err := cfg.Cosign(context.Background(), srv.Client(), fmsg, 0, forged.proof(n))
		var re *RequestError
		if !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity || from != 5 {
			t.Fatalf("a rewritten history of size %d: err %v (asked from %d), want 422 from size 5", n, err, from)
		}
		if got, _ := w.Cosigned(honest.origin); got != good {
			t.Fatalf("after the refusal the witness holds %+v, want %+v", got, good)
		}
		if got := readFile(t, filepath.Join(dir, StateFile)); !bytes.Equal(got, state) {
			t.Fatalf("after the refusal the state file holds %q, want %q", got, state)
		}
		p, _ := NewPolicy([]string{cfg.VKey}, 0)
		if _, err := p.Check(AddCosignatures(fmsg, goodLine)); !errors.Is(err, ErrQuorum) || !strings.Contains(err.Error(), "does not verify") {
			t.Fatalf("the honest cosignature on the rewritten checkpoint: %v, want ErrQuorum naming a cosignature that does not verify", err)
		}
	}
	// Smaller than what the witness cosigned: 409 asking from 5, then
	// the client sees the rollback.
	_, smsg := honest.checkpoint(t, 4)
	if _, _, err := cfg.Cosign(context.Background(), srv.Client(), smsg, 0, honest.proof(4)); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("a checkpoint smaller than the witness's: %v, want refused (rolled back)", err)
	}
}

// TestWitnessAnswers: the status codes of tlog-witness for each kind of
// bad request, the 409's body and content type.
func TestWitnessAnswers(t *testing.T) {
	skey, vkey := newLogKey(t, "log.example")
	otherKey, _ := newLogKey(t, "log.example")
	_, srv := startWitness(t, t.TempDir(), vkey)
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", 6)
	_, msg := l.checkpoint(t, 6)
	post := func(body string) (int, string, string) {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+"/add-checkpoint", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, body := post("old 0\n\n" + string(msg)); code != 200 || !strings.HasPrefix(body, "\u2014 ") {
		t.Fatalf("first checkpoint: %d %q", code, body)
	}
	code, ctype, body := post("old 3\n\n" + string(msg))
	if code != http.StatusConflict || ctype != "text/x.tlog.size" || body != "6\n" {
		t.Errorf("wrong old size: %d %s %q, want 409 text/x.tlog.size \"6\\n\"", code, ctype, body)
	}
	other := newTestLog(t, otherKey, vkey)
	other.grow(t, "a", 6)
	_, otherMsg := other.checkpoint(t, 6)
	elsewhere := newTestLog(t, skey, vkey)
	elsewhere.origin = "log.example/ledger"
	elsewhere.grow(t, "a", 1)
	_, elsewhereMsg := elsewhere.checkpoint(t, 1)
	tampered := bytes.Replace(msg, []byte("\n6\n"), []byte("\n7\n"), 1)
	empty, err := tree.Sign(tree.Checkpoint{Origin: "log.example/00000001", Root: sha256.Sum256(nil)}, l.signer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body string
		code int
	}{
		{"signed by another key of the same name", "old 6\n\n" + string(otherMsg), http.StatusForbidden},
		{"a changed size under the log's signature", "old 6\n\n" + string(tampered), http.StatusForbidden},
		{"an origin no log key vouches for", "old 0\n\n" + string(elsewhereMsg), http.StatusNotFound},
		{"old above the size", "old 9\n\n" + string(msg), http.StatusBadRequest},
		{"no old line", string(msg), http.StatusBadRequest},
		{"old with a leading zero", "old 06\n\n" + string(msg), http.StatusBadRequest},
		{"a proof line not base64", "old 6\nnot-a-hash\n\n" + string(msg), http.StatusBadRequest},
		{"no blank line", "old 6\n", http.StatusBadRequest},
		{"a proof with old size 6 = size", "old 6\n" + b64(tree.Hash{}) + "\n\n" + string(msg), http.StatusUnprocessableEntity},
		{"a proof with old size 0, of size 0 (an origin new to the witness)", "old 0\n" + b64(tree.Hash{}) + "\n\n" + string(empty), http.StatusUnprocessableEntity},
	} {
		if code, _, body := post(tc.body); code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.code)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/add-checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET add-checkpoint: %d, want 405", resp.StatusCode)
	}
}

// TestWitnessKeepsStateAcrossRestart: a witness closed and opened again
// on its directory has its key and what it cosigned, and still refuses a
// rewritten history; a second witness on a directory in use is refused.
func TestWitnessKeepsStateAcrossRestart(t *testing.T) {
	skey, vkey := newLogKey(t, "log.example")
	dir := t.TempDir()
	w, err := OpenWitness(dir, WitnessOptions{Logs: []string{vkey}, Name: "w.example/1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWitness(dir, WitnessOptions{Logs: []string{vkey}}); err == nil {
		t.Fatal("a second witness opened a directory in use")
	}
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", 9)
	c, msg := l.checkpoint(t, 9)
	if _, err := w.AddCheckpoint(append([]byte("old 0\n\n"), msg...)); err != nil {
		t.Fatal(err)
	}
	key := w.VerifierKey()
	w.Close()
	w, err = OpenWitness(dir, WitnessOptions{Logs: []string{vkey}, Name: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.VerifierKey() != key {
		t.Errorf("reopened witness's key %s, want %s", w.VerifierKey(), key)
	}
	if got, _ := w.Cosigned(l.origin); got != c {
		t.Errorf("reopened witness holds %+v, want %+v", got, c)
	}
	forged := newTestLog(t, skey, vkey)
	forged.grow(t, "b", 12)
	_, fmsg := forged.checkpoint(t, 12)
	p, _ := forged.proof(12)(9)
	req := request(9, p, fmsg)
	var re *RequestError
	if _, err := w.AddCheckpoint(req); !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a rewritten history after the restart: %v, want 422", err)
	}
}

// TestWitnessRacingAddCheckpoint: 16 goroutines ask one witness, at once,
// to cosign checkpoints of one origin from two histories that differ from
// the first leaf (8 sizes of each). Whatever the order, every checkpoint
// cosigned is of one history, the witness holds the largest of them, and
// its state file says the same.
func TestWitnessRacingAddCheckpoint(t *testing.T) {
	f := serveWitness(t)
	skey, vkey, dir, w, srv, cfg := f.skey, f.vkey, f.dir, f.w, f.srv, f.cfg
	logs := [2]*testLog{newTestLog(t, skey, vkey), newTestLog(t, skey, vkey)}
	logs[0].grow(t, "a", 40)
	logs[1].grow(t, "b", 40)
	type cosigned struct {
		history int
		c       tree.Checkpoint
	}
	var mu sync.Mutex
	var got []cosigned
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 16 {
		h, n := g%2, int64(3+g*2)
		c, msg := logs[h].checkpoint(t, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, _, err := cfg.Cosign(context.Background(), srv.Client(), msg, 0, logs[h].proof(n)); err == nil {
				mu.Lock()
				got = append(got, cosigned{h, c})
				mu.Unlock()
			} else if !errors.Is(err, ErrRefused) {
				t.Errorf("history %d size %d: %v", h, n, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(got) == 0 {
		t.Fatal("nothing cosigned")
	}
	var largest tree.Checkpoint
	for _, g := range got {
		if g.history != got[0].history {
			t.Fatalf("the witness cosigned checkpoints of both histories: %+v", got)
		}
		if g.c.Size > largest.Size {
			largest = g.c
		}
	}
	if held, _ := w.Cosigned(largest.Origin); held != largest {
		t.Errorf("the witness holds %+v, the largest it cosigned is %+v", held, largest)
	}
	want := fmt.Sprintf("%s %d %s\n", largest.Origin, largest.Size, b64(largest.Root))
	if file := string(readFile(t, filepath.Join(dir, StateFile))); file != want {
		t.Errorf("the state file holds %q, want %q", file, want)
	}
}

// TestWitnessStopsWhenItsStateCannotBeWritten: a state file that cannot
// be replaced (here a directory in its place) fails the request that would
// move it on, and the witness cosigns nothing after it, not even a
// checkpoint its memory would accept, until it is opened again.
func TestWitnessStopsWhenItsStateCannotBeWritten(t *testing.T) {
	skey, vkey := newLogKey(t, "log.example")
	dir := t.TempDir()
	w, err := OpenWitness(dir, WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", 4)
	_, msg := l.checkpoint(t, 4)
	if _, err := w.AddCheckpoint(append([]byte("old 0\n\n"), msg...)); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, StateFile)
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	l.grow(t, "a", 2)
	_, msg6 := l.checkpoint(t, 6)
	p, _ := l.proof(6)(4)
	req := request(4, p, msg6)
	var re *RequestError
	if _, err := w.AddCheckpoint(req); err == nil || errors.As(err, &re) {
		t.Fatalf("an extension whose state cannot be written: %v, want an error of the witness (not a refusal)", err)
	}
	if c, _ := w.Cosigned(l.origin); c.Size != 4 {
		t.Fatalf("the witness holds size %d after the failed write, want 4", c.Size)
	}
	_, again := l.checkpoint(t, 4)
	if _, err := w.AddCheckpoint(append([]byte("old 4\n\n"), again...)); err == nil || !strings.Contains(err.Error(), "until it is restarted") {
		t.Fatalf("a request after the failed write: %v, want refused until a restart", err)
	}
}

// TestWitnessRefusesToStartWithoutItsState: a witness directory whose key
// is there but whose state file is not (deleted, or the key copied to
// another machine without it) is refused at start, naming the file: with
// an empty state the witness would take the next checkpoint it is shown,
// of any history, as the first. A new directory, and one whose key
// --print-key created (WitnessKey), start with an empty state.
func TestWitnessRefusesToStartWithoutItsState(t *testing.T) {
	skey, vkey := newLogKey(t, "log.example")
	dir := t.TempDir()
	w, err := OpenWitness(dir, WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", 5)
	_, msg := l.checkpoint(t, 5)
	if _, err := w.AddCheckpoint(append([]byte("old 0\n\n"), msg...)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	state := filepath.Join(dir, StateFile)
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if w, err := OpenWitness(dir, WitnessOptions{Logs: []string{vkey}}); err == nil {
		// What it would do: cosign a rewritten history as if new.
		forged := newTestLog(t, skey, vkey)
		forged.grow(t, "b", 7)
		_, fmsg := forged.checkpoint(t, 7)
		_, cerr := w.AddCheckpoint(append([]byte("old 0\n\n"), fmsg...))
		w.Close()
		t.Fatalf("a witness opened without its state file (and cosigned a rewritten history: %v)", cerr)
	} else if !strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a witness without its state file: %v, want an error naming %s as missing", err, state)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatal("the refused open created the state file")
	}

	printed := t.TempDir()
	if _, err := WitnessKey(printed, ""); err != nil {
		t.Fatal(err)
	}
	w, err = OpenWitness(printed, WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatalf("a witness whose key --print-key created: %v", err)
	}
	w.Close()
}

// TestWitnessRefusesMalformedExtensions: requests built to slip a
// checkpoint past the consistency check are refused and leave the
// witness's size as it was: a proof with a hash too many or too few, an
// origin of 60,000 bytes, a body over the limit, a second signature line
// by the log's key (its name and key ID) that does not verify. A
// checkpoint that also carries signatures of unknown keys and another
// witness's cosignature is cosigned. A client holding a request open,
// its body half sent, does not keep another from being cosigned (the
// body is read before the witness's lock is taken).
func TestWitnessRefusesMalformedExtensions(t *testing.T) {
	f := serveWitness(t)
	l := newTestLog(t, f.skey, f.vkey)
	l.grow(t, "a", 5)
	_, msg5 := l.checkpoint(t, 5)
	if _, err := f.w.AddCheckpoint(request(0, nil, msg5)); err != nil {
		t.Fatal(err)
	}
	l.grow(t, "a", 8)
	c13, msg13 := l.checkpoint(t, 13)
	p, err := l.proof(13)(5)
	if err != nil {
		t.Fatal(err)
	}
	long := newTestLog(t, f.skey, f.vkey)
	long.origin = long.signer.Name() + "/" + strings.Repeat("y", 60000)
	long.grow(t, "a", 1)
	_, longMsg := long.checkpoint(t, 1)
	// A second line by the log's key: the first line's signature with
	// its last byte changed.
	sigLines := msg13[bytes.LastIndex(msg13, []byte("\n\n"))+2:]
	s, err := parseSigLine(strings.TrimSuffix(string(sigLines), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	raw := append(binary.BigEndian.AppendUint32(nil, s.hash), s.sig...)
	raw[len(raw)-1] ^= 1
	twice := append(bytes.Clone(msg13), "\u2014 "+s.name+" "+base64.StdEncoding.EncodeToString(raw)+"\n"...)
	for _, tc := range []struct {
		name string
		body []byte
		code int
	}{
		{"a hash too many", request(5, append(p, p[0]), msg13), http.StatusUnprocessableEntity},
		{"a hash too few", request(5, p[:len(p)-1], msg13), http.StatusUnprocessableEntity},
		{"no proof", request(5, nil, msg13), http.StatusUnprocessableEntity},
		{"an origin of 60,000 bytes", request(0, nil, longMsg), http.StatusNotFound},
		{"a body over 64 KiB", request(5, p, append(bytes.Clone(msg13), bytes.Repeat([]byte("x"), maxRequest)...)), http.StatusBadRequest},
		{"a second line by the log's key that does not verify", request(5, p, twice), http.StatusForbidden},
	} {
		_, err := f.w.AddCheckpoint(tc.body)
		var re *RequestError
		if !errors.As(err, &re) || re.Status != tc.code {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.code)
		}
		if c, _ := f.w.Cosigned(l.origin); c.Size != 5 {
			t.Fatalf("%s: the witness holds size %d, want 5", tc.name, c.Size)
		}
	}

	// A client sends the head of a request and half its body, and holds.
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\nold 5\n")

	otherLog, _ := newLogKey(t, "other.example")
	unknownSigner, err := note.NewSigner(otherLog)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateKey("witness.example/other")
	if err != nil {
		t.Fatal(err)
	}
	extra, err := note.Sign(&note.Note{Text: string(msg13[:bytes.LastIndex(msg13, []byte("\n\n"))+1])}, l.signer, unknownSigner, other)
	if err != nil {
		t.Fatal(err)
	}
	line, _, err := f.cfg.Cosign(context.Background(), f.srv.Client(), extra, 5, l.proof(13))
	if err != nil {
		t.Fatalf("a checkpoint with other signatures too, while a client holds a request: %v", err)
	}
	pol, _ := NewPolicy([]string{f.cfg.VKey}, 1)
	if _, err := pol.Check(AddCosignatures(msg13, line)); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.w.Cosigned(l.origin); c != c13 {
		t.Fatalf("the witness holds %+v, want %+v", c, c13)
	}
}
