package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// testEndpoint names the tests' in-memory store in errors.
const testEndpoint = "memory://test-bucket"

// replStore wraps a store with the faults the replication tests need.
type replStore struct {
	store.Store
	// down fails every request as an unreachable store does, applying
	// nothing.
	down atomic.Bool
	mu   sync.Mutex
	// hold, if not nil, holds every chunk upload until it is closed.
	hold chan struct{}
	// held counts the chunk uploads waiting on hold.
	held atomic.Int32
}

var errStoreDown = fmt.Errorf("test store: down: %w", store.ErrUnavailable)

func (s *replStore) holdChunks() {
	s.mu.Lock()
	s.hold = make(chan struct{})
	s.mu.Unlock()
}

func (s *replStore) release() {
	s.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.mu.Unlock()
}

func (s *replStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if s.down.Load() {
		return "", errStoreDown
	}
	if strings.Contains(key, "/wal/") {
		s.mu.Lock()
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			s.held.Add(1)
			select {
			case <-hold:
			case <-ctx.Done():
				s.held.Add(-1)
				return "", ctx.Err()
			}
			s.held.Add(-1)
		}
	}
	return s.Store.Put(ctx, key, data, cond)
}

func (s *replStore) Get(ctx context.Context, key string) (store.Object, error) {
	if s.down.Load() {
		return store.Object{}, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

func (s *replStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	if s.down.Load() {
		return store.ObjectInfo{}, errStoreDown
	}
	return s.Store.Head(ctx, key)
}

func (s *replStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if s.down.Load() {
		return store.Page{}, errStoreDown
	}
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *replStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	if s.down.Load() {
		return store.FolderPage{}, errStoreDown
	}
	return s.Store.Folders(ctx, prefix, after, limit)
}

func (s *replStore) Delete(ctx context.Context, key string) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Delete(ctx, key)
}

func newReplStore() *replStore { return &replStore{Store: store.NewMemory()} }

// replOptions are a DB's options with the replica st in mode.
func replOptions(st store.Store, mode Replication) *Options {
	return &Options{replicaStore: st, replicaEndpoint: testEndpoint, Replication: mode,
		StoreTimeout: 2 * time.Second, GCGrace: time.Minute, ShipInterval: 50 * time.Millisecond,
		SegmentSize: 16 << 10}
}

func openRepl(t *testing.T, dir string, st store.Store, mode Replication) *DB {
	t.Helper()
	db, err := Open(dir, replOptions(st, mode))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// bucketEvents reads every chunk and sealed segment the bucket holds of
// ledger id and checks that each holds, byte for byte, what the ledger's
// segment files in dir (closed) hold at the same place, and that each
// chunk's Merkle root is the ledger's tree's at its size (the leaves the
// engine gave the Writer); it returns the IDs of the events they hold,
// by sequence number, and checks that they run from #1 without a gap.
func bucketEvents(t *testing.T, st store.Store, dir string, id eventid.LedgerID) []eventid.ID {
	t.Helper()
	ctx := context.Background()
	segDir := filepath.Join(dir, ledgersDir, id.String())
	tf, err := tree.OpenFileReadOnly(vfs.Default, filepath.Join(segDir, treeFileName), uint32(id))
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	file := func(seg uint64) []byte {
		b, err := os.ReadFile(filepath.Join(segDir, fmt.Sprintf("%020d.seg", seg)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ids := map[uint64]eventid.ID{}
	keys := listAll(t, st, replica.LedgerPrefix(id))
	for _, key := range keys {
		o, err := st.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(key, "/wal/"):
			c, err := replica.DecodeChunk(key, id, o.Data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Fence() {
				continue
			}
			if root, err := tf.Root(c.TreeSize); err != nil || root != tree.Hash(c.Root) {
				t.Fatalf("chunk %s: root at size %d %x, the tree's %x (%v)", key, c.TreeSize, c.Root, root, err)
			}
			local := file(uint64(c.Segment))
			if end := int(c.Offset) + len(c.Records); end > len(local) || !bytes.Equal(local[c.Offset:end], c.Records) {
				t.Fatalf("chunk %s: its records (#%d to #%d) differ from segment %d at %d", key, c.FirstSeq, c.LastSeq, c.Segment, c.Offset)
			}
			walk(t, id, local, uint64(c.Segment), int64(c.Offset), int64(c.Offset)+int64(len(c.Records)), c.FirstSeq, ids)
		case strings.Contains(key, "/seg/"):
			first, last, ok := replica.ParseSegmentKey(key)
			if !ok {
				t.Fatalf("bad seg key %s", key)
			}
			found := false
			for seg := uint64(1); ; seg++ {
				b, err := os.ReadFile(filepath.Join(segDir, fmt.Sprintf("%020d.seg", seg)))
				if err != nil {
					break
				}
				if bytes.Equal(b, o.Data) {
					found = true
					got := map[uint64]eventid.ID{}
					walk(t, id, b, seg, segment.RecordsStart, int64(len(b)), first, got)
					for s, id := range got {
						if s < first || s > last {
							t.Fatalf("%s holds #%d", key, s)
						}
						ids[s] = id
					}
				}
			}
			if !found {
				t.Fatalf("%s is no segment file of the directory, byte for byte", key)
			}
		}
	}
	out := make([]eventid.ID, len(ids))
	for s, id := range ids {
		if s == 0 || s > uint64(len(ids)) {
			t.Fatalf("the bucket holds #%d among %d events: a gap", s, len(ids))
		}
		out[s-1] = id
	}
	return out
}

// walk verifies the records of segment seg's bytes b[from:to], the
// first of which is #first, and records their IDs.
func walk(t *testing.T, ledger eventid.LedgerID, b []byte, seg uint64, from, to int64, first uint64, ids map[uint64]eventid.ID) {
	t.Helper()
	span := b[from:to]
	prev, err := segment.SpanPrev(span)
	if err != nil {
		t.Fatal(err)
	}
	_, err = segment.VerifySpan(ledger, segment.Head{ID: prev, Seq: first - 1}, "bucket", seg, from, span, func(r *segment.Record, _ segment.Location) error {
		ids[r.Seq] = r.ID
		return nil
	})
	if err != nil {
		t.Fatalf("records of segment %d from %d: %v", seg, from, err)
	}
}

// listAll lists every key under prefix.
func listAll(t *testing.T, st store.Store, prefix string) []string {
	t.Helper()
	var keys []string
	after := ""
	for {
		p, err := st.List(context.Background(), prefix, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			keys = append(keys, o.Key)
		}
		if !p.Truncated || len(p.Objects) == 0 {
			return keys
		}
		after = p.Objects[len(p.Objects)-1].Key
	}
}

// appendOne appends one event to ledger name.
func appendOne(ctx context.Context, db *DB, name string, i int) (AppendResult, error) {
	return db.Append(ctx, name, []EventInput{{Entity: "acct", Key: fmt.Sprintf("a%d", i%7), Event: "credited", Data: []byte(fmt.Sprint(i))}}, nil)
}

// TestReplicatedAppendReturnsOnceStored: in Replicated mode an append
// whose chunk the store holds back does not return, and no read (Scan,
// GetSeq, the ledger's count, a subscriber) shows its event, until the
// store takes the chunk; then the append returns and every read shows it,
// the subscriber gets it, and the bucket holds it byte for byte as the
// segment does.
func TestReplicatedAppendReturnsOnceStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Replicated)
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	got := make(chan Event, 4)
	go func() {
		for e, err := range db.Subscribe(subCtx, "cash", SubscribeOptions{}) {
			if err != nil {
				return
			}
			got <- e
		}
	}()
	if e := <-got; e.ID != info.Genesis {
		t.Fatalf("the subscriber's first event: %s, want the genesis", e.ID)
	}
	st.holdChunks()
	type result struct {
		res AppendResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := appendOne(ctx, db, "cash", 1)
		done <- result{res, err}
	}()
	for st.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("the append returned (%v, %v) while its chunk was held", r.res, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := db.GetSeq(ctx, "cash", 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetSeq #2 while the chunk is held: %v, want ErrNotFound", err)
	}
	if evs := collect(t, db.Scan(ctx, "cash", ScanOptions{})); len(evs) != 1 {
		t.Fatalf("Scan while the chunk is held: %d events, want the genesis alone", len(evs))
	}
	if li, _ := db.Ledger("cash"); li.Count != 1 {
		t.Fatalf("the ledger's count while the chunk is held: %d, want 1", li.Count)
	}
	select {
	case e := <-got:
		t.Fatalf("the subscriber got %s while its chunk is held", e.ID)
	default:
	}
	st.release()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case e := <-got:
		if e.ID != r.res.IDs[0] {
			t.Fatalf("the subscriber got %s, want %s", e.ID, r.res.IDs[0])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the subscriber did not get the stored event")
	}
	ev, err := db.GetSeq(ctx, "cash", 2)
	if err != nil || ev.ID != r.res.IDs[0] {
		t.Fatalf("GetSeq #2 once stored: %v, %v", ev.ID, err)
	}
	if _, err := db.Get(ctx, r.res.IDs[0]); err != nil {
		t.Fatal(err)
	}
	if evs := collect(t, db.Scan(ctx, "cash", ScanOptions{})); len(evs) != 2 {
		t.Fatalf("Scan once stored: %d events", len(evs))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids := bucketEvents(t, st, dir, info.ID)
	if len(ids) != 2 || ids[1] != r.res.IDs[0] {
		t.Fatalf("the bucket holds %v", ids)
	}
}

// TestReplicatedAppendersCloseReopen: 16 goroutines append in Replicated
// mode while the DB closes under them; the DB is reopened (taking the
// ledger again) and they append again. Every acknowledged event is in
// the bucket, whose chunks and sealed segments are byte for byte the
// segment files', without a gap.
func TestReplicatedAppendersCloseReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Replicated)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[eventid.ID]bool{}
	run := func(db *DB, perWorker int, closeAfter int32) {
		var n atomic.Int32
		var wg sync.WaitGroup
		closed := make(chan error, 1)
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWorker {
					res, err := appendOne(ctx, db, "cash", w*1000+i)
					if err != nil {
						if closeAfter > 0 && (errors.Is(err, ErrClosed) || strings.Contains(err.Error(), "closed")) {
							return
						}
						t.Errorf("worker %d: %v", w, err)
						return
					}
					mu.Lock()
					acked[res.IDs[0]] = true
					mu.Unlock()
					if closeAfter > 0 && n.Add(1) == closeAfter {
						go func() { closed <- db.Close() }()
					}
				}
			}()
		}
		wg.Wait()
		if closeAfter > 0 {
			if err := <-closed; err != nil {
				t.Fatalf("close under the appenders: %v", err)
			}
		}
	}
	run(db, 1000, 300)
	db = openRepl(t, dir, st, Replicated)
	run(db, 20, 0)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids := bucketEvents(t, st, dir, info.ID)
	in := map[eventid.ID]bool{}
	for _, id := range ids {
		in[id] = true
	}
	for id := range acked {
		if !in[id] {
			t.Fatalf("acknowledged event %s is not in the bucket (%d events there)", id, len(ids))
		}
	}
	if len(acked) < 300+320 {
		t.Fatalf("%d events acknowledged, want at least 620", len(acked))
	}
	t.Logf("%d events acknowledged, %d in the bucket", len(acked), len(ids))
}

// TestShippedWaitReplicatedAndLag: in Shipped mode an append returns
// while its chunk is held; ReplicaStatus shows the lag, WaitReplicated
// waits until the chunk is stored, and the lag is then 0.
func TestShippedWaitReplicatedAndLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Shipped)
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	if err := db.WaitReplicated(ctx, mustLedger(t, db, "cash").Head); err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	var last AppendResult
	for i := range 10 {
		res, err := appendOne(ctx, db, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		last = res
	}
	// Visible at once: Shipped appends are acknowledged as without a
	// replica.
	if _, err := db.GetSeq(ctx, "cash", 11); err != nil {
		t.Fatal(err)
	}
	s, err := db.ReplicaStatus("cash")
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != Shipped || s.Head != 11 || s.Stored >= 11 || s.Lag != s.Head-s.Stored || s.Lag == 0 || s.Epoch == 0 || s.Fenced {
		t.Fatalf("status while held: %+v", s)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = db.WaitReplicated(short, last.IDs[0])
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReplicated while held: %v, want the deadline", err)
	}
	st.release()
	if err := db.WaitReplicated(ctx, last.IDs[0]); err != nil {
		t.Fatal(err)
	}
	if s, err = db.ReplicaStatus("cash"); err != nil || s.Stored != 11 || s.Lag != 0 {
		t.Fatalf("status once stored: %+v, %v", s, err)
	}
	if err := db.WaitReplicated(ctx, eventid.ID{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("WaitReplicated of no event: %v", err)
	}
}

// TestReplicaBehindRefused: a copy of the directory taken before the
// writer appended more is behind its bucket: its Open refuses the ledger
// with ErrBehind, naming both cures, and opens the others; the bucket is
// left as it was.
func TestReplicaBehindRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Replicated)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := copyDir(t, dir)
	db = openRepl(t, dir, st, Replicated)
	if _, err := appendOne(ctx, db, "cash", 9); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := len(listAll(t, st, ""))
	db = openRepl(t, old, st, Replicated)
	defer db.Close()
	_, err := appendOne(ctx, db, "cash", 10)
	if !errors.Is(err, ErrBehind) || !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("append to a ledger behind its bucket: %v, want ErrBehind", err)
	}
	for _, cure := range []string{"annal restore", "annal takeover", testEndpoint, "#5", "#4"} {
		if !strings.Contains(err.Error(), cure) {
			t.Fatalf("the refusal does not say %q: %v", cure, err)
		}
	}
	if u := db.Unavailable(); !errors.Is(u["cash"], ErrBehind) {
		t.Fatalf("Unavailable: %v", u)
	}
	if after := len(listAll(t, st, "")); after != before {
		t.Fatalf("the refused open wrote to the bucket: %d objects, %d before", after, before)
	}
}

