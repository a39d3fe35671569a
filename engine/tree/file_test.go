package tree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/tlog"
)

// fileSystems are the file systems the file tests run on: the disk (whose
// files truncate in place) and memory (whose files are copied to be cut).
func fileSystems(t *testing.T) map[string]func() (vfs.FS, string) {
	return map[string]func() (vfs.FS, string){
		"disk": func() (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "tree") },
		"mem":  func() (vfs.FS, string) { return vfs.NewMem(), "tree" },
	}
}

// checkRoots checks every root of f, and every leaf, against MTH.
func checkRoots(t *testing.T, f *File, leaves []Hash) {
	t.Helper()
	if f.Size() != uint64(len(leaves)) {
		t.Fatalf("Size = %d, want %d", f.Size(), len(leaves))
	}
	if len(leaves) == 0 {
		return
	}
	rt := newRFCTree(leaves)
	step := max(1, len(leaves)/300) // every size of a small tree, 300 of a large one
	for n := 1; n <= len(leaves); n++ {
		if n%step != 0 && n != len(leaves) && n&(n-1) != 0 {
			continue
		}
		r, err := f.Root(uint64(n))
		if err != nil {
			t.Fatalf("Root(%d): %v", n, err)
		}
		if want := rt.mth(0, n); r != want {
			t.Fatalf("Root(%d) = %x, MTH = %x", n, r, want)
		}
		l, err := f.Leaf(uint64(n - 1))
		if err != nil || l != leaves[n-1] {
			t.Fatalf("Leaf(%d) = %x, %v; want %x", n-1, l, err, leaves[n-1])
		}
	}
}

