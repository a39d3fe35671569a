package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// tlogWitnessServer is a real witness (cosign.Witness, its own directory)
// served over HTTP, which answers 503 while down is set.
type tlogWitnessServer struct {
	w    *cosign.Witness
	srv  *httptest.Server
	down atomic.Bool
}

// startTlogWitness serves a witness that trusts the log key vkey.
func startTlogWitness(t *testing.T, vkey string) *tlogWitnessServer {
	t.Helper()
	w, err := cosign.OpenWitness(t.TempDir(), cosign.WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	s := &tlogWitnessServer{w: w}
	s.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			http.Error(rw, "down for the test", http.StatusServiceUnavailable)
			return
		}
		w.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() {
		s.srv.Close()
		w.Close()
	})
	return s
}

func (s *tlogWitnessServer) config() cosign.WitnessConfig {
	return cosign.WitnessConfig{URL: s.srv.URL, VKey: s.w.VerifierKey()}
}

// newKeyFile creates a signing key file in a directory of its own and
// returns its path and verifier key.
func newKeyFile(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "annal.key")
	k, _, err := tree.LoadOrCreateKey(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	return path, k.Verifier
}

// TestCheckpointCosignedByTlogWitnesses: with Options.TlogWitnesses, each
// checkpoint (the first, and the extensions after it) carries the
// witness's cosignature, in the checkpoint file too; with the witness
// down it is neither stored nor returned, the error naming the witness,
// and the next one, once the witness is back, is cosigned.
func TestCheckpointCosignedByTlogWitnesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	ws := startTlogWitness(t, vkey)
	policy, err := cosign.NewPolicy([]string{ws.w.VerifierKey()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnesses: []cosign.WitnessConfig{ws.config()}}
	db := mkOpen(t, dir, opts)
	mkLedger(t, db, "pay", 5)
	for round := range 3 {
		c, err := db.Checkpoint(ctx, "pay")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := policy.Check(c.Note); err != nil {
			t.Fatalf("round %d: checkpoint of size %d: %v", round, c.Size, err)
		}
		if held, _ := ws.w.Cosigned(c.Origin); held.Size != c.Size || held.Root != c.Root {
			t.Fatalf("round %d: the witness holds %+v, the checkpoint is size %d", round, held, c.Size)
		}
		appendEvents(t, db, "pay", 3, appendSpec{From: 10 * (round + 1)})
	}
	before, err := db.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	ws.down.Store(true)
	if _, err := db.Checkpoint(ctx, "pay"); !errors.Is(err, cosign.ErrQuorum) || !strings.Contains(err.Error(), ws.srv.URL) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a checkpoint with the witness down: %v, want cosign.ErrQuorum naming %s and its 503", err, ws.srv.URL)
	}
	if now, _ := db.LatestCheckpoint("pay"); now.Size != before.Size {
		t.Fatalf("a checkpoint not cosigned was stored: latest size %d, was %d", now.Size, before.Size)
	}
	ws.down.Store(false)
	appendEvents(t, db, "pay", 2, appendSpec{From: 90})
	c, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Check(c.Note); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{SigningKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	stored, err := ro.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Check(stored.Note); err != nil || stored.Size != c.Size {
		t.Fatalf("the checkpoint file after Close: size %d (want %d): %v", stored.Size, c.Size, err)
	}

	// An import's checkpoint is cosigned too: the ledger exported and
	// imported into another directory with the same key is the same
	// origin and history, which the witness cosigns again.
	var export bytes.Buffer
	if _, err := ro.Export(ctx, "pay", &export, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	other := mkOpen(t, t.TempDir(), opts)
	defer other.Close()
	if _, err := other.Import(ctx, &export, ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	imported, err := other.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Check(imported.Note); err != nil || imported.Root != c.Root {
		t.Fatalf("the imported ledger's checkpoint (root %s, want %s): %v", imported.Root, c.Root, err)
	}
}

// TestTlogWitnessRefusesRewrittenLedger is the attack the tlog witness is
// for: whoever holds the signing key copies the data directory and its
// key with its state, and writes another history of the same ledger (same
// origin) past the size the witness cosigned. The key signs it (it is an
// extension of what that copy of the key signed), the witness refuses it
// (422), no checkpoint of it is stored, and the witness's state is
// unchanged; checkpoints signed without asking the witness carry no
// cosignature, and the policy refuses them.
func TestTlogWitnessRefusesRewrittenLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	ws := startTlogWitness(t, vkey)
	genuine, forged := t.TempDir(), t.TempDir()
	forgedKey := filepath.Join(t.TempDir(), "annal.key")

	db := mkOpen(t, genuine, &Options{SigningKeyFile: keyFile, CheckpointInterval: -1})
	mkLedger(t, db, "pay", 0)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	copyTree(t, genuine, forged)
	for _, suffix := range []string{"", ".state"} {
		b, err := os.ReadFile(keyFile + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(forgedKey+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	witnesses := []cosign.WitnessConfig{ws.config()}
	db = mkOpen(t, genuine, &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnesses: witnesses})
	appendEvents(t, db, "pay", 5, appendSpec{From: 0})
	good, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	held, _ := ws.w.Cosigned(good.Origin)

	db = mkOpen(t, forged, &Options{SigningKeyFile: forgedKey, CheckpointInterval: -1, TlogWitnesses: witnesses})
	appendEvents(t, db, "pay", 7, appendSpec{From: 100})
	_, err = db.Checkpoint(ctx, "pay")
	if !errors.Is(err, cosign.ErrQuorum) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("a checkpoint of the rewritten ledger: %v, want cosign.ErrQuorum with the witness's 422", err)
	}
	if now, _ := ws.w.Cosigned(good.Origin); now != held {
		t.Fatalf("the witness's state moved from %+v to %+v", held, now)
	}
	latest, err := db.LatestCheckpoint("pay")
	if err != nil || latest.Size != 1 {
		t.Fatalf("the rewritten ledger's latest checkpoint: size %d, %v; want the genesis checkpoint (size 1): nothing stored", latest.Size, err)
	}
	db.Close() // its checkpoint at Close is refused as well: an error

	// The forger signs without the witness: a checkpoint without its
	// cosignature, which a verifier's policy refuses.
	db = mkOpen(t, forged, &Options{SigningKeyFile: forgedKey, CheckpointInterval: -1})
	defer db.Close()
	bad, err := db.Checkpoint(ctx, "pay")
	if err != nil || bad.Size != 8 || bad.Origin != good.Origin {
		t.Fatalf("the forger's own checkpoint: %+v, %v", bad, err)
	}
	policy, _ := cosign.NewPolicy([]string{ws.w.VerifierKey()}, 1)
	if _, err := policy.Check(good.Note); err != nil {
		t.Fatalf("the genuine checkpoint: %v", err)
	}
	if _, err := policy.Check(bad.Note); !errors.Is(err, cosign.ErrQuorum) {
		t.Fatalf("the rewritten ledger's checkpoint: %v, want cosign.ErrQuorum", err)
	}
}

// TestTlogWitnessOptionsChecked: bad TlogWitnesses or quorum are
// ErrInvalid at Open, naming the option.
func TestTlogWitnessOptionsChecked(t *testing.T) {
	t.Parallel()
	k, err := cosign.GenerateKey("w.example")
	if err != nil {
		t.Fatal(err)
	}
	good := cosign.WitnessConfig{URL: "http://127.0.0.1:1", VKey: k.VerifierKey()}
	// k's public key under another name: one witness.
	f := strings.SplitN(k.VerifierKey(), "+", 3)
	pub, _ := base64.StdEncoding.DecodeString(f[2])
	id := sha256.Sum256(append([]byte("w2.example\n"), pub...))
	alias := cosign.WitnessConfig{URL: "http://127.0.0.1:2", VKey: fmt.Sprintf("w2.example+%08x+%s", binary.BigEndian.Uint32(id[:]), f[2])}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no scheme", Options{TlogWitnesses: []cosign.WitnessConfig{{URL: "127.0.0.1:1", VKey: good.VKey}}}, "TlogWitnesses[0]"},
		{"a log key", Options{TlogWitnesses: []cosign.WitnessConfig{{URL: good.URL, VKey: "x+00000000+AQ=="}}}, "TlogWitnesses[0]"},
		{"twice", Options{TlogWitnesses: []cosign.WitnessConfig{good, good}}, "given twice"},
		{"one public key under two names", Options{TlogWitnesses: []cosign.WitnessConfig{good, alias}, TlogWitnessQuorum: 2}, "one public key under two names"},
		{"quorum above", Options{TlogWitnesses: []cosign.WitnessConfig{good}, TlogWitnessQuorum: 2}, "TlogWitnessQuorum 2"},
		{"quorum without witnesses", Options{TlogWitnessQuorum: 1}, "TlogWitnessQuorum 1"},
	} {
		_, err := Open(t.TempDir(), &tc.opts)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.want)
		}
	}
}

