package fuzz

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/annal-db/annal/engine/tree"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// The proof fuzz targets share one tree of proofTreeSize leaves, built
// once per process on a memory FS; each input picks a tree size, indexes
// and one mutation of a true proof, which must be refused.
const proofTreeSize = 2000

var (
	proofTreeOnce sync.Once
	proofTree     *tree.File
	proofTreeErr  error
)

func fuzzTree(t *testing.T) *tree.File {
	proofTreeOnce.Do(func() {
		proofTree, proofTreeErr = tree.Create(vfs.NewMem(), "tree", 1)
		if proofTreeErr != nil {
			return
		}
		leaves := make([]tree.Hash, proofTreeSize)
		for i := range leaves {
			leaves[i] = tree.LeafHash(fmt.Appendf(nil, `{"event":%d}`, i))
		}
		proofTreeErr = proofTree.Append(leaves)
	})
	if proofTreeErr != nil {
		t.Fatal(proofTreeErr)
	}
	return proofTree
}

// input hands out the fuzz input's bytes as numbers, zeros once spent.
type input struct{ b []byte }

func (in *input) u8() uint8 {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *input) u16() uint64 { return uint64(in.u8())<<8 | uint64(in.u8()) }

func flipBit(h tree.Hash, bit uint64) tree.Hash {
	h[bit/8%32] ^= 1 << (bit % 8)
	return h
}

// otherHash is a hash that appears nowhere in the tree.
func otherHash(x uint64) tree.Hash {
	return sha256.Sum256(binary.BigEndian.AppendUint64([]byte("not in the tree"), x))
}

// mutateProof applies a proof mutation: a hash's bit flipped, a hash
// dropped, one added, one duplicated. ok is false if the kind does not
// apply (an empty proof has no hash to flip).
func mutateProof(p []tree.Hash, kind uint8, x uint64) (q []tree.Hash, what string) {
	if len(p) == 0 {
		return []tree.Hash{otherHash(x)}, "hash added to the empty proof"
	}
	k := int(x % uint64(len(p)))
	switch kind % 4 {
	case 0:
		q = slices.Clone(p)
		q[k] = flipBit(q[k], x>>8)
		return q, fmt.Sprintf("bit %d of hash %d flipped", x>>8%256, k)
	case 1:
		return slices.Delete(slices.Clone(p), k, k+1), fmt.Sprintf("hash %d dropped", k)
	case 2:
		k = int(x % uint64(len(p)+1))
		return slices.Insert(slices.Clone(p), k, otherHash(x)), fmt.Sprintf("hash added at %d", k)
	default:
		return slices.Insert(slices.Clone(p), k, p[k]), fmt.Sprintf("hash %d duplicated", k)
	}
}

// extraHashes reads the rest of the input as hashes: a proof made up by
// the fuzzer.
func extraHashes(in *input) []tree.Hash {
	var p []tree.Hash
	for len(in.b) >= 32 && len(p) < 70 {
		var h tree.Hash
		copy(h[:], in.b)
		in.b = in.b[32:]
		p = append(p, h)
	}
	return p
}

// FuzzInclusionProof: the true inclusion proof of a leaf verifies; a
// mutated one (leaf hash, index, root, a proof hash changed, dropped,
// added or duplicated, the proof of another leaf) is refused; a proof
// made up of the input's bytes verifies only if it is the true one. A
// changed tree size is refused unless the proof has the same shape in the
// tree of that size: RFC 9162 does not bind the size, the signed
// checkpoint does (then the statement is about the same root, and
// tree.VerifyInclusion must agree with format.md's algorithm, which
// engine/tree's tests check).
func FuzzInclusionProof(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 0, 0, 0},
		{0x07, 0xcf, 0x03, 0xe8, 2, 0, 9},
		{0x04, 0x00, 0x03, 0xff, 8, 0x10, 0x20},
		{0x00, 0x01, 0x00, 0x01, 1, 0, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ft := fuzzTree(t)
		in := &input{b: data}
		n := 1 + in.u16()%proofTreeSize
		i := in.u16() % n
		kind, x := in.u8(), in.u16()
		leaf, err := ft.Leaf(i)
		if err != nil {
			t.Fatal(err)
		}
		root, err := ft.Root(n)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ft.InclusionProof(i, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.VerifyInclusion(i, n, leaf, p, root); err != nil {
			t.Fatalf("true proof of leaf %d in %d refused: %v", i, n, err)
		}
		mi, mn, mleaf, mroot, mp := i, n, leaf, root, p
		var what string
		switch kind % 9 {
		case 0:
			mleaf, what = flipBit(leaf, x), "leaf hash bit"
		case 1:
			mi, what = x%(n+2), "index"
			if mi == i {
				mi = n + 1
			}
		case 2:
			mn, what = 1+x%(2*proofTreeSize), "size"
			if mn == n {
				mn = n + 1
			}
			err := tree.VerifyInclusion(mi, mn, mleaf, mp, mroot)
			if err == nil && !sameShape(i, n, mn) {
				t.Fatalf("proof of leaf %d in %d accepted for size %d, where its path has another shape", i, n, mn)
			}
			return
		case 3:
			mroot, what = flipBit(root, x), "root bit"
		case 4, 5, 6, 7:
			mp, what = mutateProof(p, kind-4, x)
		case 8:
			if n == 1 {
				return
			}
			j := x % n
			if j == i {
				j = (i + 1) % n
			}
			if mp, err = ft.InclusionProof(j, n); err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("the proof of leaf %d", j)
		}
		if err := tree.VerifyInclusion(mi, mn, mleaf, mp, mroot); err == nil {
			t.Fatalf("proof of leaf %d in %d, mutated (%s), accepted", i, n, what)
		} else if !errors.Is(err, tree.ErrProof) {
			t.Fatalf("mutated proof: %v, want ErrProof", err)
		}
		if made := extraHashes(in); len(made) > 0 && !slices.Equal(made, p) {
			if tree.VerifyInclusion(i, n, leaf, made, root) == nil {
				t.Fatalf("made-up proof of leaf %d in %d accepted", i, n)
			}
		}
	})
}

