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

	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestConcurrentAppendsPublishedOnce: 64 concurrent Sync appenders, each
// released once with its own result, and that result published when
// Append returns: the ledger's visible head covers it and GetSeq finds
// the IDs it returned at the sequence numbers it returned. The segment
// log's committing goroutine publishes each group (published) before it
// wakes the group's appenders.
func TestConcurrentAppendsPublishedOnce(t *testing.T) {
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
	const writers, each = 64, 8
	var mu sync.Mutex
	firsts := map[uint64]int{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := 1 + (w+i)%3 // batches of 1 to 3 events
				evs := make([]EventInput, n)
				for j := range evs {
					evs[j] = order(w*1000 + i*10 + j)
				}
				res, err := db.Append(ctx, "l", evs, &AppendOptions{Durability: Sync})
				if err != nil {
					t.Error(err)
					return
				}
				if len(res.IDs) != n {
					t.Errorf("append of %d events returned %d IDs", n, len(res.IDs))
					return
				}
				_, last := res.Last()
				if v := l.visible().Seq; v < last {
					t.Errorf("Append of #%d..#%d returned with the visible head at #%d", res.FirstSeq, last, v)
					return
				}
				for j, id := range res.IDs {
					ev, err := db.GetSeq(ctx, "l", res.Seq(j))
					if err != nil || ev.ID != id || ev.Key != evs[j].Key || ev.Event != evs[j].Event {
						t.Errorf("GetSeq(#%d) after its Append returned: %v %s, want %s", res.Seq(j), err, ev.ID, id)
						return
					}
				}
				mu.Lock()
				firsts[res.FirstSeq] += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every batch released once, each with its own numbers: the batches
	// tile #2 (after the genesis) to the head without overlap.
	info, _ := db.Ledger("l")
	seq := uint64(2)
	for seq <= info.Count {
		n, ok := firsts[seq]
		if !ok {
			t.Fatalf("no append returned #%d as its first (head #%d)", seq, info.Count)
		}
		delete(firsts, seq)
		seq += uint64(n)
	}
	if len(firsts) != 0 || seq != info.Count+1 {
		t.Fatalf("%d appends returned numbers past the head #%d or overlapping", len(firsts), info.Count)
	}
	if st := l.log.Stats(); st.Syncs >= st.Batches {
		t.Logf("no group commit in this run: %d syncs for %d batches", st.Syncs, st.Batches)
	}
}

// holdFailFS holds the first fsync of a segment file once armed, until
// released, then lets it succeed; every later one fails (EIO).
type holdFailFS struct {
	vfs.FS
	armed   atomic.Bool
	n       atomic.Int64
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (fs *holdFailFS) let() { fs.once.Do(func() { close(fs.release) }) }

// Unwrap lets the engine reach the real file system (its chmod).
func (fs *holdFailFS) Unwrap() vfs.FS { return fs.FS }

type holdFailFile struct {
	vfs.File
	fs *holdFailFS
}

func (fs *holdFailFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return &holdFailFile{File: f, fs: fs}, nil
}

func (f *holdFailFile) Sync() error {
	if !f.fs.armed.Load() {
		return f.File.Sync()
	}
	if f.fs.n.Add(1) == 1 {
		f.fs.held <- struct{}{}
		<-f.fs.release
		return f.File.Sync()
	}
	return syscall.EIO
}

// TestFailedGroupNotPublished: appenders queued behind a group whose
// fsync runs, whose own group's fsync then fails, each get the error, and
// none of their events is ever visible; the appender of the group before
// succeeds, its event published.
func TestFailedGroupNotPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := &holdFailFS{FS: vfs.Default, held: make(chan struct{}, 1), release: make(chan struct{})}
	db, err := Open(t.TempDir(), &Options{fs: g})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer g.let()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	before, _ := db.Ledger("l")
	g.armed.Store(true)
	type result struct {
		res AppendResult
		err error
	}
	first := make(chan result, 1)
	go func() {
		res, err := db.Append(ctx, "l", []EventInput{order(0)}, &AppendOptions{Durability: Sync})
		first <- result{res, err}
	}()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first append's fsync never began")
	}
	const later = 8
	results := make(chan result, later)
	for i := range later {
		go func() {
			res, err := db.Append(ctx, "l", []EventInput{order(i + 1), order(i + 2)}, &AppendOptions{Durability: Sync})
			results <- result{res, err}
		}()
	}
	time.Sleep(50 * time.Millisecond) // most of them queue behind the held group
	g.let()
	r := <-first
	if r.err != nil {
		t.Fatalf("the append of the group before the failed one: %v", r.err)
	}
	if ev, err := db.Get(ctx, r.res.IDs[0]); err != nil || ev.Seq != before.Count+1 {
		t.Fatalf("Get of the first group's event: #%d %v, want #%d", ev.Seq, err, before.Count+1)
	}
	for range later {
		select {
		case r := <-results:
			if !errors.Is(r.err, segment.ErrFailed) {
				t.Errorf("an append after the failed fsync: %v, want ErrFailed", r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an append of the failed group never returned")
		}
	}
	info, err := db.Ledger("l")
	if err != nil || info.Count != before.Count+1 || info.Head != r.res.IDs[0] {
		t.Fatalf("after the failed group: count %d head %s (%v), want %d %s", info.Count, info.Head, err, before.Count+1, r.res.IDs[0])
	}
	n := 0
	for _, err := range db.Scan(ctx, "l", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if uint64(n) != before.Count+1 {
		t.Fatalf("Scan after the failed group: %d events, want %d", n, before.Count+1)
	}
}
