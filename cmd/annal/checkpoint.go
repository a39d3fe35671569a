package main

// The commands of the Merkle tree (docs/format.md, section 9): key,
// checkpoint and prove, and what verify, export and verify-file share to
// read a checkpoint file and a --key.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

// maxCheckpointBytes bounds what is read of a checkpoint or key file: a
// signed checkpoint is a few hundred bytes, and a file larger than this is
// not one (and is not read into memory whole).
const maxCheckpointBytes = 64 << 10

// readSmallFile reads a checkpoint or key file named by a flag (what),
// refusing one larger than maxCheckpointBytes. A file that cannot be read
// is exit 1.
func readSmallFile(what, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &exitErr{code: exitError, err: fmt.Errorf("%s: %w", what, err)}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, &exitErr{code: exitError, err: fmt.Errorf("%s: %w", what, err)}
	}
	if len(b) > maxCheckpointBytes {
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("%s: %s is larger than %d bytes: not a checkpoint or a key", what, strconv.Quote(path), maxCheckpointBytes)}
	}
	return b, nil
}

// readCheckpointFile reads a checkpoint file named by a flag (what): the
// signed note, as annal checkpoint -o and export --checkpoint write it, or
// the JSON object annal checkpoint writes to a pipe ({"ledger","origin",
// "size","root","note"}: annal checkpoint NAME > FILE), whose "note" is
// the signed note. The envelope's other fields must agree with the note
// they describe (exit 3 if not: the file was edited); JSON without a note
// is a usage error that says how to write the file.
func readCheckpointFile(what, path string) ([]byte, error) {
	b, err := readSmallFile(what, path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return b, nil
	}
	var env struct {
		Ledger string  `json:"ledger"`
		Origin string  `json:"origin"`
		Size   *uint64 `json:"size"`
		Root   string  `json:"root"`
		Note   string  `json:"note"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Note == "" {
		why := "it has no \"note\""
		if err != nil {
			why = err.Error()
		}
		return nil, usageErr("%s: %s is JSON but not the object annal checkpoint prints ({\"ledger\",\"origin\",\"size\",\"root\",\"note\"}): %s; give the signed note itself (annal checkpoint NAME -o FILE writes it)",
			what, strconv.Quote(path), why)
	}
	note := []byte(env.Note)
	body, err := tree.ParseCheckpoint(noteText(note))
	if err != nil {
		return note, nil // the note's own check says what is wrong
	}
	switch {
	case env.Origin != "" && env.Origin != body.Origin,
		env.Size != nil && *env.Size != body.Size,
		env.Root != "" && env.Root != b64(body.Root),
		env.Ledger != "" && !strings.HasSuffix(body.Origin, "/"+env.Ledger):
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("%s: %s: the JSON's fields (ledger %s, origin %s, root %s) do not describe the signed note it holds (origin %s, size %d, root %s): the file was edited",
			what, strconv.Quote(path), strconv.Quote(env.Ledger), strconv.Quote(env.Origin), strconv.Quote(env.Root), strconv.Quote(body.Origin), body.Size, b64(body.Root))}
	}
	return note, nil
}

// keyArg returns the verifier key a --key flag gives: the key itself in
// the note verifier format ("name+hash+base64", as annal key prints it),
// or, for "@FILE", the first non-empty line of FILE. The JSON object that
// annal key writes in a pipe ({"name":…,"verifier":…}) is taken too,
// given as it is or in FILE, so that --key "$(annal key)" and annal key >
// FILE work whatever the output format. A key that is not in that format
// is a usage error; a FILE that cannot be read is exit 1.
func keyArg(k string) (string, error) {
	what := safeText(strconv.Quote(k))
	if path, ok := strings.CutPrefix(k, "@"); ok {
		b, err := readSmallFile("--key", path)
		if err != nil {
			return "", err
		}
		what = strconv.Quote(path) + " (its first line)"
		k = ""
		for line := range strings.SplitSeq(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				k = line
				break
			}
		}
		if k == "" {
			return "", usageErr("--key: %s holds no key (want one line name+hash+base64, as annal key prints it)", strconv.Quote(path))
		}
	}
	if strings.HasPrefix(k, "{") {
		var printed struct {
			Verifier string `json:"verifier"`
		}
		if err := json.Unmarshal([]byte(k), &printed); err == nil && printed.Verifier != "" {
			k = printed.Verifier
		}
	}
	if _, err := tree.NewVerifier(k); err != nil {
		return "", usageErr("--key: %s is not a verifier key (want name+hash+base64, as annal key prints it, or @FILE): %v", what, err)
	}
	return k, nil
}

// signedCheckpoint is a checkpoint file read and checked against a key.
type signedCheckpoint struct {
	file string // the file it was read from
	key  string // the verifier key it was checked with
	note []byte // the signed note, as the file holds it
	tree.Checkpoint
}

// openCheckpointFile reads the checkpoint file path and checks its
// signature with the verifier key vkey (keyArg). A file that cannot be
// read is exit 1; one that is not a checkpoint, or not signed by that
// key, is exit 3, naming the file and the key.
func openCheckpointFile(path, vkey string) (*signedCheckpoint, error) {
	note, err := readCheckpointFile("--checkpoint", path)
	if err != nil {
		return nil, err
	}
	return openCheckpoint(path, note, vkey)
}

// openCheckpoint checks the signed note read from file with vkey.
func openCheckpoint(file string, note []byte, vkey string) (*signedCheckpoint, error) {
	v, err := tree.NewVerifier(vkey)
	if err != nil {
		return nil, usageErr("key %s: %v", safeText(strconv.Quote(vkey)), err)
	}
	cp, err := tree.OpenCheckpoint(note, v)
	if err != nil {
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s: not a checkpoint signed by key %s: %w", strconv.Quote(file), vkey, err)}
	}
	if cp.Size == 0 {
		return nil, &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s: size 0: a ledger has at least its genesis event", strconv.Quote(file))}
	}
	return &signedCheckpoint{file: file, key: vkey, note: note, Checkpoint: cp}, nil
}

// originLedger returns the ledger ID that a checkpoint's origin ends with
// ("<key name>/<ledger ID>").
func originLedger(origin string) (eventid.LedgerID, error) {
	i := strings.LastIndexByte(origin, '/')
	if i < 0 {
		return 0, fmt.Errorf("origin %s does not end with \"/\" and a ledger ID", strconv.Quote(origin))
	}
	id, err := eventid.ParseLedgerID(origin[i+1:])
	if err != nil {
		return 0, fmt.Errorf("origin %s does not end with \"/\" and a ledger ID: %w", strconv.Quote(origin), err)
	}
	return id, nil
}

// checkOrigin checks that the checkpoint is of the ledger id (exit 3
// otherwise).
func (c *signedCheckpoint) checkOrigin(id eventid.LedgerID) error {
	if !strings.HasSuffix(c.Origin, "/"+id.String()) {
		return &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s is not of ledger %s: its origin is %s", strconv.Quote(c.file), id, strconv.Quote(c.Origin))}
	}
	return nil
}

// b64 is a hash as format.md writes it: standard base64, padded.
func b64(h tree.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }

// keyName is the name part of a verifier key ("name+hash+base64").
func keyName(vkey string) string {
	name, _, _ := strings.Cut(vkey, "+")
	return name
}

func newKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "key",
		Short: "Print the data directory's public key, that checkpoints are signed with",
		Long: `key prints the public key that the data directory's checkpoints are signed
with, in the note verifier format (docs/format.md, section 9.3), one line:

  annal-1f2e3d4c+7c8a1b2d+AdS…

Give it to whoever checks the ledger's checkpoints without the data directory
(annal verify-file FILE --checkpoint C --key K). The directory's signing key,
DIR/signing.key (owner-only), is created by the first command that needs it,
unless checkpoints signed by another key are in the directory (the key was
lost: restore it). With --signing-key FILE (or $ANNAL_SIGNING_KEY) the key
file FILE signs instead, with its memory of what it signed in FILE.state:
kept outside the data directory, it protects the ledgers against whoever can
rewrite the directory but not read the key; the key inside the directory
protects against accidents only. One key file may sign for several data
directories at once: each signature locks FILE.state (FILE.state.lock) and
keeps what the others signed. The writer keeps the public key beside the key
(DIR/signing.pub; FILE.pub for FILE.key), so that readers (ledgers, scan,
tail, verify) that may not read the private key still check the checkpoints.

--format json (or ndjson) prints {"name": the key's name, "verifier": the key}.

Example:
  annal key > annal.pub
  annal verify-file export.ndjson --checkpoint export.checkpoint --key @annal.pub`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			db, _, err := g.openBesideWriter(cmd)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			vkey := db.VerifierKey()
			if format == formatTable {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), vkey)
				return err
			}
			return writeJSON(cmd.OutOrStdout(), format, struct {
				Name     string `json:"name"`
				Verifier string `json:"verifier"`
			}{keyName(vkey), vkey})
		},
	}
}

// checkpointJSON is a checkpoint in JSON output.
type checkpointJSON struct {
	Ledger string `json:"ledger"`
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
	Note   string `json:"note"`
}

func newCheckpointCmd(g *globals) *cobra.Command {
	var issue, accept bool
	var output string
	cmd := &cobra.Command{
		Use:   "checkpoint NAME|LEDGERID [--new | --accept] [-o FILE]",
		Short: "Print a ledger's latest signed checkpoint, or issue one (--new)",
		Long: `checkpoint prints the latest signed checkpoint of the ledger NAME (or with that
ledger ID): the signed note, byte for byte as the ledger's checkpoint file
holds it (docs/format.md, section 9.3): its origin (the key's name, "/" and
the ledger ID), its size (the events it covers, genesis included), its root
(the Merkle tree's, base64), an empty line and the signature.

With --new it issues a checkpoint now, of every event appended so far (they
are synced first), and prints it. Checkpoints are also issued when the data
directory is closed after appends, and at the engine's cadence.

annal signs only a consistent extension of what its key last signed for a
ledger. A ledger whose checkpoint file is missing, older than what the key
signed (rolled back), or signed by another key is refused by every command
until its checkpoint (or the key: --signing-key) is restored, or until the
operator accepts it with --accept: the ledger is then signed as it is now,
whatever was signed before. A ledger refused for lost or damaged events is
not accepted.

Keep a checkpoint outside the data directory (-o FILE, created 0644: it is
public): it is what proves later that the ledger still extends it
(annal verify --checkpoint FILE) and what an export is verified against
(annal verify-file). FILE must not be inside the data directory.

--format table prints the note as it is; json and ndjson print
{"ledger","origin","size","root","note"}. A ledger without a checkpoint yet
is exit 1 (--new issues one).

While another process has the data directory open, checkpoint NAME prints
the latest checkpoint it signed, read-only; --new and --accept sign, and fail
then ("in use by process N").

Examples:
  annal checkpoint orders --new -o orders-2024-05-01.checkpoint
  annal checkpoint orders --accept`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			if output == "-" {
				output = ""
			}
			if output != "" {
				dataDir, err := g.dataDir(cmd)
				if err != nil {
					return err
				}
				if err := checkOutsideDataDir("checkpoint: -o", dataDir, output); err != nil {
					return err
				}
			}
			if accept {
				if issue {
					return usageErr("checkpoint: --accept and --new: give one")
				}
				db, dir, err := g.openDB(cmd, false)
				if err != nil {
					return err
				}
				defer closeDB(db, &err)
				cp, err := db.AcceptLedger(cmd.Context(), args[0])
				if err != nil {
					if errors.Is(err, engine.ErrInvalid) {
						return &exitErr{code: exitError, err: err}
					}
					return ledgerError(dir, args[0], err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: ledger %s accepted as it is: signed at size %d\n", safeName(args[0]), cp.Size)
				return printCheckpoint(cmd, format, output, cp)
			}
			open := func() (*engine.DB, string, error) { return g.openDB(cmd, false) }
			if !issue {
				// Printing the latest checkpoint reads only.
				open = func() (*engine.DB, string, error) { return g.openBesideWriter(cmd) }
			}
			db, info, dir, err := g.openLedgerWith(cmd, args[0], open)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			var cp engine.Checkpoint
			if issue {
				cp, err = db.Checkpoint(cmd.Context(), info.Name)
			} else {
				cp, err = db.LatestCheckpoint(info.Name)
				if errors.Is(err, engine.ErrNotFound) {
					return &exitErr{code: exitError, err: fmt.Errorf("ledger %s has no checkpoint yet (annal checkpoint %s --new issues one)", safeName(info.Name), safeName(info.Name))}
				}
			}
			if err != nil {
				return ledgerError(dir, info.Name, err)
			}
			return printCheckpoint(cmd, format, output, cp)
		},
	}
	cmd.Flags().BoolVar(&issue, "new", false, "issue a checkpoint of the ledger now")
	cmd.Flags().BoolVar(&accept, "accept", false, "sign a ledger refused for its checkpoint (missing, rolled back, or signed by another key) as it is now")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the signed checkpoint to FILE (0644) instead of standard output")
	return cmd
}

// printCheckpoint prints a checkpoint as the checkpoint command does: to
// the file output, if not "", else to standard output, in format.
func printCheckpoint(cmd *cobra.Command, format, output string, cp engine.Checkpoint) error {
	if output != "" {
		return writePublicFile(output, cp.Note)
	}
	if format == formatTable {
		_, err := cmd.OutOrStdout().Write(cp.Note)
		return err
	}
	return writeJSON(cmd.OutOrStdout(), format, checkpointJSON{
		Ledger: cp.Ledger.String(), Origin: cp.Origin, Size: cp.Size, Root: b64(cp.Root), Note: string(cp.Note),
	})
}

// publicFile is a file written beside its final name and renamed over it
// once complete and synced, readable by everyone (0644: a checkpoint is
// public), so that a failure leaves no partial file under the name.
type publicFile struct {
	name string
	f    *os.File
}

// createPublicFile creates the temporary file for name.
func createPublicFile(name string) (*publicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return nil, &exitErr{code: exitError, err: err}
	}
	return &publicFile{name: name, f: f}, nil
}

func (p *publicFile) Write(b []byte) (int, error) { return p.f.Write(b) }

// commit syncs the file, makes it 0644 and renames it to its name.
func (p *publicFile) commit() error {
	err := p.f.Chmod(0o644)
	if err == nil {
		err = p.f.Sync()
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.f.Name(), p.name)
	}
	if err != nil {
		os.Remove(p.f.Name())
		return &exitErr{code: exitError, err: err}
	}
	p.f = nil
	return nil
}

// abort removes the temporary file unless commit succeeded.
func (p *publicFile) abort() {
	if p != nil && p.f != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}

// writePublicFile writes b to the file name (publicFile).
func writePublicFile(name string, b []byte) error {
	p, err := createPublicFile(name)
	if err != nil {
		return err
	}
	defer p.abort()
	if _, err := p.Write(b); err != nil {
		return &exitErr{code: exitError, err: err}
	}
	return p.commit()
}

func newProveCmd(g *globals) *cobra.Command {
	var size uint64
	var consistency, key string
	cmd := &cobra.Command{
		Use:   "prove ID [--size N] | prove --consistency OLD [NAME|LEDGERID]",
		Short: "Prove an event is in a ledger's tree, or that a ledger extends an old checkpoint",
		Long: `prove ID prints the inclusion proof of the event ID (any text form, a hex
prefix of at least 4 digits, or NAME#SEQ, as annal get takes them) in the
Merkle tree of its ledger's latest checkpoint, or of the tree of size N with
--size N (docs/format.md, section 9.4): the event's leaf index (its sequence
number - 1), the tree size, the leaf hash, the root and the path, with the
signed checkpoint when the tree is the checkpoint's. An event after the
latest checkpoint is not in its tree: issue one first (annal checkpoint NAME
--new), or pass --size.

prove --consistency OLD prints the consistency proof from the checkpoint in
the file OLD (a checkpoint kept earlier) to the ledger's latest checkpoint
(or to the tree of size N with --size N): that the ledger then was a prefix
of the ledger now. OLD's signature is checked with the data directory's key,
or with --key K (a verifier key, or @FILE holding one). The ledger is the
one OLD's origin names, or NAME|LEDGERID. A ledger that does not extend OLD
(truncated, rolled back, rewritten) is exit 3, saying what differs.

Before printing, prove checks its proof: the leaf hash is recomputed from
the event, the proof is verified against the root (RFC 9162); a proof that
does not verify (a damaged tree file) is exit 3. While another process has
the data directory open, prove reads its tree file read-only, beside it.

--format json (or ndjson) prints the proof as format.md 9.4 gives it:
  {"ledger","eventId","seq","leafIndex","treeSize","leafHash","inclusionPath","checkpoint"}
  {"ledger","oldSize","newSize","oldRoot","newRoot","consistencyPath","checkpoint"}
with hashes in standard base64. --format table prints it for people.

Examples:
  annal prove 'orders#5' --format json > proof.json
  annal prove --consistency orders-2024-05-01.checkpoint`,
		Args: func(cmd *cobra.Command, args []string) error {
			if consistency != "" {
				return usageArgs(cobra.MaximumNArgs(1))(cmd, args)
			}
			if cmd.Flags().Changed("key") {
				return usageErr("prove: --key checks the checkpoint of --consistency; an inclusion proof is against the data directory's own checkpoint")
			}
			return usageArgs(cobra.ExactArgs(1))(cmd, args)
		},
		Annotations: map[string]string{idArgsAnnotation: "the argument may be an ID"},
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("size") && size == 0 {
				return usageErr("prove: --size must be at least 1 (the genesis event)")
			}
			if consistency != "" {
				var ledger string
				if len(args) == 1 {
					ledger = args[0]
				}
				return proveConsistency(cmd, g, format, consistency, key, ledger, size)
			}
			return proveInclusion(cmd, g, format, args[0], size)
		},
	}
	cmd.Flags().Uint64Var(&size, "size", 0, "prove against the tree of this size instead of the latest checkpoint's")
	cmd.Flags().StringVar(&consistency, "consistency", "", "prove that the ledger extends the checkpoint in this file")
	cmd.Flags().StringVar(&key, "key", "", "with --consistency: check the old checkpoint with this verifier key (or @FILE) instead of the data directory's")
	return cmd
}

// proveInclusion is prove ID.
func proveInclusion(cmd *cobra.Command, g *globals, format, arg string, size uint64) (err error) {
	if err := checkEventArg("prove", arg); err != nil {
		return err
	}
	db, dir, err := g.openBesideWriter(cmd)
	if err != nil {
		return err
	}
	defer closeDB(db, &err)
	ctx := cmd.Context()
	ev, err := getEvent(ctx, db, dir, arg)
	if err != nil {
		return err
	}
	p, err := db.ProveInclusion(ctx, ev.ID, size)
	if err != nil {
		return proveError(db, dir, &ev, size, err)
	}
	// The root: the checkpoint's (checked with the directory's key), or
	// the tree's at --size.
	var root tree.Hash
	var cp *signedCheckpoint
	if len(p.Checkpoint) > 0 {
		if cp, err = openCheckpoint(ev.Ledger+"'s latest checkpoint", p.Checkpoint, db.VerifierKey()); err != nil {
			return err
		}
		root = cp.Root
	} else {
		c, err := db.ProveConsistency(ctx, ev.Ledger, p.TreeSize, p.TreeSize)
		if err != nil {
			return ledgerError(dir, ev.Ledger, err)
		}
		root = c.NewRoot
	}
	// The proof checked as its reader will check it: the leaf hash from
	// the event itself.
	leaf := tree.LeafHash(appendEventLine(nil, &ev))
	if leaf != p.LeafHash {
		return &exitErr{code: exitVerification, err: fmt.Errorf("ledger %s: event #%d %s: the tree's leaf hash %s is not the event's, %s: the tree file is damaged or the event rewritten (annal verify --full says which)",
			safeName(ev.Ledger), ev.Seq, ev.ID, b64(p.LeafHash), b64(leaf))}
	}
	if err := tree.VerifyInclusion(ev.Seq-1, p.TreeSize, leaf, p.Hashes, root); err != nil {
		return &exitErr{code: exitVerification, err: fmt.Errorf("ledger %s: event #%d %s: the inclusion proof in the tree of size %d (root %s) does not verify: %w (annal verify --full says more)",
			safeName(ev.Ledger), ev.Seq, ev.ID, p.TreeSize, b64(root), err)}
	}
	w := cmd.OutOrStdout()
	if format != formatTable {
		return writeJSON(w, format, &p)
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "ledger\t%s (%s)\nevent\t#%d %s\nleaf index\t%d\ntree size\t%d\nleaf hash\t%s\nroot\t%s\n",
		safeName(ev.Ledger), p.Ledger, p.Seq, p.ID, p.Seq-1, p.TreeSize, b64(p.LeafHash), b64(root))
	writePath(tw, p.Hashes)
	if cp != nil {
		fmt.Fprintf(tw, "checkpoint\t%s, size %d, signed by %s\n", safeText(cp.Origin), cp.Size, keyName(cp.key))
	} else {
		fmt.Fprintf(tw, "checkpoint\tnone: the tree of size %d (--size), not a signed checkpoint's\n", p.TreeSize)
	}
	return tw.Flush()
}

// writePath writes a proof's hashes to a table, one a row.
func writePath(w io.Writer, hashes []tree.Hash) {
	fmt.Fprintf(w, "path\t%d hashes\n", len(hashes))
	for i, h := range hashes {
		fmt.Fprintf(w, "  %d\t%s\n", i, b64(h))
	}
}

// proveError turns a failed ProveInclusion into the command's error: an
// event outside the tree asked for says which trees it is in.
func proveError(db *engine.DB, dir string, ev *engine.Event, size uint64, err error) error {
	switch {
	case (errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrNotInTree)) && size == 0:
		if cp, cerr := db.LatestCheckpoint(ev.Ledger); cerr == nil {
			return &exitErr{code: exitError, err: fmt.Errorf("ledger %s: event #%d %s is not in the latest checkpoint, of size %d: annal checkpoint %s --new issues one that covers it",
				safeName(ev.Ledger), ev.Seq, ev.ID, cp.Size, safeName(ev.Ledger))}
		}
		return &exitErr{code: exitError, err: fmt.Errorf("ledger %s has no checkpoint yet: annal checkpoint %s --new issues one (or pass --size)", safeName(ev.Ledger), safeName(ev.Ledger))}
	case errors.Is(err, engine.ErrNotFound), errors.Is(err, engine.ErrNotInTree), errors.Is(err, tree.ErrRange):
		return &exitErr{code: exitError, err: fmt.Errorf("ledger %s: event #%d %s is not in the tree of size %d: %w", safeName(ev.Ledger), ev.Seq, ev.ID, size, err)}
	}
	return ledgerError(dir, ev.Ledger, err)
}

// proveConsistency is prove --consistency OLD [LEDGER].
func proveConsistency(cmd *cobra.Command, g *globals, format, oldFile, key, ledger string, size uint64) (err error) {
	if key != "" {
		if key, err = keyArg(key); err != nil {
			return err
		}
	}
	note, err := readCheckpointFile("--consistency", oldFile)
	if err != nil {
		return err
	}
	db, dir, err := g.openBesideWriter(cmd)
	if err != nil {
		return err
	}
	defer closeDB(db, &err)
	if key == "" {
		key = db.VerifierKey()
	}
	old, err := openCheckpoint(oldFile, note, key)
	if err != nil {
		return err
	}
	if ledger == "" {
		id, err := originLedger(old.Origin)
		if err != nil {
			return &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s: %w", strconv.Quote(oldFile), err)}
		}
		ledger = id.String()
	}
	info, err := db.Ledger(ledger)
	if err != nil {
		return ledgerError(dir, ledger, err)
	}
	if err := old.checkOrigin(info.ID); err != nil {
		return err
	}
	if info.Count < old.Size {
		return &exitErr{code: exitVerification, err: fmt.Errorf("ledger %s: truncated or rolled back: checkpoint %s covers %d events, the ledger has %d",
			safeName(info.Name), strconv.Quote(oldFile), old.Size, info.Count)}
	}
	p, err := db.ProveConsistency(cmd.Context(), info.Name, old.Size, size)
	if err != nil {
		if size == 0 && (errors.Is(err, engine.ErrNotFound) || errors.Is(err, tree.ErrRange)) {
			return &exitErr{code: exitError, err: fmt.Errorf("ledger %s: no checkpoint covers the %d events of %s: annal checkpoint %s --new issues one (or pass --size): %w",
				safeName(info.Name), old.Size, strconv.Quote(oldFile), safeName(info.Name), err)}
		}
		return ledgerError(dir, info.Name, err)
	}
	if p.OldRoot != old.Root {
		return &exitErr{code: exitVerification, err: fmt.Errorf("ledger %s: rewritten: its root at size %d is %s, checkpoint %s signs %s",
			safeName(info.Name), old.Size, b64(p.OldRoot), strconv.Quote(oldFile), b64(old.Root))}
	}
	if err := tree.VerifyConsistency(old.Size, p.NewSize, old.Root, p.NewRoot, p.Hashes); err != nil {
		return &exitErr{code: exitVerification, err: fmt.Errorf("ledger %s: the consistency proof from size %d to %d does not verify: %w (annal verify --full says more)",
			safeName(info.Name), old.Size, p.NewSize, err)}
	}
	w := cmd.OutOrStdout()
	if format != formatTable {
		return writeJSON(w, format, &p)
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "ledger\t%s (%s)\nold size\t%d\nold root\t%s\nnew size\t%d\nnew root\t%s\n",
		safeName(info.Name), p.Ledger, p.OldSize, b64(p.OldRoot), p.NewSize, b64(p.NewRoot))
	writePath(tw, p.Hashes)
	fmt.Fprintf(tw, "old checkpoint\t%s: %s, size %d, signed by %s\n", safeText(oldFile), safeText(old.Origin), old.Size, keyName(old.key))
	if len(p.Checkpoint) > 0 {
		fmt.Fprintf(tw, "new checkpoint\tthe latest, size %d\n", p.NewSize)
	} else {
		fmt.Fprintf(tw, "new checkpoint\tnone: the tree of size %d (--size), not a signed checkpoint's\n", p.NewSize)
	}
	return tw.Flush()
}
