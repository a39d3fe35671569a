package engine

import (
	"crypto"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The signer's memory. A signing key signs, for each ledger (each origin),
// only a consistent extension of the last checkpoint it signed: it keeps
// what it signed in its state file, beside the key (KEY.state; for
// Options.Signer, Options.SignerState), and refuses any other checkpoint
// (ErrSignerRefused). Someone who can rewrite a data directory but cannot
// reach the key and its state file (a key file outside the directory, a
// KMS) cannot make it sign a fork. The default key lives inside the
// directory, with its state: that protects against accidents (a restored
// or removed checkpoint file), not against someone who can read the key.
//
// The state file is text, one line per origin, sorted by origin:
//
//	<origin> <size> <root in standard base64>
//
// written atomically (a temporary file synced, renamed, its directory
// synced) before the signed checkpoint is handed out, so that the state's
// size for an origin is never below that of any checkpoint file signed by
// the key.
//
// One key may sign for several DBs at once (an outside key file given to
// two data directories, or to a directory and its copy): every signature
// takes the state's lock (KEY.state.lock: an exclusive flock, held across
// processes; LockFileEx on Windows), re-reads the state file under it,
// judges the checkpoint against what the file and its own memory hold
// (the larger size of the two for each origin), and writes back the whole
// merged state before it lets go. So no DB forgets what another signed
// (its origins are kept), and the key signs no fork: a second DB asked to
// sign another root at a size the key signed, or a smaller one, is
// refused (ErrSignerRefused). A test's file system (Options.fs) is locked
// within the process only.

// signerStateSuffix: the state file of a key file KEY is KEY.state.
const signerStateSuffix = ".state"

// signerLockSuffix: the lock file of a state file STATE is STATE.lock (an
// empty file, kept: it is only ever locked).
const signerLockSuffix = ".lock"

// signerLockWait is how long a signature waits for another process that
// holds the signer's state (which it holds for a write and two fsyncs).
const signerLockWait = 30 * time.Second

// maxSignerState bounds what is read of a state file: a line per ledger
// signed, about 100 bytes each.
const maxSignerState = 64 << 20

// CheckpointSigner signs the checkpoints of a DB's ledgers and remembers,
// for each origin, the last checkpoint it signed. NewKeyFileSigner and
// NewCryptoSigner make one; a DB makes its own from its Options.
type CheckpointSigner interface {
	// Key returns the note signer and the verifier key.
	Key() tree.Key
	// Signed returns the last checkpoint signed for origin, if any.
	Signed(origin string) (tree.Checkpoint, bool)
	// SignCheckpoint signs next, given prev, the last checkpoint signed
	// for next's origin (Signed's; the zero Checkpoint if none), and the
	// RFC 6962 consistency proof from prev's size to next's. It refuses
	// (ErrSignerRefused) unless prev is what it remembers for that origin
	// (when it remembers one) and next is a consistent extension of prev.
	// It records next before it returns the signed note.
	SignCheckpoint(prev, next tree.Checkpoint, proof []tree.Hash) ([]byte, error)
	// AcceptCheckpoint signs next whatever was signed for its origin
	// before, and remembers it: an operator's explicit act (DB.AcceptLedger,
	// annal checkpoint --accept), never the engine's own.
	AcceptCheckpoint(next tree.Checkpoint) ([]byte, error)
}

// NewKeyFileSigner returns the signer of the key file at path (the note
// signer format that DIR/signing.key holds; see docs/format.md), with its
// state in path+".state" (locked, at each signature, through
// path+".state.lock"). A key file that does not exist is an error.
func NewKeyFileSigner(path string) (CheckpointSigner, error) {
	fs := privateFS{vfs.Default}
	k, err := tree.LoadKey(fs, path)
	if err != nil {
		return nil, err
	}
	return openStateSigner(fs, k, path+signerStateSuffix, true)
}

// NewCryptoSigner returns the signer of a crypto.Signer holding an Ed25519
// key (a KMS, an HSM), named name ("": tree.KeyName of its public key),
// with its state in the file statePath (created by its first signature).
func NewCryptoSigner(s crypto.Signer, name, statePath string) (CheckpointSigner, error) {
	k, err := tree.SignerKey(s, name)
	if err != nil {
		return nil, err
	}
	if statePath == "" {
		return nil, fmt.Errorf("%w: the signer's state file: no path given", ErrInvalid)
	}
	return openStateSigner(privateFS{vfs.Default}, k, statePath, true)
}

// stateSigner is a key with its state file: the CheckpointSigner of both
// a key file and a crypto.Signer.
type stateSigner struct {
	key  tree.Key
	fs   vfs.FS
	path string // the state file
	// osLock: the state is locked with the operating system's lock on
	// path+".lock" (other processes too); else within this process only.
	osLock bool

	mu    sync.Mutex
	state map[string]tree.Checkpoint
}

// openStateSigner reads the state file at path (none yet: an empty state).
func openStateSigner(fs vfs.FS, k tree.Key, path string, osLock bool) (*stateSigner, error) {
	state, err := readSignerState(fs, path)
	if err != nil {
		return nil, err
	}
	if state == nil {
		state = map[string]tree.Checkpoint{}
	}
	return &stateSigner{key: k, fs: fs, path: path, osLock: osLock, state: state}, nil
}

// stateLocks are the in-process locks of the state files, by path: two
// signers of one process exclude each other even where the operating
// system's lock cannot tell them apart.
var stateLocks sync.Map // string -> *sync.Mutex

// lockState takes the state file's lock (see "The signer's memory") and
// returns what releases it.
func (s *stateSigner) lockState() (func(), error) {
	key := s.path
	if abs, err := filepath.Abs(key); err == nil {
		key = abs
	}
	m, _ := stateLocks.LoadOrStore(key, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	if !s.osLock {
		return mu.Unlock, nil
	}
	c, err := dirlock.LockFile(s.path+signerLockSuffix, signerLockWait)
	if err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("engine: lock the signer's state %s: %w", s.path, err)
	}
	return func() {
		c.Close()
		mu.Unlock()
	}, nil
}

// reloadLocked merges the state file, read again under its lock, into the
// signer's memory: for each origin the larger size of the two (the file's
// if equal). Another DB signing with the same key wrote what it signed
// there; a state file put back from an older copy loses nothing this
// signer remembers. A malformed file is an error: nothing is signed.
func (s *stateSigner) reloadLocked() error {
	file, err := readSignerState(s.fs, s.path)
	if err != nil {
		return err
	}
	for o, c := range file {
		if m, ok := s.state[o]; !ok || c.Size >= m.Size {
			s.state[o] = c
		}
	}
	return nil
}

func (s *stateSigner) Key() tree.Key { return s.key }

func (s *stateSigner) Signed(origin string) (tree.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.state[origin]
	return c, ok
}

func (s *stateSigner) SignCheckpoint(prev, next tree.Checkpoint, proof []tree.Hash) ([]byte, error) {
	return s.withState(func() ([]byte, error) { return s.signExtension(prev, next, proof) })
}

// signExtension is SignCheckpoint, under withState.
func (s *stateSigner) signExtension(prev, next tree.Checkpoint, proof []tree.Hash) ([]byte, error) {
	refuse := func(format string, a ...any) ([]byte, error) {
		return nil, fmt.Errorf("%w: %s size %d: %s (the signer's state: %s)", ErrSignerRefused, next.Origin, next.Size, fmt.Sprintf(format, a...), s.path)
	}
	if mem, ok := s.state[next.Origin]; ok && (mem.Size != prev.Size || mem.Root != prev.Root) {
		return refuse("the last checkpoint signed for this origin has size %d and root %s; asked to extend size %d, root %s", mem.Size, mem.Root, prev.Size, prev.Root)
	}
	switch {
	case prev.Size == 0:
	case prev.Origin != "" && prev.Origin != next.Origin:
		return refuse("the previous checkpoint is of origin %s", prev.Origin)
	case next.Size < prev.Size:
		return refuse("size %d was signed already: a smaller tree is not an extension", prev.Size)
	case next.Size == prev.Size && next.Root != prev.Root:
		return refuse("size %d was signed with the root %s; this root is %s", prev.Size, prev.Root, next.Root)
	case next.Size > prev.Size:
		if err := tree.VerifyConsistency(prev.Size, next.Size, prev.Root, next.Root, proof); err != nil {
			return refuse("not a consistent extension of the checkpoint signed at size %d: %v", prev.Size, err)
		}
	}
	return s.signLocked(next)
}

func (s *stateSigner) AcceptCheckpoint(next tree.Checkpoint) ([]byte, error) {
	return s.withState(func() ([]byte, error) { return s.signLocked(next) })
}

// withState runs sign with the signer's state locked (in this process and
// on disk) and read again from its file, so that what another DB sharing
// the key signed meanwhile is known.
func (s *stateSigner) withState(sign func() ([]byte, error)) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lockState()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.reloadLocked(); err != nil {
		return nil, err
	}
	return sign()
}

