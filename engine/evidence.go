package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// ledgerEvidence is what judgeEvidence weighs for one ledger.
type ledgerEvidence struct {
	Ledger eventid.LedgerID
	// Name names the ledger in the cure ("annal checkpoint --accept
	// NAME"); "" means the ledger ID.
	Name string
	// Path is the checkpoint file's path, for messages; Note its bytes,
	// nil if there is no checkpoint file.
	Path string
	Note []byte
	// Verifier is the directory's key (the signer's).
	Verifier note.Verifier
	// Signed is what the signer's state holds for the ledger's origin;
	// nil if nothing (or the state cannot be read).
	Signed *tree.Checkpoint
	// Head is the number of events the segments hold (recovered,
	// verified against the durable witness).
	Head uint64
	// RootAt returns the Merkle root of the first n events of the
	// segments (1 <= n <= Head), called only once the checks that need
	// no root passed: at the checkpoint's size, then at the signer's.
	RootAt func(n uint64) (tree.Hash, error)
}

// judgeEvidence applies to one ledger the checkpoint evidence that every
// open applies (the writer's Open, the read-only open, verify):
//
//   - the checkpoint file, if present, must verify with the key (every
//     signature line by the key must verify), be of this ledger, cover no
//     more events than the segments hold, and its root must be the
//     segments' root at its size (ErrRewritten otherwise);
//   - a ledger of more than its genesis event without a checkpoint file
//     is refused (ErrUnsigned): CreateLedger and Import sign their first
//     checkpoint before they return, so its loss is no crash's doing;
//   - if the signer's state holds the ledger's origin at a size larger
//     than the segments hold, or with a root that the segments do not
//     give at its size, the ledger was rolled back (and rewritten):
//     refused (ErrUnsigned and ErrRewritten). A checkpoint file behind
//     the state whose events give the signed root is the crash between
//     the state's write and the checkpoint file's: it passes.
//
// It returns the verified checkpoint (nil: none, a ledger of only its
// genesis event, which the writer signs). Refusals that wrap ErrUnsigned
// are cured by the operator's explicit act (DB.AcceptLedger); the others
// are not.
func judgeEvidence(e ledgerEvidence) (*Checkpoint, error) {
	name := e.Name
	if name == "" {
		name = e.Ledger.String()
	}
	keyText := "(none)"
	if e.Verifier != nil {
		keyText = fmt.Sprintf("%s+%08x", e.Verifier.Name(), e.Verifier.KeyHash())
	}
	accept := fmt.Sprintf("annal checkpoint --accept %s (DB.AcceptLedger) signs the ledger as it is now", name)
	rootAt := func(n uint64) (tree.Hash, error) {
		r, err := e.RootAt(n)
		if err != nil {
			return tree.Hash{}, fmt.Errorf("the root of the first %d events: %w", n, err)
		}
		return r, nil
	}
	var ck *Checkpoint
	if e.Note != nil {
		c, err := openCheckpoint(e.Note, e.Verifier, e.Ledger)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: not a checkpoint of ledger %s signed by the key %s: %w; restore the key that signed it (DIR/signing.key, or give it with --signing-key) or the checkpoint file, or accept the ledger: %s",
				ErrUnsigned, e.Path, e.Ledger, keyText, err, accept)
		}
		if c.Size > e.Head {
			return nil, fmt.Errorf("%w: %s: checkpoint signed for %d events, the segments hold %d: events lost or rolled back; restore the ledger's folder from a backup", ErrRewritten, e.Path, c.Size, e.Head)
		}
		root, err := rootAt(c.Size)
		if err != nil {
			return nil, err
		}
		if root != c.Root {
			return nil, fmt.Errorf("%w: the events differ from the checkpoint %s signed at size %d: root %s, signed %s", ErrRewritten, e.Path, c.Size, root, c.Root)
		}
		ck = &c
	} else if e.Head > 1 {
		return nil, fmt.Errorf("%w: ledger %s holds %d events and no checkpoint file (%s is missing); annal signs no history it was not shown signed: restore the checkpoint file, or accept the ledger: %s",
			ErrUnsigned, e.Ledger, e.Head, e.Path, accept)
	}
	s := e.Signed
	if s == nil {
		return ck, nil
	}
	what := "no checkpoint file"
	if ck != nil {
		what = fmt.Sprintf("the checkpoint file is of size %d", ck.Size)
	}
	if s.Size > e.Head {
		return nil, fmt.Errorf("%w: %w: ledger %s: its signer signed a checkpoint of size %d (root %s), the segments hold %d events and %s: rolled back; restore the ledger's folder and its checkpoint file from a backup, or accept the ledger: %s",
			ErrUnsigned, ErrRewritten, e.Ledger, s.Size, s.Root, e.Head, what, accept)
	}
	// A checkpoint file behind the signer's state whose events still give
	// the signed root is the crash between the state's write and the
	// checkpoint file's (or an older checkpoint file put back over intact
	// events): nothing the signer signed is lost.
	root, err := rootAt(s.Size)
	if err != nil {
		return nil, err
	}
	if root != s.Root {
		return nil, fmt.Errorf("%w: %w: ledger %s: its signer signed the root %s at size %d, the events give %s (%s): not the history the signer signed (rolled back and rewritten, a fork); restore the ledger's folder and its checkpoint file from a backup, or accept the ledger: %s",
			ErrUnsigned, ErrRewritten, e.Ledger, s.Root, s.Size, root, what, accept)
	}
	return ck, nil
}

