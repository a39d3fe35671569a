package segment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// faultWorkload is a scripted workload: create a ledger, append batches
// in Sync and None mode across several segment rotations, close, reopen,
// append more. It returns the IDs of every acknowledged append, in order,
// and the errors it saw. It stops at the first failed create or open.
func faultWorkload(fs vfs.FS, test testHooks) (acked []eventid.ID, errs []error) {
	o := Options{FS: fs, Ledger: testLedger(), SegmentSize: 2 << 10, test: test}
	l, err := Create("led", o)
	if err != nil {
		return nil, []error{err}
	}
	appendSome := func(l *Log, from, n int) {
		for i := from; i < from+n; i++ {
			b := &Batch{}
			if i == 0 {
				b.Entries = append(b.Entries, genesisEntry)
			}
			for j := range i%4 + 1 {
				b.Entries = append(b.Entries, entry(i*10+j))
			}
			if i%3 == 2 {
				b.Durability = None
			}
			if err := l.Append(b); err != nil {
				errs = append(errs, err)
				continue
			}
			acked = append(acked, b.IDs...)
		}
	}
	appendSome(l, 0, 12)
	if err := l.Close(); err != nil {
		errs = append(errs, err)
	}
	l, _, err = Open("led", o, Head{})
	if err != nil {
		return acked, append(errs, err)
	}
	appendSome(l, 12, 6)
	if err := l.Close(); err != nil {
		errs = append(errs, err)
	}
	return acked, errs
}

// TestFaultAtEveryOperation fails each I/O operation of the workload in
// turn, with each kind of fault. The failing call must return an error
// (never panic), and a reopen without faults must find a valid ledger
// holding exactly the acknowledged records, in order.
func TestFaultAtEveryOperation(t *testing.T) {
	t.Parallel()
	clean := faultfs.Wrap(vfs.NewMem())
	// The writes of zeros ahead of the records (zeroFill), by index: a
	// failed one is ignored by design.
	zeroWrites := map[int64]bool{}
	// The calls that stamp a sealed or closed segment (stampWritten): a
	// failed one leaves the stamp out, by design.
	stampOps := map[int64]bool{}
	var stampFrom int64
	stamp := func(done bool) {
		if !done {
			stampFrom = clean.Count()
			return
		}
		for i := stampFrom; i < clean.Count(); i++ {
			stampOps[i] = true
		}
	}
	acked, errs := faultWorkload(clean, testHooks{zeroFill: func(off, n int64) { zeroWrites[clean.Count()] = true }, stamp: stamp})
	if len(zeroWrites) == 0 {
		t.Fatal("the workload writes no zeros ahead of its records")
	}
	if len(errs) > 0 {
		t.Fatalf("the workload fails without faults: %v", errs)
	}
	total := clean.Count()
	t.Logf("%d operations in the workload, %d records", total, len(acked))
	injected := 0
	for _, fault := range []faultfs.Fault{faultfs.EIO, faultfs.ENOSPC, faultfs.ShortWrite} {
		for i := range total {
			name := fmt.Sprintf("%v at op %d", fault, i)
			inner := vfs.NewMem()
			fs := faultfs.Wrap(inner)
			fs.SetInjector(faultfs.AtIndex(i, fault))
			acked, errs := faultWorkload(fs, testHooks{})
			hit := fs.Injected()
			if len(hit) == 0 {
				continue // the workload took another path and ended earlier
			}
			injected++
			zeroWrite := hit[0].Kind == faultfs.WriteAt && zeroWrites[hit[0].Index]
			if len(errs) == 0 && !benignFault(hit[0]) && !zeroWrite && !stampOps[hit[0].Index] {
				t.Fatalf("%s (%v): no call reported the fault", name, hit[0])
			}
			for _, err := range errs {
				// After a failed genesis append, the next appends are not
				// a genesis: ErrNotGenesis is the right answer to them.
				if !errors.Is(err, faultfs.ErrInjected) && !errors.Is(err, ErrFailed) && !errors.Is(err, ErrNoLog) && !errors.Is(err, ErrNotGenesis) {
					t.Fatalf("%s (%v): an error that is not the fault: %v", name, hit[0], err)
				}
			}
			checkExactly(t, name+fmt.Sprintf(" (%v)", hit[0]), inner, acked)
		}
	}
	t.Logf("%d faults injected", injected)
}

// benignFault reports whether a fault at op can go unreported by design: a
// failed Close of a read handle loses nothing, nor does a failed
// Preallocate (the write that follows allocates its blocks).
func benignFault(op faultfs.Op) bool {
	return op.Kind == faultfs.Close || op.Kind == faultfs.Read || op.Kind == faultfs.ReadAt || op.Kind == faultfs.Preallocate
}

