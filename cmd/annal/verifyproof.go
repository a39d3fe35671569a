package main

// verify-proof: an inclusion proof that annal prove wrote, checked offline
// against the signed checkpoint it carries (or one given) and a verifier
// key, and, with --event, against the event's own line.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/spf13/cobra"
)

// maxProofBytes bounds what is read of a proof file: a proof holds at
// most 64 hashes (a tree of up to 2^64 leaves) and a signed note, a few
// KiB; a larger file is not a proof (and is not read into memory whole).
const maxProofBytes = 1 << 20

func newVerifyProofCmd() *cobra.Command {
	var key, checkpoint, event string
	var policy cosignPolicy
	cmd := &cobra.Command{
		Use:   "verify-proof PROOF|- --key K [--checkpoint C] [--event LINE|@FILE] [--witness W… [--quorum K]]",
		Short: "Verify an inclusion proof (annal prove --format json) offline, without a database",
		Long: `verify-proof checks the inclusion proof in the file PROOF (or standard input
for "-"), as annal prove ID --format json writes it (docs/format.md, section
9.4), without the data directory:
  - the signed checkpoint is signed by the key K: the verifier key as annal
    key prints it (name+hash+base64), or @FILE for a file holding it, as
    verify-file --key takes it. The checkpoint is the one the proof carries
    (its "checkpoint" member), or the file C given with --checkpoint (a
    checkpoint kept earlier, as annal checkpoint -o or export --checkpoint
    write it; needed for a proof made with --size N, which carries none);
    given both, they must be the same tree;
  - the checkpoint is of the proof's ledger (its origin ends with "/" and
    the ledger ID) and covers the proof's tree (its size is the proof's
    treeSize);
  - the proof's path leads from the leaf hash of event #seq (leaf seq-1)
    to the checkpoint's root (RFC 9162);
  - with --witness W (repeatable: a tlog witness's verifier key, as annal
    witness prints it, or @FILE): the checkpoint (C if given, else the one
    the proof carries) carries valid cosignatures by at least --quorum K of
    those witnesses (default: all of them); too few is exit 3, naming how
    many were found and which keys.
With --event LINE the leaf hash is computed from the event itself: LINE is
the event's NDJSON line in the Evently download format (as annal export,
annal get --format ndjson and annal scan write it; a line in Evently's own
spelling is taken too), or @FILE for a file holding that one line. Its
eventId must be the proof's and its leaf hash (the line in annal's form,
docs/format.md section 9.1) the proof's. Without --event the leaf hash is
the one the proof claims: the check is then that some event with that hash
is in the tree, not that it is the event you hold.

On success it prints "ok: ..." lines saying what was checked and exits 0.
A proof, checkpoint or event that does not verify (a changed byte, another
key, another ledger's checkpoint, another event) exits 3, saying what
differs. A file that cannot be read exits 1; a bad flag or key, 2.

Example:
  annal prove 'orders#5' --format json > proof.json
  annal key > annal.pub
  annal get 'orders#5' --format ndjson > event.ndjson
  annal verify-proof proof.json --key @annal.pub --event @event.ndjson`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := policy.parse(cmd); err != nil {
				return err
			}
			if key == "" {
				return usageErr("verify-proof: --key is required: the verifier key that signed the checkpoint (annal key prints it), or @FILE")
			}
			vkey, err := keyArg(key)
			if err != nil {
				return err
			}
			var line []byte
			if event != "" {
				if line, err = eventLineArg(event); err != nil {
					return err
				}
			}
			p, err := readProofFile(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			var given *signedCheckpoint
			if checkpoint != "" {
				if given, err = openCheckpointFile(checkpoint, vkey); err != nil {
					return err
				}
			}
			return verifyProof(cmd.OutOrStdout(), args[0], p, vkey, given, line, &policy)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the verifier key that signed the checkpoint (name+hash+base64, as annal key prints it), or @FILE holding it")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "check the proof against the signed checkpoint in this file (needed when the proof carries none: annal prove --size)")
	cmd.Flags().StringVar(&event, "event", "", "the event's NDJSON line (as annal export writes it), or @FILE holding it: check that it is the proof's leaf")
	policy.addFlags(cmd)
	return cmd
}

// readProofFile reads the inclusion proof in the file name ("-": in). A
// file that cannot be read is exit 1; one that is not an inclusion proof
// as annal prove --format json writes it, exit 3.
func readProofFile(in io.Reader, name string) (*engine.InclusionProof, error) {
	file := strconv.Quote(name)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, &exitErr{code: exitError, err: fmt.Errorf("proof: %w", err)}
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxProofBytes+1))
	if err != nil {
		return nil, &exitErr{code: exitError, err: fmt.Errorf("proof %s: %w", file, err)}
	}
	if len(b) > maxProofBytes {
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("proof %s is larger than %d bytes: not an inclusion proof", file, maxProofBytes)}
	}
	var kind struct {
		OldSize *uint64 `json:"oldSize"`
	}
	if json.Unmarshal(b, &kind) == nil && kind.OldSize != nil {
		return nil, usageErr("verify-proof: %s is a consistency proof (annal prove --consistency); verify-proof checks inclusion proofs (annal prove ID), and annal verify --checkpoint checks that a ledger extends a checkpoint", file)
	}
	var p engine.InclusionProof
	if err := json.Unmarshal(bytes.TrimSpace(b), &p); err != nil {
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("proof %s is not an inclusion proof as annal prove --format json writes it: %w", file, err)}
	}
	return &p, nil
}

