package replica

// Collecting partial tiles (docs/replication.md, "Tiles"): a partial
// tile or entry bundle is deleted once its full tile is in the bucket
// and a checkpoint covering that full tile has been the bucket's for
// GCGrace, as C2SP tlog-tiles allows; the newest checkpoint's partials
// are never deleted.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// tileGCPages bounds the List pages, and tileGCDeletes the deletes, of
// one maintenance round's collection of partial tiles; when more remain
// the maintainer is woken for the next round.
const (
	tileGCPages   = 4
	tileGCDeletes = 256
)

// tileGC is the maintainer's progress in collecting partial tiles, in
// memory only: a new Writer starts from the first tile of each level
// (the catch-up, a List page per 1,000 tiles).
type tileGC struct {
	// stored are the checkpoints this writer stored or found in the
	// bucket, by increasing size, whose grace period has not passed.
	stored []storedCheckpoint
	// bound is the size of the largest checkpoint in the bucket for at
	// least GCGrace: the partials of the tiles full at that size are
	// collected.
	bound uint64
	// cursors[l+1] is level l's progress (cursors[0]: the entry bundles).
	cursors []tileCursor
}

// storedCheckpoint is a checkpoint of size in the bucket, as this
// writer knew at at (by its clock).
type storedCheckpoint struct {
	size uint64
	at   time.Time
}

// tileCursor is a level's collection: every partial tile of an index
// below done is deleted; the listing goes on after the key after.
type tileCursor struct {
	done  uint64
	after string
}

// noteCheckpoint records that the bucket's checkpoint is of size n, now.
func (g *tileGC) noteCheckpoint(n uint64, now time.Time) {
	if n <= g.bound || len(g.stored) > 0 && n <= g.stored[len(g.stored)-1].size {
		return
	}
	g.stored = append(g.stored, storedCheckpoint{n, now})
}

// collectTiles deletes the partial tiles and bundles whose full tile is
// covered by a checkpoint the bucket has held for GCGrace: a List of the
// level's tiles from where the last round stopped to the first tile not
// full at that size, never of the whole bucket, at most tileGCPages
// pages and tileGCDeletes deletes a round. Another writer (a zombie of an
// earlier epoch) may write a deleted partial tile again: its bytes are
// fixed by the history, the same, so it is a harmless extra object.
func (s *writerState) collectTiles(ctx context.Context) error {
	if s.cfg.Tiles == nil {
		return nil
	}
	g := &s.tiles.gc
	now := s.cfg.Now()
	for len(g.stored) > 0 && now.Sub(g.stored[0].at) >= s.cfg.GCGrace {
		g.bound = max(g.bound, g.stored[0].size)
		g.stored = g.stored[1:]
	}
	pages, deletes := tileGCPages, tileGCDeletes
	for l := -1; l < tileLevels(g.bound); l++ {
		for len(g.cursors) <= l+1 {
			g.cursors = append(g.cursors, tileCursor{})
		}
		c := &g.cursors[l+1]
		full := g.bound >> (TileHeight * (max(l, 0) + 1))
		prefix := LedgerPrefix(s.cfg.Ledger) + "tile/entries/"
		if l >= 0 {
			prefix = LedgerPrefix(s.cfg.Ledger) + "tile/" + strconv.Itoa(l) + "/"
		}
		// Keys sort as their indexes (3-digit elements, "x" after the
		// digits), a tile's partials after it: the first tile not full
		// and what follows are left.
		stop := s.tileKey(tileJob{l, full, tileWidth})
		for c.done < full {
			if pages == 0 || deletes == 0 {
				notify(s.maint)
				return nil
			}
			pages--
			page, err := s.cfg.Store.List(ctx, prefix, c.after, 0)
			if err != nil {
				return fmt.Errorf("replica: list %s at %s: %w", prefix, s.cfg.Endpoint, err)
			}
			end := !page.Truncated || len(page.Objects) == 0
			for _, o := range page.Objects {
				if o.Key >= stop {
					end = true
					break
				}
				if strings.Contains(o.Key[len(prefix):], ".p/") {
					if deletes == 0 {
						notify(s.maint)
						return nil
					}
					if err := s.cfg.Store.Delete(ctx, o.Key); err != nil {
						return fmt.Errorf("replica: delete %s at %s: %w", o.Key, s.cfg.Endpoint, err)
					}
					deletes--
				}
				c.after = o.Key
			}
			if end {
				c.done = full
			}
		}
	}
	return nil
}
