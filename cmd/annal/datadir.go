package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// defaultDir is the data directory when neither --dir nor $ANNAL_DIR says.
const defaultDir = "./annal-data"

// globals are the flags every data-directory command shares.
type globals struct {
	dir        string // --dir, "" if not given
	format     string // --format, "" if not given
	cache      string // --cache, "" if not given
	signingKey string // --signing-key, "" if not given
	// replica and replication: --replica and --replication, "" if not
	// given (replica.go).
	replica, replication string
	publishTiles         bool
	// tlogWitnesses and tlogQuorum: --tlog-witness URL=KEY (repeated) and
	// --tlog-witness-quorum K (tlogwitness.go).
	tlogWitnesses []string
	tlogQuorum    int
}

// options returns the engine options the global flags ask for: the index
// memory budget of --cache, the key file of --signing-key (else
// $ANNAL_SIGNING_KEY), the replica of --replica (else $ANNAL_REPLICA) and
// --replication.
func (g *globals) options() (*engine.Options, error) {
	key := g.signingKey
	if key == "" {
		key = os.Getenv("ANNAL_SIGNING_KEY")
	}
	o := &engine.Options{SigningKeyFile: key}
	if err := g.replicaOptions(o); err != nil {
		return nil, err
	}
	if err := g.tlogWitnessOptions(o); err != nil {
		return nil, err
	}
	if g.cache == "" && key == "" && o.Replica == "" && len(o.TlogWitnesses) == 0 {
		return nil, nil
	}
	if g.cache != "" {
		n, err := parseSize(g.cache)
		if err != nil {
			return nil, usageErr("--cache: %v", err)
		}
		if n < engine.MinCacheSize {
			return nil, usageErr("--cache: %q is below the index's minimum, 8MiB", g.cache)
		}
		o.CacheSize = n
	}
	return o, nil
}

// sizeUnits are the units parseSize takes, case-insensitively, longest
// first. Every one is binary: annal writes sizes in IEC units (KiB, MiB,
// GiB: powers of 1024) everywhere, and reads KB, MB, GB, TB and K, M, G, T
// as the same (as PostgreSQL, Docker and the JVM read a memory size): a
// cache budget is never meant in powers of 1000.
var sizeUnits = []struct {
	name string
	n    int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

// sizeForms says which forms parseSize takes, for help and errors.
const sizeForms = "bytes, or a number with KiB, MiB, GiB or TiB (powers of 1024; KB, MB, GB, TB and K, M, G, T mean the same), such as 64MiB, 64MB, 64M or 67108864"

// parseSize parses a memory size: a whole number of bytes, or one followed
// by a unit of sizeUnits, as in "64MiB", "64MB", "64M". It must be above
// zero and at most 1 TiB.
func parseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	lower := strings.ToLower(num)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.name) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.name)]), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size above zero and at most 1TiB: want %s", s, sizeForms)
	}
	return n * mult, nil
}

// dataDir returns the data directory: --dir, else $ANNAL_DIR, else
// ./annal-data. An explicitly empty --dir is a usage error, so that a
// script's unset variable does not fall back to the default.
func (g *globals) dataDir(cmd *cobra.Command) (string, error) {
	if f := cmd.Flag("dir"); f != nil && f.Changed {
		if g.dir == "" {
			return "", usageErr("--dir: empty directory name")
		}
		return g.dir, nil
	}
	if d := os.Getenv("ANNAL_DIR"); d != "" {
		return d, nil
	}
	return defaultDir, nil
}

// Output formats.
const (
	formatTable  = "table"
	formatJSON   = "json"
	formatNDJSON = "ndjson"
)

// outputFormat returns --format, or, without it, table when standard output
// is a terminal and ndjson otherwise.
func (g *globals) outputFormat(cmd *cobra.Command) (string, error) {
	switch g.format {
	case formatTable, formatJSON, formatNDJSON:
		return g.format, nil
	case "":
		if isTerminal(cmd.OutOrStdout()) {
			return formatTable, nil
		}
		return formatNDJSON, nil
	}
	return "", usageErr("--format must be table, json or ndjson, not %q", g.format)
}

// isTerminal reports whether f (standard input, output or error) is a
// terminal.
func isTerminal(f any) bool {
	fd, ok := f.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(fd.Fd()))
}

