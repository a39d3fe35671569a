package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// gateFS holds the fsyncs of segment files, once armed, until released
// (and then fails them, if fail is set). Other operations pass through.
type gateFS struct {
	vfs.FS
	armed   atomic.Bool
	held    chan struct{} // receives once per held fsync
	release chan struct{} // closed to let them go (let)
	once    sync.Once
	fail    atomic.Bool
}

// let releases the held fsyncs, once: deferred, so that a test that
// fails while one is held can still close its DB.
func (fs *gateFS) let() { fs.once.Do(func() { close(fs.release) }) }

type gateFile struct {
	vfs.File
	fs  *gateFS
	seg bool
}

func (fs *gateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return f, err
	}
	return &gateFile{File: f, fs: fs, seg: strings.HasSuffix(name, ".seg")}, nil
}

// Unwrap lets the engine reach the real file system (its chmod).
func (fs *gateFS) Unwrap() vfs.FS { return fs.FS }

func (f *gateFile) Sync() error {
	if f.seg && f.fs.armed.Load() {
		f.fs.held <- struct{}{}
		<-f.fs.release
		if f.fs.fail.Load() {
			return syscall.EIO
		}
	}
	return f.File.Sync()
}

// openGated opens a DB in a new directory, on the real file system
// wrapped in a gateFS, with ledger "l" created.
func openGated(t *testing.T) (*DB, *gateFS) {
	t.Helper()
	g := &gateFS{FS: vfs.Default, held: make(chan struct{}, 16), release: make(chan struct{})}
	db, err := Open(t.TempDir(), &Options{fs: g})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	return db, g
}

// TestIndexDuringFsync: a Sync append's group is written to the index
// while its segment fsync runs (segment.Hooks.Written, indexWritten), and
// no read sees any of it until the fsync is done and Append returns: not
// Scan, GetSeq, Get, StreamHead, LedgerInfo, nor a Subscribe.
func TestIndexDuringFsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := openGated(t)
	defer db.Close()
	if _, err := db.Append(ctx, "l", []EventInput{order(0)}, nil); err != nil {
		t.Fatal(err)
	}
	before, err := db.Ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	sub := make(chan uint64, 16)
	go func() {
		for ev, err := range db.Subscribe(sctx, "l", SubscribeOptions{}) {
			if err != nil {
				return
			}
			sub <- ev.Seq
		}
	}()

	g.armed.Store(true)
	defer g.let()
	type result struct {
		res AppendResult
		err error
	}
	done := make(chan result, 1)
	batch := []EventInput{order(1), order(1), order(2)} // order(1) twice: one stream, two events
	go func() {
		res, err := db.Append(ctx, "l", batch, nil)
		done <- result{res, err}
	}()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the append's fsync never began")
	}
	// The fsync is held. The index has the group already (written during
	// the fsync), but nobody sees it.
	first := before.Count + 1
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ok, err := db.idx.BySeq(l.meta.ID, first+2)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group is not in the index while its fsync runs")
		}
		time.Sleep(time.Millisecond)
	}
	id, _, _ := db.idx.BySeq(l.meta.ID, first)
	select {
	case r := <-done:
		t.Fatalf("Append returned before its fsync was done: %+v", r)
	default:
	}
	if info, err := db.Ledger("l"); err != nil || info.Count != before.Count || info.Head != before.Head {
		t.Errorf("LedgerInfo during the fsync: count %d head %s (%v), want %d %s", info.Count, info.Head, err, before.Count, before.Head)
	}
	n := 0
	for _, err := range db.Scan(ctx, "l", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if uint64(n) != before.Count {
		t.Errorf("Scan during the fsync: %d events, want %d", n, before.Count)
	}
	if _, err := db.GetSeq(ctx, "l", first); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSeq(%d) during the fsync: %v, want ErrNotFound", first, err)
	}
	if _, err := db.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(%s) during the fsync: %v, want ErrNotFound", id, err)
	}
	e := batch[0]
	if h, err := db.StreamHead(ctx, "l", e.Entity, e.Key); err != nil || h.Seq != 0 {
		t.Errorf("StreamHead during the fsync: %+v (%v), want none (the stream's events are in the held group)", h, err)
	}
	select {
	case s := <-sub:
		if s >= first {
			t.Errorf("Subscribe gave #%d during its fsync", s)
		}
	case <-time.After(20 * time.Millisecond):
	}

	g.armed.Store(false)
	g.let()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.FirstSeq != first || r.res.IDs[0] != id {
		t.Fatalf("append: #%d %s, the index had #%d %s", r.res.FirstSeq, r.res.IDs[0], first, id)
	}
	if h, err := db.StreamHead(ctx, "l", e.Entity, e.Key); err != nil || h.Seq != first+1 {
		t.Errorf("StreamHead after the append: %+v (%v), want #%d", h, err, first+1)
	}
	if _, err := db.Get(ctx, id); err != nil {
		t.Errorf("Get after the append: %v", err)
	}
}

// TestIndexAheadAfterFailedFsync: a group indexed during an fsync that
// then fails is in the index but not in the segments; reads do not see it,
// Close does not cover it with the index's progress marker, and the next
// Open rebuilds the index: Get of its IDs is then ErrNotFound.
func TestIndexAheadAfterFailedFsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := openGated(t)
	if _, err := db.Append(ctx, "l", []EventInput{order(0)}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := db.Ledger("l")
	l, _ := db.ledger("l")
	g.armed.Store(true)
	g.fail.Store(true)
	defer g.let()
	done := make(chan error, 1)
	go func() {
		_, err := db.Append(ctx, "l", []EventInput{order(1)}, nil)
		done <- err
	}()
	<-g.held
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok, _ := db.idx.BySeq(l.meta.ID, before.Count+1); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group is not in the index while its fsync runs")
		}
		time.Sleep(time.Millisecond)
	}
	lost, _, _ := db.idx.BySeq(l.meta.ID, before.Count+1)
	g.armed.Store(false)
	g.let()
	if err := <-done; err == nil {
		t.Fatal("the append whose fsync failed succeeded")
	}
	if _, err := db.Get(ctx, lost); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the lost event after its fsync failed: %v, want ErrNotFound", err)
	}
	if info, err := db.Ledger("l"); err != nil || info.Count != before.Count {
		t.Errorf("after the failed fsync: count %d (%v), want %d", info.Count, err, before.Count)
	}
	db.Close() // the Log's failure
	db, err := Open(db.dir, &Options{fs: g})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Get(ctx, lost); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the lost event after a reopen: %v, want ErrNotFound", err)
	}
	l, _ = db.ledger("l")
	if _, ok, _ := db.idx.BySeq(l.meta.ID, before.Count+1); ok {
		t.Errorf("the index still has #%d after a reopen", before.Count+1)
	}
	// The ledger goes on from where the segments are.
	res, err := db.Append(ctx, "l", []EventInput{order(1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstSeq != before.Count+1 {
		t.Errorf("append after the reopen: #%d, want #%d", res.FirstSeq, before.Count+1)
	}
}
