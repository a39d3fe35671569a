package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
)

// The evidence a read-only DB checks each ledger against when it opens it,
// so that it agrees with the writer's Open on whether the ledger is whole
// (docs/recovery.md, "What a read-only open checks"):
//
//  1. the durable witness (the metadata's record, and the index's marker
//     when no writer holds the directory): the segments must hold it
//     (segment.Log.CheckWitness); otherwise "acknowledged events lost";
//  2. the checkpoint file: signed by the directory's key for this ledger
//     (checkCheckpointFile, as recoverTree), of no more events than the
//     segments show, and the root of the first Size events, computed from
//     the segments, equal to the signed one (rewrittenError);
//  3. a ledger of more than its genesis event has a checkpoint file
//     (CreateLedger and Import sign one before they return);
//  4. the signer's state file (beside the key file: signing.key.state), if
//     it can be read, holds no larger checkpoint of the ledger's origin
//     than its checkpoint file: a smaller one was rolled back.
//
// A ledger that fails one is unavailable (Unavailable), as with Open.

// signerStateSuffix names a key file's state file: <key file>.state.
const signerStateSuffix = ".state"

// maxSignerState bounds what a reader reads of a signer's state file.
const maxSignerState = 16 << 20

// signedState is what a signer's state file says it last signed for an
// origin.
type signedState struct {
	size uint64
	root tree.Hash
}

// readSignerState reads the signer's state file at path: one line per
// origin, "<origin> <size> <base64 root>". nil if it is missing or cannot
// be read or parsed: rule 4 is then not applied.
func readSignerState(db *DB, path string) map[string]signedState {
	b, err := readSmallFile(db.fs, path, maxSignerState)
	if err != nil {
		return nil
	}
	out := map[string]signedState{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxCheckpointFile)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil
		}
		size, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(f[2])
		var root tree.Hash
		if err != nil || len(raw) != len(root) {
			return nil
		}
		copy(root[:], raw)
		out[f[0]] = signedState{size: size, root: root}
	}
	if sc.Err() != nil {
		return nil
	}
	return out
}

// signerStatePath returns the state file of the DB's signer: beside
// DIR/signing.key, or "" for an Options.Signer (its state, if it keeps
// one, is its own).
func (db *DB) signerStatePath() string {
	if db.opts.Signer != nil {
		return ""
	}
	return filepath.Join(db.dir, signingKeyFile+signerStateSuffix)
}

// loadReaderKey sets the key with which a read-only DB checks the
// checkpoints: Options.Signer's, or DIR/signing.key's, read and never
// created. A key file that is missing or cannot be read leaves none
// (keyErr says why): every ledger with a checkpoint is then refused, as
// the writer's Open refuses it with the new key it would create. A key
// file that others can read, or malformed, fails the open, as it fails
// the writer's.
func (db *DB) loadReaderKey() error {
	if db.opts.Signer != nil {
		return db.loadKey()
	}
	path := filepath.Join(db.dir, signingKeyFile)
	k, err := tree.LoadKey(db.fs, path)
	if errors.Is(err, tree.ErrKey) {
		return fmt.Errorf("engine: the signing key %s: %w", path, err)
	}
	if err != nil {
		db.keyErr = err
		return nil
	}
	db.key = k
	if db.verifier, err = tree.NewVerifier(k.Verifier); err != nil {
		return fmt.Errorf("engine: the signing key's verifier %q: %w", k.Verifier, err)
	}
	return nil
}

// keyMissingText says why a read-only DB has no key to check a checkpoint
// with, and the cure.
func (db *DB) keyMissingText() string {
	path := filepath.Join(db.dir, signingKeyFile)
	if errors.Is(db.keyErr, os.ErrNotExist) {
		return fmt.Sprintf("there is no %s (the key that signed the ledger's checkpoints was lost or moved): restore that key to accept the ledger with its checkpoints", path)
	}
	return fmt.Sprintf("the key file cannot be read (%v)", db.keyErr)
}

// readerEvidence is what a read-only open reads of a ledger before it
// opens its segments: the signer's state, then the checkpoint file, in
// that order (a writer writes them in the other order: a checkpoint file
// read after the state is never older than the state, unless rolled back).
type readerEvidence struct {
	state   map[string]signedState
	ckPath  string
	msg     []byte
	readErr error
}

