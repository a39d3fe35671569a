package engine

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestReadOnlyCloseWhileIndexAndFollowRace: Close of a read-only DB,
// waiting for its readers, while a Scan's roIndex holds ro.mu and
// followAll, a reader, waits for ro.mu, returns. The interleaving is
// forced (Options.roHooks): followAll has entered its read and stops
// before ro.mu; roIndex takes ro.mu and stops; Close begins and waits
// for the readers (stopReads: a writer of readers.mu is pending, which
// holds off every new read); then both go on. roIndex took its read
// before ro.mu, as followAll does, so it finishes and lets ro.mu go;
// taken the other way round (ro.mu, then enterRead), its enterRead
// would wait behind Close, which waits for followAll, which waits for
// ro.mu: a deadlock, which this test reports with every goroutine's
// stack rather than hang.
func TestReadOnlyCloseWhileIndexAndFollowRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateLedger(ctx, LedgerSpec{Name: "shop"}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := appendOne(ctx, w, "shop", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	followIn, followGo := make(chan struct{}), make(chan struct{})
	indexIn, indexGo := make(chan struct{}), make(chan struct{})
	var followOnce, indexOnce sync.Once
	hooks := &readOnlyHooks{
		followAllRead: func() {
			followOnce.Do(func() {
				close(followIn)
				<-followGo
			})
		},
		roIndexLocked: func() {
			indexOnce.Do(func() {
				close(indexIn)
				<-indexGo
			})
		},
	}
	// FollowInterval at its most: followAll runs only when the test
	// calls it.
	ro, err := OpenReadOnly(dir, &Options{FollowInterval: time.Hour, TempDir: t.TempDir(), roHooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	const patience = 10 * time.Second
	stuck := func(what string) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("%s after %s: a deadlock; every goroutine:\n%s", what, patience, buf[:n])
	}
	wait := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(patience):
			stuck(what)
		}
	}

	followed := make(chan struct{})
	go func() {
		defer close(followed)
		ro.followAll()
	}()
	wait(followIn, "followAll did not enter its read")
	scanned := make(chan error, 1)
	go func() {
		var last error
		for _, err := range ro.Scan(ctx, "shop", ScanOptions{}) {
			if err != nil {
				last = err
				break
			}
		}
		scanned <- last
	}()
	wait(indexIn, "Scan's roIndex did not take ro.mu")
	closed := make(chan error, 1)
	go func() { closed <- ro.Close() }()
	// Close waits for the readers: a writer of readers.mu is pending
	// once a read can no longer be entered.
	for deadline := time.Now().Add(patience); ro.readers.mu.TryRLock(); {
		ro.readers.mu.RUnlock()
		if time.Now().After(deadline) {
			stuck("Close did not begin to wait for the readers")
		}
		time.Sleep(time.Millisecond)
	}
	close(indexGo)
	close(followGo)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(patience):
		stuck("Close did not return")
	}
	wait(followed, "followAll did not return")
	select {
	case err := <-scanned:
		t.Logf("the Scan ended with %v", err)
	case <-time.After(patience):
		stuck("the Scan did not end")
	}
}
