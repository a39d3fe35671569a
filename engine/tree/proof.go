package tree

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// maxProof is more hashes than any proof of a tree of at most 2^63 leaves
// holds (an inclusion proof has at most 63, a consistency proof 2*63).
const maxProof = 2 * 64

// VerifyInclusion checks an RFC 9162 inclusion proof of the leaf hash
// leaf at index i in the tree of size n with root root (ErrProof if not).
func VerifyInclusion(i, n uint64, leaf Hash, proof []Hash, root Hash) error {
	if i >= n || n > maxSize {
		return fmt.Errorf("%w: inclusion of leaf %d in a tree of size %d", ErrProof, i, n)
	}
	if len(proof) > maxProof {
		return fmt.Errorf("%w: inclusion proof of %d hashes", ErrProof, len(proof))
	}
	if err := tlog.CheckRecord(tlog.RecordProof(proof), int64(n), root, int64(i), leaf); err != nil {
		return fmt.Errorf("%w: inclusion of leaf %d in the tree of size %d with root %x", ErrProof, i, n, root[:])
	}
	return nil
}

// VerifyConsistency checks an RFC 9162 consistency proof between the tree
// of size m with root oldRoot and the tree of size n with root newRoot
// (1 <= m <= n; m == n takes an empty proof and equal roots).
func VerifyConsistency(m, n uint64, oldRoot, newRoot Hash, proof []Hash) error {
	if m < 1 || m > n || n > maxSize {
		return fmt.Errorf("%w: consistency of the tree of size %d with the tree of size %d", ErrProof, m, n)
	}
	if len(proof) > maxProof {
		return fmt.Errorf("%w: consistency proof of %d hashes", ErrProof, len(proof))
	}
	if err := tlog.CheckTree(tlog.TreeProof(proof), int64(n), newRoot, int64(m), oldRoot); err != nil {
		return fmt.Errorf("%w: consistency of the tree of size %d with root %x and the tree of size %d with root %x", ErrProof, m, oldRoot[:], n, newRoot[:])
	}
	return nil
}
