package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/spf13/cobra"
)

func newRestoreCmd(g *globals) *cobra.Command {
	var at, seq, ledger, key, unsigned string
	cmd := &cobra.Command{
		Use:   "restore URL DIR",
		Short: "Make a new data directory from a replica in an S3-compatible bucket",
		Long: `restore makes DIR, a new or empty directory, a data directory holding the
ledgers replicated to URL (s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true;
credentials from the standard AWS chain: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, a profile, a role). Every ledger of the bucket, or the
one --ledger names (its name or ID).

Each ledger's sealed segments are written as the bucket holds them, byte for
byte, and the records of its WAL chunks after them where the writer had them;
its name comes from its newest manifest, its checkpoint file from the bucket's
signed checkpoint. Every object is verified before it is used: every record's
frame and chain, the chunks' hash chain and epochs (a fenced writer's chunk
after the fence is refused), each chunk's Merkle root, and the root of the
events at the signed checkpoint's size. A gap or a changed object fails the
restore with an error naming the object (exit 3), never a shorter ledger.
Objects written while the restore runs are not read: it restores what the
bucket held when it began.

The bucket's checkpoint must be signed by the key the restored directory
will sign with (--signing-key, or the new directory's own signing.key, made
by the restore), or by the verifier key --key gives (or @FILE holding it):
the directory's key then signs the restored ledgers anew, as
annal checkpoint --accept does.

--at TIME or --seq N restore a point in time: the events up to it (a batch
is whole or left out), signed anew by the directory's key. The events after
it are read and verified all the same. Restore a point in time with another
key than the live ledger's (the default), or that key remembers the cut.

The restore is written under a temporary name beside DIR
(.DIR.restore-*) and renamed to DIR once complete, opened and closed (which
builds the index, the Merkle trees and meta.db): a failed restore leaves
nothing in DIR. On a terminal, a bar shows the events restored. The
restore writes nothing to the bucket (--replica and $ANNAL_REPLICA are
not used). DIR may be a symbolic link to an empty directory: the restore
goes into that directory.

A ledger whose events the bucket holds without a signed checkpoint (a
Shipped ledger whose disk was lost before its first checkpoint was stored,
or a checkpoint deleted from the bucket) fails the restore (exit 3) unless
--unsigned says otherwise: skip restores the other ledgers and names it on
stderr; restore restores it too, verified as any other and signed anew by
the restored directory's key: nothing in the bucket that its writer signed
vouches for it, so use restore only for a bucket you vouch for.

It prints one line a ledger: its name, ID, the events restored, the
events the bucket holds, how the restored ledger is signed, and how many
of the events the bucket's signed checkpoint vouches for. The events after
those were checked only for what anyone with write access to the bucket
can recompute (frames, CRC32C chains, the chunks' hash chain and Merkle
roots): a writer acknowledges events before it stores their checkpoint.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := engine.RestoreOptions{Replica: args[0], Ledger: ledger}
			var err error
			if o.Unsigned, err = unsignedFlag("restore", unsigned, "restore"); err != nil {
				return err
			}
			if at != "" && seq != "" {
				return usageErr("restore: --at and --seq are one point in time: give one")
			}
			if at != "" {
				t, err := parseTime(at, time.Now())
				if err != nil {
					return usageErr("restore: --at: %v", err)
				}
				o.At = t
			}
			if seq != "" {
				n, err := strconv.ParseUint(seq, 10, 64)
				if err != nil || n == 0 {
					return usageErr("restore: --seq %q: want a sequence number, 1 or more", seq)
				}
				o.Seq = n
			}
			if key != "" {
				k, err := keyArg(key)
				if err != nil {
					return err
				}
				o.VerifierKey = k
			}
			opts, err := g.options()
			if err != nil {
				return err
			}
			o.Options = opts
			m := newMeter(progressTo(cmd.ErrOrStderr()), "restore", 0, meterEvents)
			var done int64 // the events of the ledgers restored before
			var current engine.RestoreProgress
			o.Progress = func(p engine.RestoreProgress) {
				if p.Ledger != current.Ledger && current.Ledger != 0 {
					done += current.Records
				}
				current = p
				m.set(done + p.Records)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			res, err := engine.Restore(ctx, args[1], o)
			m.finish()
			if err != nil {
				switch {
				case errors.Is(err, engine.ErrInvalid):
					return &exitErr{code: exitUsage, err: err}
				case errors.Is(err, engine.ErrCorruption):
					return &exitErr{code: exitVerification, err: err}
				}
				return &exitErr{code: exitError, err: err}
			}
			out := cmd.OutOrStdout()
			n := 0
			for _, l := range res {
				if l.Skipped != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: ledger %s (%s) NOT restored: %s\n", safeName(l.Name), l.ID, safeText(l.Skipped))
					continue
				}
				n++
				if l.Ignored != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: ledger %s: the history ends before the last chunk in the bucket, which were not read: %s\n", safeName(l.Name), safeText(l.Ignored))
				}
				signed := "the bucket's checkpoint"
				if l.Resigned {
					signed = "signed anew by the directory's key"
				}
				fmt.Fprintf(out, "%s\t%s\t%d events restored\t%d in the bucket\t%s\t%s\n", safeName(l.Name), l.ID, l.Events, l.Verified, signed, vouched(l.Signed, l.Events))
			}
			fmt.Fprintf(out, "restore %s: %s\n", safeText(args[1]), plural(n, "ledger"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&at, "at", "", "restore the events up to this time (RFC 3339, a date, Unix seconds, an Event ID, or a relative time such as 2h)")
	f.StringVar(&seq, "seq", "", "restore the events up to this sequence number")
	f.StringVar(&ledger, "ledger", "", "restore only this ledger (its name or ID); default every ledger of the bucket")
	f.StringVar(&unsigned, "unsigned", "refuse", "a ledger the bucket holds without a signed checkpoint: refuse (the restore fails), skip (restore the others) or restore (it too, signed anew by the directory's key)")
	f.StringVar(&key, "key", "", "the verifier key that signed the bucket's checkpoints (name+hash+base64, as annal key prints it), or @FILE holding it; default the restored directory's key")
	return cmd
}

// unsignedFlag parses the --unsigned of restore and takeover: refuse,
// skip, or take, the command's word for taking such a ledger too.
func unsignedFlag(command, value, take string) (engine.Unsigned, error) {
	switch value {
	case "refuse":
		return engine.RefuseUnsigned, nil
	case "skip":
		return engine.SkipUnsigned, nil
	case take:
		return engine.RestoreUnsigned, nil
	}
	return 0, usageErr("%s: --unsigned %q: want refuse, skip or %s", command, value, take)
}

// vouched says how many of n events restored or pulled the bucket's
// signed checkpoint vouches for.
func vouched(signed, n uint64) string {
	if signed >= n {
		return "every event vouched for by the signed checkpoint"
	}
	return fmt.Sprintf("events #%d to #%d NOT vouched for by a signed checkpoint (only #1 to #%d are)", signed+1, n, signed)
}