// checkExactly reopens the ledger on fs without faults and requires
// exactly the records of acked (after the genesis), in order.
func checkExactly(t *testing.T, name string, fs vfs.FS, acked []eventid.ID) {
	t.Helper()
	l, _, err := Open("led", Options{FS: fs, Ledger: testLedger(), SegmentSize: 2 << 10}, Head{})
	if errors.Is(err, ErrNoLog) && len(acked) == 0 {
		return
	}
	if err != nil {
		t.Fatalf("%s: reopen: %v", name, err)
	}
	defer l.Close()
	var got []eventid.ID
	it := l.NewIterator(1, FirstOffset)
	for it.Next() {
		got = append(got, it.Record().ID)
	}
	if it.Err() != nil {
		t.Fatalf("%s: iterate: %v", name, it.Err())
	}
	if len(got) != len(acked) {
		t.Fatalf("%s: %d records after reopen, %d acknowledged", name, len(got), len(acked))
	}
	for i := range got {
		if got[i] != acked[i] {
			t.Fatalf("%s: record %d is %s, acknowledged %s", name, i, got[i], acked[i])
		}
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatalf("%s: Verify: %v", name, err)
	}
}

// TestFailedSyncRefusesLaterAppends: after a failed fsync the Log must
// not report any later append as durable (the fsync-gate problem).
func TestFailedSyncRefusesLaterAppends(t *testing.T) {
	t.Parallel()
	inner := vfs.NewMem()
	fs := faultfs.Wrap(inner)
	l := newTestLog(t, fs, "led", Options{})
	before := l.Head()
	fs.SetInjector(faultfs.OnKind(faultfs.Sync, 0, faultfs.EIO))
	if err := l.Append(&Batch{Entries: []Entry{entry(1)}}); !errors.Is(err, faultfs.ErrInjected) || !errors.Is(err, ErrFailed) {
		t.Fatalf("append with a failed fsync: %v", err)
	}
	fs.SetInjector(nil)
	if err := l.Append(&Batch{Entries: []Entry{entry(2)}}); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed fsync: %v, want ErrFailed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync after a failed fsync: %v, want ErrFailed", err)
	}
	if l.Head() != before {
		t.Fatalf("head moved to %v after failed appends", l.Head())
	}
	l.Close()
	checkExactly(t, "after a failed fsync", inner, []eventid.ID{before.ID})
}

// TestDiskFullThenFreed: while the disk is full appends fail cleanly and
// reads go on; once space is back, appends continue on a valid chain.
func TestDiskFullThenFreed(t *testing.T) {
	t.Parallel()
	inner := vfs.NewMem()
	fs := faultfs.Wrap(inner)
	l := newTestLog(t, fs, "led", Options{SegmentSize: 2 << 10})
	acked := []eventid.ID{l.Head().ID}
	for i := range 5 {
		b := &Batch{Entries: []Entry{entry(i)}}
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, b.IDs...)
	}
	// Every write fails, as on a full disk (a new segment's header too);
	// except the
	// copy that stands in for ftruncate on this memory file system (its
	// files have no Truncate), since a real ftruncate needs no space.
	fs.SetInjector(faultfs.InjectorFunc(func(op faultfs.Op) faultfs.Fault {
		if strings.HasSuffix(op.Path, ".tmp") {
			return faultfs.NoFault
		}
		switch op.Kind {
		case faultfs.WriteAt:
			return faultfs.ShortWrite
		case faultfs.Write, faultfs.Create:
			return faultfs.ENOSPC
		}
		return faultfs.NoFault
	}))
	for i := range 20 {
		if err := l.Append(&Batch{Entries: []Entry{entry(100 + i)}}); err == nil {
			t.Fatalf("append %d succeeded on a full disk", i)
		} else if errors.Is(err, ErrFailed) {
			t.Fatalf("a full disk failed the log: %v", err)
		}
		if _, err := l.ReadAt(l.Head().Loc); err != nil {
			t.Fatalf("read while the disk is full: %v", err)
		}
	}
	fs.SetInjector(nil)
	for i := range 20 {
		b := &Batch{Entries: []Entry{entry(200 + i)}}
		if err := l.Append(b); err != nil {
			t.Fatalf("append after space came back: %v", err)
		}
		acked = append(acked, b.IDs...)
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	checkExactly(t, "after a full disk", inner, acked)
}

// TestPreparedAndAborted: Hooks.Prepared runs for each batch after its
// IDs are set and before the next batch's Check; when the write fails,
// Hooks.Aborted runs for the prepared batches and the Log goes on.
func TestPreparedAndAborted(t *testing.T) {
	t.Parallel()
	fs := faultfs.Wrap(vfs.NewMem())
	var events []string
	l := newTestLog(t, fs, "led", Options{Hooks: Hooks{
		Prepared: func(b *Batch) {
			events = append(events, fmt.Sprintf("prepared #%d %v", b.FirstSeq, !b.IDs[0].IsZero()))
		},
		Aborted: func(b *Batch) { events = append(events, fmt.Sprintf("aborted #%d", b.FirstSeq)) },
	}})
	defer l.Close()
	events = events[:0] // the genesis batch's
	b := &Batch{Entries: []Entry{entry(1)}}
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	fs.SetInjector(faultfs.OnKind(faultfs.WriteAt, 0, faultfs.EIO))
	if err := l.Append(b); !errors.Is(err, faultfs.ErrInjected) {
		t.Fatalf("append with a failed write: %v", err)
	}
	fs.SetInjector(nil)
	if err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	want := "[prepared #2 true prepared #3 true aborted #3 prepared #3 true]"
	if got := fmt.Sprint(events); got != want {
		t.Fatalf("hooks ran %s, want %s", got, want)
	}
}
