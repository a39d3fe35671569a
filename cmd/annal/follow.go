package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/spf13/cobra"
)

func newFollowCmd(g *globals) *cobra.Command {
	var ledger, key string
	var interval, storeTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "follow URL DIR",
		Short: "Keep a verified read-only copy of a bucket's ledgers in DIR",
		Long: `follow keeps DIR, a new or empty directory (or one follow made before), a
read-only copy of the ledgers replicated to URL
(s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true; credentials from
the standard AWS chain), or of the one --ledger names (its name or ID), until
it is interrupted (SIGINT, SIGTERM).

It reads the bucket every --interval (1s): at first every object of each
ledger, then what was stored since. A request the bucket does not answer
within --store-timeout (10s) fails that read, which the next one tries
again. Every record is verified before it is
laid in DIR (its frame and chain, the chunks' hash chain, epochs and Merkle
roots), and every new signed checkpoint against the records it read: its
signature with --key (required: the verifier key of the key that signs the
writer's checkpoints, as 'annal key' prints it, or @FILE holding
it), and its root at its size, which proves it extends the last one
verified. An object that fails, or a bucket whose history is not an
extension of the one verified (rewritten), stops that ledger: a line on
stderr names the object; the other ledgers go on, and what was copied
before stays, verified.

Read DIR while follow runs with the read commands (ledgers, get, scan, tail,
export, verify, prove, checkpoint): they open it read-only, as beside a
writer. Writes are refused (DIR is held, and it is a follower's: its
follower.json). 'annal takeover URL DIR', once follow has stopped, makes DIR
the writer.

A bucket that cannot be read at the start does not stop follow if DIR holds
copies it laid before: it serves each up to the checkpoint it verified, and
reads the bucket again every --interval until it answers.

It prints a line a ledger once its first read is done (the events copied,
and those the signed checkpoint vouches for), then nothing while all goes
well. Exit codes: 0 when interrupted with every ledger followed, 3 when a
ledger stopped (at once if every ledger stopped), 2 usage (a bad argument,
a DIR that is a writer's data directory or follows another bucket or key),
1 another error (the bucket not reachable at the start with nothing in DIR
to serve, DIR in use).`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return usageErr("follow: --key is required: the verifier key of the writer's checkpoints (annal key prints it)")
			}
			k, err := keyArg(key)
			if err != nil {
				return err
			}
			opts, err := g.options()
			if err != nil {
				return err
			}
			fw, err := engine.OpenFollower(args[1], engine.FollowerOptions{Replica: args[0], Ledger: ledger, PollInterval: interval, StoreTimeout: storeTimeout, VerifierKey: k, Options: opts})
			if err != nil {
				if errors.Is(err, engine.ErrInvalid) {
					return &exitErr{code: exitUsage, err: err}
				}
				return openError(args[1], err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			shown := map[string]bool{}
			stopped := 0
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				all := fw.Statuses()
				for _, s := range all {
					id := s.Ledger.String()
					switch {
					case s.Stopped != nil && !shown[id+" stopped"]:
						shown[id+" stopped"] = true
						stopped++
						fmt.Fprintf(errOut, "annal: ledger %s (%s) stopped, %d events copied: %s\n", safeName(s.Name), id, s.Local, safeText(s.Stopped.Error()))
					case s.Local > 0 && !shown[id]:
						shown[id] = true
						fmt.Fprintf(out, "%s\t%s\t%d events\t%s\n", safeName(s.Name), id, s.Local, vouched(s.Signed, s.Local))
					}
				}
				if len(all) > 0 && stopped == len(all) {
					fw.Close()
					return silentExit(exitVerification)
				}
				select {
				case <-ctx.Done():
					if err := fw.Close(); err != nil {
						return err
					}
					if stopped > 0 {
						return silentExit(exitVerification)
					}
					return nil
				case <-t.C:
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&ledger, "ledger", "", "follow only this ledger (its name or ID); default every ledger of the bucket, and those created later")
	f.DurationVar(&interval, "interval", time.Second, "how often the bucket is read (1ms to 1h)")
	f.DurationVar(&storeTimeout, "store-timeout", 10*time.Second, "how long a request to the bucket may wait for its answer, retries included (100ms to 10m)")
	f.StringVar(&key, "key", "", "the verifier key that signs the writer's checkpoints (name+hash+base64, as annal key prints it), or @FILE holding it; required")
	return cmd
}
