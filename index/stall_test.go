package index

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fullFS fails the creation of Pebble's tables with ENOSPC while full is
// set: Pebble's flushes fail, and it retries them for ever.
type fullFS struct {
	vfs.FS
	full *atomic.Bool
}

func (fs fullFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.full.Load() && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")) {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return fs.FS.Create(name, cat)
}

// TestCallStalledAfterItBegan: a call into Pebble that begins while no
// flush runs or fails, and that Pebble holds back only later, once the
// disk is full, returns an error matching ErrFailed and ENOSPC rather
// than wait for ever. The call used to run on the caller's goroutine
// then, with nothing to give up on it: on a loaded machine a commit could
// see no flush running, lose the processor, and enter Pebble's write
// stall once the next flush had begun and failed (engine's
// TestIndexDiskFullNoHang hung so, now and then). Here the call's f waits
// between the start of the call and its Apply, as a goroutine that lost
// the processor there would.
func TestCallStalledAfterItBegan(t *testing.T) {
	t.Parallel()
	var full atomic.Bool
	// MemTableSize is its minimum, 4 MiB: CacheSize/4.
	x := openAt(t, "idx", Options{FS: fullFS{vfs.NewMem(), &full}, CacheSize: 16 << 20})
	t.Cleanup(func() { full.Store(false) }) // before Close: the flushes succeed again

	value := make([]byte, 64<<10)
	key := 0
	batch := func(size int) *pebble.Batch {
		pb := x.db.NewBatch()
		for range size / len(value) {
			key++
			if err := pb.Set(fmt.Appendf(nil, "stall-%08d", key), value, nil); err != nil {
				t.Fatal(err)
			}
		}
		return pb
	}
	if x.flushErr.Load() != nil {
		t.Fatal("a flush failed in a new index")
	}

	// Larger than half a memtable: Pebble's Apply makes room for it, and
	// stalls if the memtables are full.
	big := batch(3 << 20)
	began, release := make(chan struct{}), make(chan struct{})
	applied := make(chan struct{})
	callErr := make(chan error, 1)
	go func() {
		callErr <- x.call("commit", func() error {
			close(began)
			<-release
			defer close(applied)
			return x.db.Apply(big, pebble.NoSync)
		})
	}()
	<-began

	// The disk fills: the flushes fail from now on, and the memtables
	// fill up to Pebble's limit, 2 (MemTableStopWritesThreshold) of 4
	// MiB, with no write held back yet.
	full.Store(true)
	for {
		m := x.db.Metrics()
		if m.MemTable.Size >= 2*(4<<20) {
			break
		}
		if err := x.db.Apply(batch(1<<20), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	close(release)

	var err error
	select {
	case err = <-callErr:
	case <-time.After(time.Minute):
		t.Fatal("a call held back by Pebble while its flushes fail did not return in a minute")
	}
	select {
	case <-applied:
		t.Fatalf("the large batch was applied (%v): Pebble did not hold it back", err)
	default:
	}
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("call held back by Pebble while its flushes fail: %v, want ErrFailed and ENOSPC", err)
	}
	t.Logf("call: %v", err)

	// Space is back: the flush succeeds and Pebble applies the batch. The
	// index stays failed, and its Close says so.
	full.Store(false)
	<-applied
	for {
		x.mu.Lock()
		stuck := x.stuck
		x.mu.Unlock()
		if stuck == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := x.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close of the failed index: %v, want ErrFailed", err)
	}
}