// openDB opens the data directory for a command. Only create, import and demo (create set)
// may make a directory that does not exist; for every other command a
// missing directory, or one that holds no annal data, is an error, so that
// a mistyped --dir does not leave an empty data directory behind.
func (g *globals) openDB(cmd *cobra.Command, create bool) (*engine.DB, string, error) {
	dir, err := g.dataDir(cmd)
	if err != nil {
		return nil, "", err
	}
	if !create {
		if err := checkDataDir(dir); err != nil {
			return nil, dir, &exitErr{code: exitError, err: err}
		}
	}
	opts, err := g.options()
	if err != nil {
		return nil, dir, err
	}
	if !create && readsOnly(cmd) {
		return g.openReader(cmd, dir, opts)
	}
	// An Open that indexes many events (the index removed, or rebuilt
	// because it could not be opened) shows how far it is on a terminal;
	// one that has nothing to index draws nothing.
	var p *reindexProgress
	if w := progressTo(cmd.ErrOrStderr()); w != nil {
		if opts == nil {
			opts = &engine.Options{}
		}
		p = &reindexProgress{w: w}
		opts.Progress = p.update
	}
	db, err := engine.Open(dir, opts)
	p.clear()
	if err != nil {
		return nil, dir, openError(dir, err)
	}
	// Open reports a rename once (the new name is written): whichever
	// command opens the directory first must say it. The same for a
	// rebuilt index or metadata file: nothing is lost (both are derived
	// from the segments), but the operator should know it happened.
	for _, r := range db.Renamed() {
		fmt.Fprintf(cmd.ErrOrStderr(), "annal: %s\n", safeText(r.String()))
	}
	for _, why := range []error{db.IndexRebuilt(), db.MetaRebuilt()} {
		if why != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "annal: note: %s\n", safeText(errorLine(why)))
		}
	}
	// A tree file rebuilt from the segments (missing, damaged, another
	// ledger's, not the one the checkpoint vouches for): nothing is lost,
	// the rebuilt tree gave the signed root, but a tree file does not
	// change by itself.
	rebuilt := db.TreeRebuilt()
	names := make([]string, 0, len(rebuilt))
	for name := range rebuilt {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(cmd.ErrOrStderr(), "annal: note: ledger %s: %s\n", safeText(name), safeText(errorLine(rebuilt[name])))
	}
	return db, dir, nil
}

// openLedger opens the existing data directory (openDB) and looks up the
// ledger name (or ledger ID) in it. On success the caller closes db
// (closeDB); on failure it is closed, and the error has the exit code it
// calls for.
func (g *globals) openLedger(cmd *cobra.Command, name string) (*engine.DB, engine.LedgerInfo, string, error) {
	return g.openLedgerWith(cmd, name, func() (*engine.DB, string, error) { return g.openDB(cmd, false) })
}

// openLedgerWith is openLedger with the data directory opened by open.
func (g *globals) openLedgerWith(cmd *cobra.Command, name string, open func() (*engine.DB, string, error)) (*engine.DB, engine.LedgerInfo, string, error) {
	db, dir, err := open()
	if err != nil {
		return nil, engine.LedgerInfo{}, dir, err
	}
	info, err := db.Ledger(name)
	if err != nil {
		db.Close()
		return nil, engine.LedgerInfo{}, dir, ledgerError(dir, name, err)
	}
	return db, info, dir, nil
}

// checkDataDir says why dir is not an existing annal data directory, or
// returns nil if it is one.
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("data directory %s does not exist (annal create NAME makes it)", dir)
	case err != nil:
		return fmt.Errorf("data directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("data directory %s is not a directory", dir)
	}
	// The engine's rule (one of meta.db, index/, ledgers/ is enough, or
	// LOCK alone: Open recovers the rest), which its Open applies to a
	// non-empty directory too.
	ok, err := engine.IsDataDir(dir)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	if !ok {
		return fmt.Errorf("%s is not an annal data directory (it has no meta.db, ledgers/, index/ or LOCK)", dir)
	}
	return nil
}

// openError turns a failed engine.Open into the command's error.
func openError(dir string, err error) error {
	switch {
	case errors.Is(err, engine.ErrLocked):
		var le *engine.LockedError
		if errors.As(err, &le) {
			return &exitErr{code: exitError, err: &causeError{msg: fmt.Sprintf("data directory %s is in use by %s", dir, le.Holder()), err: err}}
		}
		// A lock on one of its files (meta.db, index/) held elsewhere.
		return &exitErr{code: exitError, err: fmt.Errorf("data directory %s is in use by another process: %w", dir, err)}
	case errors.Is(err, segment.ErrCorruption):
		return &exitErr{code: exitVerification, err: fmt.Errorf("open data directory %s: %w", dir, err)}
	case replicaRefusal(err):
		return &exitErr{code: exitReplica, err: fmt.Errorf("open data directory %s: %w", dir, err)}
	}
	return &exitErr{code: exitError, err: fmt.Errorf("open data directory %s: %w", dir, err)}
}

// causeError is an error whose message is msg and whose cause, for
// errors.Is and errors.As, is err (a message that says err in other words).
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

// closeDB closes db and folds a failure to close into the command's error.
func closeDB(db *engine.DB, err *error) {
	if cerr := db.Close(); cerr != nil && *err == nil {
		*err = &exitErr{code: exitError, err: fmt.Errorf("close: %w", cerr)}
	}
}

