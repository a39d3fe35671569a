package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// listHook is a store whose Lists of chunks run before a hook first.
type listHook struct {
	store.Store
	before func(n int32) // the n-th List of wal/ (from 1)
	n      atomic.Int32
}

func (s *listHook) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if strings.HasSuffix(prefix, "/wal/") {
		s.before(s.n.Add(1))
	}
	return s.Store.List(ctx, prefix, after, limit)
}

// TestTakeoverPullsAgainWhenTheWriterStoredMore: the writer, at work,
// stores more events after the takeover pulled the bucket and before
// it takes the ledger (each of the takeover's first Lists of the
// chunks is preceded by an append of the writer): the take finds the
// bucket ahead (ErrBehind), and Takeover pulls again and takes the
// ledger, not leaving it unavailable; the old writer is fenced and the
// new one holds every acknowledged event.
func TestTakeoverPullsAgainWhenTheWriterStoredMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newReplStore()
	dir := t.TempDir()
	a := openRepl(t, dir, mem, Replicated)
	_, err := a.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	copied := copyDir(t, dir)
	a = openRepl(t, dir, mem, Replicated)
	defer a.Close()
	acked := []AppendResult{}
	for i := range 3 {
		res, err := appendOne(ctx, a, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res)
	}
	hook := &listHook{Store: mem}
	hook.before = func(n int32) {
		if n > 4 {
			return
		}
		res, err := appendOne(ctx, a, "cash", 100+int(n))
		if err != nil {
			t.Errorf("the old writer's append before List %d: %v", n, err)
			return
		}
		acked = append(acked, res)
	}
	b, res, err := Takeover(ctx, copied, replOptions(hook, Replicated))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if u := b.Unavailable(); len(u) > 0 {
		t.Fatalf("after the takeover: unavailable %v", u)
	}
	if len(res) != 1 || res[0].Local != 1 || res[0].Pulled < 5 {
		t.Fatalf("takeover: %+v", res)
	}
	if _, err := appendOne(ctx, a, "cash", 999); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old writer's append after the takeover: %v, want ErrFenced", err)
	}
	if _, err := appendOne(ctx, b, "cash", 1000); err != nil {
		t.Fatal(err)
	}
	for _, r := range acked {
		if _, err := b.Get(ctx, r.IDs[0]); err != nil {
			t.Fatalf("acknowledged #%d on the new writer: %v", r.FirstSeq, err)
		}
	}
}
