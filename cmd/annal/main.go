// Command annal inspects and checks annal data and Evently ledgers.
//
//	annal canon                 canonical JSON of each line of standard input
//	annal id ID…                the fields and every text form of Event IDs
//	annal verify-file FILE|-    verify an Evently NDJSON ledger, no database needed
//
// Exit codes: 0 success, 1 error, 2 usage, 3 verification failed,
// 4 condition failed.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

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
	root := newRootCmd()
	root.SetArgs(protectIDArgs(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
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
	root := &cobra.Command{
		Use:   "annal",
		Short: "annal: an embedded, append-only ledger database",
		Long: `annal inspects and checks annal data and Evently ledgers.

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
	root.AddCommand(newCanonCmd(), newIDCmd(), newVerifyFileCmd())
	return root
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
