package tree

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"golang.org/x/mod/sumdb/tlog"
)

// Checker compares a tree file, read sequentially from its start, with
// leaves recomputed elsewhere (from the segments), for a full
// verification: Add the leaves in order, then Root.
type Checker struct {
	f      *File
	n      uint64 // the leaves to check
	r      *bufio.Reader
	front  frontier // of the leaves added so far
	err    error    // the first error, returned again by every later Add
	stored Hash     // Add's read buffer (a local would escape to the heap)
}

// checkerBuffer is the size of a Checker's reads: large, so that checking
// 10^7 leaves (640 MB of hashes) takes a few hundred reads.
const checkerBuffer = 1 << 20

// NewChecker returns a Checker of the first n leaves of f (n <= Size;
// beyond, every Add is ErrRange).
func (f *File) NewChecker(n uint64) *Checker { return f.NewCheckerFrom(0, n) }

// NewCheckerFrom returns a Checker of leaves from to n-1 of f (from <= n
// <= Size), taking the stored hashes of the leaves before from as they
// are: the first Add is leaf from. After a crash, the leaves appended
// since the file was last synced may be wrong (a block of the file lost
// before one that was kept reads as zeros): checking them from the last
// synced size against their events finds the first wrong one, where the
// file is to be truncated.
func (f *File) NewCheckerFrom(from, n uint64) *Checker {
	c := &Checker{f: f, n: n}
	if size := f.Size(); from > n || n > size {
		c.err = fmt.Errorf("%w: %s: checker of leaves %d to %d, the tree has %d", ErrRange, f.path, from, n, size)
		return c
	}
	c.front.reset(from, f)
	if err := c.front.load(f); err != nil {
		c.err = fmt.Errorf("tree: check %s from leaf %d: %w", f.path, from, err)
		return c
	}
	c.front.fallback = nil // from here on, nothing comes from the file
	span := storedLen(n) - storedLen(from)
	sr := io.NewSectionReader(readerAt{f}, storedLen(from), span)
	// No larger than what it reads: a small tree's check (every Open of
	// a small ledger) allocated the whole MiB.
	c.r = bufio.NewReaderSize(sr, int(min(checkerBuffer, max(span, 16))))
	return c
}

// readerAt reads a File's bytes under its handle's lock.
type readerAt struct{ f *File }

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	if r.f.closed {
		return 0, errClosed
	}
	return r.f.file.ReadAt(p, off)
}

// Add checks the next leaf: the file's leaf hash, and every stored hash
// the leaf completes, against those computed from leaf. The first
// difference is a *MismatchError. After an error, Add returns it again.
func (c *Checker) Add(leaf Hash) error {
	if c.err != nil {
		return c.err
	}
	i := c.front.n
	if i >= c.n {
		c.err = fmt.Errorf("%w: %s: leaf %d added to a checker of %d leaves", ErrRange, c.f.path, i, c.n)
		return c.err
	}
	hashes, err := c.front.add(leaf)
	if err != nil {
		c.err = fmt.Errorf("tree: check %s: %w", c.f.path, err)
		return c.err
	}
	stored := &c.stored
	for level, h := range hashes {
		if _, err := io.ReadFull(c.r, stored[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("%w: %s ends before stored hash %d", ErrCorrupt, c.f.path, tlog.StoredHashIndex(level, int64(i>>uint(level))))
			}
			c.err = fmt.Errorf("tree: check %s: leaf %d: %w", c.f.path, i, err)
			return c.err
		}
		if *stored != h {
			c.err = &MismatchError{Path: c.f.path, Leaf: i, Level: level, Stored: *stored, Computed: h}
			return c.err
		}
	}
	return nil
}

// Root returns the root of the leaves added so far (computed from them,
// not read from the file; for a Checker from leaf k, with the leaves
// before k as the file holds them); the zero Hash if there are none.
func (c *Checker) Root() Hash {
	if c.front.n == 0 {
		return Hash{}
	}
	h, _ := c.front.root() // the frontier serves every hash TreeHash asks
	return h
}

// MismatchError says where a tree file and the recomputed leaves differ.
type MismatchError struct {
	Path     string // the tree file
	Leaf     uint64 // the leaf index being checked (0 = the genesis event)
	Level    int    // 0: the leaf hash itself; >0 an interior hash it completes
	Stored   Hash   // what the file holds
	Computed Hash   // what the leaves give
}

// Error says which leaf, which of its stored hashes (and where in the
// file), what the file holds and what the leaves give.
func (e *MismatchError) Error() string {
	what := "leaf hash"
	if e.Level > 0 {
		first := e.Leaf + 1 - 1<<uint(e.Level)
		what = fmt.Sprintf("level-%d hash of leaves %d-%d", e.Level, first, e.Leaf)
	}
	return fmt.Sprintf("tree: %s: leaf %d (event #%d): %s (stored hash %d at byte %d) is %x, the leaves give %x",
		e.Path, e.Leaf, e.Leaf+1, what, tlog.StoredHashIndex(e.Level, int64(e.Leaf>>uint(e.Level))),
		offset(tlog.StoredHashIndex(e.Level, int64(e.Leaf>>uint(e.Level)))), e.Stored[:], e.Computed[:])
}

// Is makes a MismatchError match ErrCorrupt (and what it matches,
// corruption.Err).
func (e *MismatchError) Is(target error) bool { return errors.Is(ErrCorrupt, target) }

// Builder computes the root of a tree from its leaves, in memory (O(log n)
// hashes), for a rebuild or for an auditor recomputing a tree. The zero
// Builder is an empty tree.
type Builder struct {
	front frontier
}

// Add adds the next leaf hash.
func (b *Builder) Add(leaf Hash) {
	// The frontier serves every hash that adding asks for, so add
	// cannot fail.
	if _, err := b.front.add(leaf); err != nil {
		panic("tree: Builder: " + err.Error())
	}
}

// Size returns the number of leaves added.
func (b *Builder) Size() uint64 { return b.front.n }

// Root returns the root of the leaves added so far (Size >= 1; the zero
// Hash if Size is 0).
func (b *Builder) Root() Hash {
	if b.front.n == 0 {
		return Hash{}
	}
	h, err := b.front.root()
	if err != nil {
		panic("tree: Builder: " + err.Error())
	}
	return h
}

// Builder returns a Builder holding the first n leaves of f (n <= Size),
// its frontier read from the file: the leaves after n are then Added to
// it, for the roots of trees larger than the file (a replica's chunks).
func (f *File) Builder(n uint64) (*Builder, error) {
	if size := f.Size(); n > size {
		return nil, fmt.Errorf("%w: %s: builder at size %d, the tree has %d", ErrRange, f.path, n, size)
	}
	b := &Builder{}
	b.front.reset(n, f)
	if err := b.front.load(f); err != nil {
		return nil, fmt.Errorf("tree: builder of %s at size %d: %w", f.path, n, err)
	}
	b.front.fallback = nil // from here on, nothing comes from the file
	return b, nil
}
