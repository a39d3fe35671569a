package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestRestoreIgnoresFencedWritersLateChunk: a fenced writer's upload that
// landed after the new writer's last chunk (its slot was free: the new
// writer had nothing more to store, and deletes it only when its own
// uploads reach that slot) is not part of the history
// (docs/replication.md, "A fenced writer's late uploads"): a restore
// ignores it and what follows it, and restores every event of the
// history, instead of refusing a bucket that a correct writer left.
func TestRestoreIgnoresFencedWritersLateChunk(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	last := b.chunks[len(b.chunks)-1]
	late := last
	late.Number, late.Epoch = last.Number+1, 1
	late.FirstSeq, late.LastSeq = last.LastSeq+1, last.LastSeq+uint64(restoreChunkSize)
	late.TreeSize = late.LastSeq
	late.Prev[0] ^= 0xff // the zombie's own chunk before it, which the bucket does not hold
	if _, err := b.st.Put(context.Background(), replica.ChunkKey(s.id, late.Number), late.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	dir, res, err := restoreTo(t, s, b.st, RestoreOptions{})
	if err != nil {
		t.Fatalf("restore with a fenced writer's late chunk after the history: %v", err)
	}
	if res[0].Events != 1500 || !strings.Contains(res[0].Ignored, replica.ChunkKey(s.id, late.Number)) {
		t.Fatalf("restored %+v, want 1500 events and chunk %d ignored", res, late.Number)
	}
	checkRestored(t, s, dir, 1500, b.sealed)
}

// TestRestoreEndsHistoryAtGapAfterCrash: a writer killed with uploads in
// flight may leave a later chunk stored and an earlier one not (a gap):
// it acknowledged nothing from the gap on (acknowledgements follow chunk
// order), and its Open ignores the chunks after the gap. A restore (its
// disk lost) does the same instead of refusing the bucket: it restores the
// history before the gap and names it (RestoredLedger.Ignored). A gap
// before events that the signed checkpoint covers still fails it.
func TestRestoreEndsHistoryAtGapAfterCrash(t *testing.T) {
	s := makeSource(t, 1500)
	b := storeSource(t, s)
	last := b.chunks[len(b.chunks)-1]
	later := last
	later.Number = last.Number + 2
	later.FirstSeq, later.LastSeq = last.LastSeq+uint64(restoreChunkSize)+1, last.LastSeq+2*uint64(restoreChunkSize)
	later.TreeSize = later.LastSeq
	later.Prev[0] ^= 0xff // the chunk in the gap, never stored
	missing := replica.ChunkKey(s.id, last.Number+1)
	if _, err := b.st.Put(context.Background(), replica.ChunkKey(s.id, later.Number), later.Encode(), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	dir, res, err := restoreTo(t, s, b.st, RestoreOptions{})
	if err != nil {
		t.Fatalf("restore with a gap after the history's last chunk: %v", err)
	}
	if res[0].Events != 1500 || !strings.Contains(res[0].Ignored, missing) {
		t.Fatalf("restored %+v, want 1500 events and the gap at %s named", res, missing)
	}
	checkRestored(t, s, dir, 1500, b.sealed)
}