// signLocked signs next, records it in the state file (the whole merged
// state, under the state's lock), and returns the note once the state is
// durable.
func (s *stateSigner) signLocked(next tree.Checkpoint) ([]byte, error) {
	msg, err := tree.Sign(next, s.key.Signer)
	if err != nil {
		return nil, err
	}
	old, had := s.state[next.Origin]
	s.state[next.Origin] = next
	if err := writeSignerState(s.fs, s.path, s.state); err != nil {
		if had {
			s.state[next.Origin] = old
		} else {
			delete(s.state, next.Origin)
		}
		return nil, fmt.Errorf("engine: sign the checkpoint of %s size %d: the signer's state: %w", next.Origin, next.Size, err)
	}
	return msg, nil
}

// readSignerState reads a signer's state file: what its key signed last,
// by origin. A missing file is a nil map and no error; a malformed one is
// an error naming the file and the line.
func readSignerState(fs vfs.FS, path string) (map[string]tree.Checkpoint, error) {
	b, err := readSmallFile(fs, path, maxSignerState)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: the signer's state file %s: %w", path, err)
	}
	state, err := tree.ParseCheckpointLines(b)
	if err != nil {
		return nil, fmt.Errorf("%w: the signer's state file %s, %v (restore it from a backup; removing it makes the key trust every checkpoint it is shown next)", ErrInvalid, path, err)
	}
	return state, nil
}

// writeSignerState writes the state atomically: a temporary file synced,
// renamed over path, the directory synced.
func writeSignerState(fs vfs.FS, path string, state map[string]tree.Checkpoint) error {
	b := tree.AppendCheckpointLines(nil, state)
	return writeFileAtomic(fs, fs.PathDir(path), fs.PathBase(path), b, true)
}
