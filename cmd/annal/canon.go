package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/spf13/cobra"
)

// maxCanonLine bounds one input line of 'annal canon'.
const maxCanonLine = 64 << 20

func newCanonCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "canon",
		Short: "Write the canonical form of each JSON text read from standard input",
		Long: `canon reads JSON texts from standard input, one per line, and writes each
one's canonical form (the bytes an event checksum covers) on its own line to
standard output. A bad line is reported on standard error as "line N: <error>"
and writes nothing to standard output; canon goes on with the next line and
exits 1 if any line was bad.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCanon(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func runCanon(stdin io.Reader, stdout, stderr io.Writer) error {
	in := bufio.NewReaderSize(stdin, 64<<10)
	out := bufio.NewWriterSize(stdout, 64<<10)
	var c canon.Canonicalizer
	var line, dst []byte
	bad := 0
	for n := 1; ; n++ {
		// Flush before blocking on input, so that a line typed or piped in
		// interactively gets its answer at once.
		if in.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				return err
			}
		}
		var err error
		line, err = ndjson.ReadLine(in, line[:0], maxCanonLine)
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Flush()
			return &exitErr{code: exitError, err: fmt.Errorf("line %d: %w", n, err)}
		}
		dst, err = c.Append(dst[:0], line)
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "line %d: %s\n", n, errorText(err))
			continue
		}
		dst = append(dst, '\n')
		if _, err := out.Write(dst); err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return silentExit(exitError)
	}
	return nil
}
