package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"

	"golang.org/x/mod/sumdb/note"
)

// TestFollowerWrongKeySaysFollowKey: a follower given the verifier key
// of another key than the one that signs the bucket's checkpoints stops
// the ledger with an error that says what a follower's user gives (annal
// follow --key, FollowerOptions.VerifierKey), not a restore's flags.
func TestFollowerWrongKeySaysFollowKey(t *testing.T) {
	t.Parallel()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	checkpointStored(t, w, st, "cash", info.ID, 1)
	_, other, err := note.GenerateKey(rand.Reader, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	fw := openTestFollower(t, t.TempDir(), st, other)
	defer fw.Close()
	s := waitStopped(t, fw, info.ID.String())
	msg := s.Stopped.Error()
	if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(msg, "annal follow --key") || !strings.Contains(msg, "FollowerOptions.VerifierKey") {
		t.Fatalf("stopped with %v, want ErrCorruption saying to follow with annal follow --key (FollowerOptions.VerifierKey)", s.Stopped)
	}
	if strings.Contains(msg, "--signing-key") || strings.Contains(msg, "annal restore") {
		t.Fatalf("stopped with %v: a restore's flags, not a follower's", s.Stopped)
	}
	t.Logf("stopped: %v", s.Stopped)
}

// hangingStore, once on, answers no read until its context ends: a
// store that accepts connections and never replies.
type hangingStore struct {
	store.Store
	on atomic.Bool
}

func (s *hangingStore) Get(ctx context.Context, key string) (store.Object, error) {
	if s.on.Load() {
		<-ctx.Done()
		return store.Object{}, fmt.Errorf("test store: get %s: %w", key, ctx.Err())
	}
	return s.Store.Get(ctx, key)
}

func (s *hangingStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if s.on.Load() {
		<-ctx.Done()
		return store.Page{}, fmt.Errorf("test store: list %s: %w", prefix, ctx.Err())
	}
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *hangingStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	if s.on.Load() {
		<-ctx.Done()
		return store.FolderPage{}, fmt.Errorf("test store: list the folders of %s: %w", prefix, ctx.Err())
	}
	return s.Store.Folders(ctx, prefix, after, limit)
}

// TestFollowerPollBoundedByStoreTimeout: with a store that stops
// answering, each poll ends within FollowerOptions.StoreTimeout with an
// error saying so (FollowerStatus.LastError), rather than waiting for
// an answer that never comes; once the store answers again, the
// follower catches up, and it closes at once meanwhile.
func TestFollowerPollBoundedByStoreTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	checkpointStored(t, w, st, "cash", info.ID, 1)
	view := &hangingStore{Store: st}
	fw, err := OpenFollower(t.TempDir(), FollowerOptions{store: view, VerifierKey: w.key.Verifier, PollInterval: 20 * time.Millisecond,
		StoreTimeout: 200 * time.Millisecond, Options: &Options{FollowInterval: 5 * time.Millisecond, TempDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	waitFollowed(t, fw, "cash", 1)
	view.on.Store(true)
	for i := range 10 {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	// Two polls that ended on the timeout: the store never answered.
	first := waitStatus(t, fw, "cash", "a poll ended by StoreTimeout", func(s FollowerStatus) bool {
		return s.LastError != nil && errors.Is(s.LastError, context.DeadlineExceeded)
	})
	s := waitStatus(t, fw, "cash", "a later poll ended by StoreTimeout", func(s FollowerStatus) bool {
		return s.LastPoll.After(first.LastPoll) && errors.Is(s.LastError, context.DeadlineExceeded)
	})
	if s.Stopped != nil || s.Local != 1 || !strings.Contains(s.LastError.Error(), "StoreTimeout") {
		t.Fatalf("with the store hanging: %+v, want the ledger followed, 1 event, the last poll's error naming StoreTimeout", s)
	}
	t.Logf("a poll with the store hanging: %v", s.LastError)
	view.on.Store(false)
	checkpointStored(t, w, st, "cash", info.ID, 11)
	if s := waitFollowedSigned(t, fw, "cash", 11); s.Stopped != nil || s.LastError != nil {
		t.Fatalf("once the store answers: %+v", s)
	}
}

// TestFollowerStopsLedgerWhoseObjectsWereDeleted: a ledger whose
// manifest records sealed segments, but whose checkpoint, chunks and
// segments were deleted from the bucket, is not passed over: a follower
// of every ledger, and one of that ledger by its ID, stop it with an
// error naming the manifest (FollowerStatus.Stopped), and serve nothing
// of it.
func TestFollowerStopsLedgerWhoseObjectsWereDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	r := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: info.ID})
	for i := 0; ; i++ {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
		if i%50 != 49 {
			continue
		}
		if m, _, err := r.Manifest(ctx); err == nil && m.Segments > 0 {
			break
		}
		if i > 5000 {
			t.Fatal("no manifest records a sealed segment after 5,000 events")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, manifest, err := r.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range listAll(t, st, replica.LedgerPrefix(info.ID)) {
		if !strings.HasPrefix(k, replica.LedgerPrefix(info.ID)+"manifest/") {
			if err := st.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ledger := range []string{"", info.ID.String()} {
		fw, err := OpenFollower(t.TempDir(), FollowerOptions{store: st, Ledger: ledger, VerifierKey: w.key.Verifier, PollInterval: 20 * time.Millisecond,
			Options: &Options{FollowInterval: 5 * time.Millisecond, TempDir: t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		s := waitStopped(t, fw, info.ID.String())
		if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(s.Stopped.Error(), manifest) {
			t.Fatalf("following %q: stopped with %v, want ErrCorruption naming %s", ledger, s.Stopped, manifest)
		}
		if s.Local != 0 {
			t.Fatalf("following %q: %d events copied of a ledger whose objects were deleted", ledger, s.Local)
		}
		if _, err := fw.DB().Ledger("cash"); err == nil {
			t.Fatalf("following %q: the follower's DB serves the ledger", ledger)
		}
		t.Logf("following %q: %v", ledger, s.Stopped)
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