// sameShape says whether leaf i's inclusion path is the same sequence of
// left and right steps in trees of sizes n and m (RFC 9162 section 2.1.3.2,
// the steps the verifier takes).
func sameShape(i, n, m uint64) bool {
	if i >= m {
		return false
	}
	return slices.Equal(steps(i, n), steps(i, m))
}

func steps(i, n uint64) []bool {
	var s []bool
	fn, sn := i, n-1
	for sn != 0 {
		if fn&1 == 1 || fn == sn {
			s = append(s, true)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			s = append(s, false)
		}
		fn >>= 1
		sn >>= 1
	}
	return s
}

// FuzzConsistencyProof is FuzzInclusionProof for consistency proofs: the
// true proof between sizes m <= n verifies; a mutated one (either root,
// a proof hash changed, dropped, added or duplicated, the proof from
// another size) is refused; a proof made up of the input's bytes verifies
// only if it is the true one. A changed size is refused unless
// format.md's algorithm (written in engine/tree's tests, and here in
// consistencyShape) takes the same steps.
func FuzzConsistencyProof(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 0, 0, 0},
		{0x07, 0xcf, 0x03, 0xe8, 2, 0, 9},
		{0x04, 0x00, 0x01, 0x00, 8, 0x10, 0x20},
		{0x00, 0x07, 0x00, 0x03, 5, 0, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ft := fuzzTree(t)
		in := &input{b: data}
		n := 1 + in.u16()%proofTreeSize
		m := 1 + in.u16()%n
		kind, x := in.u8(), in.u16()
		r1, err := ft.Root(m)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ft.Root(n)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ft.ConsistencyProof(m, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.VerifyConsistency(m, n, r1, r2, p); err != nil {
			t.Fatalf("true proof from %d to %d refused: %v", m, n, err)
		}
		mm, mn, mr1, mr2, mp := m, n, r1, r2, p
		var what string
		switch kind % 9 {
		case 0:
			mr1, what = flipBit(r1, x), "old root bit"
		case 1:
			mr2, what = flipBit(r2, x), "new root bit"
		case 2, 3:
			// A size changed.
			if kind%9 == 2 {
				mm = x % (n + 2)
				if mm == m {
					mm = n + 1
				}
			} else {
				mn = x % (2 * proofTreeSize)
				if mn == n {
					mn = n + 1
				}
			}
			err := tree.VerifyConsistency(mm, mn, mr1, mr2, mp)
			if err == nil && (mm == 0 || mm > mn || !slices.Equal(consistencyShape(m, n), consistencyShape(mm, mn))) {
				t.Fatalf("proof from %d to %d accepted from %d to %d, where it has another shape", m, n, mm, mn)
			}
			return
		case 4, 5, 6, 7:
			if m == n {
				mp, what = []tree.Hash{otherHash(x)}, "hash added to the empty proof"
				break
			}
			mp, what = mutateProof(p, kind-4, x)
		case 8:
			m2 := 1 + x%n
			if m2 == m {
				return
			}
			if mp, err = ft.ConsistencyProof(m2, n); err != nil {
				t.Fatal(err)
			}
			if slices.Equal(mp, p) {
				return
			}
			what = fmt.Sprintf("the proof from %d", m2)
		}
		if err := tree.VerifyConsistency(mm, mn, mr1, mr2, mp); err == nil {
			t.Fatalf("proof from %d to %d, mutated (%s), accepted", m, n, what)
		} else if !errors.Is(err, tree.ErrProof) {
			t.Fatalf("mutated proof: %v, want ErrProof", err)
		}
		if made := extraHashes(in); len(made) > 0 && !slices.Equal(made, p) {
			if tree.VerifyConsistency(m, n, r1, r2, made) == nil {
				t.Fatalf("made-up proof from %d to %d accepted", m, n)
			}
		}
	})
}

