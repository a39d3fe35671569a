package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/spf13/cobra"
)

func newVerifyCmd(g *globals) *cobra.Command {
	var full bool
	var checkpointFile, key string
	var policy cosignPolicy
	cmd := &cobra.Command{
		Use:   "verify [NAME|LEDGERID] [--full] [--checkpoint FILE [--key K]] [--witness W… [--quorum K]]",
		Short: "Verify one ledger or all of them",
		Long: `verify checks the ledger NAME (or with that ledger ID), or every ledger.

verify writes nothing: it opens the data directory read-only, as ledgers,
scan and export do, beside a running writer too. It never cuts, rebuilds or
signs anything: a torn write at the end of a ledger (which the next writer's
open cuts), a missing index, metadata file or Merkle tree file (which it
rebuilds from the segments) are reported on standard error as notes, and a
ledger whose checkpoint file is missing or rolled back is reported as
failed, with the cure, never signed again.

Without --full it is the check every read-only open makes: every record of
each ledger's segments (frame CRCs, event checksums, chain links,
timestamps), the durable witness (the segments must still hold every event
that was acknowledged as durable) and the ledger's latest signed checkpoint
(its signature with the directory's key, and the root of the events it
covers, recomputed from the segments). Each result says what was checked.

With --full it also checks the Merkle tree file against the events (each
event's SHA-256 leaf hash, and every stored hash it completes) and the
latest signed checkpoint against both, and that the index agrees with the
segments. The index is checked only when no writer holds the directory
(verify then holds it until it ends: a writer that starts meanwhile is
refused); otherwise, or when the index or the tree file is missing, a note
says what was not checked and why. When standard error is a terminal it
shows a progress bar with the rate and the time left (from half a second on:
a rate over less is noise), and then, for each ledger, that it checks the
index, with the time that takes.

It prints one result a ledger (table: name, ID, events, head, what was
checked, the segments' result, the Merkle tree file's, the index's and the
ledger's, then a
line that says what the check covered; JSON and NDJSON: name, id, ok,
events, head, full (whether every record was read), checked (what was
checked, in words), checked_from and checked_to (the events whose records
were read and verified; absent when not known), error, and for a ledger
that failed, segments, tree and index: "ok", "failed", "rewritten" (the
segments: they are not what the tree or a signed checkpoint committed to)
or "damaged" (the tree file or the index: derived files), or "-" when not
checked) and, on standard error, what failed and where, in one line a
ledger. Exit 3 if any ledger's data fails a check; a ledger that could not
be checked for a reason of the system (a permission, too many open files, a
full disk) is exit 1, "could not be checked", unless another failed. A
ledger the open refused is found by its name or its ID, and its failure
reported. A checkpoint FILE may be the signed note or the JSON object
annal checkpoint prints in a pipe.

The checksums (CRC32C of every frame, and each Event ID's checksum of its
content and of the ID before) find accidental damage: a flipped bit, a torn
write, a lost or misplaced block; verify --full finds it anywhere. They are
no protection against a deliberate rewrite by someone who can write the
files: CRC32C can be recomputed. The Merkle tree (SHA-256) and its signed
checkpoints are: verify --full finds an event changed in place even when
its CRCs and Event ID still verify, and verify --checkpoint FILE, with a
checkpoint kept outside the directory, finds a ledger rewritten whole by
someone who holds the files and the key (docs/engine.md says what is
detected by whom).

The index is derived from the segments. When it alone is damaged (its files
fail their checksums, or it disagrees with segments that verify), verify
says so: the events are intact, the count and head are the segments', and
the index can be rebuilt from them.

With --checkpoint FILE verify also proves that the ledger still extends a
signed checkpoint taken earlier and kept outside the data directory (annal
checkpoint NAME -o FILE, annal export --checkpoint FILE): the checkpoint's
signature, with the data directory's key or --key K (a verifier key as
annal key prints it, or @FILE holding one), then the Merkle root of the
ledger's first N events (N: the checkpoint's size), recomputed from the
segments, against the root it signs. A ledger with fewer events (truncated,
rolled back) or another root (an event rewritten, even with every CRC and
Event ID recomputed) fails, saying what differs (exit 3). The ledger is
NAME, or the one the checkpoint's origin names. The result says what was
checked: the checkpoint's file, origin, size and key (JSON: "checkpoint":
{"file","origin","size","root","key","ok","error"}; table: a line after
the table).

With --witness W (repeatable: a tlog witness's verifier key, as annal
witness prints it, or @FILE) each ledger's latest signed checkpoint, and the
--checkpoint FILE if given, must carry valid cosignatures by at least
--quorum K of those witnesses (default: all of them): a witness cosigns only
a consistent extension of what it cosigned before, so a history rewritten
by whoever holds the signing key has no cosigned checkpoint. Too few fails
the ledger (exit 3), naming how many were found and which keys cosigned or
did not. The result says what was found (JSON: "cosignatures": [{"checkpoint",
"size","quorum","cosigned_by","ok","error"}]; table: a line after the table).

Example:
  annal verify --checkpoint orders-2024-05-01.checkpoint --full`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			if err := policy.parse(cmd); err != nil {
				return err
			}
			var cpCheck *checkpointCheck
			fromOrigin := false // the ledger is the one the checkpoint names
			if key != "" && checkpointFile == "" {
				return usageErr("verify: --key checks the checkpoint of --checkpoint FILE; give both")
			}
			if checkpointFile != "" {
				if cpCheck, err = readCheckpointCheck(checkpointFile, key); err != nil {
					return err
				}
				if len(args) == 0 {
					if cpCheck.parseErr != nil {
						return &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s: not a checkpoint (and no ledger named to verify): %w", strconv.Quote(checkpointFile), cpCheck.parseErr)}
					}
					id, err := originLedger(cpCheck.Origin)
					if err != nil {
						return &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s: %w", strconv.Quote(checkpointFile), err)}
					}
					args, fromOrigin = []string{id.String()}, true
				}
			}
			db, dir, err := g.openVerifier(cmd)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			var ledgers []engine.LedgerInfo
			var results []verifyResult
			if len(args) == 1 {
				info, err := db.Ledger(args[0])
				// A refused ledger is known by one key, its name or its
				// ID: found by the other too.
				uname, uid, uerr, refused := findUnavailable(db, dir, args[0])
				switch {
				case errors.Is(err, engine.ErrLedgerNotFound) && refused:
					results = append(results, verifyResult{Name: uname, ID: uid, full: full, err: uerr, segments: partFailed, index: partUnchecked})
				case errors.Is(err, engine.ErrLedgerUnavailable):
					results = append(results, verifyResult{Name: uname, ID: uid, full: full, err: err, segments: partFailed, index: partUnchecked})
				case errors.Is(err, engine.ErrLedgerNotFound) && fromOrigin:
					// The ledger the checkpoint was signed for is gone:
					// the directory does not extend it.
					return &exitErr{code: exitVerification, err: fmt.Errorf("checkpoint %s is of ledger %s (origin %s), which is not in %s: the directory does not extend it (removed, or another directory?)",
						strconv.Quote(checkpointFile), args[0], strconv.Quote(cpCheck.Origin), dir)}
				case err != nil:
					return ledgerError(dir, args[0], err)
				default:
					ledgers = append(ledgers, info)
				}
			} else {
				bad := db.Unavailable()
				for _, name := range slices.Sorted(maps.Keys(bad)) {
					_, id, _, _ := findUnavailable(db, dir, name)
					results = append(results, verifyResult{Name: name, ID: id, full: full, err: bad[name], segments: partFailed, index: partUnchecked})
				}
				ledgers = db.Ledgers()
			}
			v := &verifier{db: db, dir: dir, full: full}
			if full {
				v.meter = newVerifyMeter(progressTo(cmd.ErrOrStderr()), ledgers)
			}
			for i := range ledgers {
				r := v.verify(cmd.Context(), &ledgers[i])
				if cpCheck != nil {
					cpCheck.run(cmd.Context(), db, &r)
				}
				policy.verifyLedger(db, cpCheck, &r)
				results = append(results, r)
			}
			v.meter.finish()
			if err := writeVerifyResults(cmd.OutOrStdout(), format, results, full); err != nil {
				return err
			}
			for _, r := range results {
				for _, n := range r.notes {
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: note: verify %s: %s\n", safeName(r.Name), safeText(n))
				}
			}
			failed := 0
			for _, r := range results {
				if r.err != nil {
					failed++
					what := "verify " + r.Name
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: %s: %s\n", safeName(what), safeText(trimContext(errorLine(r.err), what)))
				}
			}
			if failed > 0 {
				if ctxErr := cmd.Context().Err(); ctxErr != nil {
					return &exitErr{code: exitError, err: ctxErr}
				}
				// Exit 3 says that data failed its checks; a ledger that
				// could not be checked (a permission, too many open
				// files, a full disk) is exit 1, unless another failed.
				env := 0
				for _, r := range results {
					if r.err != nil && environmentError(r.err) {
						env++
					}
				}
				if env == failed {
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: verification not done: %d of %d ledgers could not be checked (an error of the system, not of the data: see above)\n", failed, len(results))
					return silentExit(exitError)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: verification failed: %d of %d ledgers\n", failed-env, len(results))
				if env > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: and %d could not be checked (an error of the system, not of the data)\n", env)
				}
				return silentExit(exitVerification)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "read and check every record, the Merkle tree file and the latest signed checkpoint against them, and the index against the segments")
	cmd.Flags().StringVar(&checkpointFile, "checkpoint", "", "also prove that the ledger still extends the signed checkpoint in this file")
	cmd.Flags().StringVar(&key, "key", "", "check the checkpoint with this verifier key (or @FILE holding one) instead of the data directory's")
	policy.addFlags(cmd)
	return cmd
}

// cosignResult is the policy of verify --witness applied to one
// checkpoint of a ledger.
type cosignResult struct {
	checkpoint string // which: "latest" or the --checkpoint file
	size       uint64
	quorum     int
	found      []cosign.Cosigned
	err        error
}

// verifyLedger applies the policy (if any) to the checkpoints verify read
// for the ledger of r: its latest signed checkpoint, and the --checkpoint
// file's (cp, if given). A checkpoint without the quorum fails the ledger.
func (c *cosignPolicy) verifyLedger(db *engine.DB, cp *checkpointCheck, r *verifyResult) {
	if c.p == nil || r.err != nil {
		return
	}
	check := func(which, what string, size uint64, note []byte) {
		res := cosignResult{checkpoint: which, size: size, quorum: c.p.Quorum()}
		res.found, res.err = c.check(what, note)
		if note == nil {
			res.err = &exitErr{code: exitVerification, err: fmt.Errorf("%s: %w: the ledger has no signed checkpoint to carry cosignatures", what, cosign.ErrQuorum)}
		}
		r.cosigned = append(r.cosigned, res)
		if res.err != nil && r.err == nil {
			r.err = res.err
			// The ledger passed its own checks: what fails is its
			// checkpoint, without the cosignatures asked for.
			r.segments, r.tree, r.index = partOK, partOK, partOK
		}
	}
	ck, err := db.LatestCheckpoint(r.Name)
	if err != nil {
		ck = engine.Checkpoint{}
	}
	check("latest", fmt.Sprintf("the latest checkpoint of ledger %s (size %d)", r.Name, ck.Size), ck.Size, ck.Note)
	if cp != nil {
		check(cp.file, "checkpoint "+strconv.Quote(cp.file), cp.Size, cp.note)
	}
}

// verifyCosignJSON is a cosignResult in verify's JSON.
type verifyCosignJSON struct {
	Checkpoint string   `json:"checkpoint"`
	Size       uint64   `json:"size"`
	Quorum     int      `json:"quorum"`
	CosignedBy []string `json:"cosigned_by"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
}

func (c *cosignResult) json() verifyCosignJSON {
	j := verifyCosignJSON{Checkpoint: c.checkpoint, Size: c.size, Quorum: c.quorum, CosignedBy: []string{}, OK: c.err == nil}
	for _, f := range c.found {
		j.CosignedBy = append(j.CosignedBy, f.Key)
	}
	if c.err != nil {
		j.Error = errorLine(c.err)
	}
	return j
}

// checked says in words what the policy found of the checkpoint.
func (c *cosignResult) checked() string {
	which := "the latest signed checkpoint"
	if c.checkpoint != "latest" {
		which = "checkpoint " + strconv.Quote(c.checkpoint)
	}
	s := fmt.Sprintf("%s (size %d): %d valid tlog witness cosignatures, quorum %d", which, c.size, len(c.found), c.quorum)
	if c.err != nil {
		return s + ": FAILED"
	}
	return s + ": ok"
}

// checkpointCheck is verify --checkpoint: a checkpoint file, and the result
// of proving that a ledger still extends it.
type checkpointCheck struct {
	file string
	key  string // --key, "" for the data directory's
	note []byte
	// The checkpoint's body, read without checking the signature (the
	// engine checks it): what the result says was checked. parseErr
	// when it is not a checkpoint.
	tree.Checkpoint
	parseErr error
	// The outcome: the key used, and err (nil: the ledger extends it).
	usedKey string
	err     error
}

// readCheckpointCheck reads the checkpoint file of verify --checkpoint,
// and --key (keyArg) if given.
func readCheckpointCheck(file, key string) (*checkpointCheck, error) {
	c := &checkpointCheck{file: file}
	if key != "" {
		var err error
		if c.key, err = keyArg(key); err != nil {
			return nil, err
		}
	}
	note, err := readCheckpointFile("--checkpoint", file)
	if err != nil {
		return nil, err
	}
	c.note = note
	c.Checkpoint, c.parseErr = tree.ParseCheckpoint(noteText(note))
	return c, nil
}

// noteText returns a signed note's text, the part that is signed: what
// precedes the empty line before the signatures.
func noteText(note []byte) []byte {
	if i := bytes.Index(note, []byte("\n\n")); i >= 0 {
		return note[:i+1]
	}
	return note
}

// run proves that the ledger of r extends the checkpoint, and records the
// outcome in r: a failure fails the ledger.
func (c *checkpointCheck) run(ctx context.Context, db *engine.DB, r *verifyResult) {
	c.usedKey = c.key
	if c.usedKey == "" {
		c.usedKey = db.VerifierKey()
	}
	c.err = db.VerifyCheckpoint(ctx, r.Name, c.note, c.key)
	r.checkpoint = c
	if c.err != nil && r.err == nil {
		r.err = fmt.Errorf("checkpoint %s: %w", strconv.Quote(c.file), c.err)
		// The ledger passed its own checks: what fails is the ledger
		// against the checkpoint (its events, or the tree file).
		r.segments, r.tree, r.index = partOK, partOK, partOK
		switch {
		case errors.Is(c.err, engine.ErrTreeDamaged):
			r.tree = partDamaged
		case errors.Is(c.err, engine.ErrRewritten):
			r.segments = partRewritten
		}
	}
}

// checkpointJSON is the checkpoint part of a verify result in JSON.
type verifyCheckpointJSON struct {
	File   string `json:"file"`
	Origin string `json:"origin,omitempty"`
	Size   uint64 `json:"size,omitempty"`
	Root   string `json:"root,omitempty"`
	Key    string `json:"key"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

func (c *checkpointCheck) json() *verifyCheckpointJSON {
	j := &verifyCheckpointJSON{File: c.file, Key: c.usedKey, OK: c.err == nil}
	if c.parseErr == nil {
		j.Origin, j.Size, j.Root = c.Origin, c.Size, b64(c.Root)
	}
	if c.err != nil {
		j.Error = errorLine(c.err)
	}
	return j
}

// checked says in words what the checkpoint check covered.
func (c *checkpointCheck) checked() string {
	what := fmt.Sprintf("signed checkpoint %s", strconv.Quote(c.file))
	if c.parseErr == nil {
		what += fmt.Sprintf(" (origin %s, size %d, root %s)", c.Origin, c.Size, b64(c.Root))
	}
	what += " signed by key " + c.usedKey
	if c.err != nil {
		return what + ": FAILED (the error says what differs)"
	}
	return fmt.Sprintf("%s: ok, the ledger extends it (its first %d events have that root)", what, c.Size)
}

// verifyResult is the outcome of verifying one ledger.
type verifyResult struct {
	Name   string
	ID     string
	Events uint64
	Head   eventid.ID
	// What was checked: every record (full), or the records from
	// checkedFrom to checkedTo (0, 0: not known; checkedFrom above
	// checkedTo: none, the checkpoint being the head) and the head.
	full                   bool
	checkedFrom, checkedTo uint64
	err                    error
	// The parts' results when err is not nil: partOK, partFailed or
	// partRewritten (the segments), partDamaged (the tree file, the
	// index) or partUnchecked.
	segments, tree, index string
	// checkpoint: verify --checkpoint's check of the ledger (nil without).
	checkpoint *checkpointCheck
	// cosigned: verify --witness's policy applied to the ledger's
	// checkpoints (none without).
	cosigned []cosignResult
	// What --full checked of the Merkle tree: the tree file's leaves
	// against the events (treeSize), and the latest signed checkpoint
	// (latestSize 0: none yet).
	treeSize, latestSize uint64
	latestOrigin         string
	// What --full did not compare (the tree file missing, the index in a
	// writer's use...), and notes saying why, on standard error.
	treeUnchecked, indexUnchecked bool
	notes                         []string
}

// Results of a ledger's parts.
const (
	partOK        = "ok"
	partFailed    = "failed"
	partDamaged   = "damaged"
	partRewritten = "rewritten"
	partUnchecked = "-"
)

// indexRebuildHint says how the index is rebuilt: annal reindex (Open
// with engine.Options.RebuildIndex), or Open, which rebuilds a missing
// index from the segments.
const indexRebuildHint = "annal reindex --dir DIR rebuilds it from the segments"

// isIndexError reports whether err is a failure of the index alone: a
// file of the index's store that fails its checksum, an entry that does
// not decode, a store that failed, or the index disagreeing with segments
// that verified (engine.DB.Verify checks the segments first, and compares
// the index with them only when they verify).
//
// The engine has no sentinel for the last case; its message is matched.
func isIndexError(err error) bool {
	if errors.Is(err, engine.ErrIndexDamaged) || errors.Is(err, index.ErrCorruption) || errors.Is(err, index.ErrFailed) || pebble.IsCorruptionError(err) ||
		pebble.ExtractDataCorruptionInfo(err) != nil {
		return true
	}
	msg := err.Error()
	return errors.Is(err, segment.ErrCorruption) &&
		(strings.Contains(msg, ": the index disagrees with the segments") || strings.Contains(msg, ": the index has "))
}

// indexDamaged is the error verify reports for a ledger whose index alone
// is damaged: one line that says so, what the events are and how the index
// is rebuilt.
func indexDamaged(dir string, err error, events uint64, full bool) error {
	// The engine's ErrIndexDamaged says the same for a library's user; the
	// command says it once, in its own words, around the cause.
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) && errors.Is(err, engine.ErrIndexDamaged) {
		for _, e := range joined.Unwrap() {
			if e != engine.ErrIndexDamaged {
				err = e
			}
		}
	}
	detail := errorLine(err)
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil && !strings.Contains(detail, info.Path) {
		detail += " (" + info.Path + ")"
	}
	intact := "the events in the segments are intact (the tail was checked when the directory was opened; verify --full checks every record)"
	if full {
		intact = fmt.Sprintf("the %d events in the segments are intact (every record verified)", events)
	}
	return fmt.Errorf("the index is damaged: %s; %s; the index is derived from them: %s", detail, intact,
		strings.ReplaceAll(indexRebuildHint, "DIR", dir))
}

// verifier verifies ledgers one after the other.
type verifier struct {
	db    *engine.DB
	dir   string
	full  bool
	meter *meter // nil: no progress shown
	done  int64  // bytes of the ledgers verified before
}

// newVerifyMeter returns a meter over the segment bytes of ledgers, drawn
// on w (nil: nowhere), with the rate and the time left.
func newVerifyMeter(w io.Writer, ledgers []engine.LedgerInfo) *meter {
	var total int64
	for _, l := range ledgers {
		total += l.Bytes
	}
	return newMeter(w, "verify", total, meterBytes)
}

func (v *verifier) verify(ctx context.Context, l *engine.LedgerInfo) verifyResult {
	r := verifyResult{Name: l.Name, ID: l.ID.String()}
	v.meter.describe("verify " + safeName(l.Name))
	if v.full {
		var progress func(records, bytes int64)
		if v.meter != nil {
			indexing := false
			progress = func(records, bytes int64) {
				v.meter.set(v.done + min(bytes, l.Bytes))
				if records >= int64(l.Count) && !indexing {
					// Every record is verified. Verify now reads the
					// segments again beside the index, which reports
					// no progress (a quarter of the time or so): say
					// so, rather than leave the bar at its last frame
					// (drawn at most every 100 ms, it stalled at
					// 70-82%).
					indexing = true
					v.meter.showPhase("verify " + safeName(l.Name) + ": segments ok; checking the index against them")
				}
			}
		}
		rep, err := v.db.Verify(ctx, l.Name, progress)
		r.Events, r.Head, r.err = rep.Events, rep.Head, err
		r.full, r.checkedFrom, r.checkedTo = true, 1, rep.Events
		r.treeSize, r.latestSize, r.latestOrigin = rep.TreeSize, rep.CheckpointSize, rep.CheckpointOrigin
		if rep.TreeNotChecked != "" {
			r.treeUnchecked = true
			r.notes = append(r.notes, "the Merkle tree file was not checked: "+rep.TreeNotChecked)
		}
		if rep.IndexNotChecked != "" {
			r.indexUnchecked = true
			r.notes = append(r.notes, "the index was not checked: "+rep.IndexNotChecked)
		}
	} else {
		// The read-only open verified every record of the ledger, its
		// durable witness and its signed checkpoint (signature and root).
		r.Events, r.Head = l.Count, l.Head
		r.checkedFrom, r.checkedTo = 1, l.Count
		if cp, err := v.db.LatestCheckpoint(l.Name); err == nil {
			r.latestSize, r.latestOrigin = cp.Size, cp.Origin
		}
	}
	v.done += l.Bytes
	v.meter.set(v.done)
	switch {
	case r.err == nil:
	case errors.Is(r.err, engine.ErrTreeDamaged):
		// The events verified and agree with the signed checkpoint; the
		// tree file, derived from them, does not.
		r.Events, r.Head = l.Count, l.Head
		r.segments, r.tree, r.index = partOK, partDamaged, partUnchecked
	case errors.Is(r.err, engine.ErrRewritten):
		r.segments, r.tree, r.index = partRewritten, partUnchecked, partUnchecked
	case isIndexError(r.err):
		// The segments verified: with --full, Verify reads every record
		// before it compares the index (and nothing appends meanwhile,
		// this process having the directory to itself); without it, Open
		// verified the tail. Their count and head are the ledger's.
		r.Events, r.Head = l.Count, l.Head
		r.segments, r.tree, r.index = partOK, partOK, partDamaged
		r.err = indexDamaged(v.dir, r.err, l.Count, v.full)
	case v.full:
		r.segments, r.tree, r.index = partFailed, partUnchecked, partUnchecked
	default:
		// The quick check reads the head and the genesis event through
		// the index; what failed is not known to be either part.
		r.segments, r.tree, r.index = partUnchecked, partUnchecked, partUnchecked
	}
	return r
}

// environmentError reports whether err, a ledger's failure, is an error of
// the system rather than of the data (exit 1, not 3): a file annal may not
// open, too many open files, a full or read-only disk, no memory, the
// signing key missing (the checkpoints cannot be checked: the writer's
// Open refuses the directory, exit 1); and not also a data failure
// (dataFailure).
func environmentError(err error) bool {
	if dataFailure(err) {
		return false
	}
	return errors.Is(err, engine.ErrSigningKeyMissing) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOMEM)
}