// TestCreateLedgerNeedsTlogWitnessQuorum: a ledger whose first checkpoint
// the witnesses do not cosign is not created (cosign.ErrQuorum), and the
// same CreateLedger succeeds once the witness answers, its checkpoint
// cosigned, the ledger there after a reopen.
func TestCreateLedgerNeedsTlogWitnessQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	ws := startTlogWitness(t, vkey)
	dir := t.TempDir()
	opts := &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnesses: []cosign.WitnessConfig{ws.config()}}
	db := mkOpen(t, dir, opts)
	ws.down.Store(true)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "pay"}); !errors.Is(err, cosign.ErrQuorum) {
		t.Fatalf("CreateLedger with the witness down: %v, want cosign.ErrQuorum", err)
	}
	ws.down.Store(false)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "pay"}); err != nil {
		t.Fatal(err)
	}
	c, err := db.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	policy, _ := cosign.NewPolicy([]string{ws.w.VerifierKey()}, 0)
	if _, err := policy.Check(c.Note); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mkOpen(t, dir, opts)
	defer db.Close()
	if ls := db.Ledgers(); len(ls) != 1 || ls[0].Name != "pay" || len(db.Unavailable()) != 0 {
		t.Fatalf("after a reopen: ledgers %v, unavailable %v", ls, db.Unavailable())
	}
}

