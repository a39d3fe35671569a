package tree

import (
	"errors"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// Hash is a SHA-256 hash of the tree: a leaf's, a node's or a root.
type Hash = tlog.Hash

// HeaderSize is the size of a tree file's header.
const HeaderSize = 32

// LeafHash returns the leaf hash of an event: SHA-256(0x00 ‖ line), line
// being the event's export line without its newline.
func LeafHash(line []byte) Hash { return tlog.RecordHash(line) }

// maxSize is the largest tree size tlog's int64 arithmetic can take.
const maxSize = 1<<62 - 1

// frontier is the right edge of a tree of n leaves: the root of each
// complete subtree of the tree's decomposition into perfect subtrees, one
// per set bit of n (level l is the subtree of 2^l leaves ending where the
// higher ones leave off). They are the only stored hashes that appending
// a leaf (tlog.StoredHashesForRecordHash) or taking the root
// (tlog.TreeHash) needs, so a tree kept as its frontier grows in O(log n)
// memory.
//
// Invariant: for every level l with bit l of n set and have&(1<<l) != 0,
// index[l] == tlog.StoredHashIndex(l, n>>l - 1) and hash[l] is that
// stored hash.
type frontier struct {
	n     uint64
	have  uint64 // levels whose hash is known (all of n's bits, but for a File opened and not yet loaded)
	index [64]int64
	hash  [64]Hash
	// fallback serves the stored hashes not in the frontier (nil: none).
	fallback tlog.HashReader
	out      [64]Hash // ReadHashes's result, reused
	added    [65]Hash // add's result, reused: a leaf and up to 64 levels
}

// ReadHashes implements tlog.HashReader from the frontier, and fallback
// for the rest.
// The slice returned is f's own, overwritten by the next call: tlog uses
// what its HashReader returns only until it returns.
func (f *frontier) ReadHashes(indexes []int64) ([]Hash, error) {
	var out []Hash
	if len(indexes) <= len(f.out) {
		out = f.out[:len(indexes)]
	} else {
		out = make([]Hash, len(indexes))
	}
	var miss []int
	for i, x := range indexes {
		found := false
		for b := f.n & f.have; b != 0; b &= b - 1 {
			l := bits.TrailingZeros64(b)
			if f.index[l] == x {
				out[i] = f.hash[l]
				found = true
				break
			}
		}
		if !found {
			miss = append(miss, i)
		}
	}
	if len(miss) == 0 {
		return out, nil
	}
	if f.fallback == nil {
		return nil, errors.New("tree: stored hash outside the frontier")
	}
	need := make([]int64, len(miss))
	for j, i := range miss {
		need[j] = indexes[i]
	}
	got, err := f.fallback.ReadHashes(need)
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		out[i] = got[j]
	}
	return out, nil
}

// add appends a leaf and returns its stored hashes: the leaf hash, then
// the hash of each subtree it completes, from level 1 up (those of
// tlog.StoredHashesForRecordHash). The slice is f's own, overwritten by
// the next add: nothing is allocated per leaf. Leaf n completes one
// subtree per trailing 1 bit of n, each the hash of the frontier's
// subtree at that level (its left sibling) and the one below.
func (f *frontier) add(leaf Hash) ([]Hash, error) {
	if f.n >= maxSize {
		return nil, fmt.Errorf("%w: leaf %d", ErrRange, f.n)
	}
	hashes := append(f.added[:0], leaf)
	h := leaf
	for l := 0; f.n&(1<<uint(l)) != 0; l++ {
		left, err := f.level(l)
		if err != nil {
			return nil, err
		}
		h = tlog.NodeHash(left, h)
		hashes = append(hashes, h)
	}
	f.push(hashes)
	return hashes, nil
}

// level returns the frontier's hash at level l (bit l of f.n set): from
// the frontier, or else read through fallback.
func (f *frontier) level(l int) (Hash, error) {
	if f.have&(1<<uint(l)) != 0 {
		return f.hash[l], nil
	}
	got, err := f.ReadHashes([]int64{tlog.StoredHashIndex(l, int64(f.n>>uint(l))-1)})
	if err != nil {
		return Hash{}, err
	}
	return got[0], nil
}

// push records the stored hashes of leaf f.n (as add computed them) and
// counts the leaf.
func (f *frontier) push(hashes []Hash) {
	top := len(hashes) - 1 // the levels below top merge into it
	n := f.n + 1
	f.index[top] = tlog.StoredHashIndex(top, int64(n>>uint(top))-1)
	f.hash[top] = hashes[top]
	f.have = f.have&^(1<<uint(top)-1) | 1<<uint(top)
	f.n = n
}

// root returns the root of the f.n leaves (n >= 1).
func (f *frontier) root() (Hash, error) { return tlog.TreeHash(int64(f.n), f) }

// reset makes f the frontier of n leaves whose hashes are to be read
// through fallback.
func (f *frontier) reset(n uint64, fallback tlog.HashReader) {
	*f = frontier{n: n, fallback: fallback}
}

// load reads the frontier of f.n leaves from r.
func (f *frontier) load(r tlog.HashReader) error {
	var levels []int
	var indexes []int64
	for b := f.n; b != 0; b &= b - 1 {
		l := bits.TrailingZeros64(b)
		levels = append(levels, l)
		indexes = append(indexes, tlog.StoredHashIndex(l, int64(f.n>>uint(l))-1))
	}
	hashes, err := r.ReadHashes(indexes)
	if err != nil {
		return err
	}
	for i, l := range levels {
		f.index[l] = indexes[i]
		f.hash[l] = hashes[i]
		f.have |= 1 << uint(l)
	}
	return nil
}
