package index

import (
	"errors"
	"testing"
)

// TestFlushState: a flush of what was committed counts and adds a
// sublevel to level 0, which Pebble leaves alone; a closed index reports
// ErrClosed.
func TestFlushState(t *testing.T) {
	x := openAt(t, t.TempDir(), Options{})
	n0, sub, err := x.FlushState()
	if err != nil || sub != 0 {
		t.Fatalf("new index: %d flushes, %d sublevels, %v", n0, sub, err)
	}
	add(t, x, ledgerA, event{seq: 1, entity: "e", key: "k", event: "n"}, event{seq: 2, entity: "e", key: "k", event: "n"})
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	n1, sub, err := x.FlushState()
	if err != nil || n1 != n0+1 || sub != 1 {
		t.Fatalf("after a flush: %d flushes (was %d), %d sublevels, %v; want one more, 1", n1, n0, sub, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.FlushState(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v, want ErrClosed", err)
	}
}
