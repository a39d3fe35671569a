package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// waitingContext is a cancellable context that tells (asked) when the
// code under test first asks for its Done channel: the mark that the call
// is about to wait on it, so that a test cancels it during the wait and
// not before.
type waitingContext struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *waitingContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// cancelWhileWaiting runs call on another goroutine with a context that
// it cancels once call waits on it, and returns call's error. The test
// fails if call does not return within 10 s of the cancel (or does not
// ask for the context's Done channel within 10 s: it is cancelled then
// all the same).
func cancelWhileWaiting(t *testing.T, what string, call func(ctx context.Context) error) error {
	t.Helper()
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := &waitingContext{Context: parent, asked: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- call(ctx) }()
	select {
	case <-ctx.asked:
	case err := <-errc:
		t.Fatalf("%s returned before it waited: %v", what, err)
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not wait on its context within 10 s", what)
	}
	cancel()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s of its context's cancel", what)
		return nil
	}
}

// expectNoGoroutineLeft fails the test if more goroutines than before
// are left once those that are ending have ended (within 10 s).
func expectNoGoroutineLeft(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// contextEvent is an event of the tests of this file.
func contextEvent(i int) []EventInput {
	return []EventInput{{Entity: "order", Key: fmt.Sprintf("o%d", i), Event: "placed", Data: []byte(`{}`)}}
}

// TestAppendCancelledAwaitingFirst: a retry with an idempotency key waits
// for the outcome of the first append with the key while that one's group
// is committed but not yet published; a cancelled context ends the wait,
// and Append returns an error matching context.Canceled that says it
// appended nothing. No goroutine is left behind.
func TestAppendCancelledAwaitingFirst(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	first, err := db.Append(ctx, "l", contextEvent(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	// The first append with key "k" is in flight: committed (the log's
	// head), prepared, not yet published (indexed is before it), as
	// between its group's fsync and the committing goroutine's published.
	h := first.FirstSeq
	l.idxMu.Lock()
	l.indexed = h - 1
	l.idxMu.Unlock()
	l.prepared(&segment.Batch{Entries: []segment.Entry{{Entity: "order", Key: "o1", Event: "placed", Meta: []byte(`{}`), Data: []byte(`{}`)}},
		IdempotencyKey: []byte("k"), IDs: first.IDs, FirstSeq: h})
	defer func() { // as published would: the first append is done
		l.idxMu.Lock()
		l.indexed = h
		l.indexedUpTo(h)
		l.cond.Broadcast()
		l.idxMu.Unlock()
	}()

	before := runtime.NumGoroutine()
	err = cancelWhileWaiting(t, "a retry waiting for the first append's outcome", func(ctx context.Context) error {
		_, err := db.Append(ctx, "l", contextEvent(2), &AppendOptions{IdempotencyKey: "k"})
		return err
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "appended nothing") {
		t.Fatalf("Append cancelled while it waited for the first append's outcome: %v, want context.Canceled and appended nothing", err)
	}
	expectNoGoroutineLeft(t, before)
	if info, _ := db.Ledger("l"); info.Count != h {
		t.Fatalf("%d events, want %d", info.Count, h)
	}
}

// syncGate holds each fsync of a segment file, once armed, until the test
// lets it go with a token (or closes pass). Other operations pass through.
type syncGate struct {
	vfs.FS
	armed atomic.Bool
	held  chan struct{} // receives once per held fsync
	pass  chan struct{} // a token per fsync let go
	once  sync.Once
}

// open lets every fsync go from now on, once: deferred, so that a test
// that fails while one is held can still close its DB.
func (g *syncGate) open() { g.once.Do(func() { close(g.pass) }) }

type syncGateFile struct {
	vfs.File
	g   *syncGate
	seg bool
}

func (g *syncGate) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return f, err
	}
	return &syncGateFile{File: f, g: g, seg: strings.HasSuffix(name, ".seg")}, nil
}

// Unwrap lets the engine reach the real file system (its chmod).
func (g *syncGate) Unwrap() vfs.FS { return g.FS }

func (f *syncGateFile) Sync() error {
	if f.seg && f.g.armed.Load() {
		f.g.held <- struct{}{}
		<-f.g.pass
	}
	return f.File.Sync()
}

// heldFsync waits for a segment fsync to be held.
func heldFsync(t *testing.T, g *syncGate, what string) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no fsync began within 10 s", what)
	}
}

