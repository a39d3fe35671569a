package main

import (
	"errors"
	"fmt"

	"github.com/annal-db/annal/engine"
	"github.com/spf13/cobra"
)

func newBackupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backup TARGET",
		Short: "Copy the data directory consistently to a new directory",
		Long: `backup writes a consistent copy of the data directory to TARGET, a directory
that must not exist or be empty, outside the data directory: of each ledger,
every event durable when the backup reached it (at least every event
acknowledged before the backup began), its tree and signed checkpoint, the
metadata (consumer positions included), the signing key and its state file.
The copy opens as it is (its first open rebuilds the index from the segments,
verifying every record), and annal --dir TARGET verify --full passes.

It is written under a temporary name beside TARGET
(.TARGET.annal-backup-incomplete-*) and renamed to TARGET once complete and
synced: an interrupted
backup (Ctrl-C, a full disk) removes it, and a killed one leaves only that
temporary directory, never TARGET. Sealed segments are hard links where TARGET
is on the data directory's file system (they are never written again); the
rest is copied. A key given outside the directory (an Options.Signer) is not
copied: open the copy with the same one.

A copy of a live directory made with cp -a or rsync is not consistent (its
segments and meta.db are copied at different moments) and is refused when it
is opened ("acknowledged events lost"): use backup instead.

While another process has the data directory open (a running annal append,
or a service), backup copies it beside that process with reads only: it
blocks nothing and writes nothing there. Each ledger is then copied as that
process had written it when the backup reached it (every event acknowledged
before the backup began, and perhaps later ones not yet synced), after its
checkpoint, the metadata and the signer's state, which it checks as a
read-only open does; a note on standard error names the process.

It prints one line a ledger (its name, the events copied, the size of its
signed checkpoint) and a summary. A ledger the data directory refuses is
copied as it is (the copy refuses it too), reported on standard error, and the
exit code is 3.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			dir, err := g.dataDir(cmd)
			if err != nil {
				return err
			}
			if err := checkDataDir(dir); err != nil {
				return &exitErr{code: exitError, err: err}
			}
			db, _, err := g.openDB(cmd, false)
			if errors.Is(err, engine.ErrLocked) {
				// Held by another process (a running annal append, a
				// service): copied read-only beside it.
				holder := "another process"
				if le := (*engine.LockedError)(nil); errors.As(err, &le) {
					holder = le.Holder()
				}
				opts, oerr := g.options()
				if oerr != nil {
					return oerr
				}
				if db, _, err = g.openReader(cmd, dir, opts); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: note: data directory %s is in use by %s: copying it read-only beside it\n", safeText(dir), safeText(holder))
			}
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			res, err := db.Backup(ctx, args[0])
			if err != nil {
				if errors.Is(err, engine.ErrInvalid) {
					return &exitErr{code: exitUsage, err: err}
				}
				return &exitErr{code: exitError, err: err}
			}
			out := cmd.OutOrStdout()
			for _, l := range res.Ledgers {
				ck := "no signed checkpoint"
				if l.Checkpoint > 0 {
					ck = fmt.Sprintf("signed checkpoint at %d", l.Checkpoint)
				}
				fmt.Fprintf(out, "%s\t%d events\t%s\n", safeName(l.Name), l.Count, ck)
			}
			fmt.Fprintf(out, "backup %s: %d ledgers, %d files hard-linked, %d copied (%d bytes)\n", safeText(res.Dir), len(res.Ledgers), res.Linked, res.Copied, res.Bytes)
			for _, name := range res.Unavailable {
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: backup: ledger %s is refused by the data directory and was copied as it is: the copy refuses it too (annal verify says why)\n", safeName(name))
			}
			if len(res.Unavailable) > 0 {
				return silentExit(exitVerification)
			}
			return nil
		},
	}
}
