package tree

import (
	"errors"

	"github.com/annal-db/annal/segment/corruption"
)

// Errors of package tree, by subject.

// Damaged data. It also matches corruption.Err, which is
// engine.ErrCorruption.
var (
	// ErrCorrupt: a tree file whose header is wrong (magic, version,
	// ledger), or whose hashes disagree with each other or with what they
	// were checked against.
	ErrCorrupt = corruption.New("tree: corrupt tree file")
)

// Errors of what is given to the package: proofs, checkpoints, keys,
// leaf indexes and sizes.
var (
	// ErrProof: a proof that does not verify.
	ErrProof = errors.New("tree: proof does not verify")
	// ErrCheckpoint: a checkpoint that is malformed or whose signature
	// does not verify with the key given.
	ErrCheckpoint = errors.New("tree: bad checkpoint")
	// ErrKey: a key file that is malformed, or readable by others.
	ErrKey = errors.New("tree: bad signing key")
	// ErrRange: a leaf index or tree size out of range.
	ErrRange = errors.New("tree: out of range")
)