// TestReplicaDivergedRefused: a directory whose event at the bucket's
// head is another one (it went on without the replica from an older
// copy) is refused with ErrDiverged.
func TestReplicaDivergedRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Replicated)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	other := copyDir(t, dir)
	db = openRepl(t, dir, st, Replicated)
	if _, err := appendOne(ctx, db, "cash", 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The copy appends other events, without the replica.
	plain := openTest(t, other)
	for i := range 3 {
		if _, err := appendOne(ctx, plain, "cash", 100+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	db = openRepl(t, other, st, Replicated)
	defer db.Close()
	if _, err := appendOne(ctx, db, "cash", 5); !errors.Is(err, ErrDiverged) {
		t.Fatalf("append to a ledger that diverged from its bucket: %v, want ErrDiverged", err)
	}
}

// TestReplicaFenced: a second DB, on a copy of the directory, takes the
// ledger while the first is open: the first's next append fails with
// ErrFenced, and so does every later one; nothing it acknowledged is
// missing from the bucket, and the second appends on.
func TestReplicaFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	a := openRepl(t, dir, st, Replicated)
	info, err := a.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	acked := []eventid.ID{info.Genesis}
	for i := range 5 {
		res, err := appendOne(ctx, a, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.IDs[0])
	}
	// A copy of the closed directory, not behind the bucket: a DB opened
	// on it takes the ledger while A is open again.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	copied := copyDir(t, dir)
	a = openRepl(t, dir, st, Replicated)
	defer a.Close()
	b := openRepl(t, copied, st, Replicated)
	defer b.Close()
	_, err = appendOne(ctx, a, "cash", 50)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the first writer's append after a takeover: %v, want ErrFenced", err)
	}
	if _, err := appendOne(ctx, a, "cash", 51); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later append: %v, want ErrFenced again", err)
	}
	res, err := appendOne(ctx, b, "cash", 60)
	if err != nil {
		t.Fatalf("the new writer's append: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ids := bucketEvents(t, st, copied, info.ID)
	in := map[eventid.ID]bool{}
	for _, id := range ids {
		in[id] = true
	}
	for _, id := range append(acked, res.IDs[0]) {
		if !in[id] {
			t.Fatalf("acknowledged %s is not in the bucket", id)
		}
	}
}

// TestReplicatedStoreDown: with the store down, a Replicated append
// fails within StoreTimeout (and a little), naming the endpoint and
// saying that the events may yet be stored; nothing local is cut, and
// once the store answers the next append succeeds and both are stored
// and visible.
func TestReplicatedStoreDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	o := replOptions(st, Replicated)
	o.StoreTimeout = 500 * time.Millisecond
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	start := time.Now()
	_, err = appendOne(ctx, db, "cash", 1)
	took := time.Since(start)
	if err == nil {
		t.Fatal("an append with the store down succeeded")
	}
	if took > o.StoreTimeout+time.Second {
		t.Fatalf("the append failed after %v, StoreTimeout is %v", took, o.StoreTimeout)
	}
	if !errors.Is(err, ErrNotStored) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("the append with the store down: %v, want ErrNotStored and the store's error", err)
	}
	for _, want := range []string{testEndpoint, "may yet be stored", "IdempotencyKey"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the error does not say %q: %v", want, err)
		}
	}
	st.down.Store(false)
	res, err := appendOne(ctx, db, "cash", 2)
	if err != nil {
		t.Fatalf("an append once the store answers: %v", err)
	}
	if res.FirstSeq != 3 {
		t.Fatalf("the append after the failed one is #%d, want #3 (the failed one kept locally)", res.FirstSeq)
	}
	if evs := collect(t, db.Scan(ctx, "cash", ScanOptions{})); len(evs) != 3 {
		t.Fatalf("Scan: %d events, want 3", len(evs))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := bucketEvents(t, st, dir, info.ID); len(ids) != 3 || ids[2] != res.IDs[0] {
		t.Fatalf("the bucket holds %d events", len(ids))
	}
}

