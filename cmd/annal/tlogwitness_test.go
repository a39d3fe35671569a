package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/cosign"
)

// witnessProc is an annal witness process.
type witnessProc struct {
	cmd    *exec.Cmd
	vkey   string
	url    string
	stderr *lockedBuffer
}

// startWitnessProc starts "annal witness --dir dir --listen 127.0.0.1:0
// --log logKey" from the annal binary and reads the two lines it prints:
// its verifier key and its URL.
func startWitnessProc(t *testing.T, dir, logKey string) *witnessProc {
	t.Helper()
	return startWitnessAt(t, dir, logKey, "127.0.0.1:0")
}

// startWitnessAt is startWitnessProc listening on addr.
func startWitnessAt(t *testing.T, dir, logKey, addr string) *witnessProc {
	t.Helper()
	bin, err := exec.LookPath("annal") // the test binary, put in $PATH by TestMain
	if err != nil {
		t.Fatal(err)
	}
	p := &witnessProc{stderr: new(lockedBuffer)}
	p.cmd = exec.Command(bin, "witness", "--dir", dir, "--listen", addr, "--log", logKey)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	r := bufio.NewReader(out)
	for _, field := range []*string{&p.vkey, &p.url} {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("annal witness: %v; stderr: %s", err, p.stderr.String())
		}
		*field = strings.TrimSpace(line)
	}
	return p
}

func (p *witnessProc) config() []cosign.WitnessConfig {
	return []cosign.WitnessConfig{{URL: p.url, VKey: p.vkey}}
}

