// Command annal is the operator's tool over an annal data directory, and
// checks Evently ledgers without one.
//
//	annal create NAME           create a ledger; prints its name and ID
//	annal ledgers               list the ledgers: name, ID, count, head, first/last time, bytes
//	annal append NAME           append NDJSON events from standard input (or one from flags);
//	                            prints each ID once it is durable
//	annal get ID|PREFIX|NAME#SEQ  one event, by ID in any text form, hex prefix or sequence number
//	annal scan NAME             events by time range (--from, --to, --after, --limit, --reverse)
//	                            or by stream (--entity, --key, --event)
//	annal tail NAME             follow a ledger, printing events as they commit
//	annal verify [NAME]         check ledgers: the tail and the head, or every record with --full;
//	                            --checkpoint C: that the ledger still extends checkpoint C
//	annal key                   the public key checkpoints are signed with
//	annal checkpoint NAME       the ledger's latest signed checkpoint; --new issues one
//	annal prove ID              the inclusion proof of an event; --consistency OLD: that the
//	                            ledger extends the checkpoint in file OLD
//	annal stats [NAME]          count, head, time span, bytes, segments, rate; totals, index size
//	annal import [--name N] FILE|-  import an Evently NDJSON ledger, all or nothing; prints name and ID
//	annal export NAME [--after ID] [-o FILE] [--checkpoint C]  a ledger as Evently NDJSON,
//	                            with its signed checkpoint written to C
//	annal backup TARGET         a consistent copy of the data directory in a new directory,
//	                            made while it is in use (not while another process holds it)
//	annal restore URL DIR       a new data directory from a replica in an S3-compatible bucket,
//	                            every object verified; --at TIME | --seq N: a point in time
//	annal follow URL DIR --key K  a read-only copy of a bucket's ledgers in DIR, kept up by
//	                            polling it, every object verified, until interrupted
//	annal accept-lost-positions accept that the named consumers' positions were lost with
//	                            meta.db (until then every consumer call fails)
//	annal demo                  annal's whole job on a local directory, with a SIGKILL, in seconds
//	annal canon                 canonical JSON of each line of standard input
//	annal id ID…                the fields and every text form of Event IDs
//	annal verify-file FILE|-    verify an Evently NDJSON ledger, no database needed;
//	                            --checkpoint C --key K: its Merkle root against a signed checkpoint
//	annal verify-proof PROOF --key K [--event LINE]  verify an inclusion proof (annal prove
//	                            --format json) offline, and that the event LINE is its leaf
//
// Global flags: --dir D (default $ANNAL_DIR, or ./annal-data) and
// --format table|json|ndjson (default table when standard output is a
// terminal, ndjson otherwise). Only create, import and demo make a data
// directory (and restore the DIR it is given); the other commands refuse
// one that does not exist.
//
// Exit codes: 0 success, 1 error (a panic too), 2 usage, 3 verification
// failed, 4 condition failed, 5 refused by the replica (fenced: another
// writer took the ledger; or the directory is behind its bucket, or
// holds another history), 6 idempotency key used before for other events
// (docs/cli.md).
//
// Only the positional arguments of id and get, which are Event IDs, are
// read as IDs before the flags are parsed (protectIDArgs); no other
// argument and no flag's value is ever changed. Tables and messages escape
// what would act on a terminal (safeName, safeText).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, documented in the command's help, README.md and docs/cli.md.
const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitVerification = 3
	exitCondition    = 4
	// exitIdempotency: an append's idempotency key was used before by
	// an append of other events (engine.ErrIdempotencyMismatch).
	exitIdempotency = 6
)

// exitErr carries the exit code a command ends with. A nil err means the
// command already said what went wrong.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitErr) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitErr{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// silentExit ends the command with code; the message was already written.
func silentExit(code int) error { return &exitErr{code: code} }

func main() {
	os.Exit(runMain())
}

// runMain runs the process's command line, with the standard logger's
// output (Pebble logs its errors there) filtered into one escaped line a
// message (logFilter).
func runMain() int {
	log.SetFlags(0)
	log.SetOutput(&logFilter{w: os.Stderr})
	return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// run executes the command line args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdin, stdout, stderr)
}

// runContext is run with a context that ends long-running commands (tail,
// append from standard input) as SIGINT or SIGTERM would.
func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(ctx, newRootCmd(), args, stdin, stdout, stderr)
}

// execute runs the command line args of root and returns the exit code.
// A panic of the command (a bug: bad disk data and full disks are errors,
// not panics) is reported in one line and exits 1, not 2 as an uncaught
// panic would: exit code 2 means a usage error only. GOTRACEBACK=all (or
// system, or crash) adds the stack.
func execute(ctx context.Context, root *cobra.Command, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "annal: internal error (a bug in annal; please report it): panic: %s\n", errorText(fmt.Errorf("%v", r)))
			switch os.Getenv("GOTRACEBACK") {
			case "all", "system", "crash":
				stderr.Write(debug.Stack())
			}
			code = exitError
		}
	}()
	root.SetArgs(protectIDArgs(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "annal: %s\n", messageText(ee.err))
		}
		if ee.code == exitUsage {
			// The help of the command that was run: its flags and
			// arguments are what went wrong.
			path := root.Name()
			if cmd != nil {
				path = cmd.CommandPath()
			}
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "annal: %s\n", messageText(err))
	return exitError
}

