package replica

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
)

// countingStore counts the Lists (Folders among them) and Deletes made
// through it.
type countingStore struct {
	store.Store
	mu            sync.Mutex
	lists, delets int
}

func (s *countingStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *countingStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.Folders(ctx, prefix, after, limit)
}

func (s *countingStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	s.delets++
	s.mu.Unlock()
	return s.Store.Delete(ctx, key)
}

// take returns the counts since the last take, and zeroes them.
func (s *countingStore) take() (lists, deletes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lists, deletes = s.lists, s.delets
	s.lists, s.delets = 0, 0
	return lists, deletes
}

// unreadTiles is a TileSource for a collector, which reads no tile: it
// only publishes tiles (Config.Tiles set).
type unreadTiles struct{}

var errUnread = errors.New("the collector reads no tile")

func (unreadTiles) ReadHashes([]int64) ([]tree.Hash, error)  { return nil, errUnread }
func (unreadTiles) Entries(uint64, uint64) ([][]byte, error) { return nil, errUnread }

// TestCollectTilesBoundedPerRound: a bucket holding the tiles of a
// checkpoint every 100 events up to 768,077 (3,000 full level-0 tiles,
// their indexes past 999 in two path elements; 11 full level-1 tiles)
// and every partial tile and bundle of those checkpoints. A new
// collector deletes nothing until the newest checkpoint has been held
// for GCGrace; then, round by round, at most tileGCPages Lists and
// tileGCDeletes deletes a round, waking the maintainer while more
// remain, it deletes every partial tile whose full tile is stored and
// nothing else: the newest checkpoint's partials, the older ones of the
// tiles not full (level 1's tile 11, level 2) and every full tile stay. A round after that lists nothing.
func TestCollectTilesBoundedPerRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &countingStore{Store: store.NewMemory()}
	clock := newFakeClock()
	s := &writerState{cfg: Config{Store: st, Ledger: testLedgerID(), Tiles: unreadTiles{}, Now: clock.Now, GCGrace: 10 * time.Minute, Endpoint: "memory"}, maint: make(chan struct{}, 1)}
	const n = 3000*256 + 77
	put := func(key string) {
		if _, err := st.Put(ctx, key, []byte{1}, store.CreateOnly()); err != nil && !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	for l := range tileLevels(n) {
		for i := range uint64(n >> (TileHeight * (l + 1))) {
			want[s.tileKey(tileJob{l, i, tileWidth})] = true
			if l == 0 {
				want[s.tileKey(tileJob{-1, i, tileWidth})] = true
			}
		}
	}
	for _, j := range partialJobs(n) {
		want[s.tileKey(j)] = true
	}
	for key := range want {
		put(key)
	}
	partials := map[string]bool{}
	for m := uint64(100); m < n; m += 100 {
		for _, j := range partialJobs(m) {
			if key := s.tileKey(j); !want[key] {
				if j.n >= n>>(TileHeight*(max(j.level, 0)+1)) {
					want[key] = true // its full tile is not stored
				} else if !strings.Contains(key, ".p/") {
					t.Fatalf("%s is not partial", key)
				}
				put(key)
				partials[key] = true
			}
		}
	}
	all := len(keys(t, st, "tile/"))
	st.take()

	s.tiles.gc.noteCheckpoint(n, clock.Now())
	clock.advance(s.cfg.GCGrace - time.Second)
	if err := s.collectTiles(ctx); err != nil {
		t.Fatal(err)
	}
	if lists, deletes := st.take(); lists+deletes != 0 {
		t.Fatalf("before the grace period: %d Lists, %d deletes", lists, deletes)
	}
	clock.advance(2 * time.Second)
	rounds, deleted := 0, 0
	for {
		rounds++
		if err := s.collectTiles(ctx); err != nil {
			t.Fatal(err)
		}
		lists, deletes := st.take()
		if lists > tileGCPages || deletes > tileGCDeletes {
			t.Fatalf("round %d: %d Lists, %d deletes", rounds, lists, deletes)
		}
		deleted += deletes
		select {
		case <-s.maint:
			continue // more remain
		default:
		}
		break
	}
	got := keys(t, st, "tile/")
	st.take() // the test's own Lists
	left, extra := map[string]bool{}, []string(nil)
	for _, k := range got {
		left[LedgerPrefix(testLedgerID())+"tile/"+k] = true
	}
	for key := range want {
		if !left[key] {
			t.Errorf("%s was deleted", key)
		}
	}
	for key := range left {
		if !want[key] && len(extra) < 10 {
			extra = append(extra, key)
		}
	}
	if len(left) != len(want) {
		t.Fatalf("%d tile objects left, want %d (of %d; %d partials planted, %d deleted): %v", len(left), len(want), all, len(partials), deleted, extra)
	}
	if err := s.collectTiles(ctx); err != nil {
		t.Fatal(err)
	}
	if lists, deletes := st.take(); lists+deletes != 0 {
		t.Fatalf("a round after the collection: %d Lists, %d deletes", lists, deletes)
	}
	t.Logf("%d tile objects, %d partial: %d deleted in %d rounds", all, len(partials), deleted, rounds)
}
