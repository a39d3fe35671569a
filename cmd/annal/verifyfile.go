package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/spf13/cobra"
)

func newVerifyFileCmd() *cobra.Command {
	var checkpoint, key string
	var prefix bool
	var policy cosignPolicy
	cmd := &cobra.Command{
		Use:   "verify-file FILE|- [--checkpoint C --key K [--prefix] [--witness W… [--quorum K]]]",
		Short: "Verify a ledger in the Evently NDJSON download format, without a database",
		Long: `verify-file recomputes every event ID of an Evently NDJSON ledger (FILE, or
standard input for "-") from its line, the ledger ID and the previous line's
ID. On success it prints "ok: N events, ledger LLLLLLLL, head ID" and exits 0.
At the first bad line it prints "line N: " and what is wrong (for a mismatch,
the expected and the found ID) and exits 3. Input that cannot be read exits 1.

The event IDs' checksums (CRC32C) find accidents, not forgeries: someone who
edits an event and recomputes the IDs after it makes a file that verifies.
With --checkpoint C --key K verify-file also checks the file against a signed
checkpoint of the ledger, taken before (annal export --checkpoint C, or
annal checkpoint), as docs/format.md section 9.5 gives it:
  - C is signed by the key K: the verifier key as annal key prints it
    (name+hash+base64), or @FILE for a file holding it;
  - C's origin ends with "/" and the file's ledger ID;
  - the Merkle tree root of the file's first N events (N: the checkpoint's
    size; each line rewritten in annal's form, so a file in Evently's
    spelling verifies too) is the root C signs.
The result always says how many of the file's events the checkpoint vouches
for ("N of M events"). A file with more events than the checkpoint fails
(exit 3): the events after the first N are vouched for by nothing, and a
file that passes is a file the checkpoint covers whole. With --prefix such a
file passes, the check being that the file begins with the checkpoint's
events. One with fewer fails: "truncated: the checkpoint covers N events,
the file has M". Any of these failures exits 3, saying what differs.
--checkpoint and --key go together (one without the other is exit 2). With
--witness W (repeatable: a tlog witness's verifier key, as annal witness
prints it, or @FILE) C must also carry valid cosignatures by at least
--quorum K of those witnesses (default: all of them); too few is exit 3,
naming how many were found and which keys. It reads the file once, in
constant memory.

Example:
  annal verify-file orders.ndjson --checkpoint orders.checkpoint --key @annal.pub`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cp *signedCheckpoint
			if err := policy.parse(cmd); err != nil {
				return err
			}
			switch {
			case policy.p != nil && checkpoint == "":
				return usageErr("verify-file: --witness checks the cosignatures of --checkpoint C: give it (with --key)")
			case (checkpoint == "") != (key == ""):
				return usageErr("verify-file: --checkpoint and --key go together: the checkpoint is checked with the key")
			case prefix && checkpoint == "":
				return usageErr("verify-file: --prefix goes with --checkpoint: it lets the file hold events after those the checkpoint covers")
			case checkpoint != "":
				vkey, err := keyArg(key)
				if err != nil {
					return err
				}
				if cp, err = openCheckpointFile(checkpoint, vkey); err != nil {
					return err
				}
			}
			var cosigned []cosign.Cosigned
			if cp != nil {
				var err error
				if cosigned, err = policy.check("checkpoint "+strconv.Quote(cp.file), cp.note); err != nil {
					return err
				}
			}
			in := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return &exitErr{code: exitError, err: err}
				}
				defer f.Close()
				in = f
			}
			if err := runVerifyFile(in, args[0], cp, prefix, cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
				return err
			}
			if policy.p != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "ok: checkpoint %s is %s\n", safeText(strconv.Quote(cp.file)), policy.summary(cosigned))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "also check the file against the signed checkpoint in this file (needs --key)")
	cmd.Flags().BoolVar(&prefix, "prefix", false, "with --checkpoint: pass a file that holds events after those the checkpoint covers (they are vouched for by nothing; the result says how many)")
	cmd.Flags().StringVar(&key, "key", "", "the verifier key that signed the checkpoint (name+hash+base64, as annal key prints it), or @FILE holding it")
	policy.addFlags(cmd)
	return cmd
}