// linesError is an error of several lines, each of them escaped for a
// terminal already (a prefix that matches several IDs, and the list of
// them), which is printed as it is.
type linesError struct{ lines []string }

func (e *linesError) Error() string { return strings.Join(e.lines, "\n") }

// messageText is an error's message as the command prints it: one escaped
// line (errorText), or the lines of a linesError.
func messageText(err error) string {
	var le *linesError
	if errors.As(err, &le) && le.Error() == err.Error() {
		return err.Error()
	}
	return errorText(err)
}

// logFilter is the standard logger's output. Pebble, the index's store,
// logs its errors there (the engine keeps its routine messages quiet), and
// some of them are multi-line stack traces ("%+v"). logFilter writes the
// first line of each message, escaped, and drops Pebble's report of a
// damaged file, since the error it also returns reaches the command, which
// says what it means.
type logFilter struct{ w io.Writer }

func (f *logFilter) Write(p []byte) (int, error) {
	line, _, _ := strings.Cut(string(p), "\n")
	// Pebble's own report, and the index's one-line form of it.
	if strings.HasPrefix(line, "on-disk corruption:") || strings.HasPrefix(line, "index: damaged file ") {
		return len(p), nil
	}
	fmt.Fprintf(f.w, "annal: index: %s\n", safeText(errorLine(errors.New(line))))
	return len(p), nil
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "annal",
		Short: "annal: an embedded, append-only ledger database",
		Long: `annal works on an annal data directory (create, ledgers, append, get, scan,
tail, verify, stats, key, checkpoint, prove, backup), makes one from a replica
(restore URL DIR), and checks Evently ledgers without one (verify-file, with a
signed checkpoint and its key too) and inclusion proofs (verify-proof).

The data directory is --dir, or $ANNAL_DIR when --dir is not given, or
./annal-data. Only create, import and demo make a directory that does not exist (and
restore, the DIR it is given). One process
at a time may write a data directory. While another process has it open, the
commands that only read work beside it, read-only, changing nothing: ledgers,
stats, get, scan, tail, export (with --checkpoint: of the latest signed
checkpoint), verify, prove, checkpoint NAME (the latest signed checkpoint),
key and backup. The others that open it (create, append, import, reindex,
checkpoint --new or --accept, accept-lost-positions, takeover) fail with
"data directory D is in use by process N (its command)". A read command
(but tail) run while no process has the directory open holds it while it
runs, reading its index in place: a writer started meanwhile fails the same
way, and can be run again. Read commands keep what they verified in
$XDG_CACHE_HOME/annal (~/.cache/annal), which may be removed at any time.

--format chooses the output: table (aligned columns for people), json (one
JSON document) or ndjson (one JSON object a line). The default is table when
standard output is a terminal and ndjson otherwise, so scripts and pipes get
NDJSON unless they ask for something else. Events in json and ndjson are in
the Evently download format: entity, key, event, eventId, timestamp, meta,
data. append prints bare IDs, one a line, in every format.

Tables and messages escape control, format and bidirectional characters in
names and values (\x1b, \n, \u202e; a backslash in a name as \\); JSON and
NDJSON carry them as JSON does.

With --replica URL (or $ANNAL_REPLICA), every command that opens the data
directory for writing replicates its ledgers to that S3-compatible bucket
(s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true); --replication
replicated (the default: an append returns once stored in the bucket too)
or shipped (once durable locally); --publish-tiles also publishes each
ledger there as C2SP tlog-tiles, for any tlog client to verify. 'annal
replica status' shows what the bucket holds.

Exit codes: 0 success, 1 error, 2 usage, 3 verification failed,
4 condition failed, 5 refused by the replica (fenced: another writer took
the ledger; or the directory is behind its bucket, or holds another
history: annal restore, or annal takeover), 6 idempotency mismatch (append
--idempotency-key K: K was used before by an append of other events;
nothing was appended).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q", args[0])
			}
			_ = cmd.Help()
			return silentExit(exitUsage)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitErr{code: exitUsage, err: err}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&g.dir, "dir", "", "data directory (default $ANNAL_DIR, or ./annal-data)")
	pf.StringVar(&g.cache, "cache", "", "index memory budget (Pebble's block cache and memtables): bytes or KiB, MiB, GiB (binary; KB, MB, GB and K, M, G mean the same), such as 64MiB, 64MB or 64M (default 128MiB)")
	pf.StringVar(&g.signingKey, "signing-key", "", "the key file that signs checkpoints, instead of DIR/signing.key (default $ANNAL_SIGNING_KEY); its memory of what it signed is FILE.state, beside it (locked through FILE.state.lock, so that several data directories may share the key), its public key FILE.pub (.key replaced), for readers")
	pf.StringVar(&g.format, "format", "", "output format: table, json or ndjson (default table on a terminal, ndjson otherwise)")
	pf.StringVar(&g.replica, "replica", "", replicaFlagHelp)
	pf.StringVar(&g.replication, "replication", "", replicationFlagHelp)
	pf.BoolVar(&g.publishTiles, "publish-tiles", false, publishTilesFlagHelp)
	pf.StringArrayVar(&g.tlogWitnesses, "tlog-witness", nil, "URL=KEY: a tlog witness (annal witness) that must cosign each checkpoint the command writes before it is stored; KEY is its verifier key; repeatable")
	pf.IntVar(&g.tlogQuorum, "tlog-witness-quorum", 0, "with --tlog-witness: how many of the witnesses must cosign a checkpoint (default: all)")
	root.AddCommand(
		newCreateCmd(g), newLedgersCmd(g), newAppendCmd(g), newGetCmd(g),
		newScanCmd(g), newTailCmd(g), newVerifyCmd(g), newStatsCmd(g),
		newImportCmd(g), newExportCmd(g), newDemoCmd(g), newDemoWriterCmd(g),
		newReindexCmd(g), newBackupCmd(g), newKeyCmd(g), newCheckpointCmd(g), newProveCmd(g),
		newCanonCmd(), newIDCmd(), newVerifyFileCmd(), newVerifyProofCmd(), newAcceptLostPositionsCmd(g),
		newReplicaCmd(g), newRestoreCmd(g), newTakeoverCmd(g), newFollowCmd(g), newWitnessCmd(g),
	)
	return root
}

// signalContext returns a context that also ends at SIGINT or SIGTERM, for
// the commands that run until they are interrupted (tail, append from
// standard input): they stop cleanly and close the data directory.
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// usageArgs turns an argument check's failure into a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &exitErr{code: exitUsage, err: fmt.Errorf("%s: %w", cmd.Name(), err)}
		}
		return nil
	}
}

// idArgsAnnotation, in a command's Annotations, says that its positional
// arguments are Event IDs (or, for get, may be): protectIDArgs protects
// them. No other argument is ever rewritten.
const idArgsAnnotation = "annal:id-args"

// protectIDArgs rewrites each positional argument of a command that takes
// Event IDs (id, get: see idArgsAnnotation) that is an ID in the sortable
// base64 form and starts with '-' into the hex form of the same ID. Nearly
// every base64 ID of our era starts with "--" (the top bits of a timestamp
// are zero, and '-' is the base64 digit 0), so without this the flag parser
// would take `annal id --0SL0Dzb3HJCJLsyT_Wk3` for an unknown flag.
//
// Nothing else is touched: not a flag, not a flag's value (the flag
// parser takes the argument after a flag that needs a value as it is,
// whatever it starts with: --after --0SL0Dzb3HJCJLsyT_Wk3 needs no help),
// not a positional argument of another command (a ledger name, a file),
// and nothing after a literal "--". The arguments are walked as the flag
// parser walks them, with the flags of the command they run.
func protectIDArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.Annotations[idArgsAnnotation] == "" {
		return args
	}
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(cmd.InheritedFlags())
	fs.AddFlagSet(root.PersistentFlags())
	// The command's path after the root: the first positional arguments
	// that name it are its name, not its arguments.
	var path []string
	for c := cmd; c != root && c != nil; c = c.Parent() {
		path = append([]string{c.Name()}, path...)
	}
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		switch {
		case a == "--":
			return out
		case len(a) < 2 || a[0] != '-':
			if len(path) > 0 {
				path = path[1:]
			}
		case isFlagArg(fs, a):
			if takesNextArg(fs, a) {
				i++ // the flag's value, as it is
			}
		case len(path) == 0:
			if id, err := eventid.Parse(a); err == nil {
				out[i] = id.String()
			}
		}
	}
	return out
}

// isFlagArg reports whether a (which starts with '-') is a flag of fs, or
// the help flag, as the flag parser reads it: --name or --name=value for a
// long flag, -abc for shorthands (the first must be one).
func isFlagArg(fs *pflag.FlagSet, a string) bool {
	if name, ok := strings.CutPrefix(a, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		return name == "help" || fs.Lookup(name) != nil
	}
	c := a[1:2]
	return c == "h" || fs.ShorthandLookup(c) != nil
}

// takesNextArg reports whether the flag argument a (isFlagArg) takes the
// argument after it as its value: a flag that needs a value, given
// without "=" (and, for shorthands, as the last letter of a).
func takesNextArg(fs *pflag.FlagSet, a string) bool {
	if name, ok := strings.CutPrefix(a, "--"); ok {
		f := fs.Lookup(name)
		return !strings.Contains(name, "=") && f != nil && f.NoOptDefVal == ""
	}
	for i := 1; i < len(a); i++ {
		f := fs.ShorthandLookup(a[i : i+1])
		if f == nil {
			return false // the parser stops here with an error
		}
		if f.NoOptDefVal == "" {
			return i == len(a)-1 // else the rest of a is the value
		}
	}
	return false
}