// findUnavailable finds the ledger arg (a name or a ledger ID) among those
// the open refused (DB.Unavailable), which are known by their name, or by
// their ID when the metadata did not know the name: by the other key too,
// through the ledger's NAME file (DIR/ledgers/<ID>/NAME) or the ID its
// error names. It returns the ledger's name and ID (either may be ""), and
// why it was refused.
func findUnavailable(db *engine.DB, dir, arg string) (name, id string, why error, ok bool) {
	bad := db.Unavailable()
	nameOf := func(id string) string {
		b, err := os.ReadFile(filepath.Join(dir, "ledgers", id, "NAME"))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if lid, err := eventid.ParseLedgerID(arg); err == nil {
		id = lid.String()
		for _, key := range []string{id, nameOf(id)} {
			if e, found := bad[key]; found && key != "" {
				return key, id, e, true
			}
		}
		for key, e := range bad {
			if strings.Contains(e.Error(), "ledger "+id+":") || strings.Contains(e.Error(), "ledger "+id+" ") {
				return key, id, e, true
			}
		}
		return arg, id, nil, false
	}
	if e, found := bad[arg]; found {
		id := idOfName(dir, arg, nameOf)
		if m := refusedIDPattern.FindStringSubmatch(e.Error()); id == "" && m != nil {
			id = m[1] // the NAME file cannot be read: the ID the error names
		}
		return arg, id, e, true
	}
	if id := idOfName(dir, arg, nameOf); id != "" {
		if e, found := bad[id]; found {
			return arg, id, e, true
		}
	}
	return arg, "", nil, false
}

// refusedIDPattern finds the ID in the error of a refused ledger
// ("engine: ledger unavailable: ledger LLLLLLLL: …").
var refusedIDPattern = regexp.MustCompile(`ledger unavailable: ledger ([0-9a-f]{8})\b`)

// idOfName returns the ID of the ledger whose NAME file holds name, or "".
func idOfName(dir, name string, nameOf func(string) string) string {
	entries, err := os.ReadDir(filepath.Join(dir, "ledgers"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if _, err := eventid.ParseLedgerID(e.Name()); err == nil && e.IsDir() && nameOf(e.Name()) == name {
			return e.Name()
		}
	}
	return ""
}

// verifyJSON is a verify result in JSON output.
type verifyJSON struct {
	Name        string  `json:"name"`
	ID          string  `json:"id"`
	OK          bool    `json:"ok"`
	Events      uint64  `json:"events"`
	Head        string  `json:"head,omitempty"`
	Full        bool    `json:"full"`
	Checked     string  `json:"checked"`
	CheckedFrom *uint64 `json:"checked_from,omitempty"`
	CheckedTo   *uint64 `json:"checked_to,omitempty"`
	Error       string  `json:"error,omitempty"`
	Segments    string  `json:"segments,omitempty"` // on a failure
	Tree        string  `json:"tree,omitempty"`     // on a failure
	Index       string  `json:"index,omitempty"`    // on a failure
	// With --full: the leaves of the tree file compared with the events,
	// and the latest signed checkpoint checked against them (absent: none).
	TreeSize               uint64 `json:"tree_size,omitempty"`
	LatestCheckpointSize   uint64 `json:"latest_checkpoint_size,omitempty"`
	LatestCheckpointOrigin string `json:"latest_checkpoint_origin,omitempty"`
	// Checkpoint: with --checkpoint, what was checked and its result.
	Checkpoint *verifyCheckpointJSON `json:"checkpoint,omitempty"`
	// Cosignatures: with --witness, the policy's result for each
	// checkpoint it was applied to.
	Cosignatures []verifyCosignJSON `json:"cosignatures,omitempty"`
}

// fullHint is what the quick check's results say about the rest.
const fullHint = "run annal verify --full to check the Merkle tree file and the index against them too"

// checked says in words what the check of a ledger covered.
func (r *verifyResult) checked() string {
	switch {
	case r.full && r.checkedTo > 0 && r.err == nil:
		return fmt.Sprintf("every record (events #1..#%d), %s, and %s", r.checkedTo, r.treeChecked(), r.indexChecked())
	case r.full && r.checkedTo > 0:
		return fmt.Sprintf("every record (events #1..#%d, intact), and the index against the segments (failed)", r.checkedTo)
	case r.full:
		return "every record, until the failure"
	case r.checkedTo == 0:
		return "every record, as every read-only open verifies them, the durable witness and the latest signed checkpoint, until the failure"
	}
	return fmt.Sprintf("every record (events #%d..#%d: frame CRCs, event checksums, chain links, as every read-only open verifies them), the durable witness and %s; %s", r.checkedFrom, r.checkedTo, r.latestChecked(), fullHint)
}

// latestChecked says what the quick check checked of the latest signed
// checkpoint.
func (r *verifyResult) latestChecked() string {
	if r.latestSize == 0 {
		return "no signed checkpoint (a ledger of its genesis event alone)"
	}
	return fmt.Sprintf("the latest signed checkpoint (%s, size %d: its signature and its root against the events)", r.latestOrigin, r.latestSize)
}

// indexChecked says whether verify --full compared the index.
func (r *verifyResult) indexChecked() string {
	if r.indexUnchecked {
		return "not the index (see the note)"
	}
	return "the index against the segments"
}

// treeChecked says what verify --full checked of the Merkle tree.
func (r *verifyResult) treeChecked() string {
	s := fmt.Sprintf("the Merkle tree file against them (%d leaves)", r.treeSize)
	if r.treeUnchecked {
		s = "not the Merkle tree file (see the note)"
	}
	if r.latestSize == 0 {
		return s + ", no signed checkpoint yet"
	}
	return fmt.Sprintf("%s and the latest signed checkpoint (%s, size %d: its signature and its root)", s, r.latestOrigin, r.latestSize)
}

// checkedColumn is what was checked in verify's table.
func (r *verifyResult) checkedColumn() string {
	switch {
	case r.full:
		return "all"
	case r.checkedTo == 0:
		return "records"
	}
	return fmt.Sprintf("#%d..#%d", r.checkedFrom, r.checkedTo)
}

func (r *verifyResult) json() verifyJSON {
	j := verifyJSON{Name: r.Name, ID: r.ID, OK: r.err == nil, Events: r.Events, Full: r.full, Checked: r.checked()}
	if !r.Head.IsZero() {
		j.Head = r.Head.String()
	}
	if r.checkedTo > 0 && r.checkedFrom <= r.checkedTo {
		j.CheckedFrom, j.CheckedTo = &r.checkedFrom, &r.checkedTo
	}
	if r.err != nil {
		j.Error = errorLine(r.err)
		j.Segments, j.Tree, j.Index = r.segments, orDash(r.tree), r.index
	}
	if r.full && r.err == nil {
		j.TreeSize, j.LatestCheckpointSize, j.LatestCheckpointOrigin = r.treeSize, r.latestSize, r.latestOrigin
	}
	if r.checkpoint != nil {
		j.Checkpoint = r.checkpoint.json()
		j.Checked += "; and the ledger against " + r.checkpoint.checked()
	}
	for i := range r.cosigned {
		j.Cosignatures = append(j.Cosignatures, r.cosigned[i].json())
		j.Checked += "; and the cosignatures of " + r.cosigned[i].checked()
	}
	return j
}

// tablePart is a part's result in verify's table: a failure in capitals.
func tablePart(s string) string {
	if s == partOK || s == partUnchecked {
		return s
	}
	return strings.ToUpper(s)
}

func writeVerifyResults(w io.Writer, format string, results []verifyResult, full bool) error {
	switch format {
	case formatTable:
		tw := newTable(w)
		fmt.Fprintln(tw, "NAME\tID\tEVENTS\tHEAD\tCHECKED\tSEGMENTS\tTREE\tINDEX\tRESULT")
		for _, r := range results {
			j := r.json()
			result, segments, tree, index := "ok", "ok", "ok", "ok"
			if r.treeUnchecked {
				tree = partUnchecked
			}
			if r.indexUnchecked {
				index = partUnchecked
			}
			if !j.OK {
				result, segments, tree, index = "FAILED", tablePart(j.Segments), tablePart(j.Tree), tablePart(j.Index)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", safeName(j.Name), orDash(j.ID), j.Events, orDash(j.Head), r.checkedColumn(), segments, tree, index, result)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var err error
		if full {
			_, err = fmt.Fprintln(w, "checked: every record of every segment (all), the Merkle tree file against the events and the latest signed checkpoint against both, and the index against the segments (a note on standard error says what was not)")
		} else {
			_, err = fmt.Fprintf(w, "checked: every record of each ledger (CHECKED: the events read, #N..#M), as every read-only open verifies them, its durable witness and its latest signed checkpoint (signature and root); %s\n", fullHint)
		}
		for _, r := range results {
			if r.checkpoint != nil && err == nil {
				_, err = fmt.Fprintf(w, "checked: ledger %s against %s\n", safeName(r.Name), safeText(r.checkpoint.checked()))
			}
			for i := range r.cosigned {
				if err == nil {
					_, err = fmt.Fprintf(w, "checked: ledger %s: %s\n", safeName(r.Name), safeText(r.cosigned[i].checked()))
				}
			}
		}
		return err
	case formatJSON:
		out := make([]verifyJSON, 0, len(results))
		for i := range results {
			out = append(out, results[i].json())
		}
		return writeJSON(w, format, out)
	}
	for i := range results {
		if err := writeJSON(w, format, results[i].json()); err != nil {
			return err
		}
	}
	return nil
}