// queued starts an append that waits (with a context it never cancels)
// for its turn behind the group being committed, and returns once it
// waits: its error comes on the channel returned.
func queued(t *testing.T, db *DB, events []EventInput, opts *AppendOptions) <-chan error {
	t.Helper()
	ctx := &waitingContext{Context: context.Background(), asked: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := db.Append(ctx, "l", events, opts)
		errc <- err
	}()
	select {
	case <-ctx.asked:
	case err := <-errc:
		t.Fatalf("an append returned before it waited for its turn: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("an append did not wait for its turn within 10 s")
	}
	return errc
}

// TestAppendCancelledWaitingForCommit: an append whose context is
// cancelled while it waits for its turn behind another append's commit
// returns an error matching context.Canceled that says nothing was
// appended, and nothing of it is; one cancelled while another append
// commits the group it is in (during the group's fsync) returns at once
// an error matching context.Canceled that says it may have been
// appended, and it is: its retry with the same idempotency key returns
// its result. The commits are not disturbed, and no goroutine is left
// behind.
func TestAppendCancelledWaitingForCommit(t *testing.T) {
	ctx := context.Background()
	g := &syncGate{FS: vfs.Default, held: make(chan struct{}, 16), pass: make(chan struct{})}
	db, err := Open(t.TempDir(), &Options{fs: g})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer g.open()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	g.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := db.Append(ctx, "l", contextEvent(1), nil)
		first <- err
	}()
	heldFsync(t, g, "the first append")

	// Queued behind the first append's commit.
	err = cancelWhileWaiting(t, "an append queued behind a commit", func(ctx context.Context) error {
		_, err := db.Append(ctx, "l", contextEvent(2), nil)
		return err
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was appended") {
		t.Fatalf("Append cancelled while queued: %v, want context.Canceled and nothing appended", err)
	}

	// In a group being committed: the next group is led by leader, and
	// the cancelled append is in it.
	leader := queued(t, db, contextEvent(3), nil)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wctx := &waitingContext{Context: cctx, asked: make(chan struct{})}
	member := make(chan error, 1)
	opts := &AppendOptions{IdempotencyKey: "k"}
	go func() {
		_, err := db.Append(wctx, "l", contextEvent(4), opts)
		member <- err
	}()
	select {
	case <-wctx.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the group's member did not wait for its turn within 10 s")
	}
	g.pass <- struct{}{} // the first group's fsync
	if err := <-first; err != nil {
		t.Fatalf("the first append: %v", err)
	}
	heldFsync(t, g, "the second group")
	cancel()
	select {
	case err = <-member:
	case <-time.After(10 * time.Second):
		t.Fatal("an append in a group being committed did not return within 10 s of its context's cancel")
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may have been appended") {
		t.Fatalf("Append cancelled in a group being committed: %v, want context.Canceled and may have been appended", err)
	}
	g.pass <- struct{}{}
	if err := <-leader; err != nil {
		t.Fatalf("the second group's leader: %v", err)
	}
	g.armed.Store(false)
	expectNoGoroutineLeft(t, before)

	// The first append and the second group are in; the queued append
	// that was cancelled is not.
	got, err := db.Ledger("l")
	if err != nil || got.Count != info.Count+3 {
		t.Fatalf("%d events (%v), want %d", got.Count, err, info.Count+3)
	}
	res, err := db.Append(ctx, "l", contextEvent(4), opts)
	if err != nil || res.FirstSeq != info.Count+3 {
		t.Fatalf("retry with the key of the append that may have been appended: #%d %v, want its result #%d", res.FirstSeq, err, info.Count+3)
	}
}

// TestAwaitIndexedEndsWithContext: the wait of a failed condition for
// the index to show what it saw ends with its context's error.
func TestAwaitIndexedEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	// Committed, not yet indexed.
	h := l.log.Head().Seq
	l.idxMu.Lock()
	l.indexed = h - 1
	l.idxMu.Unlock()
	defer func() {
		l.idxMu.Lock()
		l.indexed = h
		l.wake()
		l.idxMu.Unlock()
	}()
	err = cancelWhileWaiting(t, "a wait for the index", func(ctx context.Context) error { return l.awaitIndexed(ctx, h) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("awaitIndexed cancelled: %v, want context.Canceled", err)
	}
}

// lockUntilDone locks mu and returns its unlock, which unlocks it the
// first time it is called.
func lockUntilDone(mu sync.Locker) (unlock func()) {
	mu.Lock()
	var once sync.Once
	return func() { once.Do(mu.Unlock) }
}

// TestConsumerWritesCancelled: each write of a consumer's position (Ack,
// Flush, SetConsumerPosition, DeleteConsumer) whose context is cancelled
// while it waits for another write of positions returns an error matching
// context.Canceled, and the stored position is as it was.
func TestConsumerWritesCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := db.Append(ctx, "l", contextEvent(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Consumer("l", "c", ConsumerOptions{Entity: "order"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := take(ctx, t, c, 3, func(i int, _ Event) bool { return i == 0 })
	if err != nil {
		t.Fatal(err)
	}
	stored := ConsumerPosition{ID: evs[0].ID, Seq: evs[0].Seq}
	storedIs := func(when string) {
		t.Helper()
		r, found, err := meta.GetConsumer(db.meta, evs[0].ID.Ledger(), "c")
		if err != nil || !found || r.Seq != stored.Seq {
			t.Fatalf("%s: stored position #%d (found %v, %v), want #%d", when, r.Seq, found, err, stored.Seq)
		}
	}
	storedIs("after the first Ack")

	// Another write of the consumer's position holds its lock (let go
	// if the test fails, so that Close can take it).
	unlock := lockUntilDone(&c.mu)
	defer unlock()
	err = cancelWhileWaiting(t, "Ack", func(ctx context.Context) error { return c.Ack(ctx, evs[2].ID) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Ack cancelled: %v, want context.Canceled", err)
	}
	err = cancelWhileWaiting(t, "Flush", func(ctx context.Context) error { return c.Flush(ctx) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush cancelled: %v, want context.Canceled", err)
	}
	unlock()
	if p := c.Position(); p.Acked != stored || p.Stored != stored {
		t.Fatalf("after the cancelled writes: acked #%d, stored #%d, want #%d", p.Acked.Seq, p.Stored.Seq, stored.Seq)
	}
	storedIs("after a cancelled Ack and Flush")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// Another write of the consumers' positions holds their lock.
	unlock = lockUntilDone(&db.consumers.mu)
	defer unlock()
	err = cancelWhileWaiting(t, "SetConsumerPosition", func(ctx context.Context) error { return db.SetConsumerPosition(ctx, "l", "c", evs[2].ID) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SetConsumerPosition cancelled: %v, want context.Canceled", err)
	}
	err = cancelWhileWaiting(t, "DeleteConsumer", func(ctx context.Context) error { return db.DeleteConsumer(ctx, "l", "c") })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DeleteConsumer cancelled: %v, want context.Canceled", err)
	}
	unlock()
	storedIs("after a cancelled SetConsumerPosition and DeleteConsumer")

	// Not cancelled, they write.
	if err := db.SetConsumerPosition(ctx, "l", "c", evs[2].ID); err != nil {
		t.Fatal(err)
	}
	stored = ConsumerPosition{ID: evs[2].ID, Seq: evs[2].Seq}
	storedIs("after SetConsumerPosition")
}
