package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// slowCheckpoints is a store whose checkpoint uploads take a while.
type slowCheckpoints struct{ store.Store }

func (s slowCheckpoints) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	if strings.HasSuffix(key, "/checkpoint") {
		time.Sleep(300 * time.Millisecond)
	}
	return s.Store.Put(ctx, key, data, cond)
}

// TestReplicatedCreateLedgerStoresItsCheckpoint: in Replicated mode
// CreateLedger returns only once the bucket holds the new ledger's
// signed checkpoint, so that a disk lost right after its first
// acknowledged append can be restored (a restore needs a ledger's
// checkpoint); a slow checkpoint upload makes CreateLedger wait for it.
func TestReplicatedCreateLedgerStoresItsCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := slowCheckpoints{store.NewMemory()}
	db := openRepl(t, t.TempDir(), st, Replicated)
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, replica.CheckpointKey(info.ID)); err != nil {
		t.Fatalf("CreateLedger returned and the bucket's checkpoint: %v", err)
	}
}
