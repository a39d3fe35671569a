package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// faultStore wraps a Store with the failures the Writer's tests need.
type faultStore struct {
	store.Store

	// maxDelay, if set, delays each chunk Put by a random time below it
	// (before it is applied), so that uploads finish out of order.
	maxDelay time.Duration
	// down fails every request with ErrUnavailable, applying nothing.
	down atomic.Bool
	// loseChunks: the next n chunk Puts are applied, then answered with
	// ErrUnavailable (the answer was lost); the retry of such a key that
	// meets 412 says ErrMaybeApplied as well, as the S3 client does.
	loseChunks atomic.Int32
	// conflicts: the next n chunk Puts answer ErrConflict, applying nothing.
	conflicts atomic.Int32

	mu       sync.Mutex
	rng      *rand.Rand
	lost     map[string]bool
	putTimes []time.Time // of the chunk Puts applied
	puts     atomic.Int64
}

func newFaultStore(inner store.Store) *faultStore {
	return &faultStore{Store: inner, rng: rand.New(rand.NewPCG(1, 2)), lost: map[string]bool{}}
}

var errDown = fmt.Errorf("fault store: down: %w", store.ErrUnavailable)

func isChunk(key string) bool { return strings.Contains(key, "/wal/") }

func (f *faultStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if f.down.Load() {
		return "", errDown
	}
	if !isChunk(key) {
		return f.Store.Put(ctx, key, data, cond)
	}
	f.puts.Add(1)
	if f.maxDelay > 0 {
		f.mu.Lock()
		d := time.Duration(f.rng.Int64N(int64(f.maxDelay)))
		f.mu.Unlock()
		time.Sleep(d)
	}
	if f.conflicts.Load() > 0 && f.conflicts.Add(-1) >= 0 {
		return "", fmt.Errorf("fault store: put %s: %w", key, store.ErrConflict)
	}
	etag, err := f.Store.Put(ctx, key, data, cond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.putTimes = append(f.putTimes, time.Now())
		if f.loseChunks.Load() > 0 && f.loseChunks.Add(-1) >= 0 {
			f.lost[key] = true
			return "", fmt.Errorf("fault store: put %s: answer lost: %w", key, store.ErrUnavailable)
		}
	}
	if errors.Is(err, store.ErrPreconditionFailed) && f.lost[key] {
		err = fmt.Errorf("%w: %w", err, store.ErrMaybeApplied)
	}
	return etag, err
}

func (f *faultStore) Get(ctx context.Context, key string) (store.Object, error) {
	if f.down.Load() {
		return store.Object{}, errDown
	}
	return f.Store.Get(ctx, key)
}

func (f *faultStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	if f.down.Load() {
		return store.ObjectInfo{}, errDown
	}
	return f.Store.Head(ctx, key)
}

func (f *faultStore) List(ctx context.Context, prefix, startAfter string, limit int) (store.Page, error) {
	if f.down.Load() {
		return store.Page{}, errDown
	}
	return f.Store.List(ctx, prefix, startAfter, limit)
}

func (f *faultStore) Folders(ctx context.Context, prefix, startAfter string, limit int) (store.FolderPage, error) {
	if f.down.Load() {
		return store.FolderPage{}, errDown
	}
	return f.Store.Folders(ctx, prefix, startAfter, limit)
}

func (f *faultStore) Delete(ctx context.Context, key string) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Delete(ctx, key)
}

// chunkPuts returns the times of the chunk Puts applied.
func (f *faultStore) chunkPuts() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.putTimes...)
}
