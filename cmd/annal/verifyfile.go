package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/spf13/cobra"
)

func newVerifyFileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "verify-file FILE|-",
		Short: "Verify a ledger in the Evently NDJSON download format, without a database",
		Long: `verify-file recomputes every event ID of an Evently NDJSON ledger (FILE, or
standard input for "-") from its line, the ledger ID and the previous line's
ID. On success it prints "ok: N events, ledger LLLLLLLL, head ID" and exits 0.
At the first bad line it prints "line N: " and what is wrong (for a mismatch,
the expected and the found ID) and exits 3. Input that cannot be read exits 1.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return &exitErr{code: exitError, err: err}
				}
				defer f.Close()
				in = f
			}
			return runVerifyFile(in, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func runVerifyFile(in io.Reader, stdout, stderr io.Writer) error {
	v, err := ndjson.VerifyAll(ndjson.NewReader(in))
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "ok: %d events, ledger %s, head %s\n", v.Count(), v.Ledger(), v.Head())
		return nil
	case errors.Is(err, ndjson.ErrRead):
		return &exitErr{code: exitError, err: err}
	default:
		fmt.Fprintln(stderr, errorText(err))
		return silentExit(exitVerification)
	}
}
