package segment

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// waitQueued waits until n appends are queued behind the committing one.
func waitQueued(t *testing.T, l *Log, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		got := len(l.queue)
		l.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// result waits for an append's error, failing the test if none comes
// within 10 s (the append would hang).
func result(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no return 10 s after its context ended", what)
		return nil
	}
}

// TestAppendContextEndsWaits: an append whose context ends while it waits
// its turn behind a commit leaves the queue and returns ctx's error,
// saying nothing was appended, and nothing of it is; one whose context
// ends while another append commits its group returns ctx's error at
// once, saying it may have been appended, and the group's commit goes on
// and appends it. No goroutine is left behind.
func TestAppendContextEndsWaits(t *testing.T) {
	before := runtime.NumGoroutine()
	// Each group (after the genesis) waits in the written hook (during
	// its fsync) for a token of release: the committing append holds the
	// lead meanwhile.
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var hold atomic.Bool
	l := newTestLog(t, vfs.Default, t.TempDir(), Options{Hooks: Hooks{Written: func([]*Batch) {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
	}}})
	defer l.Close()
	hold.Store(true)
	start := func(ctx context.Context, b *Batch) <-chan error {
		errc := make(chan error, 1)
		go func() { errc <- l.AppendContext(ctx, b) }()
		return errc
	}
	genesis := l.Head().Seq

	a := start(context.Background(), &Batch{Entries: []Entry{entry(1)}})
	<-entered // a commits its group, and waits in the hook

	// Queued: cancelled before any group took it.
	ctx, cancel := context.WithCancel(context.Background())
	b := start(ctx, &Batch{Entries: []Entry{entry(2)}})
	waitQueued(t, l, 1)
	cancel()
	err := result(t, "a queued append", b)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was appended") {
		t.Fatalf("queued append cancelled: %v, want context.Canceled and nothing appended", err)
	}
	waitQueued(t, l, 0)

	// In a group being committed: c1 leads the next group, c2 is in it.
	c1 := start(context.Background(), &Batch{Entries: []Entry{entry(3)}})
	waitQueued(t, l, 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2batch := &Batch{Entries: []Entry{entry(4)}}
	c2 := start(ctx2, c2batch)
	waitQueued(t, l, 2)
	release <- struct{}{} // a's group is done; c1 takes the lead with c2
	if err := result(t, "the first append", a); err != nil {
		t.Fatal(err)
	}
	<-entered // c1's group waits in the hook
	cancel2()
	err = result(t, "an append in a group being committed", c2)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may have been appended") {
		t.Fatalf("append cancelled in a group being committed: %v, want context.Canceled and may have been appended", err)
	}
	release <- struct{}{}
	if err := result(t, "the group's leader", c1); err != nil {
		t.Fatal(err)
	}
	// a, c1 and c2 were appended; b was not.
	if h := l.Head(); h.Seq != genesis+3 || c2batch.FirstSeq != genesis+3 {
		t.Fatalf("head #%d, the cancelled group member at #%d: want #%d for both", h.Seq, c2batch.FirstSeq, genesis+3)
	}
	hold.Store(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestAppendContextHandedLead: an append whose context ends after the
// lead was handed to it, before it took it, hands the lead on to the
// next append queued (which is woken) and appends nothing; with none
// queued, the Log is idle.
func TestAppendContextHandedLead(t *testing.T) {
	t.Parallel()
	l := newTestLog(t, vfs.Default, t.TempDir(), Options{})
	defer l.Close()
	p := &pending{b: &Batch{Entries: []Entry{entry(1)}}, wake: make(chan struct{}, 1)}
	q := &pending{b: &Batch{Entries: []Entry{entry(2)}}, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	l.leading = true
	l.queue = append(l.queue, p, q)
	if l.passLead() != p { // as the committing append does when it is done
		t.Fatal("the lead was not handed to the first append queued")
	}
	l.mu.Unlock()
	if err := l.abandon(p, context.Canceled); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was appended") {
		t.Fatalf("abandon after the lead was handed: %v", err)
	}
	select {
	case <-q.wake:
	default:
		t.Fatal("the next append queued was not woken")
	}
	l.mu.Lock()
	if !q.lead || !l.leading || len(l.queue) != 0 {
		t.Fatalf("the lead was not handed on: next has it %v, leading %v, %d queued", q.lead, l.leading, len(l.queue))
	}
	l.mu.Unlock()
	// q, in turn, abandons it with none queued: the Log is idle.
	if err := l.abandon(q, context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	l.mu.Lock()
	leading := l.leading
	l.mu.Unlock()
	if leading {
		t.Fatal("the Log still has a leader")
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(3)}}); err != nil {
		t.Fatal(err)
	}
	if h := l.Head(); h.Seq != 2 {
		t.Fatalf("head #%d, want #2 (the genesis and the last append)", h.Seq)
	}
}
