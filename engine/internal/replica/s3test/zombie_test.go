//go:build unix

package s3test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
)

// The zombie acceptance run: writers are child processes (this test
// binary run again, dispatching on zombieChildEnv in TestMain, before
// any gateway starts) that append in Replicated mode from several
// goroutines and report each acknowledged append on stdout. Each round
// the parent stops the writer with SIGSTOP, copies its directory (a
// crash image of a live writer) or restores the bucket, starts a new writer on the copy with
// engine.Takeover, waits for it to acknowledge appends, and sends SIGCONT
// to the old one: its pending and later appends must fail with ErrFenced,
// which it reports before it exits. The new writer is the next round's
// old one. At the end a restore of the bucket must hold every event any
// writer acknowledged, where it was acknowledged, each once.

// zombieChildEnv, set, makes the test binary a zombie-test writer: its
// value is the directory, then the mode ("create" or "takeover"), the
// replica URL and the writer's name, tab-separated.
const zombieChildEnv = "ANNAL_S3TEST_ZOMBIE_CHILD"

const (
	zombieLedger  = "cash"
	zombieWorkers = 4
)

func init() { childMains[zombieChildEnv] = zombieChild }

// zombieEvent is an appended event's data: the writer, its goroutine and
// the append's number there.
type zombieEvent struct {
	W string `json:"w"`
	G int    `json:"g"`
	N int    `json:"n"`
}

// zombieChild is a writer process: it opens (or creates, or takes over)
// the directory, prints "ready", then appends from zombieWorkers
// goroutines, printing "ack SEQ ID NAME/G/N" per acknowledged append and
// "fenced G ERR" or "failed G ERR" when goroutine G stops on an error;
// at EOF on stdin the goroutines stop. Once all stopped it closes the DB
// and prints "exit". It returns the exit code.
func zombieChild(arg string) int {
	parts := strings.Split(arg, "\t")
	if len(parts) != 4 {
		fmt.Fprintf(os.Stderr, "%s: want DIR\\tMODE\\tURL\\tNAME, got %q\n", zombieChildEnv, arg)
		return 2
	}
	dir, mode, url, name := parts[0], parts[1], parts[2], parts[3]
	ctx := context.Background()
	opts := &engine.Options{Replica: url, Replication: engine.Replicated, SegmentSize: 64 << 10, StoreTimeout: time.Minute}
	var db *engine.DB
	var err error
	switch mode {
	case "create":
		if db, err = engine.Open(dir, opts); err == nil {
			_, err = db.CreateLedger(ctx, engine.LedgerSpec{Name: zombieLedger})
		}
	case "takeover":
		db, _, err = engine.Takeover(ctx, dir, opts)
		if err == nil {
			if u := db.Unavailable(); len(u) > 0 {
				err = fmt.Errorf("unavailable after the takeover: %v", u)
			}
		}
	default:
		err = fmt.Errorf("mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zombie child:", err)
		return 1
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	say("ready")
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	var wg sync.WaitGroup
	for g := range zombieWorkers {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				data, _ := json.Marshal(zombieEvent{W: name, G: g, N: n})
				res, err := db.Append(ctx, zombieLedger, []engine.EventInput{{Entity: "acct", Key: fmt.Sprintf("a%d", g), Event: "credited", Data: data}}, nil)
				switch {
				case err == nil:
					say("ack %d %s %s/%d/%d", res.FirstSeq, res.IDs[0], name, g, n)
				case errors.Is(err, engine.ErrFenced):
					say("fenced %d %s", g, strings.ReplaceAll(err.Error(), "\n", " "))
					return
				default:
					say("failed %d %s", g, strings.ReplaceAll(err.Error(), "\n", " "))
					return
				}
			}
		})
	}
	wg.Wait()
	db.Close()
	say("exit")
	return 0
}

// zombieWriter is a writer process as the parent sees it.
type zombieWriter struct {
	name, dir string
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	mu        sync.Mutex
	acks      []zombieAck
	fenced    []string // the fenced goroutines' errors
	failed    []string
	exited    bool
	changed   chan struct{} // closed and replaced at each line
	done      chan struct{} // closed when stdout ends
	stderr    strings.Builder
}

type zombieAck struct {
	seq uint64
	id  eventid.ID
	tag string
}

func startZombie(t *testing.T, dir, mode, url, name string) *zombieWriter {
	t.Helper()
	w := &zombieWriter{name: name, dir: dir, changed: make(chan struct{}), done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^$")
	w.cmd.Env = append(os.Environ(), zombieChildEnv+"="+strings.Join([]string{dir, mode, url, name}, "\t"))
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGCONT)
		w.cmd.Process.Kill()
		w.cmd.Wait()
	})
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			switch f := strings.SplitN(line, " ", 4); f[0] {
			case "ack":
				seq, _ := strconv.ParseUint(f[1], 10, 64)
				id, err := eventid.Parse(f[2])
				if err != nil || len(f) < 4 {
					w.failed = append(w.failed, "bad ack line: "+line)
				}
				w.acks = append(w.acks, zombieAck{seq: seq, id: id, tag: f[3]})
			case "fenced":
				w.fenced = append(w.fenced, line)
			case "failed":
				w.failed = append(w.failed, line)
			case "exit":
				w.exited = true
			}
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w
}

// await waits until cond holds of the writer (under its lock), failing
// the test after d or when the process's output ends first.
func (w *zombieWriter) await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-w.done:
			w.mu.Lock()
			ok = cond()
			w.mu.Unlock()
			if !ok {
				t.Fatalf("writer %s ended before %s: failed %v; stderr: %s", w.name, what, w.failed, w.stderr.String())
			}
			return
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("writer %s: no %s within %s (%d acks, fenced %v, failed %v)", w.name, what, d, len(w.acks), w.fenced, w.failed)
		}
	}
}