// runVerifyFile verifies the ledger read from in (named name), and with
// cp the tree root of its first cp.Size events against cp: the file must
// hold exactly those events, or, with prefix, begin with them.
func runVerifyFile(in io.Reader, name string, cp *signedCheckpoint, prefix bool, stdout, stderr io.Writer) error {
	r := ndjson.NewReader(in)
	v := ndjson.NewVerifier()
	var (
		b    tree.Builder
		root tree.Hash
		line []byte
	)
	fail := func(err error) error {
		if errors.Is(err, ndjson.ErrRead) {
			return &exitErr{code: exitError, err: err}
		}
		fmt.Fprintln(stderr, errorText(err))
		return silentExit(exitVerification)
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		if err := v.Verify(ev); err != nil {
			return fail(&ndjson.LineError{Line: r.Line(), Err: err})
		}
		if cp == nil || b.Size() == cp.Size {
			continue
		}
		if b.Size() == 0 {
			if err := cp.checkOrigin(v.Ledger()); err != nil {
				return err
			}
		}
		// The leaf: the line in annal's form (format.md 9.1), which is
		// the line itself when annal wrote the file.
		line = ndjson.AppendEvent(line[:0], ev)
		b.Add(tree.LeafHash(line[:len(line)-1]))
		if b.Size() == cp.Size {
			root = b.Root()
		}
	}
	if v.Count() == 0 {
		return fail(ndjson.ErrNoEvents)
	}
	okLine := fmt.Sprintf("ok: %d events, ledger %s, head %s\n", v.Count(), v.Ledger(), v.Head())
	if cp == nil {
		_, err := io.WriteString(stdout, okLine)
		return err
	}
	file := strconv.Quote(name)
	if b.Size() < cp.Size {
		return &exitErr{code: exitVerification, err: fmt.Errorf("%s: truncated: the checkpoint covers %d events, the file has %d (checkpoint %s, origin %s)",
			safeText(file), cp.Size, b.Size(), strconv.Quote(cp.file), strconv.Quote(cp.Origin))}
	}
	if root != cp.Root {
		return &exitErr{code: exitVerification, err: fmt.Errorf("%s: rewritten: its %d event IDs verify, but the Merkle root of its first %d events is %s, and checkpoint %s (origin %s, size %d) signs %s: the file is not the ledger the checkpoint was signed for",
			safeText(file), v.Count(), cp.Size, b64(root), strconv.Quote(cp.file), strconv.Quote(cp.Origin), cp.Size, b64(cp.Root))}
	}
	total := uint64(v.Count())
	vouched := fmt.Sprintf("%d of %d events vouched for", cp.Size, total)
	if total > cp.Size && !prefix {
		// The first N match, but the events after them are vouched for
		// by nothing: a file that passes is one the checkpoint covers.
		return &exitErr{code: exitVerification, err: fmt.Errorf("%s: %s: its first %d events match checkpoint %s (origin %s, size %d), but the %d after them are covered by no checkpoint (a newer checkpoint covers them; --prefix checks only that the file begins with the checkpoint's events)",
			safeText(file), vouched, cp.Size, strconv.Quote(cp.file), strconv.Quote(cp.Origin), cp.Size, total-cp.Size)}
	}
	covered := fmt.Sprintf("its %d events", cp.Size)
	if total > cp.Size {
		covered = fmt.Sprintf("its first %d events (the %d after them are not covered by it)", cp.Size, total-cp.Size)
	}
	io.WriteString(stdout, okLine)
	fmt.Fprintf(stdout, "ok: checkpoint %s (origin %s, size %d, root %s) is signed by key %s and matches %s: %s\n",
		safeText(strconv.Quote(cp.file)), safeText(cp.Origin), cp.Size, b64(cp.Root), safeText(cp.key), covered, vouched)
	return nil
}
