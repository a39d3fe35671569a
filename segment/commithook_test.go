package segment

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCommittedHookOncePerBatch: with 64 concurrent appenders,
// Hooks.Committed sees every committed batch exactly once, in commit order
// (each group follows the one before it without a gap), and before that
// batch's Append returns: the committing goroutine finishes a group's
// work for all its appenders before it wakes them.
func TestCommittedHookOncePerBatch(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[*Batch]int{}
	next := uint64(1) // the genesis batch's, which the hook sees first
	var order error
	groups, multi := 0, 0
	committed := func(group []*Batch) {
		mu.Lock()
		defer mu.Unlock()
		groups++
		if len(group) > 1 {
			multi++
		}
		for _, b := range group {
			seen[b]++
			if b.FirstSeq != next && order == nil {
				order = errors.New("a batch passed out of sequence order")
			}
			next = b.FirstSeq + uint64(len(b.IDs))
		}
	}
	// The first group after the genesis waits in the written hook (the
	// queue's lock is not held there) until two more appends queue behind
	// it, so that a later group holds more than one batch however fast
	// the file system syncs: a test of groups that relies on timing alone
	// saw none under -race.
	var lp atomic.Pointer[Log]
	var held atomic.Bool
	written := func(group []*Batch) {
		l := lp.Load()
		if l == nil || group[0].FirstSeq <= 1 || held.Swap(true) {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			l.mu.Lock()
			n := len(l.queue)
			l.mu.Unlock()
			if n >= 2 {
				return
			}
		}
	}
	l := newTestLog(t, vfs.Default, t.TempDir(), Options{SegmentSize: 64 << 10, Hooks: Hooks{Written: written, Committed: committed}})
	defer l.Close()
	lp.Store(l)
	const writers, each = 64, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b := &Batch{Entries: []Entry{entry(w*each + i)}}
				if err := l.Append(b); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				n := seen[b]
				mu.Unlock()
				if n != 1 {
					t.Errorf("Append of #%d returned after %d calls of the committed hook with it, want 1", b.FirstSeq, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if order != nil {
		t.Fatal(order)
	}
	if len(seen) != 1+writers*each || next != l.Head().Seq+1 {
		t.Fatalf("the hook saw %d batches up to #%d, %d were appended (head #%d)", len(seen), next-1, writers*each, l.Head().Seq)
	}
	if multi == 0 {
		t.Fatalf("no group of more than one batch in %d groups", groups)
	}
}

// TestCommittedHookNotForFailedGroup: a group whose fsync fails is not
// passed to the committed hook, and each of its appenders gets the error;
// the group committed before it was passed, and its appender succeeded.
func TestCommittedHookNotForFailedGroup(t *testing.T) {
	t.Parallel()
	fs := faultfs.Wrap(vfs.NewMem())
	var mu sync.Mutex
	var hooked []*Batch
	// The first group (a) is held in its fsync, by the written hook, until
	// b and c wait behind it; their group's fsync then fails.
	hold, holding := make(chan struct{}), make(chan struct{})
	l := newTestLog(t, fs, "led", Options{Hooks: Hooks{
		Committed: func(group []*Batch) {
			mu.Lock()
			if group[0].FirstSeq > 1 { // not the genesis batch
				hooked = append(hooked, group...)
			}
			mu.Unlock()
		},
		Written: func(group []*Batch) {
			if len(group) == 1 && group[0].FirstSeq == 2 {
				close(holding)
				<-hold
			}
		},
	}})
	defer l.Close()
	fs.SetInjector(faultfs.OnKind(faultfs.Sync, 1, faultfs.EIO))
	a := &Batch{Entries: []Entry{entry(1)}, Durability: Sync}
	aErr := make(chan error, 1)
	go func() { aErr <- l.Append(a) }()
	select {
	case <-holding: // a's group is in its fsync: b and c queue behind it
	case <-time.After(10 * time.Second):
		t.Fatal("the first group never reached its fsync")
	}
	bs := []*Batch{{Entries: []Entry{entry(2)}, Durability: Sync}, {Entries: []Entry{entry(3), entry(4)}, Durability: Sync}}
	errs := make(chan error, len(bs))
	for _, b := range bs {
		go func() { errs <- l.Append(b) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		n := len(l.queue)
		l.mu.Unlock()
		if n == len(bs) {
			break
		}
		if time.Now().After(deadline) {
			close(hold)
			t.Fatalf("%d appends queued behind the first group, want %d", n, len(bs))
		}
		time.Sleep(time.Millisecond)
	}
	close(hold)
	if err := <-aErr; err != nil {
		t.Fatalf("the first group's append: %v", err)
	}
	for range bs {
		if err := <-errs; !errors.Is(err, ErrFailed) || !errors.Is(err, faultfs.ErrInjected) {
			t.Errorf("an append of the group whose fsync failed: %v, want ErrFailed", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 1 || hooked[0] != a {
		t.Fatalf("the committed hook saw %d batches, want the first group's only", len(hooked))
	}
	if h := l.Head(); h.Seq != a.FirstSeq {
		t.Fatalf("head #%d, want #%d", h.Seq, a.FirstSeq)
	}
}