// eventLineArg returns the event line that --event gives: the line
// itself, or, for "@FILE", the one line FILE holds. More than one line
// (an export given whole) is a usage error.
func eventLineArg(v string) ([]byte, error) {
	b, what := []byte(v), "the --event value"
	if path, ok := strings.CutPrefix(v, "@"); ok {
		f, err := os.Open(path)
		if err != nil {
			return nil, &exitErr{code: exitError, err: fmt.Errorf("--event: %w", err)}
		}
		defer f.Close()
		if b, err = io.ReadAll(io.LimitReader(f, ndjson.DefaultMaxLineBytes+2)); err != nil {
			return nil, &exitErr{code: exitError, err: fmt.Errorf("--event: %w", err)}
		}
		what = strconv.Quote(path)
	}
	line := bytes.TrimRight(b, "\r\n")
	if n := bytes.Count(line, []byte("\n")); n > 0 {
		return nil, usageErr("--event: %s holds %d lines: give the one line of the event the proof is of", what, n+1)
	}
	return line, nil
}

// verifyProof checks the inclusion proof p (read from file) against its
// checkpoint, or given, signed by vkey, and, with line, that the event
// line is its leaf, and the policy's cosignatures on the checkpoint, and
// prints what it checked to w.
func verifyProof(w io.Writer, file string, p *engine.InclusionProof, vkey string, given *signedCheckpoint, line []byte, policy *cosignPolicy) error {
	proof := safeText(strconv.Quote(file))
	fail := func(format string, a ...any) error {
		return &exitErr{code: exitVerification, err: fmt.Errorf("proof %s: "+format, append([]any{proof}, a...)...)}
	}
	if given != nil {
		if err := given.checkOrigin(p.Ledger); err != nil {
			return fail("it is of ledger %s, and %w", p.Ledger, err)
		}
	}
	cp := given
	if len(p.Checkpoint) > 0 {
		carried, err := openCheckpoint(file+" (its checkpoint member)", p.Checkpoint, vkey)
		if err != nil {
			return err
		}
		if err := carried.checkOrigin(p.Ledger); err != nil {
			return fail("it is of ledger %s, and %w", p.Ledger, err)
		}
		if given != nil && (carried.Size != given.Size || carried.Root != given.Root || carried.Origin != given.Origin) {
			return fail("it carries the checkpoint of origin %s, size %d, root %s, not checkpoint %s (origin %s, size %d, root %s)",
				strconv.Quote(carried.Origin), carried.Size, b64(carried.Root), strconv.Quote(given.file), strconv.Quote(given.Origin), given.Size, b64(given.Root))
		}
		if cp == nil {
			cp = carried
		}
	}
	if cp == nil {
		return usageErr("verify-proof: proof %s carries no checkpoint (annal prove --size N makes such a proof): give the checkpoint of its tree with --checkpoint C", proof)
	}
	cosigned, err := policy.check("checkpoint "+strconv.Quote(cp.file), cp.note)
	if err != nil {
		return err
	}
	if p.TreeSize != cp.Size {
		return fail("it is for the tree of size %d, and checkpoint %s (origin %s) covers %d events: the proof is not for this checkpoint",
			p.TreeSize, strconv.Quote(cp.file), strconv.Quote(cp.Origin), cp.Size)
	}
	leaf := p.LeafHash
	if line != nil {
		ev, err := ndjson.NewReader(bytes.NewReader(line)).Next()
		if errors.Is(err, io.EOF) {
			return usageErr("--event: the line is empty: give the event's NDJSON line")
		}
		if err != nil {
			return &exitErr{code: exitVerification, err: fmt.Errorf("--event: not an event line in the Evently download format: %w", err)}
		}
		if ev.ID != p.ID {
			return fail("it is of event %s, and the --event line is event %s: another event", p.ID, ev.ID)
		}
		annalLine := ndjson.AppendEvent(nil, ev)
		leaf = tree.LeafHash(annalLine[:len(annalLine)-1])
		if leaf != p.LeafHash {
			return fail("the --event line is event %s, but its leaf hash is %s, and the proof's is %s: the line's content differs from the event the proof is of",
				ev.ID, b64(leaf), b64(p.LeafHash))
		}
	}
	if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, leaf, p.Hashes, cp.Root); err != nil {
		return fail("its path (%d hashes) does not lead from the leaf hash %s of event #%d to the root %s of checkpoint %s (origin %s, size %d): %w",
			len(p.Hashes), b64(leaf), p.Seq, b64(cp.Root), strconv.Quote(cp.file), strconv.Quote(cp.Origin), cp.Size, err)
	}
	fmt.Fprintf(w, "ok: checkpoint %s (origin %s, size %d, root %s) is signed by key %s\n",
		safeText(strconv.Quote(cp.file)), safeText(cp.Origin), cp.Size, b64(cp.Root), safeText(cp.key))
	if policy.p != nil {
		fmt.Fprintf(w, "ok: checkpoint %s is %s\n", safeText(strconv.Quote(cp.file)), policy.summary(cosigned))
	}
	fmt.Fprintf(w, "ok: event #%d %s of ledger %s is leaf %d of that tree (leaf hash %s)\n", p.Seq, p.ID, p.Ledger, p.Seq-1, b64(leaf))
	if line != nil {
		_, err := fmt.Fprintf(w, "ok: the --event line is that event: its leaf hash is the proof's\n")
		return err
	}
	_, err = fmt.Fprintf(w, "note: the event itself was not checked, only the leaf hash the proof claims: --event LINE checks that the event you hold is that leaf\n")
	return err
}
