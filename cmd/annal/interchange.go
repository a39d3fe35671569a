package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

func newImportCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import [--name NAME] FILE|-",
		Short: "Import an Evently NDJSON ledger as a new ledger",
		Long: `import reads a ledger in the Evently NDJSON download format (FILE, or
standard input for -) and stores it as a new ledger of the data directory,
with every event ID and timestamp as they are. Every line is verified first:
its ID is recomputed from its content, the ledger ID, its timestamp and the
line before. A bad line stops the import with its line number and what is
wrong (exit 3 when an ID does not verify, 1 otherwise), and nothing is left
behind: an import is all or nothing.

The ledger is named NAME, or else as its genesis event names it. It prints
the new ledger's name and ID. On a terminal, a progress bar shows the rate
(from half a second on: a rate over less is noise), and, once the input is
read, that the ledger is being written, synced and indexed, with the time
that takes.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			in, size, closeIn, err := openInput(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeIn()
			db, dir, err := g.openDB(cmd, true)
			if err != nil {
				return err
			}
			imported := ""
			defer closeDBStored(db, &err, cmd.ErrOrStderr(), func() string { return imported }, noStored)
			m := newMeter(progressTo(cmd.ErrOrStderr()), "import", size, meterBytes)
			opts := engine.ImportOptions{Name: name}
			if m != nil {
				opts.Progress = func(_, bytes int64) { m.set(bytes) }
				// Once the input is read, Import writes the last
				// events, syncs and indexes the ledger, which reports
				// no progress (seconds for a large ledger): say so,
				// rather than leave a full bar or none.
				in = &eofReader{r: in, atEOF: func() { m.showPhase("import: input read; writing, syncing and indexing the ledger") }}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			start := time.Now()
			info, err := db.Import(ctx, bufio.NewReaderSize(in, 1<<20), opts)
			m.finish()
			if err != nil {
				return importError(dir, args[0], err)
			}
			// Import syncs the ledger before it returns: it is there.
			imported = fmt.Sprintf("ledger %s (%s) is imported, %d events: do not import it again", safeName(info.Name), info.ID, info.Count)
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", safeName(info.Name), info.ID)
			if isTerminal(cmd.ErrOrStderr()) {
				fmt.Fprintf(cmd.ErrOrStderr(), "imported %d events in %s\n", info.Count, time.Since(start).Round(time.Millisecond))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the new ledger (default: the name its genesis event gives)")
	return cmd
}

// importError gives an import's failure its exit code: 3 when the input
// does not verify (an ID that its content does not give), 1 otherwise.
func importError(dir, file string, err error) error {
	var me *ndjson.MismatchError
	switch {
	case errors.As(err, &me):
		return &exitErr{code: exitVerification, err: fmt.Errorf("import %s: %w", file, err)}
	case errors.Is(err, engine.ErrLedgerExists):
		return &exitErr{code: exitError, err: fmt.Errorf("import %s: %w (in %s)", file, err, dir)}
	}
	return &exitErr{code: exitError, err: fmt.Errorf("import %s: %w", file, err)}
}

func newExportCmd(g *globals) *cobra.Command {
	var after, output, checkpoint string
	cmd := &cobra.Command{
		Use:   "export NAME|LEDGERID [--after ID] [-o FILE] [--checkpoint CFILE]",
		Short: "Export a ledger as Evently NDJSON",
		Long: `export writes the ledger NAME (or with that ledger ID) in the Evently NDJSON
download format, one event a line in ledger order, to standard output or to
FILE (-o), in constant memory. The whole ledger verifies with
'annal verify-file' and with any other Evently validator; importing it gives
back the same IDs. With --after ID only the events after that one are
written (a continuation, which verifies only together with what came
before). On a terminal, with -o, a progress bar shows the rate.

FILE must not be inside the data directory (symbolic links and ".."
resolved): an export written there could replace one of the ledgers' own
files. Such a FILE is a usage error (exit 2), and nothing is written.

With --checkpoint CFILE export issues a signed checkpoint of the ledger,
exports exactly the events it covers, and writes the checkpoint to CFILE
(created 0644: it is public; not inside the data directory either). While
another process has the data directory open, export signs nothing (that
process signs): it exports the events of the latest signed checkpoint and
writes that checkpoint. The pair is what an auditor verifies without the
data directory:

  annal export orders -o orders.ndjson --checkpoint orders.checkpoint
  annal key > annal.pub
  annal verify-file orders.ndjson --checkpoint orders.checkpoint --key @annal.pub

