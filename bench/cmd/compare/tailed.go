package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/bench/peer"
	"github.com/annal-db/annal/engine"
)

// tailedParams are the append workloads measured with a reader process
// beside the writer (group "tailed", annal only): the writer's rate with
// the reader is compared with the append-batch cell of the same params.
var tailedParams = []struct {
	batch int
	mode  string
}{{100, "sync"}, {10, "none"}}

// tailedRound measures, for each of tailedParams, annal's append rate while
// a second process follows the same ledger (engine.OpenReadOnly and
// Subscribe, as `annal tail` does).
func (r *runner) tailedRound(round int) {
	if !slices.Contains(r.cfg.stores, "annal") {
		return
	}
	for _, p := range tailedParams {
		r.fresh(round, "append-tailed", fmt.Sprintf("batch=%d mode=%s readers=1", p.batch, p.mode), "annal", "events/s",
			job{Kind: "tailed", Store: "annal", Mode: p.mode, Batch: p.batch, Dur: r.cfg.dur})
	}
}

// readerTimeout bounds how long the reader may take, after the writer
// stops, to show the writer's last event.
const readerTimeout = time.Minute

// tailed appends as appendBatches does while a reader process follows the
// ledger, then checks that the reader showed every event appended (the
// genesis event included) within readerTimeout.
func (j *job) tailed(s peer.Store, out *outcome) error {
	if j.Store != "annal" {
		return peer.ErrUnsupported
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	spec, _ := json.Marshal(job{Kind: "follow", Store: j.Store, Dir: j.Dir})
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill() // a no-op once it has exited
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		return fmt.Errorf("reader did not start: %q %s", lines.Text(), stderr.String())
	}
	if err := j.appendBatches(s, out); err != nil {
		return err
	}
	want := out.Events + 1 // the genesis event
	fmt.Fprintf(stdin, "%d\n", want)
	stdin.Close()
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("reader: %v: %s", err, stderr.String())
	}
	var ro outcome
	if err := json.Unmarshal([]byte(last), &ro); err != nil {
		return fmt.Errorf("reader: %q: %v", last, err)
	}
	if ro.Err != "" {
		return fmt.Errorf("reader: %s", ro.Err)
	}
	if ro.Events != want {
		return fmt.Errorf("reader showed %d events of the %d written", ro.Events, want)
	}
	return nil
}

// follow is the reader process of tailed: it opens the directory read-only
// beside the writer, says "ready", and counts the events Subscribe shows
// until it has shown as many as the writer then writes on stdin.
func (j *job) follow(out *outcome) error {
	db, err := engine.OpenReadOnly(j.Dir, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen, want atomic.Int64
	go func() {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		n, perr := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if (err != nil && err != io.EOF) || perr != nil {
			cancel()
			return
		}
		want.Store(n)
		deadline := time.Now().Add(readerTimeout)
		for seen.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	fmt.Println("ready")
	start := time.Now()
	for _, err := range db.Subscribe(ctx, peer.AnnalLedger, engine.SubscribeOptions{}) {
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		if n := seen.Add(1); n == want.Load() {
			break
		}
	}
	out.Events, out.Seconds = seen.Load(), time.Since(start).Seconds()
	return nil
}
