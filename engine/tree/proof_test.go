package tree

import (
	"crypto"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// memTree returns a tree file on a memory FS holding leaves.
func memTree(t testing.TB, leaves []Hash) *File {
	t.Helper()
	f, err := Create(vfs.NewMem(), "tree", 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(leaves); i += 1000 {
		if err := f.Append(leaves[i:min(i+1000, len(leaves))]); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func raw(p []Hash) [][]byte {
	out := make([][]byte, len(p))
	for i := range p {
		out[i] = p[i][:]
	}
	return out
}

var hasher = rfc6962.New(crypto.SHA256)

// merkleProof builds the proof that transparency-dev/merkle describes (the
// nodes to read, and the one to rehash from some of them) from the
// tree's perfect subtrees.
func (t *rfcTree) merkleProof(nodes proof.Nodes, err error) []Hash {
	if err != nil {
		panic(err)
	}
	h := make([][]byte, len(nodes.IDs))
	for k, id := range nodes.IDs {
		x := t.levels[id.Level][id.Index]
		h[k] = x[:]
	}
	h, err = nodes.Rehash(h, hasher.HashChildren)
	if err != nil {
		panic(err)
	}
	out := make([]Hash, len(h))
	for k := range h {
		copy(out[k][:], h[k])
	}
	return out
}

// checkInclusion checks the engine's inclusion proof of leaf i in the tree
// of size n against RFC 9162 (PATH, byte for byte) and the proof
// transparency-dev/merkle builds, and has it verified by
// VerifyInclusion, format.md's pseudocode and transparency-dev/merkle;
// then mutated copies must be refused by all three.
func checkInclusion(t *testing.T, f *File, rt *rfcTree, leaves []Hash, i, n uint64) {
	t.Helper()
	p, err := f.InclusionProof(i, n)
	if err != nil {
		t.Fatalf("InclusionProof(%d, %d): %v", i, n, err)
	}
	if want := rt.path(int(i), 0, int(n)); !slices.Equal(p, want) {
		t.Fatalf("InclusionProof(%d, %d) = %x, RFC 9162 PATH = %x", i, n, p, want)
	}
	if want := rt.merkleProof(proof.Inclusion(i, n)); !slices.Equal(p, want) {
		t.Fatalf("InclusionProof(%d, %d) = %x, transparency-dev/merkle's = %x", i, n, p, want)
	}
	root := rt.mth(0, int(n))
	verdicts := func(i, n uint64, leaf Hash, p []Hash, root Hash) (ours, spec, merkle bool) {
		ours = VerifyInclusion(i, n, leaf, p, root) == nil
		spec = specVerifyInclusion(i, n, leaf, p, root)
		merkle = proof.VerifyInclusion(hasher, i, n, leaf[:], raw(p), root[:]) == nil
		return
	}
	if o, s, m := verdicts(i, n, leaves[i], p, root); !o || !s || !m {
		t.Fatalf("inclusion %d in %d: VerifyInclusion %v, format.md %v, merkle %v; want all true", i, n, o, s, m)
	}
	type mutant struct {
		name string
		i, n uint64
		leaf Hash
		p    []Hash
		root Hash
	}
	flip := func(h Hash, bit int) Hash { h[bit/8] ^= 1 << (bit % 8); return h }
	ms := []mutant{
		{"leaf bit", i, n, flip(leaves[i], int(i+n)%256), p, root},
		{"root bit", i, n, leaves[i], p, flip(root, int(i*3)%256)},
		{"index+1", i + 1, n, leaves[i], p, root},
		{"size+1", i, n + 1, leaves[i], p, root},
		{"proof hash added", i, n, leaves[i], append(slices.Clone(p), root), root},
	}
	if i > 0 {
		ms = append(ms, mutant{"index-1", i - 1, n, leaves[i], p, root})
	}
	if n > i+1 {
		ms = append(ms, mutant{"size-1", i, n - 1, leaves[i], p, root})
	}
	for k := range p {
		q := slices.Clone(p)
		q[k] = flip(q[k], k*7%256)
		ms = append(ms, mutant{"proof bit", i, n, leaves[i], q, root})
		ms = append(ms, mutant{"proof hash dropped", i, n, leaves[i], slices.Delete(slices.Clone(p), k, k+1), root})
		ms = append(ms, mutant{"proof hash duplicated", i, n, leaves[i], slices.Insert(slices.Clone(p), k, p[k]), root})
	}
	for _, m := range ms {
		if m.i == i && m.n == n && m.leaf == leaves[i] && m.root == root && slices.Equal(m.p, p) {
			continue // the mutation changed nothing
		}
		o, s, mk := verdicts(m.i, m.n, m.leaf, m.p, m.root)
		if m.leaf == leaves[i] && m.root == root && slices.Equal(m.p, p) {
			// Only the index or size changed. RFC 9162 does not bind
			// them to the proof: the path of leaf i in the tree of size
			// n also verifies against the same root as leaf i' in a
			// tree of size n' when the path has the same shape there
			// (e.g. leaf 47689 in sizes 58948 and 58949). The size is
			// bound to the root by the signed checkpoint instead. The
			// three verifiers must agree.
			if o != s || s != mk {
				t.Fatalf("inclusion %d in %d, mutation %q: VerifyInclusion %v, format.md %v, merkle %v disagree", i, n, m.name, o, s, mk)
			}
			continue
		}
		if o || s || mk {
			t.Fatalf("inclusion %d in %d, mutation %q accepted: VerifyInclusion %v, format.md %v, merkle %v", i, n, m.name, o, s, mk)
		}
	}
}

// checkConsistency is checkInclusion for consistency proofs.
func checkConsistency(t *testing.T, f *File, rt *rfcTree, m, n uint64) {
	t.Helper()
	p, err := f.ConsistencyProof(m, n)
	if err != nil {
		t.Fatalf("ConsistencyProof(%d, %d): %v", m, n, err)
	}
	if want := rt.proof(int(m), int(n)); !slices.Equal(p, want) {
		t.Fatalf("ConsistencyProof(%d, %d) = %x, RFC 9162 PROOF = %x", m, n, p, want)
	}
	if want := rt.merkleProof(proof.Consistency(m, n)); !slices.Equal(p, want) {
		t.Fatalf("ConsistencyProof(%d, %d) = %x, transparency-dev/merkle's = %x", m, n, p, want)
	}
	r1, r2 := rt.mth(0, int(m)), rt.mth(0, int(n))
	verdicts := func(m, n uint64, r1, r2 Hash, p []Hash) (ours, spec, merkle bool) {
		ours = VerifyConsistency(m, n, r1, r2, p) == nil
		spec = specVerifyConsistency(m, n, r1, r2, p)
		merkle = proof.VerifyConsistency(hasher, m, n, raw(p), r1[:], r2[:]) == nil
		return
	}
	if o, s, mk := verdicts(m, n, r1, r2, p); !o || !s || !mk {
		t.Fatalf("consistency %d to %d: VerifyConsistency %v, format.md %v, merkle %v; want all true", m, n, o, s, mk)
	}
	type mutant struct {
		name   string
		m, n   uint64
		r1, r2 Hash
		p      []Hash
	}
	flip := func(h Hash, bit int) Hash { h[bit/8] ^= 1 << (bit % 8); return h }
	ms := []mutant{
		{"old root bit", m, n, flip(r1, int(m)%256), r2, p},
		{"new root bit", m, n, r1, flip(r2, int(n)%256), p},
		{"old size+1", m + 1, n, r1, r2, p},
		{"new size+1", m, n + 1, r1, r2, p},
		{"old size-1", m - 1, n, r1, r2, p},
		{"new size-1", m, n - 1, r1, r2, p},
		{"proof hash added", m, n, r1, r2, append(slices.Clone(p), r2)},
		{"roots swapped", m, n, r2, r1, p},
	}
	for k := range p {
		q := slices.Clone(p)
		q[k] = flip(q[k], k*5%256)
		ms = append(ms, mutant{"proof bit", m, n, r1, r2, q})
		ms = append(ms, mutant{"proof hash dropped", m, n, r1, r2, slices.Delete(slices.Clone(p), k, k+1)})
		ms = append(ms, mutant{"proof hash duplicated", m, n, r1, r2, slices.Insert(slices.Clone(p), k, p[k])})
	}
	for _, mu := range ms {
		if mu.m == m && mu.n == n && mu.r1 == r1 && mu.r2 == r2 && slices.Equal(mu.p, p) {
			continue
		}
		o, s, mk := verdicts(mu.m, mu.n, mu.r1, mu.r2, mu.p)
		if mu.m == 0 {
			// transparency-dev/merkle takes any tree to be consistent
			// with the empty one (size 0, empty proof); RFC 9162 and
			// annal have no tree of size 0.
			mk = false
		}
		if mu.r1 == r1 && mu.r2 == r2 && slices.Equal(mu.p, p) {
			// Only a size changed: as for inclusion (checkInclusion),
			// the verifiers must agree.
			if o != s || s != mk {
				t.Fatalf("consistency %d to %d, mutation %q: VerifyConsistency %v, format.md %v, merkle %v disagree", m, n, mu.name, o, s, mk)
			}
			continue
		}
		if o || s || mk {
			t.Fatalf("consistency %d to %d, mutation %q accepted: VerifyConsistency %v, format.md %v, merkle %v", m, n, mu.name, o, s, mk)
		}
	}
}

// TestProofsSmall checks every inclusion and consistency proof of every
// tree of up to 64 leaves.
func TestProofsSmall(t *testing.T) {
	leaves := testLeaves(65)
	f := memTree(t, leaves)
	rt := newRFCTree(leaves)
	for n := uint64(1); n <= 64; n++ {
		for i := uint64(0); i < n; i++ {
			checkInclusion(t, f, rt, leaves, i, n)
		}
		for m := uint64(1); m <= n; m++ {
			checkConsistency(t, f, rt, m, n)
		}
	}
}

// TestProofsRandom checks random proofs in a tree of 10^5 leaves.
func TestProofsRandom(t *testing.T) {
	const size = 100_000
	leaves := testLeaves(size)
	f := memTree(t, leaves)
	rt := newRFCTree(leaves)
	rng := rand.New(rand.NewPCG(14, 1))
	cases := 300
	if testing.Short() {
		cases = 30
	}
	for range cases {
		n := 1 + rng.Uint64N(size)
		checkInclusion(t, f, rt, leaves, rng.Uint64N(n), n)
		checkConsistency(t, f, rt, 1+rng.Uint64N(n), n)
	}
	// The edges: the last leaf, sizes around powers of 2.
	for _, n := range []uint64{size, 65536, 65537, 65535, 32768, 99999} {
		checkInclusion(t, f, rt, leaves, n-1, n)
		checkInclusion(t, f, rt, leaves, 0, n)
		checkConsistency(t, f, rt, 1, n)
		checkConsistency(t, f, rt, n, n)
		checkConsistency(t, f, rt, n/2, n)
	}
}

// TestProofBadInput: out-of-range sizes and indexes are errors, never
// panics.
func TestProofBadInput(t *testing.T) {
	leaves := testLeaves(10)
	f := memTree(t, leaves)
	root, _ := f.Root(10)
	for _, c := range []struct{ i, n uint64 }{{10, 10}, {0, 11}, {0, 0}, {1 << 63, 1<<64 - 1}, {0, 1<<64 - 1}} {
		if _, err := f.InclusionProof(c.i, c.n); !errors.Is(err, ErrRange) {
			t.Errorf("InclusionProof(%d, %d) = %v, want ErrRange", c.i, c.n, err)
		}
		if err := VerifyInclusion(c.i, c.n, leaves[0], nil, root); !errors.Is(err, ErrProof) {
			t.Errorf("VerifyInclusion(%d, %d) = %v, want ErrProof", c.i, c.n, err)
		}
	}
	for _, c := range []struct{ m, n uint64 }{{0, 5}, {6, 5}, {5, 11}, {0, 0}, {1, 1<<64 - 1}, {1<<64 - 1, 1<<64 - 1}} {
		if _, err := f.ConsistencyProof(c.m, c.n); !errors.Is(err, ErrRange) {
			t.Errorf("ConsistencyProof(%d, %d) = %v, want ErrRange", c.m, c.n, err)
		}
		if err := VerifyConsistency(c.m, c.n, root, root, nil); !errors.Is(err, ErrProof) && c.m != c.n {
			t.Errorf("VerifyConsistency(%d, %d) = %v, want ErrProof", c.m, c.n, err)
		}
	}
	if err := VerifyConsistency(1<<64-1, 1<<64-1, root, root, nil); !errors.Is(err, ErrProof) {
		t.Errorf("VerifyConsistency of size 2^64-1 = %v, want ErrProof (beyond what the tree can hold)", err)
	}
	if _, err := f.Root(0); !errors.Is(err, ErrRange) {
		t.Errorf("Root(0) = %v, want ErrRange", err)
	}
	if _, err := f.Root(11); !errors.Is(err, ErrRange) {
		t.Errorf("Root(11) = %v, want ErrRange", err)
	}
	if _, err := f.Leaf(10); !errors.Is(err, ErrRange) {
		t.Errorf("Leaf(10) = %v, want ErrRange", err)
	}
	long := make([]Hash, 1000)
	if err := VerifyInclusion(0, 10, leaves[0], long, root); !errors.Is(err, ErrProof) {
		t.Errorf("VerifyInclusion with 1000 hashes = %v, want ErrProof", err)
	}
}
