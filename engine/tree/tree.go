package tree

import (
	"crypto"
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// SKELETON (issue 14 base branch): signatures and contracts only; the
// tree helper fills in the bodies. Nothing here may reach main unfilled.

var errTODO = errors.New("tree: not implemented yet")

// Hash is a SHA-256 hash of the tree: a leaf's, a node's or a root.
type Hash = tlog.Hash

// HeaderSize is the size of a tree file's header.
const HeaderSize = 32

// Sentinel errors.
var (
	// ErrCorrupt: a tree file whose header is wrong (magic, version,
	// ledger), or whose hashes disagree with each other or with what they
	// were checked against.
	ErrCorrupt = errors.New("tree: corrupt tree file")
	// ErrProof: a proof that does not verify.
	ErrProof = errors.New("tree: proof does not verify")
	// ErrCheckpoint: a checkpoint that is malformed or whose signature
	// does not verify with the key given.
	ErrCheckpoint = errors.New("tree: bad checkpoint")
	// ErrRange: a leaf index or tree size out of range.
	ErrRange = errors.New("tree: out of range")
	// ErrKey: a key file that is malformed, or readable by others.
	ErrKey = errors.New("tree: bad signing key")
)

// LeafHash returns the leaf hash of an event: SHA-256(0x00 ‖ line), line
// being the event's export line without its newline.
func LeafHash(line []byte) Hash { return tlog.RecordHash(line) }

// File is a ledger's tree file (see the package doc). It is safe for one
// writer (Append, Truncate, Sync) and concurrent readers (Root, Leaf,
// proofs), which see the leaves appended before they were called.
type File struct{}

// Create creates an empty tree file at path for the ledger (its header
// written and synced) and returns it open.
func Create(fs vfs.FS, path string, ledger uint32) (*File, error) { return nil, errTODO }

// OpenFile opens the tree file at path, checking its header (ErrCorrupt
// if it is not a tree file of this ledger). Size is the count of leaves
// whose stored hashes are all in the file; bytes after them (a torn
// write) are ignored, and cut by the next Truncate or Append.
func OpenFile(fs vfs.FS, path string, ledger uint32) (*File, error) { return nil, errTODO }

// Size returns the number of leaves.
func (f *File) Size() uint64 { return 0 }

// Append adds leaves (leaf hashes, in order) after the last one, writing
// their stored hashes with one write, not synced.
func (f *File) Append(leaves []Hash) error { return errTODO }

// Sync makes every leaf appended so far durable.
func (f *File) Sync() error { return errTODO }

// Truncate cuts the tree back to n leaves (n <= Size).
func (f *File) Truncate(n uint64) error { return errTODO }

// Root returns the root hash of the tree of the first n leaves
// (1 <= n <= Size).
func (f *File) Root(n uint64) (Hash, error) { return Hash{}, errTODO }

// Leaf returns the leaf hash of leaf i (i < Size).
func (f *File) Leaf(i uint64) (Hash, error) { return Hash{}, errTODO }

// InclusionProof returns the RFC 9162 inclusion proof of leaf i in the
// tree of size n (i < n <= Size).
func (f *File) InclusionProof(i, n uint64) ([]Hash, error) { return nil, errTODO }

// ConsistencyProof returns the RFC 9162 consistency proof between the
// trees of sizes m and n (1 <= m <= n <= Size).
func (f *File) ConsistencyProof(m, n uint64) ([]Hash, error) { return nil, errTODO }

// Close closes the file.
func (f *File) Close() error { return errTODO }

// Checker compares a tree file, read sequentially from its start, with
// leaves recomputed elsewhere (from the segments), for a full
// verification: Add the leaves in order, then Done.
type Checker struct{}

// NewChecker returns a Checker of the first n leaves of f (n <= Size).
func (f *File) NewChecker(n uint64) *Checker { return nil }

// Add checks the next leaf: the file's leaf hash, and every stored hash
// the leaf completes, against those computed from leaf. The first
// difference is a *MismatchError.
func (c *Checker) Add(leaf Hash) error { return errTODO }

// Root returns the root of the leaves added so far (computed from them,
// not read from the file).
func (c *Checker) Root() Hash { return Hash{} }

// MismatchError says where a tree file and the recomputed leaves differ.
type MismatchError struct {
	Leaf     uint64 // the leaf index being checked (0 = the genesis event)
	Level    int    // 0: the leaf hash itself; >0 an interior hash it completes
	Stored   Hash   // what the file holds
	Computed Hash   // what the leaves give
}

func (e *MismatchError) Error() string { return "tree: mismatch" }

// Is makes a MismatchError match ErrCorrupt.
func (e *MismatchError) Is(target error) bool { return target == ErrCorrupt }

// Builder computes the root of a tree from its leaves, in memory (O(log n)
// hashes), for a rebuild or for an auditor recomputing a tree.
type Builder struct{}

// Add adds the next leaf hash.
func (b *Builder) Add(leaf Hash) {}

// Size returns the number of leaves added.
func (b *Builder) Size() uint64 { return 0 }

// Root returns the root of the leaves added so far (Size >= 1).
func (b *Builder) Root() Hash { return Hash{} }

// VerifyInclusion checks an RFC 9162 inclusion proof of the leaf hash
// leaf at index i in the tree of size n with root root (ErrProof if not).
func VerifyInclusion(i, n uint64, leaf Hash, proof []Hash, root Hash) error { return errTODO }

// VerifyConsistency checks an RFC 9162 consistency proof between the tree
// of size m with root oldRoot and the tree of size n with root newRoot.
func VerifyConsistency(m, n uint64, oldRoot, newRoot Hash, proof []Hash) error { return errTODO }

// Checkpoint is the body of a C2SP tlog-checkpoint.
type Checkpoint struct {
	Origin string // "<key name>/<ledger ID in 8 lower-case hex digits>"
	Size   uint64 // the number of leaves (events, genesis included)
	Root   Hash
}

// Origin returns the origin of the checkpoints of a ledger signed with a
// key named keyName: keyName + "/" + the ledger ID in 8 hex digits.
func Origin(keyName string, ledger uint32) string { return "" }

// Text returns the checkpoint's body: "origin\nsize\nbase64(root)\n".
func (c Checkpoint) Text() []byte { return nil }

// Sign returns the signed note of the checkpoint (C2SP signed-note).
func Sign(c Checkpoint, s note.Signer) ([]byte, error) { return nil, errTODO }

// OpenCheckpoint verifies a signed checkpoint with the verifier and
// parses its body (ErrCheckpoint, wrapped with the reason, if malformed
// or not signed by that key).
func OpenCheckpoint(msg []byte, v note.Verifier) (Checkpoint, error) { return Checkpoint{}, errTODO }

// ParseCheckpoint parses a checkpoint's body without any signature check.
func ParseCheckpoint(text []byte) (Checkpoint, error) { return Checkpoint{}, errTODO }

// Key is a signing key: its note signer, and its public key in the note
// verifier format ("name+hash+base64(0x01 ‖ public key)").
type Key struct {
	Signer   note.Signer
	Verifier string
}

// KeyName returns the default name of an Ed25519 key: "annal-" and the
// first 4 bytes of SHA-256 of its public key in hex.
func KeyName(pub []byte) string { return "" }

// LoadOrCreateKey reads the key file at path, or creates it (owner-only,
// 0600, synced, with its directory) with a new Ed25519 key named
// KeyName(public key) if there is none. A key file that is malformed or
// that others can read is ErrKey. created says whether it was created.
func LoadOrCreateKey(fs vfs.FS, path string) (k Key, created bool, err error) {
	return Key{}, false, errTODO
}

// SignerKey adapts a crypto.Signer holding an Ed25519 key (a KMS, an HSM)
// to a Key; name "" means KeyName(public key).
func SignerKey(s crypto.Signer, name string) (Key, error) { return Key{}, errTODO }

// NewVerifier returns the note verifier of a key in the verifier format.
func NewVerifier(vkey string) (note.Verifier, error) { return note.NewVerifier(vkey) }
