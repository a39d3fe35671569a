package replica

// The log published as C2SP tlog-tiles (docs/replication.md, "Tiles"):
// beside each ledger's checkpoint, the Merkle tree's tiles and the
// entry bundles covering the tree size of every checkpoint the Writer
// stores, written before that checkpoint, so that a client that reads
// checkpoint finds every tile it needs.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// TileSource is what the Writer makes the tiles from (Config.Tiles): the
// ledger's Merkle tree and its leaves' bytes.
type TileSource interface {
	// ReadHashes returns the tree's stored hashes at the given
	// tlog.StoredHashIndex indexes (a tlog.HashReader), of a tree at
	// least as large as every checkpoint given to the Writer.
	ReadHashes(indexes []int64) ([]tree.Hash, error)
	// Entries returns the leaf bytes of events first to last (sequence
	// numbers, from 1): their export lines without the "\n"
	// (docs/format.md, section 9.1).
	Entries(first, last uint64) ([][]byte, error)
}

// TileHeight is the height of a tile (C2SP tlog-tiles): 256 hashes.
const TileHeight = 8

// tileWidth is the width of a full tile, in hashes or entries.
const tileWidth = 1 << TileHeight

// MaxBundleEntry is the largest entry an entry bundle holds (its length
// is a big-endian uint16). A larger event's leaf bytes are stored under
// LeafKey, and its entry in the bundle is empty (docs/format.md, 9.7).
const MaxBundleEntry = 1<<16 - 1

// tileBatch bounds the tiles one maintenance round writes (the rest in
// the next rounds, the checkpoint after them), so that a ledger's first
// tiles (a large ledger new to the bucket, or one stored before tiles
// were) do not hold up its sealed segments and GC; tileUploads is how
// many are written at once.
const (
	tileBatch   = 512
	tileUploads = 8
)

// tilePath is the C2SP form of a tile index and width: N in 3-digit
// path elements, all but the last prefixed with x, and .p/W for a
// partial tile.
func tilePath(n uint64, w int) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n >= 1000 {
		n /= 1000
		s = fmt.Sprintf("x%03d/%s", n%1000, s)
	}
	if w != tileWidth {
		s += ".p/" + strconv.Itoa(w)
	}
	return s
}

// TileKey is the key of the tile at level l, index n, width w (256: a
// full tile): "tile/<L>/<N>[.p/<W>]" under the ledger's folder.
func TileKey(ledger eventid.LedgerID, l int, n uint64, w int) string {
	return LedgerPrefix(ledger) + "tile/" + strconv.Itoa(l) + "/" + tilePath(n, w)
}

// BundleKey is the key of the entry bundle n of width w:
// "tile/entries/<N>[.p/<W>]" under the ledger's folder.
func BundleKey(ledger eventid.LedgerID, n uint64, w int) string {
	return LedgerPrefix(ledger) + "tile/entries/" + tilePath(n, w)
}

// LeafKey is the key of the leaf bytes of leaf i (event i+1) when they
// are longer than MaxBundleEntry: "leaf/<i, 20 digits>".
func LeafKey(ledger eventid.LedgerID, i uint64) string {
	return fmt.Sprintf("%sleaf/%020d", LedgerPrefix(ledger), i)
}

// tileProgress is what the maintainer knows of the tiles in the bucket.
// The maintainer's own: no lock.
type tileProgress struct {
	known bool // the bucket was looked at (resume)
	// full[l] tiles of level l are stored (l from 0), and bundles full
	// entry bundles.
	full    []uint64
	bundles uint64
	// size: every tile and bundle of the tree of this size is stored.
	size uint64
	// gc is the collection of partial tiles (tilegc.go).
	gc tileGC
}

// tileJob is one object to write: a tile of level level (-1: an entry
// bundle), index n, width w.
type tileJob struct {
	level int
	n     uint64
	w     int
}

// tileLevels is the number of tile levels a tree of size n has.
func tileLevels(n uint64) int {
	l := 0
	for n > 0 {
		l++
		n >>= TileHeight
	}
	return l
}

// partialJobs are the partial tiles and bundle of a tree of size n.
func partialJobs(n uint64) []tileJob {
	var jobs []tileJob
	for l := range tileLevels(n) {
		if w := int(n >> (TileHeight * l) % tileWidth); w > 0 {
			jobs = append(jobs, tileJob{l, n >> (TileHeight * (l + 1)), w})
		}
	}
	if w := int(n % tileWidth); w > 0 {
		jobs = append(jobs, tileJob{-1, n >> TileHeight, w})
	}
	return jobs
}

// storeTiles stores the tiles and entry bundles of the tree of size n,
// before the checkpoint of that size; have is the size of the bucket's
// checkpoint (0: none), whose tiles a writer that stored it stored
// first. It returns false when tiles remain for the next round.
func (s *writerState) storeTiles(ctx context.Context, n, have uint64) (bool, error) {
	tp := &s.tiles
	if !tp.known {
		if err := s.resumeTiles(ctx, min(have, n)); err != nil {
			return false, err
		}
	}
	if tp.size >= n {
		return true, nil
	}
	for len(tp.full) < tileLevels(n) {
		tp.full = append(tp.full, 0)
	}
	// The full tiles and bundles, level by level, at most tileBatch a
	// round.
	var jobs []tileJob
	for l := range tileLevels(n) {
		for i := tp.full[l]; i < n>>(TileHeight*(l+1)) && len(jobs) < tileBatch; i++ {
			jobs = append(jobs, tileJob{l, i, tileWidth})
		}
	}
	for i := tp.bundles; i < n>>TileHeight && len(jobs) < tileBatch; i++ {
		jobs = append(jobs, tileJob{-1, i, tileWidth})
	}
	full := len(jobs) > 0
	if !full {
		jobs = partialJobs(n)
	}
	if err := s.writeTiles(ctx, jobs); err != nil {
		return false, err
	}
	if full {
		for _, j := range jobs {
			if j.level < 0 {
				tp.bundles = max(tp.bundles, j.n+1)
			} else {
				tp.full[j.level] = max(tp.full[j.level], j.n+1)
			}
		}
		return false, nil
	}
	tp.size = n
	return true, nil
}

