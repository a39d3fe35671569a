package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestOpenRefusesTailChunkAtAnotherPlace: someone with write access to
// the bucket rewrites the last chunk's header so that its records sit at
// another offset (its CRC recomputed; the last chunk, so no hash chain
// names it). The tail's event and root are the directory's, but the
// writer must not build on it: its fence would say that the next records
// go where the directory does not put them, and no restore would accept
// the bucket again. Open refuses the ledger, naming the chunk.
func TestOpenRefusesTailChunkAtAnotherPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	dir, o, info := closedReplicatedLedger(t, st, 5)
	wal := listAll(t, st, replica.LedgerPrefix(info.ID)+"wal/")
	var lastKey string
	var last replica.Chunk
	for i := len(wal) - 1; i >= 0; i-- {
		obj, err := st.Get(ctx, wal[i])
		if err != nil {
			t.Fatal(err)
		}
		c, err := replica.DecodeChunk(wal[i], info.ID, obj.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Fence() {
			lastKey, last = wal[i], c
			break
		}
		if err := st.Delete(ctx, wal[i]); err != nil { // the fences after it: the data chunk is the last
			t.Fatal(err)
		}
	}
	last.Offset += 8
	if _, err := st.Put(ctx, lastKey, last.Encode(), store.Condition{}); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	why, refused := db.Unavailable()["cash"]
	if !refused || !errors.Is(why, ErrCorruption) || !strings.Contains(why.Error(), lastKey) {
		t.Fatalf("open with the last chunk's records moved: refused %v: %v; want ErrCorruption naming %s", refused, why, lastKey)
	}
}
