package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestReadersSeeOnePrefix: while writers append, a subscriber and a
// scanner each Get every event they are given, and find it: Subscribe and
// Scan walk the segments, which hold committed events before the index
// does; they stop at what the index covers (ledger.visible), so nothing
// they yield is unknown to Get. LedgerInfo.Head is readable too.
func TestReadersSeeOnePrefix(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := db.Append(ctx, "l", []EventInput{order(w*each + i)}, &AppendOptions{Durability: None}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	var missed []string
	var mu sync.Mutex
	miss := func(format string, a ...any) {
		mu.Lock()
		missed = append(missed, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		n := 0
		for ev, err := range db.Subscribe(sctx, "l", SubscribeOptions{}) {
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
				return
			}
			if _, err := db.Get(ctx, ev.ID); err != nil {
				miss("subscribe gave #%d, Get: %v", ev.Seq, err)
			}
			if n++; n == 1+writers*each {
				stop()
			}
		}
	})
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			for ev, err := range db.Scan(ctx, "l", ScanOptions{Reverse: false}) {
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := db.Get(ctx, ev.ID); err != nil {
					miss("scan gave #%d, Get: %v", ev.Seq, err)
				}
			}
			info, err := db.Ledger("l")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := db.Get(ctx, info.Head); err != nil {
				miss("LedgerInfo.Head #%d, Get: %v", info.Count, err)
			}
		}
	})
	readers.Wait()
	if len(missed) > 0 {
		t.Fatalf("%d events yielded that Get did not find, the first: %s", len(missed), missed[0])
	}
}

// TestAwaitIndexedEnds: the wait of a ConditionError for the index ends
// when the index reaches the head the condition saw, at once when that
// head's batch was aborted (the log's head is below it), and when Close
// begins.
func TestAwaitIndexedEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	wait := func(seq uint64) chan struct{} {
		ended := make(chan struct{})
		go func() { l.awaitIndexed(context.Background(), seq); close(ended) }()
		return ended
	}
	expect := func(what string, ended chan struct{}) {
		t.Helper()
		select {
		case <-ended:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the wait did not end", what)
		}
	}
	// Aborted: no event at seq.
	expect("aborted batch", wait(l.log.Head().Seq+1))
	// Indexed already.
	expect("indexed", wait(l.log.Head().Seq))

	// Committed, not yet indexed (as between an appender's commit and
	// its index write): a later index write ends the wait.
	h := l.log.Head().Seq
	l.idxMu.Lock()
	l.indexed = h - 1
	l.idxMu.Unlock()
	ended := wait(h)
	select {
	case <-ended:
		t.Fatal("the wait ended before the index reached the head")
	case <-time.After(20 * time.Millisecond):
	}
	l.idxMu.Lock()
	l.indexed = h
	l.wake()
	l.idxMu.Unlock()
	expect("index reached the head", ended)

	// Close ends it.
	l.idxMu.Lock()
	l.indexed = h - 1
	l.idxMu.Unlock()
	ended = wait(h)
	closeErr := make(chan error, 1)
	go func() { closeErr <- db.Close() }()
	closed = true
	expect("Close", ended)
	<-closeErr
}
