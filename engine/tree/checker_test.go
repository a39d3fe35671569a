package tree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/tlog"
)

// corruptHash overwrites stored hash x of f's file.
func corruptHash(t *testing.T, f *File, x int64) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	var b [32]byte
	if _, err := f.file.ReadAt(b[:], offset(x)); err != nil {
		t.Fatal(err)
	}
	b[5] ^= 0x40
	if _, err := f.file.WriteAt(b[:], offset(x)); err != nil {
		t.Fatal(err)
	}
}

// runChecker adds leaves to a checker of f and returns the first error.
func runChecker(f *File, leaves []Hash) error {
	c := f.NewChecker(uint64(len(leaves)))
	for _, l := range leaves {
		if err := c.Add(l); err != nil {
			return err
		}
	}
	return nil
}

// TestCheckerFindsChanges: the Checker finds a changed leaf hash, a
// changed interior hash, and a changed event (a leaf that differs from
// the file's), each at the leaf that stores it.
func TestCheckerFindsChanges(t *testing.T) {
	leaves := testLeaves(1000)
	if err := runChecker(memTree(t, leaves), leaves); err != nil {
		t.Fatalf("intact tree: %v", err)
	}
	// A checker from a leaf takes the leaves before it from the file.
	c := memTree(t, leaves).NewCheckerFrom(500, 1000)
	for _, l := range leaves[500:] {
		if err := c.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	if c.Root() != mth(leaves) {
		t.Fatal("root of a checker from leaf 500 differs from MTH")
	}
	for _, c := range []struct {
		name        string
		level       int
		n           int64 // the node's index at its level
		wantLeaf    uint64
		changeEvent bool
	}{
		{"leaf hash", 0, 517, 517, false},
		{"first leaf", 0, 0, 0, false},
		{"last leaf", 0, 999, 999, false},
		{"level-1 hash", 1, 100, 201, false},
		{"level-5 hash", 5, 3, 127, false},
		{"level-9 hash", 9, 0, 511, false},
		{"event changed", 0, 733, 733, true},
	} {
		f := memTree(t, leaves)
		check := leaves
		if c.changeEvent {
			check = append([]Hash(nil), leaves...)
			check[c.n][0] ^= 1
		} else {
			corruptHash(t, f, tlog.StoredHashIndex(c.level, c.n))
		}
		err := runChecker(f, check)
		var me *MismatchError
		if !errors.As(err, &me) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Checker = %v, want a *MismatchError", c.name, err)
		}
		if me.Leaf != c.wantLeaf || me.Level != c.level || me.Stored == me.Computed {
			t.Fatalf("%s: mismatch at leaf %d level %d, want leaf %d level %d", c.name, me.Leaf, me.Level, c.wantLeaf, c.level)
		}
		for _, want := range []string{"tree", fmt.Sprintf("leaf %d", c.wantLeaf), fmt.Sprintf("is %x", me.Stored[:]), fmt.Sprintf("the leaves give %x", me.Computed[:])} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not say %q", c.name, err, want)
			}
		}
	}
	// A checker of more leaves than the file has, and a file cut short
	// under it (on the disk, whose files truncate in place).
	f, err := Create(vfs.Default, filepath.Join(t.TempDir(), "tree"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Append(leaves[:10]); err != nil {
		t.Fatal(err)
	}
	if err := f.NewChecker(11).Add(leaves[0]); !errors.Is(err, ErrRange) {
		t.Fatalf("checker of 11 leaves of 10: %v, want ErrRange", err)
	}
	c = f.NewChecker(10)
	if err := os.Truncate(f.path, storedLen(5)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10 && err == nil; i++ {
		err = c.Add(leaves[i])
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "leaf 5") {
		t.Fatalf("file cut under the checker: %v, want ErrCorrupt at leaf 5", err)
	}
}