// signedFor returns what a signer remembers for the ledger id's origin
// under the key of v, nil if nothing: signed is a stateSigner's Signed, or
// stateLookup of a state file read with readSignerState.
func signedFor(signed func(origin string) (tree.Checkpoint, bool), v note.Verifier, id eventid.LedgerID) *tree.Checkpoint {
	if c, ok := signed(tree.Origin(v.Name(), uint32(id))); ok {
		return &c
	}
	return nil
}

// stateLookup is signedFor's lookup in a state read by readSignerState
// (nil: no state file).
func stateLookup(state map[string]tree.Checkpoint) func(string) (tree.Checkpoint, bool) {
	return func(origin string) (tree.Checkpoint, bool) {
		c, ok := state[origin]
		return c, ok
	}
}

// The evidence a read-only DB checks each ledger against when it opens it,
// so that it agrees with the writer's Open on whether the ledger is whole
// (docs/recovery.md, "What a read-only open checks"):
//
//  1. the durable witness (the metadata's record, and the index's marker
//     when no writer holds the directory): the segments must hold it
//     (segment.Log.CheckWitness); otherwise "acknowledged events lost";
//  2. the checkpoint evidence, judged by judgeEvidence as the writer's
//     recoverTree judges it: the checkpoint file, a missing one, and the
//     signer's state file (KEY.state, if it can be read), with the roots
//     computed from the segments (checkReaderEvidence).
//
// A ledger that fails one is unavailable (Unavailable), as with Open.