// createPay creates the ledger "pay" in a new data directory dir signed
// with the key file key, and returns the key's verifier key.
func createPay(t *testing.T, dir, key string) string {
	t.Helper()
	db, err := engine.Open(dir, &engine.Options{SigningKeyFile: key, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(context.Background(), engine.LedgerSpec{Name: "pay"}); err != nil {
		t.Fatal(err)
	}
	logKey := db.VerifierKey()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return logKey
}

// appendN appends n events of a history named by prefix to the ledger.
func appendN(t *testing.T, db *engine.DB, ledger, prefix string, n int) {
	t.Helper()
	for i := range n {
		ev := []engine.EventInput{{Entity: "acct", Key: prefix, Event: fmt.Sprintf("%s-%d", prefix, i), Data: []byte(`{}`)}}
		if _, err := db.Append(context.Background(), ledger, ev, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWitnessCommandRefusesRewrittenLedger: an annal witness process
// cosigns a ledger's checkpoints; killed (SIGKILL) and restarted on its
// directory it has the same key and what it cosigned, and refuses the
// checkpoint of the same ledger rewritten by whoever holds the signing key
// (a copy of the directory and of the key, another history). Then annal
// verify --witness K --quorum 1 passes on the genuine directory and fails
// (exit 3, saying how many cosignatures and which key) on the rewritten
// one, and so does verify-proof on a proof of each.
func TestWitnessCommandRefusesRewrittenLedger(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	genuine, forged, wdir := filepath.Join(tmp, "genuine"), filepath.Join(tmp, "forged"), filepath.Join(tmp, "witness")
	key, forgedKey := filepath.Join(tmp, "keys", "annal.key"), filepath.Join(tmp, "forger", "annal.key")
	logKey := createPay(t, genuine, key)
	// The forger's copy: the directory and the key with its state.
	if err := os.CopyFS(forged, os.DirFS(genuine)); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(forgedKey), 0o700)
	for _, suffix := range []string{"", ".state"} {
		b, err := os.ReadFile(key + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(forgedKey+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	w := startWitnessProc(t, wdir, logKey)
	db, err := engine.Open(genuine, &engine.Options{SigningKeyFile: key, CheckpointInterval: -1, TlogWitnesses: w.config()})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, db, "pay", "genuine", 5)
	good, err := db.Checkpoint(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(wdir, cosign.StateFile))
	if err != nil || !strings.Contains(string(state), fmt.Sprintf("%s %d ", good.Origin, good.Size)) {
		t.Fatalf("the witness's state file: %q, %v; want origin %s size %d", state, err, good.Origin, good.Size)
	}

	w.cmd.Process.Signal(syscall.SIGKILL)
	w.cmd.Wait()
	w2 := startWitnessProc(t, wdir, logKey)
	if w2.vkey != w.vkey {
		t.Fatalf("the restarted witness's key is %s, was %s", w2.vkey, w.vkey)
	}
	db, err = engine.Open(forged, &engine.Options{SigningKeyFile: forgedKey, CheckpointInterval: -1, TlogWitnesses: w2.config()})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, db, "pay", "forged", 8)
	if _, err := db.Checkpoint(ctx, "pay"); !errors.Is(err, cosign.ErrQuorum) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("the rewritten ledger's checkpoint: %v, want refused by the restarted witness (422)", err)
	}
	db.Close() // refused at Close too
	if after, _ := os.ReadFile(filepath.Join(wdir, cosign.StateFile)); !bytes.Equal(after, state) {
		t.Fatalf("the witness's state changed: %q, was %q", after, state)
	}
	// The witness logs the refusal before it answers; the line may still
	// be in the pipe from its standard error.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(w2.stderr.String(), "422 Unprocessable Entity"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the witness logged no refusal: %s", w2.stderr.String())
		}
	}
	// The forger signs alone.
	db, err = engine.Open(forged, &engine.Options{SigningKeyFile: forgedKey, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Checkpoint(ctx, "pay"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	wkeyFile := filepath.Join(tmp, "witness.pub")
	os.WriteFile(wkeyFile, []byte(w.vkey+"\n"), 0o644)
	if got := strings.TrimSpace(mustAnnal(t, "", "witness", "--dir", wdir, "--print-key")); got != w.vkey {
		t.Errorf("witness --print-key: %q, want %q", got, w.vkey)
	}
	out := mustAnnal(t, "", "--dir", genuine, "--signing-key", key, "verify", "--witness", w.vkey, "--quorum", "1", "--format", "table")
	if !strings.Contains(out, "1 valid tlog witness cosignatures, quorum 1: ok") {
		t.Errorf("verify --witness on the genuine ledger does not say what it found:\n%s", out)
	}
	mustAnnal(t, "", "--dir", genuine, "--signing-key", key, "verify", "--witness", "@"+wkeyFile)
	_, errOut := wantExit(t, exitVerification, []string{"0 of the 1 tlog witnesses given cosigned the checkpoint, the quorum is 1", "no cosignature by: " + w.vkey},
		"--dir", forged, "--signing-key", forgedKey, "verify", "--witness", w.vkey, "--quorum", "1")
	if !strings.Contains(errOut, "verification failed: 1 of 1 ledgers") {
		t.Errorf("verify --witness on the rewritten ledger: %s", errOut)
	}

	// verify-proof, on a proof of each directory.
	for _, tc := range []struct {
		dir, key string
		code     int
	}{{genuine, key, 0}, {forged, forgedKey, exitVerification}} {
		proof := filepath.Join(tmp, filepath.Base(tc.dir)+".proof")
		os.WriteFile(proof, []byte(mustAnnal(t, "", "--dir", tc.dir, "--signing-key", tc.key, "prove", "pay#3", "--format", "json")), 0o644)
		pub := mustAnnal(t, "", "--dir", tc.dir, "--signing-key", tc.key, "key", "--format", "table")
		code, out, errOut := annal(t, "", "verify-proof", proof, "--key", strings.TrimSpace(pub), "--witness", w.vkey)
		if code != tc.code {
			t.Errorf("verify-proof --witness of %s: exit %d, want %d\n%s%s", tc.dir, code, tc.code, out, errOut)
		}
		if tc.code == 0 && !strings.Contains(out, "cosigned by 1 of the 1 tlog witnesses given (quorum 1)") {
			t.Errorf("verify-proof --witness does not say what it found:\n%s", out)
		}
		if tc.code != 0 && !strings.Contains(errOut, "0 of the 1") {
			t.Errorf("verify-proof --witness on the rewritten ledger's proof: %s", errOut)
		}
	}
}

// TestWitnessFlagsUsage: the policy's flags and the witness command's
// bad uses are usage errors (exit 2) saying what to give.
func TestWitnessFlagsUsage(t *testing.T) {
	dir := newDir(t)
	k, err := cosign.GenerateKey("w.example")
	if err != nil {
		t.Fatal(err)
	}
	logKey := strings.TrimSpace(mustAnnal(t, "", "--dir", dir, "key", "--format", "table"))
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"--quorum goes with --witness", []string{"--dir", dir, "verify", "--quorum", "1"}},
		{"not a cosignature/v1 key", []string{"--dir", dir, "verify", "--witness", logKey}},
		{"quorum 2 of 1", []string{"--dir", dir, "verify", "--witness", k.VerifierKey(), "--quorum", "2"}},
		{"--dir D is required", []string{"witness", "--listen", "127.0.0.1:0", "--log", logKey}},
		{"is an annal data directory", []string{"--dir", dir, "witness", "--listen", "127.0.0.1:0", "--log", logKey}},
		{"at least one --log", []string{"--dir", filepath.Join(t.TempDir(), "w"), "witness", "--listen", "127.0.0.1:0"}},
		{"--witness checks the cosignatures of --checkpoint", []string{"verify-file", "-", "--witness", k.VerifierKey()}},
	} {
		wantExit(t, exitUsage, []string{tc.want}, tc.args...)
	}
	// A second witness on a directory in use: exit 1, naming it.
	wdir := filepath.Join(t.TempDir(), "w")
	startWitnessProc(t, wdir, logKey)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wantExit(t, exitError, []string{"held by another witness"}, "witness", "--dir", wdir, "--listen", "127.0.0.1:0", "--log", logKey)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a second witness on a directory in use did not exit")
	}
}

// TestWitnessKilledWhileCosigning: a writer issues checkpoints through an
// annal witness process that is killed (SIGKILL) at a different moment of
// each checkpoint (before, during or after its request) and restarted on
// its directory. After each restart the witness's state is a checkpoint of
// the writer's ledger (its size and the ledger's root at that size), and
// the writer's next checkpoint is cosigned: a kill never leaves the
// witness ahead of what it wrote, or on another history.
func TestWitnessKilledWhileCosigning(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	dir, wdir, key := filepath.Join(tmp, "data"), filepath.Join(tmp, "witness"), filepath.Join(tmp, "keys", "annal.key")
	logKey := createPay(t, dir, key)
	w := startWitnessProc(t, wdir, logKey)
	addr := strings.TrimPrefix(w.url, "http://")
	db, err := engine.Open(dir, &engine.Options{SigningKeyFile: key, CheckpointInterval: -1, TlogWitnesses: w.config()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	policy, err := cosign.NewPolicy([]string{w.vkey}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cosigned := 0
	for round := range 10 {
		appendN(t, db, "pay", fmt.Sprintf("r%d", round), 3)
		done := make(chan error, 1)
		go func() {
			_, err := db.Checkpoint(ctx, "pay")
			done <- err
		}()
		time.Sleep(time.Duration(round) * 600 * time.Microsecond)
		w.cmd.Process.Signal(syscall.SIGKILL)
		w.cmd.Wait()
		if err := <-done; err == nil {
			cosigned++
		} else if !errors.Is(err, cosign.ErrQuorum) {
			t.Fatalf("round %d: a checkpoint while the witness was killed: %v", round, err)
		}
		w = startWitnessAt(t, wdir, logKey, addr)
		b, err := os.ReadFile(filepath.Join(wdir, cosign.StateFile))
		switch {
		case err == nil && len(b) == 0 && round == 0:
			// Killed before it cosigned anything: it holds nothing.
		case err != nil:
			t.Fatalf("round %d: %v", round, err)
		default:
			f := strings.Fields(string(b))
			if len(f) != 3 {
				t.Fatalf("round %d: the witness's state %q", round, b)
			}
			size, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			p, err := db.ProveConsistency(ctx, "pay", size, size)
			if err != nil {
				t.Fatalf("round %d: the witness holds size %d: %v", round, size, err)
			}
			if b64(p.OldRoot) != f[2] {
				t.Fatalf("round %d: the witness holds size %d root %s, the ledger's root there is %s", round, size, f[2], b64(p.OldRoot))
			}
		}
		c, err := db.Checkpoint(ctx, "pay")
		if err != nil {
			t.Fatalf("round %d: the checkpoint after the restart: %v", round, err)
		}
		if _, err := policy.Check(c.Note); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	t.Logf("%d of 10 checkpoints cosigned before the kill", cosigned)
}
