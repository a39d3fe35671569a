package s3test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestRestoreStopsAtFirstGap: a writer killed with uploads in flight
// leaves chunks stored after one that never was. A restore reads the
// chunks up to the first gap and ignores those after it (not even read:
// here one is garbage), as the Writer's Open does; a gap before events
// the signed checkpoint covers is damage naming the missing chunk.
func TestRestoreStopsAtFirstGap(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	l := makeLedger(t, 2000, 8<<10)
	prefix := fmt.Sprintf("gap%d", prefixes.Add(1))
	st := openPrefix(t, prefix)
	upload(t, st, l, 5)
	var chunks []string
	for after := ""; ; {
		p, err := st.List(ctx, replica.LedgerPrefix(l.id)+"wal/", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			chunks = append(chunks, o.Key)
		}
		if !p.Truncated || len(p.Objects) == 0 {
			break
		}
		after = p.Objects[len(p.Objects)-1].Key
	}
	last := uint64(len(chunks))
	late := replica.ChunkKey(l.id, last+2)
	if _, err := st.Put(ctx, late, []byte("a late upload, never acknowledged"), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "after-gap")
	res, err := engine.Restore(ctx, dir, engine.RestoreOptions{Replica: bucketURL(endpoint, prefix), Options: l.opts})
	if err != nil {
		t.Fatalf("restore with %s stored after a gap: %v", late, err)
	}
	if len(res) != 1 || res[0].Events != uint64(l.n) || res[0].Resigned {
		t.Fatalf("restored %+v, want %d events under the bucket's checkpoint", res, l.n)
	}

	// A chunk removed whose events the checkpoint covers.
	missing := chunks[len(chunks)/2]
	if err := st.Delete(ctx, missing); err != nil {
		t.Fatal(err)
	}
	_, err = engine.Restore(ctx, filepath.Join(t.TempDir(), "gap"), engine.RestoreOptions{Replica: bucketURL(endpoint, prefix), Options: l.opts})
	if !errors.Is(err, engine.ErrCorruption) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("restore with %s removed: %v; want ErrCorruption naming it", missing, err)
	}
}
