package segment

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// gateFS is a file system whose segment files' fsyncs wait, while the gate
// is shut, until it is opened: a slow disk under the interval syncer.
type gateFS struct {
	vfs.FS
	mu      sync.Mutex
	shut    chan struct{} // nil: open
	waiting chan struct{} // receives once per fsync that waits
}

func (fs *gateFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return &gateFile{File: f, fs: fs}, nil
}

func (fs *gateFS) gate() chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.shut
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (f *gateFile) Sync() error {
	if g := f.fs.gate(); g != nil {
		f.fs.waiting <- struct{}{}
		<-g
	}
	return f.File.Sync()
}

// TestIntervalAppendDuringBackgroundSync: in Interval mode an append
// returns after its write, without waiting for an fsync, and that holds
// while the interval syncer's fsync is running: the syncer does not hold
// the segment's write lock during its fsync. Once the fsync ends, the
// durable head is what was written before it began, and a later fsync
// covers the rest.
func TestIntervalAppendDuringBackgroundSync(t *testing.T) {
	t.Parallel()
	fs := &gateFS{FS: vfs.NewMem(), waiting: make(chan struct{}, 16)}
	l := newTestLog(t, fs, "led", Options{Durability: Interval, SyncInterval: time.Millisecond})
	defer l.Close()

	first := &Batch{Entries: []Entry{entry(1)}}
	shut := make(chan struct{})
	fs.mu.Lock()
	fs.shut = shut
	fs.mu.Unlock()
	if err := l.Append(first); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fs.waiting: // the syncer's fsync of first has begun, and waits
	case <-time.After(10 * time.Second):
		t.Fatal("the interval syncer did not fsync")
	}

	done := make(chan error, 1)
	second := &Batch{Entries: []Entry{entry(2), entry(3)}}
	go func() { done <- l.Append(second) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(shut)
		t.Fatal("an Interval append waited for the interval syncer's fsync")
	}
	if got := l.Head().Seq; got != second.FirstSeq+1 {
		t.Fatalf("head at #%d after the second append, want #%d", got, second.FirstSeq+1)
	}
	if d := l.Durable().Seq; d >= first.FirstSeq {
		t.Fatalf("durable at #%d while the fsync of #%d has not returned", d, first.FirstSeq)
	}

	fs.mu.Lock()
	fs.shut = nil
	fs.mu.Unlock()
	close(shut)
	deadline := time.Now().Add(10 * time.Second)
	for l.Durable().Seq < second.FirstSeq+1 {
		if time.Now().After(deadline) {
			t.Fatalf("durable at #%d, the syncer never covered #%d", l.Durable().Seq, second.FirstSeq+1)
		}
		time.Sleep(time.Millisecond)
	}
}
