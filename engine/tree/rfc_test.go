package tree

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// This file holds RFC 9162 written out directly, independently of tlog:
// the tree hash (MTH, section 2.1.1), inclusion paths (PATH, 2.1.3.1),
// consistency proofs (PROOF/SUBPROOF, 2.1.4.1), and the verification
// algorithms of docs/format.md section 9.4 copied line by line. The
// engine's tree is tested against them.

func nodeHash(l, r Hash) Hash {
	b := make([]byte, 0, 65)
	b = append(b, 1)
	b = append(b, l[:]...)
	b = append(b, r[:]...)
	return sha256.Sum256(b)
}

func leafHash(data []byte) Hash {
	return sha256.Sum256(append([]byte{0}, data...))
}

// largestPow2Below returns the largest power of 2 smaller than n (n > 1).
func largestPow2Below(n int) int {
	k := 1
	for k<<1 < n {
		k <<= 1
	}
	return k
}

// mth is RFC 9162's MTH over leaf hashes.
func mth(d []Hash) Hash {
	if len(d) == 1 {
		return d[0]
	}
	k := largestPow2Below(len(d))
	return nodeHash(mth(d[:k]), mth(d[k:]))
}

// rfcTree computes MTH and proofs of one list of leaves, with the hashes
// of its aligned perfect subtrees kept (MTH of them is what the recursion
// spends its time on) so that trees of 10^5 leaves take little time.
type rfcTree struct {
	levels [][]Hash // levels[l][j] = MTH(D[j*2^l : (j+1)*2^l))
}

func newRFCTree(leaves []Hash) *rfcTree {
	t := &rfcTree{levels: [][]Hash{leaves}}
	for lv := leaves; len(lv) > 1; {
		next := make([]Hash, len(lv)/2)
		for j := range next {
			next[j] = nodeHash(lv[2*j], lv[2*j+1])
		}
		t.levels = append(t.levels, next)
		lv = next
	}
	return t
}

// mth returns MTH(D[lo:hi)).
func (t *rfcTree) mth(lo, hi int) Hash {
	n := hi - lo
	if n&(n-1) == 0 && lo%n == 0 {
		l := 0
		for 1<<l < n {
			l++
		}
		return t.levels[l][lo>>l]
	}
	k := largestPow2Below(n)
	return nodeHash(t.mth(lo, lo+k), t.mth(lo+k, hi))
}

// path is PATH(m, D[lo:hi)).
func (t *rfcTree) path(m, lo, hi int) []Hash {
	n := hi - lo
	if n == 1 {
		return nil
	}
	k := largestPow2Below(n)
	if m < k {
		return append(t.path(m, lo, lo+k), t.mth(lo+k, hi))
	}
	return append(t.path(m-k, lo+k, hi), t.mth(lo, lo+k))
}

// subproof is SUBPROOF(m, D[lo:hi), b).
func (t *rfcTree) subproof(m, lo, hi int, b bool) []Hash {
	n := hi - lo
	if m == n {
		if b {
			return nil
		}
		return []Hash{t.mth(lo, hi)}
	}
	k := largestPow2Below(n)
	if m <= k {
		return append(t.subproof(m, lo, lo+k, b), t.mth(lo+k, hi))
	}
	return append(t.subproof(m-k, lo+k, hi, false), t.mth(lo, lo+k))
}

// proof is PROOF(m, D[0:n)).
func (t *rfcTree) proof(m, n int) []Hash { return t.subproof(m, 0, n, true) }

// specVerifyInclusion is format.md 9.4's inclusion verification, line by
// line.
func specVerifyInclusion(i, n uint64, h Hash, path []Hash, root Hash) bool {
	if i >= n {
		return false
	}
	fn, sn, r := i, n-1, h
	for _, p := range path {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	return sn == 0 && r == root
}

// specVerifyConsistency is format.md 9.4's consistency verification, line
// by line.
func specVerifyConsistency(m, n uint64, r1, r2 Hash, path []Hash) bool {
	if m == n {
		return len(path) == 0 && r1 == r2
	}
	if m == 0 || len(path) == 0 {
		return false
	}
	if m&(m-1) == 0 {
		path = append([]Hash{r1}, path...)
	}
	fn, sn := m-1, n-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := path[0], path[0]
	for _, c := range path[1:] {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			fr = nodeHash(c, fr)
			sr = nodeHash(c, sr)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			sr = nodeHash(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	return fr == r1 && sr == r2 && sn == 0
}

// testLeaves returns n distinct leaf hashes.
func testLeaves(n int) []Hash {
	out := make([]Hash, n)
	for i := range out {
		out[i] = leafHash(fmt.Appendf(nil, "leaf %d", i))
	}
	return out
}

// The helpers above must themselves be RFC 9162: check them against the
// hashes tlog and merkle agree on, in TestRFCHelpers.
func TestRFCHelpers(t *testing.T) {
	if leafHash([]byte("x")) != LeafHash([]byte("x")) {
		t.Fatal("leafHash differs from LeafHash")
	}
	leaves := testLeaves(37)
	rt := newRFCTree(leaves)
	for n := 1; n <= len(leaves); n++ {
		if rt.mth(0, n) != mth(leaves[:n]) {
			t.Fatalf("memoised MTH differs at size %d", n)
		}
	}
}
