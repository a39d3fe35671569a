package engine

import (
	"errors"
	"fmt"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"golang.org/x/mod/sumdb/note"
)

// ErrUnsigned: a ledger holds events that no checkpoint its signer stands
// by covers: its checkpoint file is missing, older than what the signer
// signed for it (rolled back), signed by another key, or not a checkpoint.
// The writer refuses the ledger (ErrLedgerUnavailable) and signs nothing
// for it until the operator restores the checkpoint (or the key), or
// accepts the ledger as it is now: DB.AcceptLedger, annal checkpoint
// --accept NAME.
var ErrUnsigned = errors.New("engine: ledger not covered by a checkpoint its signer stands by")

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
	keyText := fmt.Sprintf("%s+%08x", e.Verifier.Name(), e.Verifier.KeyHash())
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
