package segment

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// gateFS holds the next fsync of a file (Sync or SyncData) once armed:
// the fsync waits, before it runs, until the test releases it. It wraps a
// faultfs.FS, so the fsync then gets the fault that the injector gives it.
type gateFS struct {
	vfs.FS
	gate *syncGate
}

type syncGate struct {
	mu      sync.Mutex
	armed   bool
	reached chan struct{} // closed when the held fsync begins
	release chan struct{} // closed by the test to let it run
}

func newGateFS(inner vfs.FS) gateFS {
	return gateFS{FS: inner, gate: &syncGate{reached: make(chan struct{}), release: make(chan struct{})}}
}

// arm holds the next fsync.
func (g *syncGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *syncGate) pass() {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.reached)
		<-g.release
	}
}

func (fs gateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return f, err
	}
	return gateFile{File: f, gate: fs.gate}, nil
}

type gateFile struct {
	vfs.File
	gate *syncGate
}

func (f gateFile) Sync() error {
	f.gate.pass()
	return f.File.Sync()
}

func (f gateFile) SyncData() error {
	f.gate.pass()
	return f.File.SyncData()
}

// holdFirstFsync appends a (Sync) with its group's fsync held, then
// appends bs concurrently and waits until they are written behind it, as
// later groups in the air (the pipeline: a group is written while the
// group before it is in its fsync), and releases a's fsync. It returns
// the errors of bs's Appends, in bs's order, and of a's.
func holdFirstFsync(t *testing.T, l *Log, gate *syncGate, a *Batch, bs []*Batch) ([]error, error) {
	t.Helper()
	gate.arm()
	aErr := make(chan error, 1)
	go func() { aErr <- l.Append(a) }()
	select {
	case <-gate.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group never reached its fsync")
	}
	errs := make([]chan error, len(bs))
	for i, b := range bs {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- l.Append(b) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.ioMu.Lock()
		n := 0
		for _, f := range l.flights {
			n += len(f.accepted)
		}
		l.ioMu.Unlock()
		if n == 1+len(bs) {
			break
		}
		if time.Now().After(deadline) {
			close(gate.release)
			t.Fatalf("%d batches written while the first group's fsync ran, want %d", n, 1+len(bs))
		}
		time.Sleep(time.Millisecond)
	}
	close(gate.release)
	out := make([]error, len(bs))
	for i := range bs {
		out[i] = <-errs[i]
	}
	return out, <-aErr
}

// TestFailedFsyncAbortsLaterGroups: while a group's fsync runs, two later
// groups are written behind it; the first fsync fails. None of the three
// is published or passed to the committed hook, every appender gets the
// failure, the prepared batches are Aborted last first, the segment is
// cut where the first group began, and the next Open has none of them.
func TestFailedFsyncAbortsLaterGroups(t *testing.T) {
	inner := vfs.NewMem()
	ffs := faultfs.Wrap(inner)
	fs := newGateFS(ffs)
	l := newTestLog(t, fs, "led", Options{})
	before := l.Head()
	var mu sync.Mutex
	var hooked, aborted []*Batch
	l.SetCommitted(func(group []*Batch) {
		mu.Lock()
		hooked = append(hooked, group...)
		mu.Unlock()
	})
	onAbort := func(b *Batch) {
		mu.Lock()
		aborted = append(aborted, b)
		mu.Unlock()
	}
	a := &Batch{Entries: []Entry{entry(1)}, Durability: Sync, Aborted: onAbort}
	bs := []*Batch{
		{Entries: []Entry{entry(2)}, Durability: Sync, Aborted: onAbort},
		{Entries: []Entry{entry(3), entry(4)}, Durability: Sync, Aborted: onAbort},
	}
	ffs.SetInjector(faultfs.OnKind(faultfs.Sync, 0, faultfs.EIO))
	bErrs, aErr := holdFirstFsync(t, l, fs.gate, a, bs)
	for i, err := range append([]error{aErr}, bErrs...) {
		if !errors.Is(err, ErrFailed) || !errors.Is(err, faultfs.ErrInjected) {
			t.Errorf("append %d: %v, want the failed fsync's ErrFailed", i, err)
		}
	}
	mu.Lock()
	if len(hooked) != 0 {
		t.Errorf("the committed hook saw %d batches of failed groups", len(hooked))
	}
	var order []uint64
	for _, b := range aborted {
		order = append(order, b.FirstSeq)
	}
	mu.Unlock()
	if len(order) != 3 || !slices.IsSortedFunc(order, func(x, y uint64) int { return int(y) - int(x) }) || order[2] != a.FirstSeq {
		t.Errorf("batches aborted at #%v, want the three, last first", order)
	}
	if h := l.Head(); h != before {
		t.Errorf("head %+v after the failed groups, want %+v", h, before)
	}
	if err := l.Append(&Batch{Entries: []Entry{entry(5)}}); !errors.Is(err, ErrFailed) {
		t.Errorf("append after the failed fsync: %v, want ErrFailed", err)
	}
	l.Close()
	ffs.SetInjector(nil)
	checkExactly(t, "after a failed fsync with later groups in the air", inner, []eventid.ID{before.ID})
}

// TestPipelinedGroupsCommitInOrder: groups written while the group before
// them is in its fsync are committed after it, in order, each passed once
// to the committed hook, and the next Open has them all.
func TestPipelinedGroupsCommitInOrder(t *testing.T) {
	inner := vfs.NewMem()
	fs := newGateFS(inner)
	l := newTestLog(t, fs, "led", Options{})
	genesis := l.Head().ID
	var mu sync.Mutex
	var hooked []uint64
	l.SetCommitted(func(group []*Batch) {
		mu.Lock()
		for _, b := range group {
			hooked = append(hooked, b.FirstSeq)
		}
		mu.Unlock()
	})
	a := &Batch{Entries: []Entry{entry(1)}, Durability: Sync}
	bs := []*Batch{{Entries: []Entry{entry(2)}, Durability: Sync}, {Entries: []Entry{entry(3)}, Durability: None}}
	bErrs, aErr := holdFirstFsync(t, l, fs.gate, a, bs)
	if aErr != nil || bErrs[0] != nil || bErrs[1] != nil {
		t.Fatalf("appends: %v, %v", aErr, bErrs)
	}
	mu.Lock()
	got := slices.Clone(hooked)
	mu.Unlock()
	if want := []uint64{2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("committed hook saw #%v, want #%v: each batch once, in commit order", got, want)
	}
	if l.Head().Seq != 4 {
		t.Fatalf("head #%d, want #4", l.Head().Seq)
	}
	byseq := append([]*Batch{a}, bs...)
	slices.SortFunc(byseq, func(x, y *Batch) int { return int(x.FirstSeq) - int(y.FirstSeq) })
	ids := []eventid.ID{genesis}
	for _, b := range byseq {
		ids = append(ids, b.IDs...)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkExactly(t, "after pipelined groups", inner, ids)
}
