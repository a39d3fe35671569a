package s3test

import (
	"context"
	"errors"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestFaultProxyListBodyCutShort: a List whose answer is cut off after
// its status line is retried, like a Get's.
func TestFaultProxyListBodyCutShort(t *testing.T) {
	p := startFaultProxy(t, 0, 0)
	s := openProxiedStore(t, p)
	ctx := context.Background()
	if _, err := s.Put(ctx, "wal/1", []byte("chunk"), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	p.script = []fault{resetMidBody}
	page, err := s.List(ctx, "wal/", "", 0)
	if err != nil || len(page.Objects) != 1 {
		t.Fatalf("List after a body cut short = %+v, %v; want wal/1", page, err)
	}
}

// TestFaultProxyConflictAfterLostCreate: a create lands but its answer is
// lost, and the retry meets a 409. The error must say that the earlier
// attempt may have been applied: the caller's next create would meet its
// own object and take the 412 for a fence.
func TestFaultProxyConflictAfterLostCreate(t *testing.T) {
	p := startFaultProxy(t, 0, 0)
	s := openProxiedStore(t, p)
	p.script = []fault{lostResponse, fail409}
	_, err := s.Put(context.Background(), "wal/1", []byte("chunk"), store.CreateOnly())
	if !errors.Is(err, store.ErrConflict) || !errors.Is(err, store.ErrMaybeApplied) {
		t.Fatalf("Put = %v; want ErrConflict with ErrMaybeApplied", err)
	}
}
