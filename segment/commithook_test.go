package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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

// TestRecordsHookSpansAreTheSegmentBytes: the spans that Hooks.Records
// gets, laid at their segments and offsets, are byte for byte the
// segment files' records, in order and without a gap, across rotations
// and with 16 concurrent appenders; each span's first and last records
// are the ones it names.
func TestRecordsHookSpansAreTheSegmentBytes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	type span struct {
		seg     uint64
		off     int64
		b       []byte
		first   uint64
		last    Head
		durable bool
	}
	var spans []span
	records := func(s Span) {
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, span{s.Segment, s.Offset, append([]byte(nil), s.Bytes...), s.FirstSeq, s.Last, s.Durable})
	}
	dir := t.TempDir()
	l := newTestLog(t, vfs.Default, dir, Options{SegmentSize: 16 << 10, Hooks: Hooks{Records: records}})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				d := None
				if i%3 == 0 {
					d = Sync
				}
				if err := l.Append(&Batch{Entries: []Entry{entry(w*100 + i)}, Durability: d}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	files := map[uint64][]byte{}
	for i, s := range spans {
		if s.first != next {
			t.Fatalf("span %d starts at %d, want %d", i, s.first, next)
		}
		if s.last.Seq < s.first {
			t.Fatalf("span %d: last %d before first %d", i, s.last.Seq, s.first)
		}
		if s.durable && l.Durable().Seq < s.last.Seq {
			t.Fatalf("span %d said durable, the Log's durable head is %d", i, l.Durable().Seq)
		}
		f, ok := files[s.seg]
		if !ok {
			var err error
			if f, err = os.ReadFile(filepath.Join(dir, FileName(s.seg))); err != nil {
				t.Fatal(err)
			}
			files[s.seg] = f
		}
		if end := s.off + int64(len(s.b)); end > int64(len(f)) || !bytes.Equal(f[s.off:end], s.b) {
			t.Fatalf("span %d (segment %d at %d, %d bytes) is not the segment's bytes there", i, s.seg, s.off, len(s.b))
		}
		if s.last.Loc.Segment != s.seg || s.last.Loc.End() != s.off+int64(len(s.b)) {
			t.Fatalf("span %d: last record at %+v, span ends at %d", i, s.last.Loc, s.off+int64(len(s.b)))
		}
		if i > 0 {
			p := spans[i-1]
			if p.seg == s.seg && p.off+int64(len(p.b)) != s.off {
				t.Fatalf("span %d at %d does not follow span %d ending at %d", i, s.off, i-1, p.off+int64(len(p.b)))
			}
		}
		next = s.last.Seq + 1
	}
	if next != head.Seq+1 {
		t.Fatalf("spans end at %d, the head is %d", next-1, head.Seq)
	}
	if len(files) < 2 {
		t.Fatalf("the records spanned %d segment(s): the test wants a rotation", len(files))
	}
}