// consistencyShape returns the steps format.md's consistency algorithm
// takes for sizes m < n: whether m is a power of 2, then for each proof
// hash whether it is hashed on the left of both, on the right of the new
// root, and the proof length; nil for m == n.
func consistencyShape(m, n uint64) []uint8 {
	if m == n || m == 0 {
		return nil
	}
	var s []uint8
	if m&(m-1) == 0 {
		s = append(s, 9)
	}
	fn, sn := m-1, n-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	for sn != 0 {
		if fn&1 == 1 || fn == sn {
			s = append(s, 1)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			s = append(s, 2)
		}
		fn >>= 1
		sn >>= 1
	}
	return s
}

// FuzzParseCheckpoint: any bytes parse or are refused, never a panic; a
// parsed checkpoint's Text is the input up to the extension lines and
// parses back to the same checkpoint.
func FuzzParseCheckpoint(f *testing.F) {
	for _, seed := range []string{
		"annal-56475aa7/e95bff80\n2\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwE=\n",
		"o\n18446744073709551615\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwE=\next\n",
		"o\n02\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwF=\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := tree.ParseCheckpoint(data)
		if err != nil {
			if !errors.Is(err, tree.ErrCheckpoint) {
				t.Fatalf("ParseCheckpoint: %v, want ErrCheckpoint", err)
			}
			return
		}
		text := c.Text()
		if !bytes.HasPrefix(data, text) {
			t.Fatalf("ParseCheckpoint(%q) = %+v, whose text %q is not the input's start", data, c, text)
		}
		if c2, err := tree.ParseCheckpoint(text); err != nil || c2 != c {
			t.Fatalf("the text of %+v parses to %+v, %v", c, c2, err)
		}
	})
}

var (
	fuzzKeyOnce sync.Once
	fuzzSigner  note.Signer
	fuzzVerif   note.Verifier
)

func fuzzKey(t *testing.T) (note.Signer, note.Verifier) {
	fuzzKeyOnce.Do(func() {
		k, err := tree.SignerKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{14}, 32)), "")
		if err != nil {
			panic(err)
		}
		v, err := tree.NewVerifier(k.Verifier)
		if err != nil {
			panic(err)
		}
		fuzzSigner, fuzzVerif = k.Signer, v
	})
	return fuzzSigner, fuzzVerif
}

// FuzzOpenCheckpoint: a signed checkpoint opens to itself; the same note
// with up to three bytes changed, removed or inserted never opens; and
// the input itself, taken as a note, opens (never panics) only if it is
// a checkpoint signed by the key.
func FuzzOpenCheckpoint(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x00\x10\x01\x01\x20\x02"))
	f.Add([]byte("annal-x/00000001\n1\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwE=\n\n— annal-x AAAA\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, v := fuzzKey(t)
		if c, err := tree.OpenCheckpoint(data, v); err == nil {
			msg, _ := tree.Sign(c, s)
			if !bytes.HasPrefix(data, c.Text()) || msg == nil {
				t.Fatalf("the input opened as %+v", c)
			}
		}
		in := &input{b: data}
		c := tree.Checkpoint{
			Origin: tree.Origin(s.Name(), uint32(in.u16())<<16|uint32(in.u16())),
			Size:   in.u16()<<48 | in.u16()<<32 | in.u16()<<16 | in.u16(),
		}
		for i := range c.Root {
			c.Root[i] = in.u8()
		}
		msg, err := tree.Sign(c, s)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tree.OpenCheckpoint(msg, v); err != nil || got != c {
			t.Fatalf("signed %+v opens as %+v, %v", c, got, err)
		}
		m := bytes.Clone(msg)
		edits := 1 + in.u8()%3
		for range edits {
			pos := int(in.u16() % uint64(len(m)+1))
			b := in.u8()
			switch op := in.u8() % 3; {
			case op == 0 && pos < len(m):
				m[pos] ^= b | 1
			case op == 1 && pos < len(m):
				m = slices.Delete(m, pos, pos+1)
			default:
				m = slices.Insert(m, pos, b)
			}
		}
		if bytes.Equal(m, msg) {
			return
		}
		if got, err := tree.OpenCheckpoint(m, v); err == nil {
			t.Fatalf("changed note opened as %+v:\n%q\nfrom\n%q", got, m, msg)
		} else if !errors.Is(err, tree.ErrCheckpoint) {
			t.Fatalf("changed note: %v, want ErrCheckpoint", err)
		}
	})
}
