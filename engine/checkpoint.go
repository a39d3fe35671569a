package engine

import (
	"context"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// Checkpoint is a signed checkpoint of a ledger's Merkle tree.
type Checkpoint struct {
	Ledger eventid.LedgerID
	// Origin, Size and Root are the checkpoint's body (C2SP
	// tlog-checkpoint): Size is the number of events it covers, genesis
	// included (events #1 to #Size).
	Origin string
	Size   uint64
	Root   tree.Hash
	// Note is the signed note, as written to a checkpoint file: the
	// bytes to hand to an auditor.
	Note []byte
}

// InclusionProof proves that an event is leaf Seq-1 of the tree of size
// TreeSize.
type InclusionProof struct {
	Ledger   eventid.LedgerID
	ID       eventid.ID
	Seq      uint64 // the event's sequence number; its leaf index is Seq-1
	TreeSize uint64
	LeafHash tree.Hash
	Hashes   []tree.Hash // RFC 9162 inclusion proof
	// Checkpoint is the signed note of the tree the proof is against,
	// when that tree is a checkpoint's (ProveInclusion with treeSize 0).
	Checkpoint []byte
}

// ConsistencyProof proves that the tree of size OldSize is a prefix of
// the tree of size NewSize.
type ConsistencyProof struct {
	Ledger  eventid.LedgerID
	OldSize uint64
	NewSize uint64
	OldRoot tree.Hash
	NewRoot tree.Hash
	Hashes  []tree.Hash // RFC 9162 consistency proof
	// Checkpoint is the signed note of the newer tree, when it is a
	// checkpoint's (ProveConsistency with newSize 0).
	Checkpoint []byte
}

// The JSON forms of InclusionProof and ConsistencyProof are those of
// docs/format.md, section 9.4 (what annal prove --format json writes):
// hashes in standard base64, the checkpoint member present when the field
// is set.

// VerifierKey returns the public key that checkpoints are signed with,
// in the note verifier format ("name+hash+base64").
func (db *DB) VerifierKey() string { return db.key.Verifier }

// Checkpoint issues a new signed checkpoint of the ledger now: it syncs
// the ledger's segments up to the head readers see, syncs the tree file,
// signs the checkpoint of that size and writes it to the ledger's
// checkpoint file before returning it. The signer signs it only as a
// consistent extension of the last checkpoint it signed for the ledger
// (ErrSignerRefused otherwise; nothing is written then).
func (db *DB) Checkpoint(ctx context.Context, ledgerName string) (Checkpoint, error) {
	if err := db.readOnlyErr("Checkpoint"); err != nil {
		return Checkpoint{}, err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return Checkpoint{}, err
	}
	return db.checkpoint(ctx, l)
}

// LatestCheckpoint returns the last checkpoint issued for the ledger
// (ErrNotFound if none was).
func (db *DB) LatestCheckpoint(ledgerName string) (Checkpoint, error) {
	return db.latestCheckpoint(ledgerName)
}

// ProveInclusion returns the inclusion proof of the event id in the tree
// of size treeSize of its ledger; treeSize 0 means the latest checkpoint's
// size. An event after that tree is ErrNotInTree (it exists: a checkpoint
// that covers it, DB.Checkpoint, gives its proof); an unknown event, or a
// ledger without a checkpoint when treeSize is 0, ErrNotFound. On a DB
// opened with OpenReadOnly, the proof is made from the ledger's tree file,
// read-only, against a tree the DB shows (the latest checkpoint checked
// at the open by default); a tree file that does not give that
// checkpoint's root is ErrTreeDamaged (the writer's next Open rebuilds
// it).
func (db *DB) ProveInclusion(ctx context.Context, id eventid.ID, treeSize uint64) (InclusionProof, error) {
	return db.proveInclusion(ctx, id, treeSize)
}

// ProveConsistency returns the consistency proof between the trees of
// sizes oldSize and newSize of the ledger (newSize 0: the latest
// checkpoint's size). On a DB opened with OpenReadOnly, as
// ProveInclusion says.
func (db *DB) ProveConsistency(ctx context.Context, ledgerName string, oldSize, newSize uint64) (ConsistencyProof, error) {
	return db.proveConsistency(ctx, ledgerName, oldSize, newSize)
}

// DB.VerifyCheckpoint is in verifytree.go, with Verify's check of the
// tree.