// loadReaderKey sets the key with which a read-only DB checks the
// checkpoints: Options.Signer's, or the key file's (Options.SigningKeyFile,
// else DIR/signing.key), read and never created; no signer is opened. A
// reader needs only the public key: a key file that exists but that this
// reader may not read (another user's, 0600) gives way to its verifier
// file, which the writer keeps beside it (verifierFile: DIR/signing.pub).
// A key file that is missing, or unreadable with no verifier file, leaves
// none (keyErr says why): every ledger with a checkpoint is then refused
// (ErrSigningKeyMissing), as the writer's Open refuses the directory. A
// key file that others can read, or malformed, fails the open, as it
// fails the writer's; so does a malformed verifier file.
func (db *DB) loadReaderKey() error {
	path, _ := db.signerFiles()
	var k tree.Key
	var err error
	if db.opts.Signer != nil {
		if k, err = db.optionsSignerKey(); err != nil {
			return err
		}
	} else {
		k, err = tree.LoadKey(db.fs, path)
		if errors.Is(err, os.ErrNotExist) && db.opts.SigningKeyFile == "" {
			// A follower's directory: the verifier key it follows with.
			c, ok, ferr := readFollowerFile(db.fs, db.dir)
			if ferr != nil {
				return ferr
			}
			if ok {
				k, err = tree.Key{Verifier: c.Verifier}, nil
			}
		}
		if errors.Is(err, tree.ErrKey) {
			return fmt.Errorf("engine: the signing key %s: %w", path, err)
		}
		if errors.Is(err, os.ErrPermission) {
			text, _, perr := readVerifierFile(db.fs, verifierFile(path))
			if errors.Is(perr, tree.ErrKey) {
				return fmt.Errorf("engine: the signing key's verifier file: %w", perr)
			}
			if perr == nil {
				k, err = tree.Key{Verifier: text}, nil
			} else {
				db.keyErr = fmt.Errorf("%w; nor its public key %s (%w): the writer writes it at its next open", err, verifierFile(path), perr)
				return nil
			}
		}
		if err != nil {
			db.keyErr = err
			return nil
		}
	}
	if err := db.setKey(k); err != nil {
		return err
	}
	// A malformed state fails the writer's Open (openStateSigner): the
	// reader's too. Each ledger's look at it (readEvidence) reads it again.
	if _, p := db.signerFiles(); p != "" {
		if _, err := readSignerState(db.fs, p); err != nil {
			return err
		}
	}
	return nil
}

// keyMissingText says why a read-only DB has no key to check a checkpoint
// with, and the cure.
func (db *DB) keyMissingText() string {
	path, _ := db.signerFiles()
	if errors.Is(db.keyErr, os.ErrNotExist) {
		return fmt.Sprintf("there is no %s (the key that signed the ledger's checkpoints was lost or moved): restore that key (or give it with --signing-key) to accept the ledger with its checkpoints", path)
	}
	return fmt.Sprintf("the key file cannot be read (%v)", db.keyErr)
}

// readerEvidence is what a read-only open reads of a ledger before it
// opens its segments: the signer's state, then the checkpoint file, in
// that order (a writer writes them in the other order: a checkpoint file
// read after the state is never older than the state, unless rolled back).
type readerEvidence struct {
	state   map[string]tree.Checkpoint
	ckPath  string
	msg     []byte
	readErr error
}

func (db *DB) readEvidence(id eventid.LedgerID) readerEvidence {
	var ev readerEvidence
	if _, p := db.signerFiles(); p != "" {
		// Unreadable or malformed: rule 4 is not applied (the writer
		// reports it).
		ev.state, _ = readSignerState(db.fs, p)
	}
	ev.ckPath = db.fs.PathJoin(db.ledgerDir(id), checkpointFileName)
	ev.msg, ev.readErr = readSmallFile(db.fs, ev.ckPath, maxCheckpointFile)
	return ev
}

// lostEverySegment is the refusal of a ledger whose segments are all gone
// while its witness w says events were durable (dir: its directory).
func lostEverySegment(dir string, w segment.Head) error {
	return &segment.CorruptionError{File: dir, Problem: fmt.Sprintf("every segment is missing: acknowledged events lost: events up to #%d (%s) were durable", w.Seq, w.ID),
		Expected: fmt.Sprintf("segments holding events 1 to %d", w.Seq), Found: "no segment file", Lost: true}
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
	hold, err := dirlock.Hold(dir)
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
	return index.Open(path, index.Options{ReadOnly: true, CacheSize: 8 << 20, FS: heldDirFS{vfs.Default}})
}

// heldDirFS is the file system of an index opened read-only in a data
// directory that the caller holds (its flock, dirlock.Hold), as every
// caller of openIndexReadOnly does: Pebble's own lock of index/LOCK,
// which Pebble takes by creating the file again (a truncation, which
// changes its modification time), is not taken. No other process can
// open the index meanwhile: a writer holds the directory first.
type heldDirFS struct{ vfs.FS }

// Lock takes no lock: the directory's flock, held, stands for it.
func (heldDirFS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }

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
	hold, err := dirlock.Hold(dir)
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

