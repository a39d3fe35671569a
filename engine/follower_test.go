package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// followerWriter opens a Shipped writer on a new directory replicating to
// st, with a key outside it, and creates the ledger "cash".
func followerWriter(t *testing.T, st store.Store) (*DB, *Options, LedgerInfo) {
	t.Helper()
	o := replOptions(st, Shipped)
	o.SigningKeyFile = filepath.Join(t.TempDir(), "writer.key")
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WaitReplicated(context.Background(), info.Genesis); err != nil {
		t.Fatal(err)
	}
	return db, o, info
}

func openTestFollower(t *testing.T, dir string, st store.Store, vkey string) *Follower {
	t.Helper()
	fw, err := OpenFollower(dir, FollowerOptions{store: st, VerifierKey: vkey, PollInterval: 20 * time.Millisecond,
		Options: &Options{FollowInterval: 5 * time.Millisecond, TempDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	return fw
}

// waitFollowed waits until the follower's copy of ledger name holds n
// events, or the ledger stops.
func waitFollowed(t testing.TB, fw *Follower, name string, n uint64) FollowerStatus {
	t.Helper()
	return waitStatus(t, fw, name, fmt.Sprintf("%d events", n), func(s FollowerStatus) bool { return s.Local >= n || s.Stopped != nil })
}

// waitFollowedSigned waits until the follower verified a checkpoint of n
// events of ledger name, or the ledger stops.
func waitFollowedSigned(t testing.TB, fw *Follower, name string, n uint64) FollowerStatus {
	t.Helper()
	return waitStatus(t, fw, name, fmt.Sprintf("a checkpoint of %d events", n), func(s FollowerStatus) bool { return s.Signed >= n || s.Stopped != nil })
}

// waitStopped waits until the follower stopped ledger name.
func waitStopped(t testing.TB, fw *Follower, name string) FollowerStatus {
	t.Helper()
	return waitStatus(t, fw, name, "the ledger stopped", func(s FollowerStatus) bool { return s.Stopped != nil })
}

// waitStatus waits until the status of ledger name is done, want saying
// what that is.
func waitStatus(t testing.TB, fw *Follower, name, want string, done func(FollowerStatus) bool) FollowerStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := fw.Status(name)
		if err == nil && done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower of %s: %+v (%v), want %s", name, s, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFollowerKeepsUpWithWriter: a follower on another directory keeps a
// copy of a ledger that a writer appends to: a subscriber on the
// follower's DB gets every event the writer acknowledged, in order, and
// Get, Scan, the checkpoint and an inclusion proof work on the copy,
// while appends to it are refused. The lag (an append's return to the
// follower's subscriber) is logged.
func TestFollowerKeepsUpWithWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, _ := followerWriter(t, st)
	defer w.Close()
	fw := openTestFollower(t, t.TempDir(), st, w.key.Verifier)
	defer fw.Close()
	waitFollowed(t, fw, "cash", 1)

	const n = 400
	acked := make([]time.Time, n+2)
	var mu sync.Mutex
	ids := make([]eventid.ID, n+2)
	go func() {
		for i := range n {
			res, err := appendOne(ctx, w, "cash", i)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked[res.FirstSeq], ids[res.FirstSeq] = time.Now(), res.IDs[0]
			mu.Unlock()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lags []time.Duration
	for ev, err := range fw.DB().Subscribe(sctx, "cash", SubscribeOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq == 1 {
			continue
		}
		now := time.Now()
		mu.Lock()
		at, id := acked[ev.Seq], ids[ev.Seq]
		mu.Unlock()
		if !at.IsZero() {
			lags = append(lags, now.Sub(at))
			if ev.ID != id {
				t.Fatalf("event #%d: the follower serves %s, the writer acknowledged %s", ev.Seq, ev.ID, id)
			}
		}
		if ev.Seq == n+1 {
			break
		}
	}
	slices.Sort(lags)
	t.Logf("lag from an append's return to the follower's subscriber, %d events, poll 20 ms, Shipped 50 ms: p50 %v, p99 %v, max %v",
		len(lags), lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1])

	db := fw.DB()
	mu.Lock()
	last := ids[n+1]
	mu.Unlock()
	ev, err := db.Get(ctx, last)
	if err != nil || ev.Seq != n+1 {
		t.Fatalf("Get on the follower: %+v, %v", ev, err)
	}
	count := 0
	for _, err := range db.Scan(ctx, "cash", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		count++
	}
	if count != n+1 {
		t.Fatalf("Scan on the follower: %d events, want %d", count, n+1)
	}
	if _, err := appendOne(ctx, db, "cash", 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("an append to the follower's DB: %v, want ErrReadOnly", err)
	}
	// The writer's checkpoint of every event, and a proof of inclusion from
	// the follower's tree file, checked against it.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := waitFollowedSigned(t, fw, "cash", n+1)
	if s.Bucket != n+1 || s.Behind != 0 || s.Stopped != nil {
		t.Fatalf("status: %+v", s)
	}
	ro, err := OpenReadOnly(fw.Dir(), &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ck, err := ro.LatestCheckpoint("cash")
	if err != nil || ck.Size != n+1 {
		t.Fatalf("the checkpoint read beside the follower: %+v, %v", ck, err)
	}
	p, err := ro.ProveInclusion(ctx, last, ck.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, p.LeafHash, p.Hashes, ck.Root); err != nil {
		t.Fatalf("the inclusion proof of the follower's copy: %v", err)
	}
}

// frozenStore is the follower's view of a bucket, which the test can
// freeze: the checkpoint as it was, and no chunk after those stored then
// (as if the writer had stored nothing since), while the test changes
// what the bucket holds.
type frozenStore struct {
	store.Store
	mu     sync.Mutex
	frozen bool
	ck     map[string][]byte // checkpoint key → the object when frozen
	max    map[string]uint64 // ledger prefix → the last chunk then
}

func (s *frozenStore) freeze(t *testing.T, ids ...eventid.LedgerID) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen, s.ck, s.max = true, map[string][]byte{}, map[string]uint64{}
	for _, id := range ids {
		obj, err := s.Store.Get(context.Background(), replica.CheckpointKey(id))
		if err != nil {
			t.Fatal(err)
		}
		s.ck[replica.CheckpointKey(id)] = obj.Data
		keys := listAll(t, s.Store, replica.LedgerPrefix(id)+"wal/")
		n, _ := replica.ParseNumber(keys[len(keys)-1])
		s.max[replica.LedgerPrefix(id)] = n
	}
}

func (s *frozenStore) thaw() {
	s.mu.Lock()
	s.frozen = false
	s.mu.Unlock()
}

// hidden says whether key is a chunk stored after the freeze.
func (s *frozenStore) hidden(key string) bool {
	i := strings.Index(key, "wal/")
	if !s.frozen || i < 0 {
		return false
	}
	last, frozen := s.max[key[:i]]
	n, ok := replica.ParseNumber(key)
	return frozen && ok && n > last
}

func (s *frozenStore) Get(ctx context.Context, key string) (store.Object, error) {
	s.mu.Lock()
	ck, frozen := s.ck[key]
	frozen = frozen && s.frozen
	hidden := s.hidden(key)
	s.mu.Unlock()
	switch {
	case frozen:
		return store.Object{Data: ck}, nil
	case hidden:
		return store.Object{}, fmt.Errorf("frozen: %s: %w", key, store.ErrNotFound)
	}
	return s.Store.Get(ctx, key)
}

func (s *frozenStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	p, err := s.Store.List(ctx, prefix, after, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Objects = slices.DeleteFunc(p.Objects, func(o store.ObjectInfo) bool { return s.hidden(o.Key) })
	return p, err
}

// damagedFollower sets up a follower of a writer's ledger "cash" through
// a frozenStore: 51 events followed, then the view frozen and 5 more
// chunks of 10 events each stored, and the writer closed (its last
// checkpoint covers them). It returns the bucket, the follower's view,
// the follower, the ledger and the IDs of the writer's events by
// sequence number, and the keys of the chunks stored after the freeze.
func damagedFollower(t *testing.T) (*replStore, *frozenStore, *Follower, LedgerInfo, []eventid.ID, []string) {
	t.Helper()
	ctx := context.Background()
	st := newReplStore()
	o := replOptions(st, Shipped)
	o.SegmentSize = 1 << 20 // no seal: the chunks are the only copy
	o.SigningKeyFile = filepath.Join(t.TempDir(), "writer.key")
	w, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := w.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []eventid.ID{{}, info.Genesis}
	batch := func(n int) {
		for i := range n {
			res, err := appendOne(ctx, w, "cash", i)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.IDs[0])
		}
		if err := w.WaitReplicated(ctx, ids[len(ids)-1]); err != nil {
			t.Fatal(err)
		}
	}
	batch(50)
	view := &frozenStore{Store: st}
	fw := openTestFollower(t, t.TempDir(), view, w.key.Verifier)
	t.Cleanup(func() { fw.Close() })
	waitFollowed(t, fw, "cash", 51)
	view.freeze(t, info.ID)
	before := listAll(t, st, replica.LedgerPrefix(info.ID)+"wal/")
	for range 5 {
		batch(10)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	after := listAll(t, st, replica.LedgerPrefix(info.ID)+"wal/")
	if len(after) < len(before)+3 {
		t.Fatalf("%d chunks stored after the freeze, want several", len(after)-len(before))
	}
	return st, view, fw, info, ids, after[len(before):]
}

// readThrough reads the follower's ledger "cash" until stop is closed, by
// a Subscribe and by Scans, and reports an event that the writer did not
// acknowledge at its sequence number, or one after #limit (none after it
// was verified); it returns the highest sequence number it got.
func readThrough(t *testing.T, db *DB, ids []eventid.ID, limit uint64, stop chan struct{}) func() uint64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	high := uint64(0)
	check := func(ev Event) {
		if ev.Seq > limit || ev.Seq >= uint64(len(ids)) || ev.ID != ids[ev.Seq] {
			t.Errorf("the follower served event #%d %s: not one it verified (the verified events end at #%d)", ev.Seq, ev.ID, limit)
		}
		mu.Lock()
		high = max(high, ev.Seq)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev, err := range db.Subscribe(ctx, "cash", SubscribeOptions{}) {
			if err != nil {
				return
			}
			check(ev)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for ev, err := range db.Scan(ctx, "cash", ScanOptions{}) {
				if err != nil {
					break
				}
				check(ev)
			}
		}
	}()
	return func() uint64 {
		close(stop)
		cancel()
		wg.Wait()
		return high
	}
}

// TestFollowerStopsAtDamage: a chunk with a changed byte, a chunk removed
// (a gap, and later chunks stored), and a chunk replaced by one of
// another epoch each stop the follower's ledger with an error naming the
// object, while readers of the follower get only the events verified
// before; the ledger's reads then fail with that error.
func TestFollowerStopsAtDamage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, st store.Store, id eventid.LedgerID, key string)
	}{
		{"changed byte", func(t *testing.T, st store.Store, id eventid.LedgerID, key string) {
			obj, err := st.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			b := slices.Clone(obj.Data)
			b[len(b)-20] ^= 1 // in the last record's payload
			putOver(t, st, key, b)
		}},
		{"removed chunk", func(t *testing.T, st store.Store, id eventid.LedgerID, key string) {
			if err := st.Delete(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}},
		{"chunk of another epoch", func(t *testing.T, st store.Store, id eventid.LedgerID, key string) {
			obj, err := st.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := replica.DecodeChunk(key, id, obj.Data)
			if err != nil {
				t.Fatal(err)
			}
			c.Epoch++
			putOver(t, st, key, c.Encode())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, view, fw, info, ids, hidden := damagedFollower(t)
			tc.damage(t, st, info.ID, hidden[0])
			done := readThrough(t, fw.DB(), ids, 51, make(chan struct{}))
			view.thaw()
			s := waitStopped(t, fw, "cash")
			high := done()
			if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(s.Stopped.Error(), hidden[0]) {
				t.Fatalf("the follower stopped with %v, want ErrCorruption naming %s", s.Stopped, hidden[0])
			}
			if s.Local != 51 {
				t.Fatalf("the follower's copy holds %d events, want the 51 verified before", s.Local)
			}
			t.Logf("stopped: %v (readers got up to #%d)", s.Stopped, high)
			assertReadsStopped(t, fw, ids[51], hidden[0])
		})
	}
}

func putOver(t *testing.T, st store.Store, key string, b []byte) {
	t.Helper()
	if err := st.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), key, b, store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
}

