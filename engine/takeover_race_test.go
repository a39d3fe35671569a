package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// manifestLog is a store that keeps every manifest and fence chunk it
// stored (GC deletes manifests: the test reads them all here).
type manifestLog struct {
	store.Store
	mu        sync.Mutex
	manifests []replica.Manifest
	fences    []replica.Chunk
}

func (s *manifestLog) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	etag, err := s.Store.Put(ctx, key, data, cond)
	if err != nil {
		return etag, err
	}
	parts := strings.Split(key, "/")
	id, perr := eventid.ParseLedgerID(parts[1])
	if perr != nil {
		return etag, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.Contains(key, "/manifest/"):
		if m, derr := replica.DecodeManifest(key, id, data); derr == nil {
			s.manifests = append(s.manifests, m)
		}
	case strings.Contains(key, "/wal/"):
		if c, derr := replica.DecodeChunk(key, id, data); derr == nil && c.Fence() {
			s.fences = append(s.fences, c)
		}
	}
	return etag, err
}

// TestRacingTakeovers: eight directories, copies of the writer's, take
// the ledger at once with Takeover while the writer is open. Every
// epoch has one writer (the manifests written) and one fence chunk;
// each takeover that loses is refused with an error naming the cause, or
// its ledger is, or its appends fail with ErrFenced; exactly one of the
// eight appends, and a restore of the bucket holds every event
// acknowledged, the old writer's and the winner's.
func TestRacingTakeovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &manifestLog{Store: store.NewMemory()}
	dir := t.TempDir()
	a := openRepl(t, dir, rec, Replicated)
	info, err := a.CreateLedger(ctx, LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	acked := []eventid.ID{info.Genesis}
	for i := range 20 {
		res, err := appendOne(ctx, a, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.IDs[0])
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	const n = 8
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = copyDir(t, dir)
	}
	a = openRepl(t, dir, rec, Replicated)
	defer a.Close()
	for i := range 10 { // events the copies lack: each takeover pulls them
		res, err := appendOne(ctx, a, "cash", 20+i)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.IDs[0])
	}

	dbs := make([]*DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			dbs[i], _, errs[i] = Takeover(ctx, dirs[i], replOptions(rec, Replicated))
		})
	}
	close(start)
	wg.Wait()
	for _, db := range dbs {
		if db != nil {
			defer db.Close()
		}
	}

	// Each appends after all took over (or failed to).
	appended := make([][]eventid.ID, n)
	appendErrs := make([]error, n)
	for i, db := range dbs {
		if errs[i] != nil {
			t.Logf("takeover %d refused: %v", i, errs[i])
			if !errors.Is(errs[i], ErrFenced) && !errors.Is(errs[i], ErrBehind) && !strings.Contains(errs[i].Error(), "took the ledger") {
				t.Errorf("takeover %d: %v, want a fence, the bucket ahead, or the ledger taken by others", i, errs[i])
			}
			continue
		}
		if u := db.Unavailable(); len(u) > 0 {
			t.Logf("takeover %d: ledger refused: %v", i, u["cash"])
			if !errors.Is(u["cash"], ErrFenced) && !errors.Is(u["cash"], ErrBehind) && !strings.Contains(u["cash"].Error(), "took the ledger") {
				t.Errorf("takeover %d: the ledger is unavailable: %v, want a fence, the bucket ahead, or the ledger taken by others", i, u["cash"])
			}
			continue
		}
		wg.Go(func() {
			for k := range 5 {
				res, err := appendOne(ctx, db, "cash", 1000*(i+1)+k)
				if err != nil {
					appendErrs[i] = err
					return
				}
				appended[i] = append(appended[i], res.IDs[0])
			}
		})
	}
	wg.Wait()
	winners, fenced := 0, 0
	for i := range n {
		switch {
		case errs[i] != nil || dbs[i] == nil || len(dbs[i].Unavailable()) > 0:
		case appendErrs[i] == nil:
			winners++
			acked = append(acked, appended[i]...)
		case errors.Is(appendErrs[i], ErrFenced):
			fenced++
			if len(appended[i]) > 0 {
				t.Errorf("takeover %d appended %d events, then was fenced", i, len(appended[i]))
			}
		default:
			t.Errorf("takeover %d: append: %v, want ErrFenced or success", i, appendErrs[i])
		}
	}
	if winners != 1 {
		t.Fatalf("%d of the %d takeovers append, want one", winners, n)
	}
	if _, err := appendOne(ctx, a, "cash", 99); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old writer's append: %v, want ErrFenced", err)
	}

	// One writer per epoch, one fence chunk per epoch.
	rec.mu.Lock()
	writer := map[uint64]string{}
	for _, m := range rec.manifests {
		if w, ok := writer[m.Epoch]; ok && w != m.Writer.Nonce {
			t.Errorf("epoch %d has manifests of two writers: %s and %s", m.Epoch, w, m.Writer.Nonce)
		}
		writer[m.Epoch] = m.Writer.Nonce
	}
	fences := map[uint64]int{}
	for _, c := range rec.fences {
		fences[c.Epoch]++
		if fences[c.Epoch] > 1 {
			t.Errorf("epoch %d has %d fence chunks", c.Epoch, fences[c.Epoch])
		}
	}
	epochs := len(writer)
	rec.mu.Unlock()

	for _, db := range dbs {
		if db != nil {
			if err := db.Close(); err != nil && !errors.Is(err, ErrFenced) {
				t.Logf("close: %v", err)
			}
		}
	}
	restored := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(ctx, restored, RestoreOptions{store: rec, Options: &Options{SigningKeyFile: filepath.Join(dir, signingKeyFile)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Events != uint64(len(acked)) {
		t.Fatalf("restored %+v, want the %d events acknowledged", res, len(acked))
	}
	r, err := Open(restored, &Options{SigningKeyFile: filepath.Join(dir, signingKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, id := range acked {
		if _, err := r.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged %s after the restore: %v", id, err)
		}
	}
	t.Logf("%d takeovers at once: %d epochs, %d fenced at their first append, %d refused at Takeover; %d events restored", n, epochs, fenced, func() int {
		k := 0
		for _, e := range errs {
			if e != nil {
				k++
			}
		}
		return k
	}(), len(acked))
}