// treeRoot returns the root at size n of ledger l's events as the
// writer's Open finds it when the segments' recovery skipped sealed
// segments that stamps vouch for (see checkLeaves): n must be the size of
// the checkpoint msg (signed by the directory's key), the ledger's tree
// file must give the checkpoint's root there, and the events that the
// read-only open verified (from Log.VerifiedFrom on), with the tree
// file's hashes of those before them, must give that root too. ok is
// false when one of these does not hold, or when every event was read
// anyway: the caller then computes the root from the segments.
func (db *DB) treeRoot(l *ledger, msg []byte, n uint64) (root tree.Hash, ok bool) {
	from, at := l.log.VerifiedFrom()
	if msg == nil || db.verifier == nil || from <= 1 {
		return tree.Hash{}, false
	}
	ck, err := openCheckpoint(msg, db.verifier, l.meta.ID)
	if err != nil || ck.Size != n {
		return tree.Hash{}, false
	}
	f, err := tree.OpenFileReadOnly(db.fs, db.treePath(l), uint32(l.meta.ID))
	if err != nil {
		return tree.Hash{}, false
	}
	defer f.Close()
	if f.Size() < ck.Size {
		return tree.Hash{}, false
	}
	if r, err := f.Root(ck.Size); err != nil || r != ck.Root {
		return tree.Hash{}, false
	}
	if why, err := l.checkLeaves(f, from, at, &ck); err != nil || why != "" {
		return tree.Hash{}, false
	}
	return ck.Root, true
}

// checkReaderEvidence checks the checkpoint evidence of ledger l, whose
// segments a read-only DB opened after it read ev (judgeEvidence, as the
// writer's Open), and keeps the checkpoint as the ledger's latest.
func (db *DB) checkReaderEvidence(l *ledger, ev readerEvidence) error {
	id := l.meta.ID
	name := l.meta.Name // the genesis event's, or the metadata's
	if m, ok := db.ro.known[id]; ok && m.Name != "" {
		name = m.Name
	}
	head := l.log.Head().Seq
	if errors.Is(ev.readErr, os.ErrNotExist) && head > 1 {
		// A writer's CreateLedger or Import signs before its first
		// append: the checkpoint, read before the segments, is there now.
		// It may cover events after what the segments showed: look again.
		if msg, err := readSmallFile(db.fs, ev.ckPath, maxCheckpointFile); err == nil {
			ev.msg, ev.readErr = msg, nil
			l.log.Follow()
			head = l.log.Head().Seq
		}
	}
	e := ledgerEvidence{Ledger: id, Name: name, Path: ev.ckPath, Verifier: db.verifier, Head: head}
	roots := map[uint64]tree.Hash{}
	e.RootAt = func(n uint64) (tree.Hash, error) {
		if r, ok := roots[n]; ok {
			return r, nil
		}
		r, ok := db.treeRoot(l, e.Note, n)
		if !ok {
			var err error
			if r, _, err = l.segmentsRoot(context.Background(), nil, n); err != nil {
				return r, err
			}
		}
		roots[n] = r
		return r, nil
	}
	switch {
	case ev.readErr == nil:
		e.Note = ev.msg
	case errors.Is(ev.readErr, os.ErrNotExist):
	case errors.Is(ev.readErr, tree.ErrCheckpoint):
		e.Note = []byte{} // larger than any checkpoint: not one
	default:
		return fmt.Errorf("read the checkpoint: %w", ev.readErr)
	}
	if db.verifier == nil {
		if e.Note != nil {
			// Not the data's failure: the same as the writer's Open.
			return fmt.Errorf("%w: %s: no key to check it with: %s", ErrSigningKeyMissing, ev.ckPath, db.keyMissingText())
		}
	} else if ev.state != nil {
		e.Signed = signedFor(stateLookup(ev.state), db.verifier, id)
	}
	ck, err := judgeEvidence(e)
	if err != nil {
		return err
	}
	if ck != nil {
		l.latest.Store(ck)
	}
	return nil
}