// assertReadsStopped checks that Get and Scan of the stopped ledger fail
// naming the object.
func assertReadsStopped(t *testing.T, fw *Follower, id eventid.ID, object string) {
	t.Helper()
	ctx := context.Background()
	// The DB shows the stop at once (stopReads, after the poll).
	if _, err := fw.DB().Get(ctx, id); err == nil || !strings.Contains(err.Error(), object) {
		t.Fatalf("Get on the stopped ledger: %v, want an error naming %s", err, object)
	}
	for _, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
		if err == nil || !strings.Contains(err.Error(), object) {
			t.Fatalf("Scan on the stopped ledger: %v, want an error naming %s", err, object)
		}
		break
	}
}

// TestFollowerRefusesRewrittenHistory: the bucket's ledger replaced by
// another history of the same ledger, signed by the same key (a copy of
// the writer's directory and key taken after the ledger was created, that
// appended other events), is refused: the follower stops, naming the
// checkpoint and the chunk that does not continue what it verified, and
// serves none of the other history.
func TestFollowerRefusesRewrittenHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, o, dir, keyDir, info := keyedWriter(t, st)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	forkDir, forkKeys := copyDir(t, dir), copyDir(t, keyDir)
	w, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	ids := []eventid.ID{{}, info.Genesis}
	for i := range 50 {
		res, err := appendOne(ctx, w, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
	}
	checkpointStored(t, w, st, "cash", info.ID, 51)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	view := &frozenStore{Store: st}
	fw := openTestFollower(t, t.TempDir(), view, w.key.Verifier)
	defer fw.Close()
	waitFollowedSigned(t, fw, "cash", 51)
	view.freeze(t, info.ID)

	// The other history: 80 other events after the genesis event, in a
	// bucket of its own, then put in place of the ledger's objects.
	other := store.NewMemory()
	fork := openFork(t, forkDir, forkKeys, other)
	for i := range 80 {
		if _, err := fork.Append(ctx, "cash", []EventInput{{Entity: "acct", Key: "x", Event: "debited", Data: []byte(fmt.Sprint(i))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, fork, other, "cash", info.ID, 81)
	if err := fork.Close(); err != nil {
		t.Fatal(err)
	}
	prefix := replica.LedgerPrefix(info.ID)
	for _, k := range listAll(t, st, prefix) {
		if err := st.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range listAll(t, other, prefix) {
		obj, err := other.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, k, obj.Data, store.CreateOnly()); err != nil {
			t.Fatal(err)
		}
	}

	done := readThrough(t, fw.DB(), ids, 51, make(chan struct{}))
	view.thaw()
	s := waitStopped(t, fw, "cash")
	done()
	ck := replica.CheckpointKey(info.ID)
	if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(s.Stopped.Error(), ck) || !strings.Contains(s.Stopped.Error(), "wal/") {
		t.Fatalf("the follower stopped with %v, want ErrCorruption naming %s and the chunk", s.Stopped, ck)
	}
	t.Logf("stopped: %v", s.Stopped)
	assertReadsStopped(t, fw, ids[51], ck)
}

// keyedWriter opens a Shipped writer on the new directory dir replicating
// to st, with its key in the folder keyDir, and creates the ledger "cash":
// copies of dir and keyDir make a fork of the writer (openFork).
func keyedWriter(t *testing.T, st store.Store) (w *DB, o *Options, dir, keyDir string, info LedgerInfo) {
	t.Helper()
	o = replOptions(st, Shipped)
	keyDir, dir = t.TempDir(), t.TempDir()
	o.SigningKeyFile = filepath.Join(keyDir, "writer.key")
	w, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if info, err = w.CreateLedger(context.Background(), LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	return w, o, dir, keyDir, info
}

// openFork opens the copies dir and keyDir of a keyedWriter's folders as
// a writer replicating to st.
func openFork(t *testing.T, dir, keyDir string, st store.Store) *DB {
	t.Helper()
	o := replOptions(st, Shipped)
	o.SigningKeyFile = filepath.Join(keyDir, "writer.key")
	if err := os.Chmod(o.SigningKeyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// checkpointStored has db sign a checkpoint of ledger name (ID id) and waits
// until the bucket st holds one of n events or more.
func checkpointStored(t testing.TB, db *DB, st store.Store, name string, id eventid.LedgerID, n uint64) {
	t.Helper()
	if _, err := db.Checkpoint(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		obj, err := st.Get(context.Background(), replica.CheckpointKey(id))
		if err == nil {
			lines := strings.Split(string(obj.Data), "\n")
			var size uint64
			if len(lines) > 1 {
				fmt.Sscan(lines[1], &size)
			}
			if size >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket's checkpoint: %v, want one of %d events", err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFollowerPromotedByTakeover: a follower's directory, once the
// follower is closed, becomes the ledger's writer with Takeover (with the
// writer's key): the writer that was is fenced, and the new one appends
// after the events the follower copied.
func TestFollowerPromotedByTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, o, _ := followerWriter(t, st)
	defer w.Close()
	var last AppendResult
	for i := range 100 {
		var err error
		if last, err = appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitReplicated(ctx, last.IDs[0]); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, w.key.Verifier)
	waitFollowed(t, fw, "cash", 101)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	to := replOptions(st, Shipped)
	to.SigningKeyFile = o.SigningKeyFile
	if db, err := Open(dir, to); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), followerFile) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open of a follower's directory: %v, want ErrInvalid naming %s", err, followerFile)
	}
	b, res, err := Takeover(ctx, dir, to)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(res) != 1 || res[0].Local != 101 || res[0].Pulled != 101 {
		t.Fatalf("takeover: %+v, want the follower's 101 events and nothing to pull", res)
	}
	if errs := b.Unavailable(); len(errs) > 0 {
		t.Fatalf("the promoted directory: %v", errs)
	}
	next, err := appendOne(ctx, b, "cash", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if next.FirstSeq != 102 {
		t.Fatalf("the promoted writer appended #%d, want #102", next.FirstSeq)
	}
	if err := b.WaitReplicated(ctx, next.IDs[0]); err != nil {
		t.Fatal(err)
	}
	var ferr error
	for range 100 { // Shipped: the old writer learns at its next upload
		if _, ferr = appendOne(ctx, w, "cash", 999); ferr != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(ferr, ErrFenced) {
		t.Fatalf("the old writer's append after the promotion: %v, want ErrFenced", ferr)
	}
	if _, err := os.Stat(filepath.Join(dir, followerFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the promoted directory still holds %s (%v)", followerFile, err)
	}
}

// slowStore answers every request after d.
type slowStore struct {
	store.Store
	d time.Duration
}

func (s slowStore) Get(ctx context.Context, key string) (store.Object, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return store.Object{}, ctx.Err()
	}
	return s.Store.Get(ctx, key)
}

// TestFollowerCloseMidPoll: Close while a poll is under way (a slow
// store) and readers read the follower's DB: it returns, the readers end
// with an error (ErrClosed, or the context's), and the race detector
// finds nothing.
func TestFollowerCloseMidPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, _ := followerWriter(t, st)
	defer w.Close()
	fw := openTestFollower(t, t.TempDir(), slowStore{st, 2 * time.Millisecond}, w.key.Verifier)
	stopW := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopW:
				return
			default:
			}
			if _, err := appendOne(ctx, w, "cash", i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	waitFollowed(t, fw, "cash", 50)
	readers := make(chan error, 4)
	for range 2 {
		go func() {
			var last error
			for _, err := range fw.DB().Subscribe(ctx, "cash", SubscribeOptions{}) {
				if err != nil {
					last = err
					break
				}
			}
			readers <- last
		}()
		go func() {
			for {
				_, err := fw.Status("cash")
				var serr error
				for _, err := range fw.DB().Scan(ctx, "cash", ScanOptions{Limit: 10}) {
					if err != nil {
						serr = err
						break
					}
				}
				if err != nil || serr != nil {
					readers <- serr
					return
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // polls under way
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-readers; !errors.Is(err, ErrClosed) {
			t.Errorf("a reader of the closed follower ended with %v, want ErrClosed", err)
		}
	}
	close(stopW)
	wg.Wait()
}

// BenchmarkFollowerLag measures a follower's lag behind a Shipped writer
// appending about 10,000 events a second (batches of 100 every 10 ms)
// for 3 s an iteration, through the in-memory store: the time from an
// append's return to the event reaching a subscriber of the follower's
// DB, at the poll interval FOLLOW_POLL (default 100ms). It reports the
// p50, p99 and max lag, and p99 over the poll interval.
func BenchmarkFollowerLag(b *testing.B) {
	poll := 100 * time.Millisecond
	if s := os.Getenv("FOLLOW_POLL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		poll = d
	}
	ctx := context.Background()
	var lags []time.Duration
	events := 0
	for range b.N {
		st := newReplStore()
		o := replOptions(st, Shipped)
		o.SegmentSize = 64 << 20
		o.SigningKeyFile = filepath.Join(b.TempDir(), "writer.key")
		w, err := Open(b.TempDir(), o)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
			b.Fatal(err)
		}
		checkpointStored(b, w, st, "cash", w.byName["cash"].meta.ID, 1) // a follower serves a ledger once it has one
		fw, err := OpenFollower(b.TempDir(), FollowerOptions{store: st, VerifierKey: w.key.Verifier, PollInterval: poll,
			Options: &Options{TempDir: b.TempDir()}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if s, err := fw.Status("cash"); err == nil && s.Local > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		var mu sync.Mutex
		acked := map[uint64]time.Time{}
		stop := time.Now().Add(3 * time.Second)
		var last uint64
		wdone := make(chan struct{})
		go func() {
			defer close(wdone)
			batch := make([]EventInput, 100)
			for i := range batch {
				batch[i] = EventInput{Entity: "acct", Key: fmt.Sprint(i % 7), Event: "credited", Data: []byte(fmt.Sprint(i))}
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for time.Now().Before(stop) {
				<-tick.C
				res, err := w.Append(ctx, "cash", batch, nil)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				for s := res.FirstSeq; s < res.FirstSeq+uint64(len(batch)); s++ {
					acked[s] = now
				}
				last = res.FirstSeq + uint64(len(batch)) - 1
				mu.Unlock()
			}
		}()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		for ev, err := range fw.DB().Subscribe(sctx, "cash", SubscribeOptions{AfterSeq: 1}) {
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			mu.Lock()
			at, ok := acked[ev.Seq]
			mu.Unlock()
			done := false
			select {
			case <-wdone:
				mu.Lock()
				done = ev.Seq >= last
				mu.Unlock()
			default:
			}
			if ok {
				lags = append(lags, now.Sub(at))
				events++
			}
			if done {
				break
			}
		}
		cancel()
		fw.Close()
		w.Close()
	}
	slices.Sort(lags)
	p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(float64(len(lags))*q))] }
	b.ReportMetric(float64(p(0.5).Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(p(0.99).Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, "lag-max-ms")
	b.ReportMetric(float64(p(0.99))/float64(poll), "p99/poll")
	b.ReportMetric(float64(events)/float64(b.N)/3, "events/s")
}

// flakyStore fails every third Get, once on, as an unreachable store
// does.
type flakyStore struct {
	store.Store
	on atomic.Bool
	n  atomic.Int64
}

func (s *flakyStore) Get(ctx context.Context, key string) (store.Object, error) {
	if s.on.Load() && s.n.Add(1)%3 == 0 {
		return store.Object{}, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

// TestFollowerRetriesFailedReads: a store that fails every third read
// after the first poll (in the middle of polls: after some chunks of a
// poll were read; a poll reads the checkpoint and each chunk) does
// not stop the follower: each failed poll lays nothing, the next one
// reads again from where the last whole poll ended, and the copy ends
// with exactly the writer's events.
func TestFollowerRetriesFailedReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	checkpointStored(t, w, st, "cash", info.ID, 1)
	view := &flakyStore{Store: st}
	fw := openTestFollower(t, t.TempDir(), view, w.key.Verifier)
	defer fw.Close()
	waitFollowed(t, fw, "cash", 1)
	view.on.Store(true)
	ids := []eventid.ID{{}, info.Genesis}
	failed := false
	for i := range 300 {
		res, err := appendOne(ctx, w, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
		if s, err := fw.Status("cash"); err == nil {
			failed = failed || s.LastError != nil
		}
	}
	if err := w.WaitReplicated(ctx, ids[len(ids)-1]); err != nil {
		t.Fatal(err)
	}
	s := waitFollowed(t, fw, "cash", 301)
	if s.Stopped != nil {
		t.Fatalf("the follower stopped: %v", s.Stopped)
	}
	if !failed {
		t.Log("no poll was seen failing (the status is sampled)")
	}
	n := 0
	for ev, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if ev.ID != ids[ev.Seq] {
			t.Fatalf("event #%d: the copy holds %s, the writer appended %s", ev.Seq, ev.ID, ids[ev.Seq])
		}
	}
	if n != 301 {
		t.Fatalf("the copy holds %d events, want 301", n)
	}
}

// TestFollowerOtherLedgersGoOn: a follower of every ledger of a bucket
// whose ledger "cash" stops at a changed chunk goes on following the
// other, "bonds", created after the follower started.
func TestFollowerOtherLedgersGoOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, cash := followerWriter(t, st)
	defer w.Close()
	checkpointStored(t, w, st, "cash", cash.ID, 1)
	view := &frozenStore{Store: st}
	fw := openTestFollower(t, t.TempDir(), view, w.key.Verifier)
	defer fw.Close()
	waitFollowed(t, fw, "cash", 1)
	view.freeze(t, cash.ID)
	for i := range 20 {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "cash", cash.ID, 21)
	keys := listAll(t, st, replica.LedgerPrefix(cash.ID)+"wal/")
	obj, err := st.Get(ctx, keys[len(keys)-1])
	if err != nil {
		t.Fatal(err)
	}
	var bad string
	for _, k := range keys {
		if view.hidden(k) {
			bad = k
			break
		}
	}
	if bad == "" {
		t.Fatalf("no chunk of cash stored after the freeze: %v", keys)
	}
	obj, _ = st.Get(ctx, bad)
	b := slices.Clone(obj.Data)
	b[len(b)-20] ^= 1
	putOver(t, st, bad, b)
	view.thaw()
	s := waitStopped(t, fw, "cash")
	if !strings.Contains(s.Stopped.Error(), bad) {
		t.Fatalf("cash stopped with %v, want an error naming %s", s.Stopped, bad)
	}

	bonds, err := w.CreateLedger(ctx, LedgerSpec{Name: "bonds"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := appendOne(ctx, w, "bonds", i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "bonds", bonds.ID, 11)
	fw.mu.Lock()
	fw.listed = time.Time{} // list the bucket's ledgers at the next poll, not in a minute
	fw.mu.Unlock()
	if s := waitFollowed(t, fw, "bonds", 11); s.Stopped != nil {
		t.Fatalf("bonds stopped: %v", s.Stopped)
	}
	n := 0
	for _, err := range fw.DB().Scan(ctx, "bonds", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 11 {
		t.Fatalf("the copy of bonds holds %d events, want 11", n)
	}
	if s, _ := fw.Status("cash"); s.Stopped == nil || s.Local != 1 {
		t.Fatalf("cash: %+v, want stopped at its first event", s)
	}
}