func (db *DB) readEvidence(id eventid.LedgerID) readerEvidence {
	var ev readerEvidence
	if p := db.signerStatePath(); p != "" {
		ev.state = readSignerState(db, p)
	}
	ev.ckPath = db.fs.PathJoin(db.ledgerDir(id), checkpointFileName)
	ev.msg, ev.readErr = readSmallFile(db.fs, ev.ckPath, maxCheckpointFile)
	return ev
}

// lostEverySegment is the refusal of a ledger whose segments are all gone
// while its witness w says events were durable (dir: its directory).
func lostEverySegment(dir string, w segment.Head) error {
	return &segment.CorruptionError{File: dir, Problem: fmt.Sprintf("every segment is missing: acknowledged events lost: events up to #%d (%s) were durable", w.Seq, w.ID),
		Expected: fmt.Sprintf("segments holding events 1 to %d", w.Seq), Found: "no segment file"}
}

// roWitness returns the durable witness of ledger id for a read-only DB:
// the later of its metadata record's (the snapshot taken at the open) and
// the index's marker (read at the open when no writer held the directory).
func (db *DB) roWitness(id eventid.LedgerID) segment.Head {
	var w segment.Head
	if m, ok := db.ro.known[id]; ok {
		w = m.Witness
	}
	if d, ok := db.ro.idxWitness[id]; ok && d.Seq > w.Seq {
		w = d
	}
	return w
}

// readIndexWitnesses returns the durable witness in the writer's index of
// each ledger of ids, if no writer holds the directory (a live writer's
// metadata file is current, and its index cannot be opened), or nil. The
// directory is held (its flock, as a writer takes it) while the index is
// read, read-only, so that no writer opens it meanwhile: a writer that
// starts then is refused (ErrLocked) for those few milliseconds.
func (db *DB) readIndexWitnesses(ids []eventid.LedgerID) map[eventid.LedgerID]segment.Head {
	if db.opts.fs != nil || len(ids) == 0 {
		return nil
	}
	dir, err := filepath.EvalSymlinks(db.dir)
	if err != nil {
		return nil
	}
	hold, err := lockDir(dir)
	if err != nil {
		return nil // a writer holds it, or no flock
	}
	defer hold.Close()
	x, err := openIndexReadOnly(dir)
	if err != nil {
		return nil
	}
	defer x.Close()
	return indexWitnesses(x, ids)
}

// openIndexReadOnly opens the index of the data directory dir read-only:
// nothing is created or written (a missing index is an error).
func openIndexReadOnly(dir string) (*index.Index, error) {
	path := filepath.Join(dir, indexDir)
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", path)
	}
	if _, err := os.Stat(filepath.Join(path, "LOCK")); err != nil {
		return nil, err // Pebble's open would create it
	}
	return index.Open(path, index.Options{ReadOnly: true, CacheSize: 8 << 20})
}

// indexWitnesses returns the durable witness in x of each ledger of ids.
func indexWitnesses(x *index.Index, ids []eventid.LedgerID) map[eventid.LedgerID]segment.Head {
	out := map[eventid.LedgerID]segment.Head{}
	for _, id := range ids {
		if d, ok, err := x.Durable(id); err == nil && ok {
			out[id] = d
		}
	}
	return out
}

// openWriterIndex opens, for Options.VerifyIndex, the writer's index
// read-only and holds the directory until Close, or says why not.
func (db *DB) openWriterIndex() {
	if db.opts.fs != nil {
		db.ro.wIdxWhy = "a test's file system"
		return
	}
	dir, err := filepath.EvalSymlinks(db.dir)
	if err != nil {
		db.ro.wIdxWhy = err.Error()
		return
	}
	hold, err := lockDir(dir)
	if err != nil {
		db.ro.wIdxWhy = "a writer holds the data directory (its index is in use; stop it, or verify a copy made with annal backup, to check the index)"
		if errors.Is(err, errors.ErrUnsupported) {
			db.ro.wIdxWhy = "no flock on this system: a writer may have the index open"
		}
		return
	}
	x, err := openIndexReadOnly(dir)
	if errors.Is(err, os.ErrNotExist) {
		hold.Close()
		db.ro.wIdxWhy, db.ro.wIdxMissing = "the index "+filepath.Join(db.dir, indexDir)+" is missing: the next writer's open rebuilds it from the segments", true
		return
	}
	if err != nil {
		hold.Close()
		db.ro.wIdxWhy, db.ro.wIdxMissing = fmt.Sprintf("the index cannot be opened (%v): the next writer's open rebuilds it from the segments, or annal reindex", err), true
		return
	}
	db.ro.wIdx, db.ro.wHold = x, hold
}