func fileLen(t *testing.T, fs vfs.FS, path string) int64 {
	t.Helper()
	info, err := fs.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestRoots: the root of every size 1..300, appended in batches of
// every size, read from the file, from a Builder and from a Checker, is
// RFC 9162's MTH computed directly.
func TestRoots(t *testing.T) {
	leaves := testLeaves(300)
	for _, batch := range []int{1, 2, 3, 7, 64, 300} {
		f := memTree(t, nil)
		for i := 0; i < len(leaves); i += batch {
			if err := f.Append(leaves[i:min(i+batch, len(leaves))]); err != nil {
				t.Fatal(err)
			}
		}
		checkRoots(t, f, leaves)
		if got, want := fileLen(t, f.fs, f.path), HeaderSize+32*tlog.StoredHashCount(300); got != want {
			t.Fatalf("file is %d bytes, want %d", got, want)
		}
	}
	var b Builder
	c := memTree(t, leaves).NewChecker(300)
	for n := 1; n <= len(leaves); n++ {
		b.Add(leaves[n-1])
		if err := c.Add(leaves[n-1]); err != nil {
			t.Fatal(err)
		}
		want := mth(leaves[:n])
		if b.Size() != uint64(n) || b.Root() != want {
			t.Fatalf("Builder of %d leaves: size %d root %x, MTH %x", n, b.Size(), b.Root(), want)
		}
		if c.Root() != want {
			t.Fatalf("Checker root of %d leaves = %x, MTH %x", n, c.Root(), want)
		}
	}
	if err := c.Add(leaves[0]); !errors.Is(err, ErrRange) {
		t.Fatalf("Checker.Add past n = %v, want ErrRange", err)
	}
}

// TestReopen: a tree appended, closed and reopened has the same leaves and
// roots, and grows on.
func TestReopen(t *testing.T) {
	leaves := testLeaves(100)
	for name, mk := range fileSystems(t) {
		t.Run(name, func(t *testing.T) {
			fs, path := mk()
			f, err := Create(fs, path, 42)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Append(leaves[:37]); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Append(leaves[37:38]); err == nil {
				t.Fatal("Append after Close succeeded")
			}
			f, err = OpenFile(fs, path, 42)
			if err != nil {
				t.Fatal(err)
			}
			checkRoots(t, f, leaves[:37])
			for i := 37; i < 100; i += 9 {
				if err := f.Append(leaves[i:min(i+9, 100)]); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			f, err = OpenFile(fs, path, 42)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			checkRoots(t, f, leaves)
		})
	}
}

// TestTornTail: a file cut anywhere inside the last leaf's stored hashes
// opens at the leaves before it; garbage after the last whole hash is
// ignored; the next Append (or Truncate) cuts it, and the file is exactly
// the leaves'.
func TestTornTail(t *testing.T) {
	leaves := testLeaves(64) // leaf 63 closes 6 subtrees: 7 hashes
	for name, mk := range fileSystems(t) {
		t.Run(name, func(t *testing.T) {
			fs, path := mk()
			full := func() []byte {
				f, err := Create(fs, path, 1)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Append(leaves); err != nil {
					t.Fatal(err)
				}
				f.Close()
				return readAll(t, fs, path)
			}()
			start, end := storedLen(63), storedLen(64)
			for cut := start; cut <= end; cut++ {
				writeFile(t, fs, path, full[:cut])
				f, err := OpenFile(fs, path, 1)
				if err != nil {
					t.Fatalf("cut at %d: %v", cut, err)
				}
				want := 63
				if cut == end {
					want = 64
				}
				checkRoots(t, f, leaves[:want])
				if err := f.Append(leaves[want:]); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if got := readAll(t, fs, path); !bytes.Equal(got, full) {
					t.Fatalf("cut at %d, appended again: %d bytes differ from the whole file (%d)", cut, len(got), len(full))
				}
			}
			// Garbage after the last whole hash: whole hashes that do not
			// make a leaf, and a partial one.
			// (Junk that does not make up leaf 63's 7 hashes; more would
			// be read as leaves, see TestShortWrite.)
			for _, extra := range []int{1, 31, 32, 33, 6*32 + 5} {
				junk := bytes.Repeat([]byte{0xa5}, extra)
				writeFile(t, fs, path, append(full[:start:start], junk...))
				f, err := OpenFile(fs, path, 1)
				if err != nil {
					t.Fatal(err)
				}
				checkRoots(t, f, leaves[:63])
				if err := f.Append(leaves[63:]); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if got := readAll(t, fs, path); !bytes.Equal(got, full) {
					t.Fatalf("%d bytes of junk, appended again: file differs", extra)
				}
				// Truncate cuts the junk too.
				writeFile(t, fs, path, append(full[:start:start], junk...))
				f, err = OpenFile(fs, path, 1)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(63); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if got := fileLen(t, fs, path); got != start {
					t.Fatalf("after Truncate(63) the file is %d bytes, want %d", got, start)
				}
			}
		})
	}
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Clone(b)); err != nil { // vfs.File.Write may modify its argument
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHeaderDamage: a damaged header, or another ledger's, is ErrCorrupt
// naming the file and what differs.
func TestHeaderDamage(t *testing.T) {
	fs := vfs.NewMem()
	f, err := Create(fs, "tree", 0xe95bff80)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Append(testLeaves(3)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	good := readAll(t, fs, "tree")
	for _, c := range []struct {
		name   string
		damage func([]byte) []byte
		ledger uint32
		want   string
	}{
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, 0xe95bff80, `magic "XNNLTREE"`},
		{"version", func(b []byte) []byte { b[11] = 2; return b }, 0xe95bff80, "format version 2"},
		{"other ledger", func(b []byte) []byte { return b }, 0x12345678, "ledger e95bff80 in the header, want 12345678"},
		{"reserved", func(b []byte) []byte { b[20] = 1; return b }, 0xe95bff80, "bytes 16-31"},
		{"short", func(b []byte) []byte { return b[:31] }, 0xe95bff80, "31 bytes"},
		{"empty", func(b []byte) []byte { return nil }, 0xe95bff80, "0 bytes"},
	} {
		writeFile(t, fs, "tree", c.damage(bytes.Clone(good)))
		_, err := OpenFile(fs, "tree", c.ledger)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tree") {
			t.Errorf("%s: OpenFile = %v, want ErrCorrupt saying %q", c.name, err, c.want)
		}
	}
	if _, err := OpenFile(fs, "missing", 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenFile of a missing file = %v, want os.ErrNotExist", err)
	}
}

// TestTruncate: cutting the tree back and growing it with other leaves
// gives the roots of the new leaves, and the file survives reopening.
func TestTruncate(t *testing.T) {
	a, b := testLeaves(50), testLeaves(80)
	for i := range b {
		b[i][0] ^= 0xff // leaves other than a's
	}
	for name, mk := range fileSystems(t) {
		t.Run(name, func(t *testing.T) {
			fs, path := mk()
			f, err := Create(fs, path, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Append(a); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(51); !errors.Is(err, ErrRange) {
				t.Fatalf("Truncate(51) of 50 = %v, want ErrRange", err)
			}
			for _, k := range []uint64{50, 33, 32, 1, 0} {
				if err := f.Truncate(k); err != nil {
					t.Fatal(err)
				}
				if got, want := fileLen(t, fs, path), storedLen(k); got != want {
					t.Fatalf("Truncate(%d): file %d bytes, want %d", k, got, want)
				}
				want := append(append([]Hash{}, a[:k]...), b[k:]...)
				if err := f.Append(b[k:]); err != nil {
					t.Fatal(err)
				}
				checkRoots(t, f, want)
				f.Close()
				if f, err = OpenFile(fs, path, 3); err != nil {
					t.Fatal(err)
				}
				checkRoots(t, f, want)
				if err := f.Truncate(k); err != nil {
					t.Fatal(err)
				}
				if err := f.Append(a[k:]); err != nil {
					t.Fatal(err)
				}
				checkRoots(t, f, a)
			}
			f.Close()
		})
	}
}

// TestConcurrentReaders: readers take roots and proofs, and verify them,
// while one writer appends (run with -race).
func TestConcurrentReaders(t *testing.T) {
	const total = 3000
	leaves := testLeaves(total)
	f := memTree(t, leaves[:1])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := f.Size()
				root, err := f.Root(n)
				if err != nil {
					errs <- err
					return
				}
				i := rng.Uint64N(n)
				p, err := f.InclusionProof(i, n)
				if err == nil {
					err = VerifyInclusion(i, n, leaves[i], p, root)
				}
				if err != nil {
					errs <- fmt.Errorf("inclusion %d in %d: %w", i, n, err)
					return
				}
				m := 1 + rng.Uint64N(n)
				old, err := f.Root(m)
				if err == nil {
					p, err = f.ConsistencyProof(m, n)
				}
				if err == nil {
					err = VerifyConsistency(m, n, old, root, p)
				}
				if err != nil {
					errs <- fmt.Errorf("consistency %d to %d: %w", m, n, err)
					return
				}
			}
		}()
	}
	for i := 1; i < total; {
		k := min(1+i%7, total-i)
		if err := f.Append(leaves[i : i+k]); err != nil {
			t.Fatal(err)
		}
		i += k
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, _ := f.Root(total)
	if r != newRFCTree(leaves).mth(0, total) {
		t.Fatal("root after the concurrent appends differs from MTH")
	}
}

// TestCrash: on a memory FS that loses unsynced writes at a crash, the
// reopened tree is a prefix of what was appended, at least what was
// synced, with the right roots.
func TestCrash(t *testing.T) {
	leaves := testLeaves(2000)
	holes := 0
	for seed := range uint64(20) {
		fs := vfs.NewCrashableMem()
		f, err := Create(fs, "tree", 5)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 2))
		synced, n := 0, 0
		for n < len(leaves) {
			k := min(1+rng.IntN(40), len(leaves)-n)
			if err := f.Append(leaves[n : n+k]); err != nil {
				t.Fatal(err)
			}
			n += k
			if rng.IntN(15) == 0 {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				synced = n
			}
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed * 5), RNG: rand.New(rand.NewPCG(seed, 3))})
		f.Close()
		g, err := OpenFile(crashed, "tree", 5)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		got := int(g.Size())
		if got < synced || got > n {
			t.Fatalf("seed %d: %d leaves after the crash, synced %d, appended %d", seed, got, synced, n)
		}
		// Unsynced blocks may come back or not, each on its own: the
		// unsynced tail may hold zeros where a block was lost before one
		// that was kept. The recovery is to check the leaves after the
		// last sync against their events and cut at the first that
		// differs.
		c := g.NewCheckerFrom(uint64(synced), uint64(got))
		for i := synced; i < got; i++ {
			if err := c.Add(leaves[i]); err != nil {
				var me *MismatchError
				if !errors.As(err, &me) || me.Leaf != uint64(i) {
					t.Fatalf("seed %d: leaf %d: %v", seed, i, err)
				}
				if err := g.Truncate(uint64(i)); err != nil {
					t.Fatal(err)
				}
				holes++
				got = i
				break
			}
		}
		checkRoots(t, g, leaves[:got])
		if seed == 0 && got != synced {
			t.Fatalf("no unsynced data kept, yet %d leaves after the crash, %d synced", got, synced)
		}
		// It grows on from there.
		if err := g.Append(leaves[got:]); err != nil {
			t.Fatal(err)
		}
		checkRoots(t, g, leaves)
		g.Close()
	}
	// The seeds are fixed: some of them lose a block before one that is
	// kept, and the check above must have found it.
	t.Logf("%d of 20 crashes left a hole in the unsynced tail", holes)
	if holes == 0 {
		t.Fatal("no crash left a hole: the test does not test the recovery")
	}
}

// TestShortWrite: an Append whose write fails half-way leaves whole
// hashes after the tree's end; the next Append, of fewer leaves, cuts
// them, so that reopening does not read them as leaves.
func TestShortWrite(t *testing.T) {
	leaves := testLeaves(300)
	fs := faultfs.Wrap(vfs.NewMem())
	f, err := Create(fs, "tree", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Append(leaves[:10]); err != nil {
		t.Fatal(err)
	}
	fs.SetInjector(faultfs.OnKind(faultfs.WriteAt, 0, faultfs.ShortWrite))
	if err := f.Append(leaves[10:300]); !errors.Is(err, faultfs.ErrInjected) {
		t.Fatalf("Append with a short write: %v", err)
	}
	if f.Size() != 10 {
		t.Fatalf("Size after a failed Append = %d, want 10", f.Size())
	}
	if fileLen(t, fs, "tree") <= storedLen(11) {
		t.Fatal("test assumption: the short write left more than a leaf's hashes")
	}
	if err := f.Append(leaves[10:11]); err != nil {
		t.Fatal(err)
	}
	checkRoots(t, f, leaves[:11])
	f.Close()
	if f, err = OpenFile(fs, "tree", 1); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkRoots(t, f, leaves[:11])
}