// TestReplicaCheckpointsReachBucket: a signed checkpoint the DB issues
// (on request, by the background checkpointer, at Close) is stored in
// the bucket once its events are; Close's before Close returns.
func TestReplicaCheckpointsReachBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	o := replOptions(st, Replicated)
	o.CheckpointInterval = 100 * time.Millisecond
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Checkpoint(ctx, "cash")
	if err != nil {
		t.Fatal(err)
	}
	key := replica.CheckpointKey(info.ID)
	deadline := time.Now().Add(5 * time.Second)
	for {
		o, err := st.Get(ctx, key)
		if err == nil && bytes.Equal(o.Data, c.Note) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint of size %d is not in the bucket: %v", c.Size, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The background checkpointer's too.
	if _, err := appendOne(ctx, db, "cash", 9); err != nil {
		t.Fatal(err)
	}
	for {
		o, err := st.Get(ctx, key)
		if err == nil && strings.Contains(string(o.Data), "\n6\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpointer's checkpoint of size 6 is not in the bucket: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And the one Close issues, stored before Close returns.
	if _, err := appendOne(ctx, db, "cash", 10); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(filepath.Join(dir, ledgersDir, info.ID.String(), checkpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, local) || !strings.Contains(string(local), "\n7\n") {
		t.Fatalf("the bucket's checkpoint after Close:\n%s\nthe directory's:\n%s", got.Data, local)
	}
}

// TestReplicaOptions: the replication options out of range, or set
// without a replica, or a malformed URL, are ErrInvalid naming the
// option.
func TestReplicaOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Replication: Shipped}, "without a Replica"},
		{Options{Replica: "http://bucket/x"}, "Replica"},
		{Options{Replica: "s3://Bad_Bucket/x"}, "Replica"},
		{Options{Replica: "s3://bucket/x", Replication: 7}, "Replication"},
		{Options{Replica: "s3://bucket/x", ShipInterval: time.Millisecond}, "ShipInterval"},
		{Options{Replica: "s3://bucket/x", StoreTimeout: time.Hour}, "StoreTimeout"},
		{Options{Replica: "s3://bucket/x", MinFlushInterval: time.Minute}, "MinFlushInterval"},
		{Options{Replica: "s3://bucket/x", GCGrace: 2 * time.Second, StoreTimeout: 5 * time.Second}, "GCGrace"},
		{Options{Replica: "s3://bucket/x", Durability: Interval}, "Durability"},
	} {
		_, err := Open(t.TempDir(), &c.o)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid naming %s", c.o, err, c.want)
		}
	}
	// Shipped mode takes any durability.
	o := Options{Replica: "s3://bucket/x", Replication: Shipped, Durability: Interval}
	w := o.withDefaults()
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
}

