package tree

import (
	"errors"
	"testing"
)

// TestFileBuilderContinuesTheFile: a Builder taken from a file at size n
// and given the leaves after n has the root of the whole tree at every
// size (for the replica's chunks after the bucket's head), and one
// beyond the file's size is ErrRange.
func TestFileBuilderContinuesTheFile(t *testing.T) {
	leaves := testLeaves(300)
	f := memTree(t, leaves[:200])
	for _, n := range []uint64{0, 1, 2, 3, 64, 127, 128, 199, 200} {
		b, err := f.Builder(n)
		if err != nil {
			t.Fatalf("Builder(%d): %v", n, err)
		}
		if b.Size() != n {
			t.Fatalf("Builder(%d).Size() = %d", n, b.Size())
		}
		for i := n; i < uint64(len(leaves)); i++ {
			b.Add(leaves[i])
			if i+1 == 250 || i+1 == 300 || i+1 == n+1 {
				if got, want := b.Root(), mth(leaves[:i+1]); got != want {
					t.Fatalf("Builder(%d) plus leaves to %d: root %x, want %x", n, i+1, got, want)
				}
			}
		}
	}
	if _, err := f.Builder(201); !errors.Is(err, ErrRange) {
		t.Fatalf("Builder(201) of a tree of 200: %v, want ErrRange", err)
	}
}
