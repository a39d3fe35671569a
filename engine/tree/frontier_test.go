package tree

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// tlogStore is every stored hash of a tree, computed by tlog alone (the
// reference the frontier must agree with), indexed as in the file.
type tlogStore []Hash

func (s tlogStore) ReadHashes(indexes []int64) ([]Hash, error) {
	out := make([]Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s)) {
			return nil, fmt.Errorf("stored hash %d of %d", x, len(s))
		}
		out[i] = s[x]
	}
	return out, nil
}

// tlogStored returns the stored hashes of leaves, as tlog computes them.
func tlogStored(t testing.TB, leaves []Hash) tlogStore {
	t.Helper()
	var s tlogStore
	for i, l := range leaves {
		hashes, err := tlog.StoredHashesForRecordHash(int64(i), l, s)
		if err != nil {
			t.Fatal(err)
		}
		s = append(s, hashes...)
	}
	return s
}

// TestFrontierAgreesWithTlog: for every tree size up to 2100, and from a
// frontier loaded at many sizes, the stored hashes the frontier computes
// for each leaf (and nothing is allocated for them) are those of
// tlog.StoredHashesForRecordHash, and its root is tlog.TreeHash's.
func TestFrontierAgreesWithTlog(t *testing.T) {
	const n = 2100
	leaves := testLeaves(n)
	store := tlogStored(t, leaves)
	check := func(f *frontier, from int) {
		t.Helper()
		for i := from; i < n; i++ {
			got, err := f.add(leaves[i])
			if err != nil {
				t.Fatalf("from %d: add leaf %d: %v", from, i, err)
			}
			want, err := tlog.StoredHashesForRecordHash(int64(i), leaves[i], store)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("from %d: leaf %d: %d stored hashes, tlog %d", from, i, len(got), len(want))
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("from %d: leaf %d: stored hash %d (level %d) is %x, tlog %x", from, i, tlog.StoredHashIndex(j, int64(i)>>uint(j)), j, got[j][:4], want[j][:4])
				}
			}
			// The root at every size after the first leaves, then now and then.
			if i < 300 || i%97 == 0 {
				root, err := f.root()
				if err != nil {
					t.Fatal(err)
				}
				wantRoot, err := tlog.TreeHash(int64(i+1), store)
				if err != nil {
					t.Fatal(err)
				}
				if root != wantRoot {
					t.Fatalf("from %d: root of %d leaves %x, tlog %x", from, i+1, root[:4], wantRoot[:4])
				}
			}
		}
	}
	var f frontier
	check(&f, 0)
	for _, from := range []int{1, 2, 3, 7, 8, 255, 256, 257, 1023, 1024, 1500, 2047, 2048, 2099} {
		var g frontier
		g.reset(uint64(from), store)
		if err := g.load(store); err != nil {
			t.Fatal(err)
		}
		g.fallback = nil // every hash from the frontier, none from the store
		check(&g, from)
	}
	// A frontier not loaded reads the hashes it lacks from its fallback.
	var g frontier
	g.reset(1535, store)
	check(&g, 1535)
	// Nothing is allocated per leaf.
	var h frontier
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := h.add(leaves[i%n]); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Fatalf("add allocates %v times a leaf", a)
	}
}

// TestFrontierFallbackError: a frontier that lacks a hash and has no way
// to read it fails the add, and adds nothing.
func TestFrontierFallbackError(t *testing.T) {
	var f frontier
	f.reset(3, nil)
	if _, err := f.add(testLeaves(1)[0]); err == nil {
		t.Fatal("add without the frontier's hashes passed")
	}
	if f.n != 3 {
		t.Fatalf("a failed add counted a leaf: n = %d", f.n)
	}
	f.reset(3, tlogStore(nil))
	if _, err := f.add(testLeaves(1)[0]); err == nil {
		t.Fatal("add with an unreadable hash passed")
	}
	f.reset(maxSize, nil)
	if _, err := f.add(Hash{}); !errors.Is(err, ErrRange) {
		t.Fatalf("leaf past the largest tree: %v, want ErrRange", err)
	}
}

// TestFileAndCheckerAgreeWithTlog: a tree file written by Append holds,
// byte for byte, tlog's stored hashes; and every stored hash a Checker
// compares is tlog's: changing any one of them (of 300 leaves) makes the
// Checker fail at the leaf and level tlog places it.
func TestFileAndCheckerAgreeWithTlog(t *testing.T) {
	const n = 300
	leaves := testLeaves(n)
	store := tlogStored(t, leaves)
	f := memTree(t, leaves)
	f.mu.RLock()
	for x, want := range store {
		var got Hash
		if _, err := f.file.ReadAt(got[:], offset(int64(x))); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("stored hash %d of the file is %x, tlog %x", x, got[:4], want[:4])
		}
	}
	f.mu.RUnlock()
	if err := runChecker(f, leaves); err != nil {
		t.Fatalf("intact tree: %v", err)
	}
	for x := range store {
		corruptHash(t, f, int64(x))
		err := runChecker(f, leaves)
		corruptHash(t, f, int64(x)) // back as it was
		var m *MismatchError
		if !errors.As(err, &m) {
			t.Fatalf("stored hash %d changed: the checker says %v", x, err)
		}
		if got := tlog.StoredHashIndex(m.Level, int64(m.Leaf>>uint(m.Level))); got != int64(x) {
			t.Fatalf("stored hash %d changed: the checker fails at leaf %d level %d (stored hash %d)", x, m.Leaf, m.Level, got)
		}
		if m.Stored == store[x] || m.Computed != store[x] {
			t.Fatalf("stored hash %d changed: the checker computed %x (tlog %x), stored %x", x, m.Computed[:4], store[x][:4], m.Stored[:4])
		}
	}
}