// TestVersityGWZombieRounds runs the zombie acceptance rounds (see the
// comment at the top of this file) against versitygw; every fifth new
// writer is on a directory restored from the bucket (engine.Restore)
// instead of a copy.
func TestVersityGWZombieRounds(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 4
	}
	credentialsInEnvironment(t, secret)
	url := fmt.Sprintf("s3://%s/zombie%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	root := t.TempDir()
	start := time.Now()
	const acksPerRound = 24 // acknowledged by each new writer before the old one resumes

	cur := startZombie(t, filepath.Join(root, "w0"), "create", url, "w0")
	cur.await(t, time.Minute, "ready and acks", func() bool { return len(cur.acks) >= acksPerRound })
	var all []*zombieWriter
	all = append(all, cur)
	fencedTotal, restores := 0, 0
	for r := 1; r <= rounds; r++ {
		old := cur
		if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The stopped writer's directory as it is: a crash image.
		time.Sleep(20 * time.Millisecond) // let the stop land
		dir := filepath.Join(root, fmt.Sprintf("w%d", r))
		if r%5 == 0 {
			// A directory restored from the bucket, with the key.
			zombieRestore(t, url, old.dir, dir)
			restores++
		} else if err := copyTree(old.dir, dir); err != nil {
			t.Fatalf("round %d: copy the stopped writer's directory: %v", r, err)
		}
		name := fmt.Sprintf("w%d", r)
		cur = startZombie(t, dir, "takeover", url, name)
		all = append(all, cur)
		cur.await(t, time.Minute, "acks after the takeover", func() bool { return len(cur.acks) >= acksPerRound })
		if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		old.await(t, time.Minute, "fenced appends", func() bool { return old.exited })
		old.stdin.Close()
		if err := old.cmd.Wait(); err != nil {
			t.Fatalf("round %d: writer %s: %v; stderr: %s", r, old.name, err, old.stderr.String())
		}
		old.mu.Lock()
		if len(old.failed) > 0 || len(old.fenced) != zombieWorkers {
			t.Fatalf("round %d: writer %s resumed: %d goroutines fenced %v, failed %v; want all %d fenced",
				r, old.name, len(old.fenced), old.fenced, old.failed, zombieWorkers)
		}
		fencedTotal += len(old.fenced)
		old.mu.Unlock()
	}
	// The last writer stops at EOF.
	cur.stdin.Close()
	cur.await(t, time.Minute, "exit", func() bool { return cur.exited })
	if err := cur.cmd.Wait(); err != nil {
		t.Fatalf("the last writer: %v; stderr: %s", err, cur.stderr.String())
	}
	cur.mu.Lock()
	if len(cur.failed) > 0 || len(cur.fenced) > 0 {
		t.Fatalf("the last writer: fenced %v, failed %v", cur.fenced, cur.failed)
	}
	cur.mu.Unlock()

	// Restore the bucket and check every acknowledged event.
	ctx := context.Background()
	restored := filepath.Join(root, "restored")
	key := filepath.Join(cur.dir, "signing.key")
	res, err := engine.Restore(ctx, restored, engine.RestoreOptions{Replica: url, Options: &engine.Options{SigningKeyFile: key}})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("restored %+v", res)
	}
	db, err := engine.Open(restored, &engine.Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bySeq := map[uint64]eventid.ID{}
	byTag := map[string]uint64{}
	for ev, err := range db.Scan(ctx, zombieLedger, engine.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		bySeq[ev.Seq] = ev.ID
		if ev.Seq == 1 {
			continue
		}
		var e zombieEvent
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("#%d: %v", ev.Seq, err)
		}
		tag := fmt.Sprintf("%s/%d/%d", e.W, e.G, e.N)
		if was, ok := byTag[tag]; ok {
			t.Fatalf("the event %s is in the restored ledger twice: #%d and #%d", tag, was, ev.Seq)
		}
		byTag[tag] = ev.Seq
	}
	acked := 0
	for _, w := range all {
		for _, a := range w.acks {
			acked++
			if got, ok := bySeq[a.seq]; !ok || got != a.id {
				t.Fatalf("writer %s acknowledged #%d %s (%s); the restored ledger holds %s there", w.name, a.seq, a.id, a.tag, got)
			}
			if byTag[a.tag] != a.seq {
				t.Fatalf("writer %s acknowledged %s at #%d; the restored ledger holds it at #%d", w.name, a.tag, a.seq, byTag[a.tag])
			}
		}
	}
	t.Logf("%d rounds in %s (%d new writers on a restored directory, the others on a copy): %d writers, %d events acknowledged, all in the restored ledger of %d events, each once; %d appends of resumed writers fenced",
		rounds, time.Since(start).Round(time.Millisecond), restores, len(all), acked, res[0].Events, fencedTotal)
}

// zombieRestore restores the bucket into dir with engine.Restore, signed
// by the key of the directory from (a copy of it, which becomes dir's
// own signing.key).
func zombieRestore(t *testing.T, url, from, dir string) {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(from, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Restore(context.Background(), dir, engine.RestoreOptions{Replica: url, Options: &engine.Options{SigningKeyFile: keyFile}}); err != nil {
		t.Fatalf("restore into %s: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "signing.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the directory from to the new directory to, with the
// files' permissions (a signing key stays owner-only).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, info.Mode().Perm())
	})
}
