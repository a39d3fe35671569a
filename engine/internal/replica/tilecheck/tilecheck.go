// Package tilecheck reads a ledger published as C2SP tlog-tiles the way a
// generic client does, for tests: from the objects' bytes, with
// golang.org/x/mod/sumdb/tlog (proofs, tiles) and sumdb/note (the signed
// checkpoint) alone, knowing nothing of annal but the paths of
// C2SP tlog-tiles (docs/replication.md, "Tiles").
package tilecheck

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Fetch returns the object at path, relative to the log's prefix (the
// ledger's folder): "checkpoint", "tile/0/x001/234", ...
type Fetch func(path string) ([]byte, error)

// Log is a tiled log read through Fetch, its checkpoints checked with a
// verifier key.
type Log struct {
	fetch    Fetch
	verifier note.Verifier
	// Fallbacks counts the partial tiles and bundles read from their
	// full tile, the partial one missing.
	Fallbacks int
}

// New returns the log that fetch reads, whose checkpoints vkey (a note
// verifier key) signs.
func New(fetch Fetch, vkey string) (*Log, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &Log{fetch: fetch, verifier: v}, nil
}

// Checkpoint returns the tree of the log's current checkpoint, and the
// note.
func (l *Log) Checkpoint() (tlog.Tree, []byte, error) {
	msg, err := l.fetch("checkpoint")
	if err != nil {
		return tlog.Tree{}, nil, err
	}
	t, err := l.Open(msg)
	return t, msg, err
}

// Open checks a signed checkpoint's signature and returns its tree (C2SP
// tlog-checkpoint: origin, size, base64 root).
func (l *Log) Open(msg []byte) (tlog.Tree, error) {
	n, err := note.Open(msg, note.VerifierList(l.verifier))
	if err != nil {
		return tlog.Tree{}, fmt.Errorf("checkpoint: %w", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return tlog.Tree{}, errors.New("checkpoint: fewer than three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return tlog.Tree{}, fmt.Errorf("checkpoint: size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return tlog.Tree{}, fmt.Errorf("checkpoint: root %q", lines[2])
	}
	t := tlog.Tree{N: size}
	copy(t.Hash[:], root)
	return t, nil
}

// c2spPath is the C2SP path of a tile: tlog's path without the height
// element, entry bundles (level -1, tlog's "data") under tile/entries/.
func c2spPath(t tlog.Tile) string {
	p := strings.TrimPrefix(t.Path(), "tile/"+strconv.Itoa(t.H)+"/")
	return "tile/" + strings.Replace(p, "data/", "entries/", 1)
}

// tiles is a tlog.TileReader fetching tiles from the log: no cache, so
// every proof reads the bucket again.
type tiles struct{ l *Log }

func (tiles) Height() int { return 8 }

func (r tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		b, fromFull, err := r.l.fetchTile(t)
		if err != nil {
			return nil, err
		}
		if fromFull {
			if len(b) != tlog.HashSize<<t.H {
				return nil, fmt.Errorf("tile %s: %d bytes, want %d", c2spPath(t), len(b), tlog.HashSize<<t.H)
			}
			b = b[:t.W*tlog.HashSize]
		}
		out[i] = b
	}
	return out, nil
}

// fetchTile fetches tile t (a tile or an entry bundle). A partial one
// that the log no longer serves (C2SP tlog-tiles: a log may delete it
// once the full tile is available) is read from the full tile, which
// begins with it (fromFull): the caller keeps its first t.W hashes or
// entries.
func (l *Log) fetchTile(t tlog.Tile) (b []byte, fromFull bool, err error) {
	b, err = l.fetch(c2spPath(t))
	if err == nil {
		return b, false, nil
	}
	if t.W == 1<<t.H {
		return nil, false, fmt.Errorf("tile %s: %w", c2spPath(t), err)
	}
	full := t
	full.W = 1 << t.H
	b, ferr := l.fetch(c2spPath(full))
	if ferr != nil {
		return nil, false, fmt.Errorf("tile %s: %w; its full tile %s: %w", c2spPath(t), err, c2spPath(full), ferr)
	}
	l.Fallbacks++
	return b, true, nil
}

func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}

// Hashes returns a tlog.HashReader of tree t, its tiles fetched and
// checked against t's root (tlog.TileHashReader).
func (l *Log) Hashes(t tlog.Tree) tlog.HashReader { return tlog.TileHashReader(t, tiles{l}) }

// Entry returns entry i of tree t, from its entry bundle (the partial
// one of t's width if t ends in it, or the first entries of the full
// bundle when the partial one is gone).
func (l *Log) Entry(t tlog.Tree, i int64) ([]byte, error) {
	if i < 0 || i >= t.N {
		return nil, fmt.Errorf("entry %d is not in a tree of %d", i, t.N)
	}
	w := 256
	if i/256 == t.N/256 {
		w = int(t.N % 256)
	}
	bundle := tlog.Tile{H: 8, L: -1, N: i / 256, W: w}
	path := c2spPath(bundle)
	b, fromFull, err := l.fetchTile(bundle)
	if err != nil {
		return nil, err
	}
	want := w
	if fromFull {
		want, path = 256, c2spPath(tlog.Tile{H: 8, L: -1, N: i / 256, W: 256})
	}
	var entries [][]byte
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			return nil, fmt.Errorf("entry bundle %s: entry %d is cut short", path, len(entries))
		}
		n := int(binary.BigEndian.Uint16(b))
		entries = append(entries, b[2:2+n])
		b = b[2+n:]
	}
	if len(entries) != want {
		return nil, fmt.Errorf("entry bundle %s holds %d entries, want %d", path, len(entries), want)
	}
	return entries[i%256], nil
}

// VerifyEntry checks that entry, as leaf i, is in tree t: an inclusion
// proof from the tiles (tlog.ProveRecord) checked against t's root
// (tlog.CheckRecord) with the entry's record hash.
func (l *Log) VerifyEntry(t tlog.Tree, i int64, entry []byte) error {
	p, err := tlog.ProveRecord(t.N, i, l.Hashes(t))
	if err != nil {
		return fmt.Errorf("inclusion of %d in %d: %w", i, t.N, err)
	}
	if err := tlog.CheckRecord(p, t.N, t.Hash, i, tlog.RecordHash(entry)); err != nil {
		return fmt.Errorf("inclusion of %d in %d: %w", i, t.N, err)
	}
	return nil
}

// VerifyInclusion fetches entry i of tree t from its bundle and checks
// that it is leaf i of t; it returns the entry.
func (l *Log) VerifyInclusion(t tlog.Tree, i int64) ([]byte, error) {
	e, err := l.Entry(t, i)
	if err != nil {
		return nil, err
	}
	return e, l.VerifyEntry(t, i, e)
}

// VerifyConsistency checks that tree old is a prefix of tree t: a
// consistency proof from t's tiles (tlog.ProveTree) checked with
// tlog.CheckTree.
func (l *Log) VerifyConsistency(old, t tlog.Tree) error {
	p, err := tlog.ProveTree(t.N, old.N, l.Hashes(t))
	if err != nil {
		return fmt.Errorf("consistency of %d with %d: %w", old.N, t.N, err)
	}
	if err := tlog.CheckTree(p, t.N, t.Hash, old.N, old.Hash); err != nil {
		return fmt.Errorf("consistency of %d with %d: %w", old.N, t.N, err)
	}
	return nil
}