// TestCheckpointRefusesLyingTlogWitness: a witness (a real one behind a
// proxy that changes its answers) that answers 200 with its cosignature
// of the previous checkpoint, or with lines that are not cosignatures,
// does not count: the checkpoint fails with cosign.ErrQuorum naming it
// and is not stored. Its valid cosignature among garbage lines counts,
// and only that line is added to the checkpoint.
func TestCheckpointRefusesLyingTlogWitness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	ws := startTlogWitness(t, vkey)
	var mode atomic.Value // "", "replay", "garbage", "garbage around"
	mode.Store("")
	var last atomic.Value // the witness's last answer
	last.Store([]byte(nil))
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if mode.Load() == "replay" {
			rw.Write(last.Load().([]byte))
			return
		}
		rec := httptest.NewRecorder()
		ws.srv.Config.Handler.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		switch m := mode.Load(); {
		case rec.Code != http.StatusOK:
		case m == "garbage":
			body = []byte("\u2014 " + strings.SplitN(ws.w.VerifierKey(), "+", 2)[0] + " AAAA\nnot a line\n")
		case m == "garbage around":
			body = append(append([]byte("hello\n\u2014 x AAAAAAA=\n"), body...), "\u2014 trailing"...)
		}
		for k, v := range rec.Header() {
			rw.Header()[k] = v
		}
		rw.WriteHeader(rec.Code)
		rw.Write(body)
		if rec.Code == http.StatusOK {
			last.Store(rec.Body.Bytes())
		}
	}))
	defer proxy.Close()
	wc := cosign.WitnessConfig{URL: proxy.URL, VKey: ws.w.VerifierKey()}
	policy, err := cosign.NewPolicy([]string{wc.VKey}, 1)
	if err != nil {
		t.Fatal(err)
	}
	db := mkOpen(t, t.TempDir(), &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnesses: []cosign.WitnessConfig{wc}})
	defer db.Close()
	mkLedger(t, db, "pay", 5)
	first, err := db.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"replay", "garbage"} {
		mode.Store(m)
		appendEvents(t, db, "pay", 2, appendSpec{From: len(m) * 10})
		_, err := db.Checkpoint(ctx, "pay")
		if !errors.Is(err, cosign.ErrQuorum) || !strings.Contains(err.Error(), proxy.URL) || !strings.Contains(err.Error(), "without a cosignature by its key") {
			t.Fatalf("%s: %v, want cosign.ErrQuorum naming %s answering without its cosignature", m, err, proxy.URL)
		}
		if now, _ := db.LatestCheckpoint("pay"); now.Size != first.Size {
			t.Fatalf("%s: a checkpoint of size %d was stored, the last cosigned is %d", m, now.Size, first.Size)
		}
	}
	mode.Store("garbage around")
	c, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatalf("a cosignature among garbage lines: %v", err)
	}
	if _, err := policy.Check(c.Note); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(c.Note, []byte("hello")) || bytes.Contains(c.Note, []byte("trailing")) || bytes.Count(c.Note, []byte("\u2014 ")) != 2 {
		t.Fatalf("the checkpoint holds more than the log's signature and the cosignature:\n%s", c.Note)
	}
}

