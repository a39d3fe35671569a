package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReplicatedGetByIDSeesOnlyStored: in Replicated mode Get by ID, like
// every other read, does not show an event committed locally whose chunk
// the store has not stored yet (StreamHead would not show it: a client
// seeing it by ID, then not as its stream's head, saw the ledger go
// back); once stored, it does.
func TestReplicatedGetByIDSeesOnlyStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	db := openRepl(t, t.TempDir(), st, Replicated)
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WaitReplicated(ctx, info.Head); err != nil {
		t.Fatal(err)
	}
	st.holdChunks()
	done := make(chan error, 1)
	go func() {
		_, err := appendOne(ctx, db, "cash", 1)
		done <- err
	}()
	db.mu.RLock()
	dl := db.byID[info.ID]
	db.mu.RUnlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if id, err := dl.idAt(2); err == nil {
			if _, err := db.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of #2, in the index but not stored: %v, want ErrNotFound", err)
			}
			if h, err := db.StreamHead(ctx, "cash", "acct", "a1"); err != nil || !h.ID.IsZero() {
				t.Fatalf("StreamHead while #2 is not stored: %+v, %v", h, err)
			}
			st.release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ev, err := db.Get(ctx, id)
			if err != nil || ev.Seq != 2 {
				t.Fatalf("Get of #2 once stored: %+v, %v", ev, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("#2 never reached the index")
		}
		time.Sleep(time.Millisecond)
	}
}
