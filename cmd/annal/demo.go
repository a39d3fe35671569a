package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

// The demo shows annal's whole job on a local directory: a ledger, a
// realistic workload from concurrent appenders, a writer killed with
// SIGKILL in the middle of its appends, a reopen that verifies and keeps
// every acknowledged event, a time-range scan, an entity replay, and an
// export that verifies as an Evently ledger.

// demoConfig sizes the demo.
type demoConfig struct {
	dir       string
	opts      *engine.Options // of every Open, and the child writer's --cache
	events    int             // events of the main workload
	writers   int             // concurrent appenders
	batch     int             // events per append
	killAfter time.Duration   // how long the child writer runs before SIGKILL
}

func newDemoCmd(g *globals) *cobra.Command {
	cfg := demoConfig{writers: 8, batch: 100}
	short := false
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run annal end to end on a local directory and print what happened",
		Long: `demo creates a ledger in the data directory (--dir, default ./annal-data),
appends a workload of order events from concurrent appenders, starts a
child process that appends in Sync mode and prints each acknowledged ID,
kills it with SIGKILL, reopens the directory (verifying the ledger and
cutting the torn write), checks that every acknowledged event is there,
scans a time range, replays one order's stream, exports the ledger as
Evently NDJSON and verifies the export. The directory is left for you to
explore with the other commands (annal ledgers, annal scan, ...); its last
lines are commands to run, with the command as the demo was run (go run
./cmd/annal, or the annal binary). The export and its checkpoint are
written beside the data directory, not in it (as export -o requires):
DIR-LEDGER.ndjson and DIR-LEDGER.checkpoint (./annal-data-orders.ndjson),
with a number added if one of them exists.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.dataDir(cmd)
			if err != nil {
				return err
			}
			cfg.dir = dir
			if cfg.opts, err = g.options(); err != nil {
				return err
			}
			if short {
				cfg.events = min(cfg.events, 20_000)
			}
			if cfg.events < cfg.writers*cfg.batch || cfg.writers < 1 || cfg.batch < 1 {
				return usageErr("demo: --events must be at least --writers x --batch (%d)", cfg.writers*cfg.batch)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return runDemo(ctx, cfg, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&cfg.events, "events", 100_000, "events of the main workload")
	cmd.Flags().IntVar(&cfg.writers, "writers", cfg.writers, "concurrent appenders")
	cmd.Flags().IntVar(&cfg.batch, "batch", cfg.batch, "events per append")
	cmd.Flags().DurationVar(&cfg.killAfter, "kill-after", 700*time.Millisecond, "how long the child writer appends, after its first acknowledged event, before it is killed")
	cmd.Flags().BoolVar(&short, "short", false, "a smaller workload (at most 20,000 events), for CI")
	return cmd
}

// newDemoWriterCmd is the child the demo kills: it appends one order
// event at a time in Sync mode and prints each ID once it is durable.
func newDemoWriterCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:    "demo-writer LEDGER",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := g.dataDir(cmd)
			if err != nil {
				return err
			}
			opts, err := g.options()
			if err != nil {
				return err
			}
			db, err := engine.Open(dir, opts)
			if err != nil {
				return err
			}
			defer db.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
			for i := 0; ; i++ {
				if err := cmd.Context().Err(); err != nil {
					return nil
				}
				res, err := db.Append(cmd.Context(), args[0], []engine.EventInput{demoEvent(rng, 0, 1, 1_000_000+i)}, &engine.AppendOptions{Durability: engine.Sync})
				if err != nil {
					return err
				}
				fmt.Fprintln(out, res.IDs[0])
				if err := out.Flush(); err != nil {
					return err
				}
			}
		},
	}
}

var demoSteps = [...]string{"placed", "paid", "packed", "shipped", "delivered"}

// demoOrders is how many orders a writer has open at once.
const demoOrders = 20

// demoEvent is a writer's k-th order event (of writers): the writer works
// on demoOrders orders at a time, taking each through its steps in turn,
// so each order's events are in order and interleave with the others'.
// About 250 bytes of meta and data.
func demoEvent(rng *rand.Rand, writer, writers, k int) engine.EventInput {
	round := k / (demoOrders * len(demoSteps))
	order := (round*demoOrders+k%demoOrders)*writers + writer
	step := demoSteps[(k/demoOrders)%len(demoSteps)]
	item := rand.New(rand.NewPCG(uint64(order), 9)) // the same items at every step
	meta := fmt.Sprintf(`{"actor":"user-%d","cause":"req-%08x","source":"checkout-service"}`, rng.IntN(500), rng.Uint32())
	data := fmt.Sprintf(`{"order":"order-%d","customer":"customer-%d","items":[{"sku":"sku-%d","qty":%d,"price":%d.%02d}],"currency":"EUR","status":%q}`,
		order, order%997, item.IntN(5000), 1+item.IntN(4), 5+item.IntN(200), item.IntN(100), step)
	return engine.EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", order), Event: "order-" + step, Meta: []byte(meta), Data: []byte(data)}
}

// step prints one line of the demo's progress.
type demoPrinter struct{ w io.Writer }

func (p demoPrinter) step(format string, a ...any) { fmt.Fprintf(p.w, "==> "+format+"\n", a...) }
func (p demoPrinter) line(format string, a ...any) { fmt.Fprintf(p.w, "    "+format+"\n", a...) }

func runDemo(ctx context.Context, cfg demoConfig, w io.Writer) error {
	p := demoPrinter{w}
	start := time.Now()
	p.step("data directory %s", cfg.dir)
	db, err := engine.Open(cfg.dir, cfg.opts)
	if err != nil {
		return err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	name := "orders"
	for i := 2; ; i++ {
		if _, err := db.Ledger(name); errors.Is(err, engine.ErrLedgerNotFound) {
			break
		}
		name = fmt.Sprintf("orders-%d", i)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: name, Description: "Orders of the annal demo", Actor: "annal demo"})
	if err != nil {
		return err
	}
	p.step("created ledger %q, ID %s (the checksum of its genesis event %s)", name, info.ID, info.Genesis)

	// The workload: writers append batches in Sync mode.
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.writers)
	per := cfg.events / cfg.writers
	for wr := range cfg.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wr), 1))
			for n := 0; n < per; n += cfg.batch {
				evs := make([]engine.EventInput, min(cfg.batch, per-n))
				for i := range evs {
					evs[i] = demoEvent(rng, wr, cfg.writers, n+i)
				}
				if _, err := db.Append(ctx, name, evs, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	took := time.Since(t0)
	appended := per * cfg.writers
	p.step("appended %d events from %d concurrent appenders in batches of %d, Sync durability: %s, %.0f events/s",
		appended, cfg.writers, cfg.batch, took.Round(time.Millisecond), float64(appended)/took.Seconds())

	// A signed checkpoint of the ledger as it is now: a client that keeps
	// it can later check that the ledger still extends it.
	before, err := db.Checkpoint(ctx, name)
	if err != nil {
		return err
	}
	p.step("signed checkpoint: %d events, Merkle root %s, key %s", before.Size, b64(before.Root), db.VerifierKey())

	// The crash: a child process appends and prints each durable ID; it
	// is killed with SIGKILL mid-stream.
	if err := db.Close(); err != nil {
		return err
	}
	db = nil
	acked, err := killWriter(ctx, cfg, name)
	if err != nil {
		return err
	}
	p.step("a child writer appended one event at a time (Sync) and was killed with SIGKILL after %d acknowledged appends", len(acked))

	t0 = time.Now()
	db, err = engine.Open(cfg.dir, cfg.opts)
	if err != nil {
		return err
	}
	if u := db.Unavailable(); len(u) > 0 {
		return fmt.Errorf("after the crash, ledgers are unavailable: %v", u)
	}
	opened := time.Since(t0)
	rep, err := db.Verify(ctx, name, nil)
	if err != nil {
		return fmt.Errorf("verify after the crash: %w", err)
	}
	verified := time.Since(t0) - opened
	lost := 0
	for _, id := range acked {
		if _, err := db.Get(ctx, id); err != nil {
			lost++
		}
	}
	if lost > 0 {
		return fmt.Errorf("%d of %d acknowledged events lost", lost, len(acked))
	}
	p.step("reopened in %s and verified all %d events (checksums, chain, Merkle tree, index) in %s: all %d acknowledged events are there",
		opened.Round(time.Millisecond), rep.Events, verified.Round(time.Millisecond), len(acked))

	// The checkpoint signed before the crash against the ledger after it.
	if err := db.VerifyCheckpoint(ctx, name, before.Note, ""); err != nil {
		return fmt.Errorf("the checkpoint signed before the crash: %w", err)
	}
	after, err := db.Checkpoint(ctx, name)
	if err != nil {
		return err
	}
	cons, err := db.ProveConsistency(ctx, name, before.Size, after.Size)
	if err != nil {
		return err
	}
	if err := tree.VerifyConsistency(before.Size, after.Size, before.Root, after.Root, cons.Hashes); err != nil {
		return fmt.Errorf("consistency of the checkpoints before and after the crash: %w", err)
	}
	p.step("the checkpoint signed before the crash (%d events) is a prefix of the one after it (%d events): its root recomputed from the segments, and a consistency proof of %d hashes",
		before.Size, after.Size, len(cons.Hashes))

	// A time-range scan: 100 ms around the ledger's middle event. (The
	// middle of its time span can fall in the pause between the bulk
	// appends and the child writer, where there is nothing to show.)
	info, err = db.Ledger(name)
	if err != nil {
		return err
	}
	middle, err := db.GetSeq(ctx, name, max(1, info.Count/2))
	if err != nil {
		return err
	}
	mid := middle.Time()
	from, to := mid.Add(-50*time.Millisecond), mid.Add(50*time.Millisecond)
	n, shown := 0, 0
	var lines []string
	for ev, err := range db.Scan(ctx, name, engine.ScanOptions{From: from, To: to}) {
		if err != nil {
			return err
		}
		n++
		if shown < 3 {
			lines = append(lines, fmt.Sprintf("#%-7d %s  %s  %-14s %s", ev.Seq, ev.Time().UTC().Format("15:04:05.000000"), ev.ID, ev.Key, ev.Event))
			shown++
		}
	}
	if n == 0 {
		return fmt.Errorf("time-range scan %s .. %s found no event, though event #%d (%s) is in it", from, to, middle.Seq, middle.ID)
	}
	p.step("time-range scan %s .. %s: %d events; the first %d:", from.UTC().Format("15:04:05.000"), to.UTC().Format("15:04:05.000"), n, shown)
	for _, l := range lines {
		p.line("%s", l)
	}

	// An inclusion proof of the middle event in the latest checkpoint,
	// checked as a client would: the leaf recomputed from the event.
	incl, err := db.ProveInclusion(ctx, middle.ID, 0)
	if err != nil {
		return err
	}
	line, err := json.Marshal(middle)
	if err != nil {
		return err
	}
	if err := tree.VerifyInclusion(middle.Seq-1, after.Size, tree.LeafHash(line), incl.Hashes, after.Root); err != nil {
		return fmt.Errorf("inclusion proof of event #%d: %w", middle.Seq, err)
	}
	p.step("inclusion proof of event #%d in the signed checkpoint of %d events: %d hashes (%d bytes), verified",
		middle.Seq, after.Size, len(incl.Hashes), 32*len(incl.Hashes))

	// An entity replay: one order's stream.
	key := "order-42"
	p.step("replay of order %s:", key)
	for ev, err := range db.Replay(ctx, name, engine.ReplayOptions{Entity: "order", Keys: []string{key}}) {
		if err != nil {
			return err
		}
		p.line("#%-7d %s  %-16s %s", ev.Seq, ev.ID, ev.Event, ev.Data)
	}

	// Export with its signed checkpoint, and verify the file offline as
	// an auditor would: every Event ID, then the Merkle root of its lines
	// against the signed checkpoint (annal verify-file --checkpoint).
	// Beside the data directory, not in it: as export -o and checkpoint
	// -o, the demo writes no file of its own among the ledgers' files.
	exportPath, checkpointPath, err := demoOutputPaths(cfg.dir, name)
	if err != nil {
		return err
	}
	t0 = time.Now()
	f, err := os.OpenFile(exportPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var note bytes.Buffer
	exported, err := db.Export(ctx, name, f, engine.ExportOptions{Checkpoint: &note})
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err == nil {
		err = writeNewFile(checkpointPath, note.Bytes())
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	exportTook := time.Since(t0)
	cp, err := openCheckpoint(checkpointPath, note.Bytes(), db.VerifierKey())
	if err != nil {
		return err
	}
	f, err = os.Open(exportPath)
	if err != nil {
		return err
	}
	var report, problems bytes.Buffer
	err = runVerifyFile(bufio.NewReaderSize(f, 1<<20), exportPath, cp, false, &report, &problems)
	f.Close()
	if err != nil {
		return fmt.Errorf("the export does not verify: %v %s", err, strings.TrimSpace(problems.String()))
	}
	fi, _ := os.Stat(exportPath)
	p.step("exported %d events (%s) to %s with its signed checkpoint in %s, then verified the file offline:",
		exported, humanBytes(fi.Size()), exportPath, exportTook.Round(time.Millisecond))
	for l := range strings.Lines(report.String()) {
		p.line("%s", strings.TrimSpace(l))
	}

	if err := db.Close(); err != nil {
		return err
	}
	db = nil
	// Hints that run as they are printed: with the command as it was run
	// (go run ./cmd/annal, or the binary).
	annal := demoCommand()
	dir := annal + " --dir " + shellQuote(cfg.dir)
	p.step("done in %s. Explore:", time.Since(start).Round(time.Millisecond))
	for _, hint := range []string{
		dir + " ledgers",
		dir + " scan " + shellQuote(name) + " --limit 5",
		dir + " verify " + shellQuote(name) + " --full",
		dir + " prove " + shellQuote(name+"#2"),
		annal + " verify-file " + shellQuote(exportPath) + " --checkpoint " + shellQuote(checkpointPath) + ` --key "$(` + dir + ` key)"`,
	} {
		p.line("%s", hint)
	}
	return nil
}

// demoOutputPaths returns the files the demo exports the ledger name of
// the data directory dir to, and writes its checkpoint to: beside dir,
// named after it and the ledger ("annal-data-orders.ndjson"), with a
// number added if one of them exists. They are outside the data
// directory, as export -o requires of its output.
func demoOutputPaths(dir, name string) (export, checkpoint string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if b := filepath.Base(filepath.Clean(dir)); b == "." || b == ".." {
		parent = filepath.Dir(abs) // "." is the data directory itself
	}
	stem := filepath.Join(parent, filepath.Base(abs)+"-"+name)
	for i := 2; ; i++ {
		export, checkpoint = stem+".ndjson", stem+".checkpoint"
		_, err1 := os.Lstat(export)
		_, err2 := os.Lstat(checkpoint)
		if errors.Is(err1, fs.ErrNotExist) && errors.Is(err2, fs.ErrNotExist) {
			break
		}
		stem = filepath.Join(parent, fmt.Sprintf("%s-%s-%d", filepath.Base(abs), name, i))
	}
	for _, f := range []string{export, checkpoint} {
		if err := checkOutsideDataDir("demo: export", dir, f); err != nil {
			return "", "", err
		}
	}
	return export, checkpoint, nil
}

// writeNewFile writes b to the file name, which must not exist, 0644.
func writeNewFile(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// demoCommand returns how the demo's hints run the command: "go run
// ./cmd/annal" when the demo runs from go run (goRunBinary), else the
// binary as it was run: "annal" when that is the annal on $PATH.
func demoCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "annal"
	}
	if goRunBinary(exe) {
		return "go run ./cmd/annal"
	}
	if onPath, err := exec.LookPath("annal"); err == nil && sameFile(onPath, exe) {
		return "annal"
	}
	if arg0 := os.Args[0]; strings.ContainsRune(arg0, filepath.Separator) {
		return shellQuote(arg0)
	}
	return "annal"
}

// goRunBinary reports whether exe is a binary that go run built: one it
// keeps in the build cache ($GOCACHE, by default go-build in the user's
// cache directory, since Go 1.24), or one in its temporary work
// directory (go-buildNNN/bNNN/exe/NAME), removed when it ends. Either
// is no command to give the user.
func goRunBinary(exe string) bool {
	var caches []string
	if c := os.Getenv("GOCACHE"); c != "" {
		caches = append(caches, c)
	}
	if c, err := os.UserCacheDir(); err == nil {
		caches = append(caches, filepath.Join(c, "go-build"))
	}
	for _, c := range caches {
		if strings.HasPrefix(exe, filepath.Clean(c)+string(filepath.Separator)) {
			return true
		}
	}
	return filepath.Base(filepath.Dir(exe)) == "exe" && strings.Contains(exe, string(filepath.Separator)+"go-build")
}

// sameFile reports whether the paths a and b name the same file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// shellQuote returns s as one word of a POSIX shell: as it is when it
// holds only characters the shell takes literally, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./+,:@=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// killWriter runs the demo writer as a child process, reads the IDs it
// prints, kills it with SIGKILL after cfg.killAfter, and returns the IDs
// it had acknowledged.
func killWriter(ctx context.Context, cfg demoConfig, ledger string) ([]eventid.ID, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"--dir", cfg.dir}
	if cfg.opts != nil {
		args = append(args, "--cache", strconv.FormatInt(cfg.opts.CacheSize, 10))
	}
	cmd := exec.CommandContext(ctx, self, append(args, "demo-writer", ledger)...)
	// argv[0] "annal", so that a test binary standing in for the command
	// (testscript) runs it as annal.
	cmd.Args[0] = "annal"
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The kill comes cfg.killAfter after the first acknowledgement (the
	// child opening the directory can take a while on a busy machine), or
	// after a minute without one.
	kill := func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	timer := time.AfterFunc(time.Minute, kill)
	defer func() { timer.Stop() }()
	var acked []eventid.ID
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		// A line cut by the kill is not an acknowledgement.
		id, err := eventid.Parse(strings.TrimSpace(sc.Text()))
		if err != nil {
			continue
		}
		if len(acked) == 0 {
			timer.Stop()
			timer = time.AfterFunc(cfg.killAfter, kill)
		}
		acked = append(acked, id)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return nil, fmt.Errorf("the demo writer did not die by SIGKILL: %v", err)
	}
	if len(acked) == 0 {
		return nil, errors.New("the demo writer acknowledged nothing before it was killed")
	}
	return acked, nil
}