// TestCheckpointPublishedOnQuorumWithoutSlowWitness: with a quorum of 2
// of 3 tlog witnesses, a checkpoint is stored as soon as the two fast ones
// cosigned it, while the third (an HTTP server that holds its requests)
// has not answered: the writer does not wait for it (up to the request
// timeout). Its answers, once it is released, move its size on, so that
// the next checkpoint is asked of it from there and it cosigns that too,
// without a 409 reported.
func TestCheckpointPublishedOnQuorumWithoutSlowWitness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	fast1, fast2 := startTlogWitness(t, vkey), startTlogWitness(t, vkey)
	slowW, err := cosign.OpenWitness(t.TempDir(), cosign.WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	defer slowW.Close()
	release := make(chan struct{})
	var held, abandoned, conflicts atomic.Int64
	slowSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		held.Add(1)
		// The body read first: the server notices the client's going
		// away (r.Context) only then.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		select {
		case <-release:
			sw := &statusWriter{ResponseWriter: rw}
			slowW.ServeHTTP(sw, r)
			if sw.status == http.StatusConflict {
				conflicts.Add(1)
			}
		case <-r.Context().Done():
			abandoned.Add(1) // the writer gave up on it
		}
	}))
	defer slowSrv.Close()
	slow := &tlogWitnessServer{w: slowW, srv: slowSrv}
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	opts := &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnessQuorum: 2,
		TlogWitnesses: []cosign.WitnessConfig{slow.config(), fast1.config(), fast2.config()}}
	db := mkOpen(t, t.TempDir(), opts)
	mkLedger(t, db, "pay", 5)
	appendEvents(t, db, "pay", 3, appendSpec{From: 10})
	c1, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if n := abandoned.Load(); n != 0 {
		t.Fatalf("the slow witness's requests were abandoned %d times before the checkpoint returned: the writer waited for it", n)
	}
	if held.Load() == 0 {
		t.Fatal("the slow witness was not asked")
	}
	two, err := cosign.NewPolicy([]string{fast1.w.VerifierKey(), fast2.w.VerifierKey()}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Check(c1.Note); err != nil {
		t.Fatalf("checkpoint of size %d: %v", c1.Size, err)
	}
	if bytes.Contains(c1.Note, []byte("— "+strings.SplitN(slow.w.VerifierKey(), "+", 2)[0]+" ")) {
		t.Fatalf("the checkpoint carries a cosignature of the slow witness, which has not answered:\n%s", c1.Note)
	}
	releaseOnce.Do(func() { close(release) })
	// The late answers: the slow witness cosigns what it was sent.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, _ := slow.w.Cosigned(c1.Origin); got.Size == c1.Size {
			break
		}
		if time.Now().After(deadline) {
			got, _ := slow.w.Cosigned(c1.Origin)
			t.Fatalf("the slow witness, released, holds size %d, want %d (the checkpoint's)", got.Size, c1.Size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	appendEvents(t, db, "pay", 2, appendSpec{From: 20})
	c2, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	// The slow witness was asked for c2 from c1's size, which its late
	// answer left: it cosigns c2 (after the quorum, most likely) without
	// a 409.
	for {
		if got, _ := slow.w.Cosigned(c2.Origin); got.Size == c2.Size && db.TlogWitnessStatus()[0].Size == c2.Size {
			break
		}
		if time.Now().After(deadline) {
			got, _ := slow.w.Cosigned(c2.Origin)
			t.Fatalf("the slow witness holds size %d, want %d (the second checkpoint's)", got.Size, c2.Size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := conflicts.Load(); n != 0 {
		t.Fatalf("the slow witness answered 409 %d times: it was not asked from the size its late answer left", n)
	}
	st := db.TlogWitnessStatus()
	if len(st) != 3 || st[0].URL != slow.srv.URL || st[0].Size != c2.Size {
		t.Fatalf("TlogWitnessStatus: %+v", st)
	}
	for _, s := range st {
		if s.Conflict != nil || s.LastError != nil {
			t.Fatalf("witness %s: conflict %v, last error %v; want neither", s.URL, s.Conflict, s.LastError)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// statusWriter notes the status an http.Handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// TestTlogWitnessRestoredWholeIsReported: a witness's directory put back
// whole from an old copy (its key, state and log as they were) is not
// detected by the witness: the files agree. The writer that had a newer
// cosignature from it in the same process sees it: the witness answers
// 409 with the older size, and DB.TlogWitnessStatus reports the conflict
// ("behind", both sizes); the checkpoint is cosigned from the older size
// (the same history, so the proof from it verifies).
func TestTlogWitnessRestoredWholeIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	wdir := t.TempDir()
	wopts := cosign.WitnessOptions{Logs: []string{vkey}}
	w, err := cosign.OpenWitness(wdir, wopts)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[cosign.Witness]
	current.Store(w)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		current.Load().ServeHTTP(rw, r)
	}))
	defer srv.Close()
	cfg := cosign.WitnessConfig{URL: srv.URL, VKey: w.VerifierKey()}
	db := mkOpen(t, t.TempDir(), &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnesses: []cosign.WitnessConfig{cfg}})
	mkLedger(t, db, "pay", 3)
	c1, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(t.TempDir(), "witness")
	if err := os.CopyFS(old, os.DirFS(wdir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(old, cosign.KeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "pay", 4, appendSpec{From: 10})
	c2, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	restored, err := cosign.OpenWitness(old, wopts)
	if err != nil {
		t.Fatalf("the witness's directory restored whole: %v (its files agree: it is not detected)", err)
	}
	defer restored.Close()
	current.Store(restored)
	appendEvents(t, db, "pay", 2, appendSpec{From: 20})
	c3, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	st := db.TlogWitnessStatus()
	if len(st) != 1 || st[0].Conflict == nil || st[0].Size != c3.Size {
		t.Fatalf("TlogWitnessStatus: %+v; want a conflict and size %d", st, c3.Size)
	}
	msg := st[0].Conflict.Error()
	for _, want := range []string{srv.URL, "behind", fmt.Sprintf("size %d", c1.Size), fmt.Sprintf("size %d", c2.Size)} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the conflict %q does not say %q", msg, want)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