A checkpoint covers a whole ledger, so --checkpoint with --after is a usage
error (exit 2). Before it writes CFILE, export compares the events it wrote
with the tree the checkpoint signs (the Merkle root of their leaf hashes):
if the segments hold other events than the tree committed to (an event
changed in place, even with its checksums kept), it fails with exit 3,
writes no checkpoint and removes the partial FILE.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			var opts engine.ExportOptions
			if after != "" {
				id, perr := eventid.Parse(after)
				if perr != nil {
					return usageErr("--after: %v", perr)
				}
				opts.After = id
			}
			if output != "" && output != "-" {
				dataDir, err := g.dataDir(cmd)
				if err != nil {
					return err
				}
				if err := checkOutsideDataDir("export: -o", dataDir, output); err != nil {
					return err
				}
			}
			if checkpoint != "" {
				if after != "" {
					return usageErr("export: --checkpoint and --after exclude each other: a checkpoint covers a whole ledger, from its genesis event")
				}
				if checkpoint == "-" {
					return usageErr("export: --checkpoint needs a file name, not \"-\"")
				}
				dataDir, err := g.dataDir(cmd)
				if err != nil {
					return err
				}
				if err := checkOutsideDataDir("export: --checkpoint", dataDir, checkpoint); err != nil {
					return err
				}
				if output != "" && output != "-" && sameFileName(output, checkpoint) {
					return usageErr("export: -o and --checkpoint name the same file %s", strconv.Quote(output))
				}
			}
			// Without --checkpoint export reads only (openDB opens it
			// read-only); with it, beside a writer, it exports the latest
			// signed checkpoint's events, read-only.
			db, info, dir, err := g.openLedgerWith(cmd, args[0], func() (*engine.DB, string, error) { return g.openBesideWriter(cmd) })
			if err != nil {
				if checkpoint != "" && errors.Is(err, engine.ErrRewritten) {
					// Refused at open for the same reason the export
					// would fail: the data failed (exit 3).
					return &exitErr{code: exitVerification, err: errors.Unwrap(err)}
				}
				return err
			}
			defer closeDB(db, &err)
			var w io.Writer = cmd.OutOrStdout()
			var file *os.File
			if output != "" && output != "-" {
				// Written beside the target and renamed over it once
				// complete, so that a failed export leaves no partial
				// file under the name.
				file, err = os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".*")
				if err != nil {
					return &exitErr{code: exitError, err: err}
				}
				defer func() {
					if file != nil {
						file.Close()
						os.Remove(file.Name())
					}
				}()
				w = file
				if m := newMeter(progressTo(cmd.ErrOrStderr()), "export", int64(info.Count), meterEvents); m != nil {
					opts.Progress = func(events, _ int64) { m.set(events) }
					defer m.finish()
				}
			}
			var cpFile *publicFile
			if checkpoint != "" {
				if cpFile, err = createPublicFile(checkpoint); err != nil {
					return err
				}
				defer cpFile.abort()
				opts.Checkpoint = cpFile
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			n, err := db.Export(ctx, args[0], w, opts)
			if errors.Is(err, engine.ErrRewritten) {
				// The segments are not the events the checkpoint signs:
				// no checkpoint is written, and the partial export is
				// removed (the deferred cleanups).
				return &exitErr{code: exitVerification, err: err}
			}
			if err != nil {
				return ledgerError(dir, args[0], err)
			}
			// The checkpoint is renamed into place before the export
			// file: should the export's rename fail, CFILE holds a true
			// checkpoint of the ledger, never an older one beside a new
			// export (which would fail verify-file for no fault).
			if cpFile != nil {
				if err := cpFile.commit(); err != nil {
					return err
				}
			}
			if file != nil {
				if err := file.Sync(); err != nil {
					return &exitErr{code: exitError, err: err}
				}
				if err := file.Close(); err != nil {
					return &exitErr{code: exitError, err: err}
				}
				if err := os.Rename(file.Name(), output); err != nil {
					return &exitErr{code: exitError, err: err}
				}
				file = nil
				if isTerminal(cmd.ErrOrStderr()) {
					fmt.Fprintf(cmd.ErrOrStderr(), "exported %d events to %s\n", n, safeText(output))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "export only the events after this event ID")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of standard output")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "issue a checkpoint of the ledger, export exactly its events and write the signed checkpoint to FILE (0644)")
	return cmd
}

// sameFileName reports whether the paths a and b name the same file
// (as written, cleaned and made absolute; or, when both exist, the same
// file on disk).
func sameFileName(a, b string) bool {
	fa, erra := os.Stat(a)
	fb, errb := os.Stat(b)
	if erra == nil && errb == nil {
		return os.SameFile(fa, fb)
	}
	aa, erra := filepath.Abs(a)
	ab, errb := filepath.Abs(b)
	return erra == nil && errb == nil && aa == ab
}

// checkOutsideDataDir refuses an output file inside the data directory
// dataDir, where it could replace a segment, the metadata or a file of the
// index (rename replaces whatever has the name): a usage error. The file's
// directory is resolved as the system resolves it (symbolic links, then
// ".."), and it and each directory above it is compared with the data
// directory as a file (device and inode), so that no spelling of the path
// and no link or mount gets past. A directory that does not exist (the
// export then fails to create its file) or a data directory that does not
// exist (the open fails) is no reason to refuse.
//
// what names the file in the message: "export: -o", "export: --checkpoint".
func checkOutsideDataDir(what, dataDir, output string) error {
	data, err := os.Stat(dataDir)
	if err != nil {
		return nil
	}
	// The directory part as written: filepath.Dir would clean "x/.." to
	// ".", where the system goes up from wherever x leads.
	parent := "."
	if i := strings.LastIndexByte(output, filepath.Separator); i == 0 {
		parent = string(filepath.Separator)
	} else if i > 0 {
		parent = output[:i]
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return nil
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil
	}
	for d := real; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && os.SameFile(fi, data) {
			return usageErr("%s %s is inside the data directory %s: annal does not write its output there, where it could replace a ledger's own files; choose a file outside it", what, strconv.Quote(output), dataDir)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// openInput opens FILE, or standard input for "-", and returns its size
// when known (0 otherwise).
func openInput(cmd *cobra.Command, name string) (io.Reader, int64, func(), error) {
	if name == "-" {
		return cmd.InOrStdin(), 0, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, &exitErr{code: exitError, err: err}
	}
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, func() { f.Close() }, nil
}

// eofReader calls atEOF, once, when r first returns io.EOF.
type eofReader struct {
	r     io.Reader
	atEOF func()
	seen  bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && !e.seen {
		e.seen = true
		e.atEOF()
	}
	return n, err
}