// resumeTiles finds what the bucket holds of the tiles: those of the
// bucket's checkpoint, of size have, if its newest tile at each level
// and its newest bundle are there (a writer stores them all before the
// checkpoint); else none is taken as stored, and every one is written
// create-only (those found are read back and compared).
func (s *writerState) resumeTiles(ctx context.Context, have uint64) error {
	tp := &s.tiles
	tp.known = true
	if have == 0 {
		return nil
	}
	newest := partialJobs(have)
	for l := range tileLevels(have) {
		if have>>(TileHeight*l)%tileWidth == 0 {
			newest = append(newest, tileJob{l, have>>(TileHeight*(l+1)) - 1, tileWidth})
		}
	}
	if have%tileWidth == 0 {
		newest = append(newest, tileJob{-1, have>>TileHeight - 1, tileWidth})
	}
	for _, j := range newest {
		key := s.tileKey(j)
		_, err := s.cfg.Store.Head(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil // not all there: every tile is written again
		}
		if err != nil {
			tp.known = false
			return fmt.Errorf("replica: head %s at %s: %w", key, s.cfg.Endpoint, err)
		}
	}
	tp.full = make([]uint64, tileLevels(have))
	for l := range tp.full {
		tp.full[l] = have >> (TileHeight * (l + 1))
	}
	tp.bundles, tp.size = have>>TileHeight, have
	return nil
}

// tileKey is the key of a job's object.
func (s *writerState) tileKey(j tileJob) string {
	if j.level < 0 {
		return BundleKey(s.cfg.Ledger, j.n, j.w)
	}
	return TileKey(s.cfg.Ledger, j.level, j.n, j.w)
}

// writeTiles writes the jobs' objects, create-only, tileUploads at a
// time; the first error is returned once all are done.
func (s *writerState) writeTiles(ctx context.Context, jobs []tileJob) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan tileJob)
	for range min(tileUploads, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if err := s.writeTile(ctx, j); err != nil {
					mu.Lock()
					if first == nil || isFatal(err) && !isFatal(first) {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	return first
}

// writeTile makes a job's object and writes it create-only. Other bytes
// under its key are damage: its content is fixed by the history, which
// every writer of the ledger shares.
func (s *writerState) writeTile(ctx context.Context, j tileJob) error {
	var data []byte
	if j.level >= 0 {
		var err error
		data, err = tlog.ReadTileData(tlog.Tile{H: TileHeight, L: j.level, N: int64(j.n), W: j.w}, s.cfg.Tiles)
		if err != nil {
			return fmt.Errorf("replica: tile %s: reading the Merkle tree: %w", s.tileKey(j), err)
		}
	} else {
		first := j.n*tileWidth + 1
		entries, err := s.cfg.Tiles.Entries(first, first+uint64(j.w)-1)
		if err != nil {
			return fmt.Errorf("replica: entry bundle %s: reading events #%d to #%d: %w", s.tileKey(j), first, first+uint64(j.w)-1, err)
		}
		if len(entries) != j.w {
			return fmt.Errorf("%w: replica: entry bundle %s: the local log gave %d entries for events #%d to #%d", errDamage, s.tileKey(j), len(entries), first, first+uint64(j.w)-1)
		}
		for i, e := range entries {
			if len(e) > MaxBundleEntry {
				// Stored whole beside the bundle, before it.
				key := LeafKey(s.cfg.Ledger, first-1+uint64(i))
				if err := s.create(ctx, key, e, s.judgeTile); err != nil {
					return err
				}
				e = nil
			}
			data = binary.BigEndian.AppendUint16(data, uint16(len(e)))
			data = append(data, e...)
		}
	}
	return s.create(ctx, s.tileKey(j), data, s.judgeTile)
}

// judgeTile says that other bytes under a tile's, bundle's or leaf's key
// are damage: the object is a function of the history, so another
// writer of the ledger would have written the same bytes.
func (s *writerState) judgeTile(key string, found []byte) error {
	return fmt.Errorf("%w: replica: %s holds other bytes (%d) than this writer's tree and events give", errDamage, key, len(found))
}

// storeCheckpointTiles stores the tiles of the checkpoint of size n
// before it (storeCheckpoint), if the Writer publishes tiles; false: more
// remain, and the maintainer is woken for the next round.
func (s *writerState) storeCheckpointTiles(ctx context.Context, n, have uint64) (bool, error) {
	if s.cfg.Tiles == nil {
		return true, nil
	}
	done, err := s.storeTiles(ctx, n, have)
	if err == nil && !done {
		notify(s.maint)
	}
	return done, err
}