// How long a read-only open waits for a writer that is signing: between
// its state file and its checkpoint file (rule 4).
const (
	stateRetries    = 5
	stateRetryPause = 20 * time.Millisecond
)

// checkReaderEvidence checks the checkpoint evidence of ledger l, whose
// segments a read-only DB opened after it read ev (rules 2 to 4 above),
// and keeps the checkpoint as the ledger's latest.
func (db *DB) checkReaderEvidence(l *ledger, ev readerEvidence) error {
	id := l.meta.ID
	name := l.meta.Name // the genesis event's, or the metadata's
	if m, ok := db.ro.known[id]; ok && m.Name != "" {
		name = m.Name
	}
	head := l.log.Head().Seq
	ck, err := db.checkCheckpointFile(ev.ckPath, ev.msg, ev.readErr, id, head)
	if err == nil && ck == nil && head > 1 {
		// A writer's CreateLedger or Import signs before its first
		// append: the checkpoint, read before the segments, is there now.
		// It may cover events after what the segments showed: look again.
		if ev.msg, ev.readErr = readSmallFile(db.fs, ev.ckPath, maxCheckpointFile); ev.readErr == nil {
			l.log.Follow()
			head = l.log.Head().Seq
		}
		ck, err = db.checkCheckpointFile(ev.ckPath, ev.msg, ev.readErr, id, head)
	}
	if err != nil {
		return err
	}
	if ck == nil && head > 1 {
		return fmt.Errorf("%w: %s is missing, and the ledger holds %d events (more than its genesis event): its signed checkpoint was removed, or the ledger restored without it, and nothing vouches for the events; restore the checkpoint file, or run annal checkpoint --accept %s to sign the ledger as it is now",
			ErrRewritten, ev.ckPath, head, name)
	}
	for try := 0; ; try++ {
		err := rolledBack(ev, ck, head, id, name, db.signerStatePath())
		if err == nil {
			break
		}
		if try == stateRetries {
			return err
		}
		// A writer between its state file and its checkpoint file.
		time.Sleep(stateRetryPause)
		ev2 := db.readEvidence(id)
		if ev2.readErr == nil {
			l.log.Follow()
			head = l.log.Head().Seq
		}
		ck2, err2 := db.checkCheckpointFile(ev2.ckPath, ev2.msg, ev2.readErr, id, head)
		if err2 != nil {
			return err2
		}
		if ck2 != nil {
			ev, ck = ev2, ck2
		} else {
			ev.state = ev2.state
		}
	}
	if ck == nil {
		return nil
	}
	root, _, err := l.segmentsRoot(context.Background(), nil, ck.Size)
	if err != nil {
		return err
	}
	if root != ck.Root {
		return rewrittenError(ev.ckPath, ck, root)
	}
	l.latest.Store(ck)
	return nil
}

// rolledBack applies rule 4: the signer's state (ev.state, nil: not
// applied) must hold no larger checkpoint of the ledger's origin than its
// checkpoint file ck (nil: missing).
func rolledBack(ev readerEvidence, ck *Checkpoint, head uint64, id eventid.LedgerID, name, statePath string) error {
	if ev.state == nil {
		return nil
	}
	var origin string
	var have uint64
	var st signedState
	var found bool
	if ck != nil {
		origin, have = ck.Origin, ck.Size
		st, found = ev.state[origin]
	} else {
		suffix := "/" + id.String()
		for o, s := range ev.state {
			if strings.HasSuffix(o, suffix) {
				origin, st, found = o, s, true
				break
			}
		}
	}
	if !found || st.size <= have || ck == nil && head <= 1 && st.size <= 1 {
		// (A ledger of its genesis event alone without a checkpoint: a
		// crash inside CreateLedger after the state was written, which
		// the writer's Open signs again, at the same size and root.)
		return nil
	}
	what := fmt.Sprintf("is of size %d", have)
	if ck == nil {
		what = "is missing"
	}
	return fmt.Errorf("%w: the signer's state %s says it signed a checkpoint of size %d for %s, and the checkpoint file %s %s: the checkpoint was rolled back (or removed), with the ledger perhaps; restore the latest checkpoint file (and the events it covers), or run annal checkpoint --accept %s to sign the ledger as it is now",
		ErrRewritten, statePath, st.size, origin, ev.ckPath, what, name)
}
