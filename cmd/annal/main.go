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
//	annal verify [NAME]         check ledgers: the tail and the head, or every record with --full
//	annal stats [NAME]          count, head, time span, bytes, segments, events a day; totals
//	annal import [--name N] FILE|-  import an Evently NDJSON ledger, all or nothing; prints name and ID
//	annal export NAME [--after ID] [-o FILE]  a ledger as Evently NDJSON
//	annal demo                  annal's whole job on a local directory, with a SIGKILL, in seconds
//	annal canon                 canonical JSON of each line of standard input
//	annal id ID…                the fields and every text form of Event IDs
//	annal verify-file FILE|-    verify an Evently NDJSON ledger, no database needed
//
// Global flags: --dir D (default $ANNAL_DIR, or ./annal-data) and
// --format table|json|ndjson (default table when standard output is a
// terminal, ndjson otherwise). Only create, import and demo make a data
// directory; the other commands refuse one that does not exist.
//
// Exit codes: 0 success, 1 error, 2 usage, 3 verification failed,
// 4 condition failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, documented in the command's help and in README.md.
const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitVerification = 3
	exitCondition    = 4
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
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdin, stdout, stderr)
}

// runContext is run with a context that ends long-running commands (tail,
// append from standard input) as SIGINT or SIGTERM would.
func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(protectIDArgs(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "annal: %v\n", ee.err)
		}
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, "Run 'annal --help' for usage.")
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "annal: %v\n", err)
	return exitError
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "annal",
		Short: "annal: an embedded, append-only ledger database",
		Long: `annal works on an annal data directory (create, ledgers, append, get, scan,
tail, verify, stats) and checks Evently ledgers without one (verify-file).

The data directory is --dir, or $ANNAL_DIR when --dir is not given, or
./annal-data. Only create, import and demo make a directory that does not exist. One process
at a time may have a data directory open; a command run while another process
has it open fails with "data directory D is in use by another process".

--format chooses the output: table (aligned columns for people), json (one
JSON document) or ndjson (one JSON object a line). The default is table when
standard output is a terminal and ndjson otherwise, so scripts and pipes get
NDJSON unless they ask for something else. Events in json and ndjson are in
the Evently download format: entity, key, event, eventId, timestamp, meta,
data. append prints bare IDs, one a line, in every format.

Exit codes: 0 success, 1 error, 2 usage, 3 verification failed,
4 condition failed.`,
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
	pf.StringVar(&g.cache, "cache", "", "index memory budget (Pebble's block cache and memtables), such as 64MiB (default 128MiB)")
	pf.StringVar(&g.format, "format", "", "output format: table, json or ndjson (default table on a terminal, ndjson otherwise)")
	root.AddCommand(
		newCreateCmd(g), newLedgersCmd(g), newAppendCmd(g), newGetCmd(g),
		newScanCmd(g), newTailCmd(g), newVerifyCmd(g), newStatsCmd(g),
		newImportCmd(g), newExportCmd(g), newDemoCmd(g), newDemoWriterCmd(g),
		newReindexCmd(g),
		newCanonCmd(), newIDCmd(), newVerifyFileCmd(),
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

// protectIDArgs rewrites each argument that is an Event ID in the sortable
// base64 form and starts with '-' into the hex form of the same ID. Nearly
// every base64 ID of our era starts with "--" (the top bits of a timestamp
// are zero, and '-' is the base64 digit 0), so without this the flag parser
// would take `annal id --0SL0Dzb3HJCJLsyT_Wk3` for an unknown flag. An
// argument that names a flag of some command is left alone, and so is
// everything after a literal "--".
func protectIDArgs(root *cobra.Command, args []string) []string {
	flags := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if flags[name] || name == "help" {
			continue
		}
		if id, err := eventid.Parse(a); err == nil {
			out[i] = id.String()
		}
	}
	return out
}