// closeDBStored is closeDB for a command that tells its user that what it
// did is stored (append prints IDs, create and import a ledger): once it
// has, a failure to close the data directory (on a full disk, the index's
// checkpoint or the metadata's write) must not read as a failed command,
// which would invite a retry that stores it twice. stored says, when the
// command is done, what is stored and is durable, or "" if nothing is;
// unsure says what was acknowledged but may not be durable, or "".
func closeDBStored(db *engine.DB, err *error, stderr io.Writer, stored, unsure func() string) {
	if cerr := db.Close(); cerr != nil {
		*err = closeOutcome(*err, cerr, stored(), unsure(), stderr)
	}
}

// closeOutcome decides how a command ends whose data directory failed to
// close (closeErr; nil if it closed): the command's own error wins; if the
// command stored something durable (stored), it succeeds, and a warning on
// stderr says that the close failed and that what it printed is stored;
// otherwise it fails (exit 1), saying what may not be durable (unsure).
func closeOutcome(cmdErr, closeErr error, stored, unsure string, stderr io.Writer) error {
	switch {
	case closeErr == nil || cmdErr != nil:
		return cmdErr
	case errors.Is(closeErr, engine.ErrSignerRefused) && stored != "":
		// The signer refused a ledger's checkpoint: what is stored is
		// not signed, and cannot be until the ledger is checked. Not a
		// warning: the command fails, saying what is stored.
		return &exitErr{code: exitError, err: fmt.Errorf("close: %w (%s, not signed)", closeErr, stored)}
	case stored != "":
		fmt.Fprintf(stderr, "annal: warning: closing the data directory failed: %s\nannal: warning: %s\n", errorText(closeErr), stored)
		return nil
	case unsure != "":
		return &exitErr{code: exitError, err: fmt.Errorf("close: %w (%s)", closeErr, unsure)}
	}
	return &exitErr{code: exitError, err: fmt.Errorf("close: %w", closeErr)}
}

// noStored is the stored or unsure of closeDBStored for nothing.
func noStored() string { return "" }

// dataFailure reports whether err says that stored data failed a check:
// segments (corruption, a lost tail), the Merkle tree or a signed
// checkpoint (rewritten, damaged, missing, rolled back, not signed by the
// key), the index, the metadata file.
func dataFailure(err error) bool {
	return errors.Is(err, segment.ErrCorruption) || errors.Is(err, engine.ErrRewritten) || errors.Is(err, engine.ErrTreeDamaged) ||
		errors.Is(err, engine.ErrUnsigned) || errors.Is(err, tree.ErrCheckpoint) ||
		errors.Is(err, tree.ErrCorrupt) || errors.Is(err, engine.ErrMetaDamaged) || isIndexError(err)
}

// unavailableCode is the exit code of a command refused a ledger that
// the open refused (err): 3 if its data failed verification, else 1.
func unavailableCode(err error) int {
	if replicaRefusal(err) {
		return exitReplica
	}
	if dataFailure(err) {
		return exitVerification
	}
	return exitError
}

// ledgerError turns an engine error about the ledger name (or about no
// ledger in particular, for "") into the command's error, with the exit code
// it calls for.
func ledgerError(dir, name string, err error) error {
	var ce *engine.ConditionError
	switch {
	case errors.As(err, &ce):
		return &exitErr{code: exitCondition, err: fmt.Errorf("ledger %s: condition failed (%s): expected %s, found %s; the ledger's head is %s",
			name, ce.Condition, idOrNone(ce.Expected), idOrNone(ce.Found), ce.Head)}
	case errors.Is(err, engine.ErrConditionFailed):
		return &exitErr{code: exitCondition, err: err}
	case errors.Is(err, engine.ErrIdempotencyMismatch):
		return &exitErr{code: exitIdempotency, err: err}
	case errors.Is(err, engine.ErrFenced):
		return &exitErr{code: exitReplica, err: fmt.Errorf("%w (another writer took the ledger: this directory is no longer its writer)", err)}
	case errors.Is(err, engine.ErrLedgerUnavailable) && name == "":
		return &exitErr{code: unavailableCode(err), err: fmt.Errorf("%w (annal verify says more)", err)}
	case name == "":
	case errors.Is(err, engine.ErrLedgerNotFound):
		return &exitErr{code: exitError, err: fmt.Errorf("no ledger %q in %s (annal ledgers lists them)", name, dir)}
	case errors.Is(err, engine.ErrLedgerUnavailable):
		return &exitErr{code: unavailableCode(err), err: fmt.Errorf("ledger %q cannot be read: %w (annal verify says more)", name, err)}
	}
	if isIndexError(err) {
		return &exitErr{code: exitError, err: fmt.Errorf("%w; the index is damaged, not the events in the segments: it is derived from them: %s", err,
			strings.ReplaceAll(indexRebuildHint, "DIR", dir))}
	}
	return &exitErr{code: exitError, err: err}
}