// TestShippedLagShipsAtNextOpen: in Shipped mode (with Durability None)
// a Close while the store holds the uploads back returns within
// StoreTimeout without an error, the events not stored staying in the
// segments; the next Open ships them (read back from the segments, with
// their Merkle leaves), then the events appended after it.
func TestShippedLagShipsAtNextOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	o := replOptions(st, Shipped)
	o.Durability = None
	o.StoreTimeout = 300 * time.Millisecond
	o.GCGrace = 10 * time.Second
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WaitReplicated(ctx, info.Head); err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	for i := range 200 {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := db.Close(); err != nil {
		t.Fatalf("Close of a Shipped DB with uploads held: %v", err)
	}
	if took := time.Since(start); took > o.StoreTimeout+2*time.Second {
		t.Fatalf("Close took %v, StoreTimeout is %v", took, o.StoreTimeout)
	}
	st.release()
	db, err = Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var last AppendResult
	for i := range 20 {
		if last, err = appendOne(ctx, db, "cash", 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.WaitReplicated(ctx, last.IDs[0]); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := bucketEvents(t, st, dir, info.ID); len(ids) != 221 || ids[220] != last.IDs[0] {
		t.Fatalf("the bucket holds %d events, want 221", len(ids))
	}
}

// TestReplicatedImport: a ledger imported into a replicated DB is taken
// in the bucket and stored whole before Import returns (Replicated mode),
// and its later appends are replicated as any other ledger's.
func TestReplicatedImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := openTest(t, t.TempDir())
	if _, err := src.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := appendOne(ctx, src, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	in, _ := exportBytes(t, src, "cash", ExportOptions{})
	src.Close()
	dir := t.TempDir()
	st := newReplStore()
	db := openRepl(t, dir, st, Replicated)
	info := importBytes(t, db, in, ImportOptions{})
	res, err := appendOne(ctx, db, info.Name, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := bucketEvents(t, st, dir, info.ID); len(ids) != 302 || ids[301] != res.IDs[0] {
		t.Fatalf("the bucket holds %d events of the imported ledger, want 302", len(ids))
	}
}

// TestReplicatedConditionSeesStored: in Replicated mode a failed
// condition that saw an event not yet stored returns once it is, so that
// the caller can read what it found (read-your-conflicts).
func TestReplicatedConditionSeesStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	db := openRepl(t, t.TempDir(), st, Replicated)
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	first := make(chan error, 1)
	go func() {
		_, err := appendOne(ctx, db, "cash", 1)
		first <- err
	}()
	for st.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		_, err := db.Append(ctx, "cash", []EventInput{ev("acct", "a1", "debited")}, &AppendOptions{ExpectedHead: info.Genesis})
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("the conditional append returned (%v) while the event it conflicts with is not stored", err)
	case <-time.After(200 * time.Millisecond):
	}
	st.release()
	err = <-second
	var ce *ConditionError
	if !errors.As(err, &ce) {
		t.Fatalf("the conditional append: %v, want a ConditionError", err)
	}
	if _, err := db.Get(ctx, ce.Head); err != nil {
		t.Fatalf("the event the condition found is not readable once it returned: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestTakeoverPullsAndFences: a copy of the directory taken before the
// writer appended more is behind its bucket; Takeover pulls the bucket's
// events into it and takes the ledger: the old writer's next append
// fails with ErrFenced, the new one appends after every event the old
// one acknowledged, and the bucket holds them all, byte for byte the new
// directory's segments. A directory whose events differ from the
// bucket's is refused with ErrDiverged, nothing written into it.
func TestTakeoverPullsAndFences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	a := openRepl(t, dir, st, Replicated)
	info, err := a.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	old := copyDir(t, dir)
	diverged := copyDir(t, dir)
	a = openRepl(t, dir, st, Replicated)
	defer a.Close()
	acked := []eventid.ID{info.Genesis}
	for i := range 300 { // several segments: sealed ones are pulled whole
		res, err := appendOne(ctx, a, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.IDs[0])
	}
	b, res, err := Takeover(ctx, old, replOptions(st, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(res) != 1 || res[0].Local != 1 || res[0].Pulled != 301 {
		t.Fatalf("takeover: %+v, want #1 pulled to #301", res)
	}
	if _, err := appendOne(ctx, a, "cash", 999); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old writer's append after the takeover: %v, want ErrFenced", err)
	}
	next, err := appendOne(ctx, b, "cash", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if next.FirstSeq != 302 {
		t.Fatalf("the new writer appended #%d, want #302", next.FirstSeq)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ids := bucketEvents(t, st, old, info.ID)
	if len(ids) != 302 {
		t.Fatalf("the bucket holds %d events, want 302", len(ids))
	}
	for i, id := range append(acked, next.IDs[0]) {
		if ids[i] != id {
			t.Fatalf("event #%d: the bucket holds %s, want %s", i+1, ids[i], id)
		}
	}

	// A copy that went on without the replica holds another #2.
	plain := openTest(t, diverged)
	if _, err := appendOne(ctx, plain, "cash", 5000); err != nil {
		t.Fatal(err)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(diverged, ledgersDir, info.ID.String(), fmt.Sprintf("%020d.seg", 1))
	before, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Takeover(ctx, diverged, replOptions(st, Replicated)); !errors.Is(err, ErrDiverged) {
		t.Fatalf("takeover of a diverged directory: %v, want ErrDiverged", err)
	}
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, before) {
		t.Fatal("the refused takeover wrote into the directory's segment")
	}
}

// TestShippedFenced: in Shipped mode a writer learns that another took
// the ledger at its next upload: from then on its appends fail with
// ErrFenced, and ReplicaStatus says Fenced; the events it acknowledged
// and had not shipped stay in its directory only.
func TestShippedFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	a := openRepl(t, dir, st, Shipped)
	if _, err := a.CreateLedger(ctx, LedgerSpec{Name: "cash"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	copied := copyDir(t, dir)
	a = openRepl(t, dir, st, Shipped)
	defer a.Close()
	b := openRepl(t, copied, st, Shipped)
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for n := 0; ; n++ {
		if _, err = appendOne(ctx, a, "cash", n); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fenced writer still appends after %d events", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the fenced writer's append: %v, want ErrFenced", err)
	}
	if _, err := appendOne(ctx, a, "cash", 1000); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later append: %v, want ErrFenced", err)
	}
	if s, err := a.ReplicaStatus("cash"); err != nil || !s.Fenced {
		t.Fatalf("the fenced writer's status: %+v, %v", s, err)
	}
	if _, err := appendOne(ctx, b, "cash", 2000); err != nil {
		t.Fatalf("the new writer: %v", err)
	}
}

// TestReplicatedIdempotentRetry: an append that failed because the store
// was down, retried with the same IdempotencyKey once it answers, returns
// the first one's result (nothing appended twice), stored and visible.
func TestReplicatedIdempotentRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := newReplStore()
	o := replOptions(st, Replicated)
	o.StoreTimeout = 300 * time.Millisecond
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	events := []EventInput{ev("acct", "a1", "credited"), ev("acct", "a1", "debited")}
	key := &AppendOptions{IdempotencyKey: "pay-1"}
	st.down.Store(true)
	if _, err := db.Append(ctx, "cash", events, key); err == nil {
		t.Fatal("an append with the store down succeeded")
	}
	st.down.Store(false)
	res, err := db.Append(ctx, "cash", events, key)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if res.FirstSeq != 2 || len(res.IDs) != 2 || !res.Replayed {
		t.Fatalf("the retry's result: %+v, want the first append's #2 and #3, Replayed", res)
	}
	if evs := collect(t, db.Scan(ctx, "cash", ScanOptions{})); len(evs) != 3 || evs[2].ID != res.IDs[1] {
		t.Fatalf("Scan after the retry: %d events", len(evs))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := bucketEvents(t, st, dir, info.ID); len(ids) != 3 || ids[1] != res.IDs[0] {
		t.Fatalf("the bucket holds %d events, want 3", len(ids))
	}
}

// closedReplicatedLedger makes a Replicated DB on a new directory with
// the replica st and a signing key file outside the directory, creates
// ledger "cash" with n events after its genesis and closes the DB. It
// returns the directory, the options it was opened with (to open it
// again, or restore with the same key) and the ledger.
func closedReplicatedLedger(t *testing.T, st store.Store, n int) (string, *Options, LedgerInfo) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	o := replOptions(st, Replicated)
	o.SigningKeyFile = filepath.Join(t.TempDir(), "shared.key")
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := appendOne(ctx, db, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, o, info
}
