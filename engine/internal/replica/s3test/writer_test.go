package s3test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// spanLog is a real segment.Log and a replica.Source over it: Read and
// Frontier answer from the spans its Hooks.Records gave (kept in
// memory), each record's leaf the SHA-256 of its frame. Its commits go
// to the Writers attached.
type spanLog struct {
	t   testing.TB
	log *segment.Log

	mu      sync.Mutex
	spans   []segment.Span
	leaves  []tree.Hash
	writers []*replica.Writer
}

var genesis = segment.Entry{Entity: "ledger", Key: "s3test", Event: "ledger-created", Meta: []byte(`{"actor":"test"}`), Data: []byte(`{"name":"s3test"}`)}

func ledgerID() eventid.LedgerID {
	c := eventid.Content{Entity: genesis.Entity, Key: genesis.Key, Event: genesis.Event, Meta: genesis.Meta, Data: genesis.Data}
	return c.LedgerID()
}

func newSpanLog(t testing.TB) *spanLog {
	t.Helper()
	sl := &spanLog{t: t}
	l, err := segment.Create(t.TempDir(), segment.Options{Ledger: ledgerID(), Hooks: segment.Hooks{Records: sl.records}})
	if err != nil {
		t.Fatal(err)
	}
	sl.log = l
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Append(&segment.Batch{Entries: []segment.Entry{genesis}}); err != nil {
		t.Fatal(err)
	}
	return sl
}

func frameLeaves(b []byte) []tree.Hash {
	var out []tree.Hash
	for len(b) > 0 {
		n := 12 + int(binary.BigEndian.Uint32(b))
		out = append(out, tree.Hash(sha256.Sum256(b[:n])))
		b = b[n:]
	}
	return out
}

func (sl *spanLog) records(s segment.Span) {
	leaves := frameLeaves(s.Bytes)
	s.Bytes = slices.Clone(s.Bytes)
	sl.mu.Lock()
	sl.spans = append(sl.spans, s)
	sl.leaves = append(sl.leaves, leaves...)
	ws := sl.writers
	sl.mu.Unlock()
	for _, w := range ws {
		w.Add(s, leaves)
	}
}

func (sl *spanLog) attach(w *replica.Writer) {
	sl.mu.Lock()
	sl.writers = append(slices.Clip(sl.writers), w)
	sl.mu.Unlock()
}

func (sl *spanLog) append(n int, i int) uint64 {
	b := &segment.Batch{}
	for j := range n {
		b.Entries = append(b.Entries, segment.Entry{Entity: "order", Key: fmt.Sprintf("o-%d", i), Event: "placed",
			Meta: []byte(`{"actor":"test"}`), Data: []byte(fmt.Sprintf(`{"i":%d,"j":%d}`, i, j))})
	}
	if err := sl.log.Append(b); err != nil {
		sl.t.Error(err)
		return 0
	}
	return b.FirstSeq + uint64(n) - 1
}

func (sl *spanLog) Head() segment.Head    { return sl.log.Head() }
func (sl *spanLog) Durable() segment.Head { return sl.log.Durable() }
func (sl *spanLog) Sync() error           { return sl.log.Sync() }

func (sl *spanLog) Read(from uint64, max int) (segment.Span, []tree.Hash, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	i := sort.Search(len(sl.spans), func(i int) bool { return sl.spans[i].FirstSeq >= from })
	if i == len(sl.spans) || sl.spans[i].FirstSeq != from {
		return segment.Span{}, nil, fmt.Errorf("span log: no span begins at %d", from)
	}
	s := sl.spans[i]
	return s, slices.Clone(sl.leaves[from-1 : s.Last.Seq]), nil
}

func (sl *spanLog) Sealed(n uint64) ([]byte, uint64, uint64, error) {
	return nil, 0, 0, fmt.Errorf("span log: segment %d is not sealed (one segment only)", n)
}

func (sl *spanLog) Frontier(n uint64) (*tree.Builder, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	b := &tree.Builder{}
	for _, l := range sl.leaves[:n] {
		b.Add(l)
	}
	return b, nil
}

func writerConfig(st store.Store, sl *spanLog, host string) replica.Config {
	return replica.Config{
		Store: st, Ledger: ledgerID(), Name: "s3test", Mode: replica.Replicated,
		Identity: replica.Identity{Host: host, PID: os.Getpid(), Started: time.Now(), Nonce: host},
		Source:   sl, Endpoint: endpoint, StoreTimeout: 20 * time.Second,
	}
}

// manifestRecorder notes every manifest stored through it.
type manifestRecorder struct {
	store.Store
	mu        sync.Mutex
	manifests []recorded
}

type recorded struct {
	key   string
	epoch uint64
	host  string
}

func (r *manifestRecorder) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	etag, err := r.Store.Put(ctx, key, data, cond)
	if err == nil && strings.Contains(key, "/manifest/") {
		m, derr := replica.DecodeManifest(key, ledgerID(), data)
		if derr != nil {
			return etag, derr
		}
		r.mu.Lock()
		r.manifests = append(r.manifests, recorded{key: key, epoch: m.Epoch, host: m.Writer.Host})
		r.mu.Unlock()
	}
	return etag, err
}

// TestVersityGWWritersRaceToTake: 8 Writers, each in its own goroutine,
// Open and Take one ledger at once against versitygw (opening again on
// ErrBehind, as the engine does). Every Take that
// succeeds holds an epoch of its own (epochs strictly increase, one
// writer's manifest per epoch); only the highest stores the next
// record, and every other writer's Wait fails with ErrFenced.
func TestVersityGWWritersRaceToTake(t *testing.T) {
	rec := &manifestRecorder{Store: openStore(t)}
	st := store.Store(rec)
	sl := newSpanLog(t)
	ctx := context.Background()
	type taker struct {
		w     *replica.Writer
		epoch uint64
		err   error
	}
	takers := make([]taker, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// As the engine does: a bucket ahead of the Tail read is
			// read again (here the directory holds every record).
			for try := 0; ; try++ {
				w, _, err := replica.Open(ctx, writerConfig(st, sl, fmt.Sprintf("writer-%d", i)))
				if err != nil {
					takers[i].err = err
					return
				}
				sl.attach(w)
				err = w.Take(ctx)
				if err == nil {
					takers[i] = taker{w: w, epoch: w.Status().Epoch}
					return
				}
				_ = w.Close(ctx)
				takers[i].err = err
				if !errors.Is(err, replica.ErrBehind) || try == 20 {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	epochs := map[uint64]int{}
	var top uint64
	for i, tk := range takers {
		switch {
		case tk.err == nil:
			if j, dup := epochs[tk.epoch]; dup {
				t.Fatalf("writers %d and %d both took epoch %d", j, i, tk.epoch)
			}
			epochs[tk.epoch] = i
			top = max(top, tk.epoch)
		case errors.Is(tk.err, replica.ErrFenced), errors.Is(tk.err, replica.ErrBehind), errors.Is(tk.err, store.ErrPreconditionFailed):
			t.Logf("writer %d lost the race at Take: %v", i, tk.err)
		default:
			t.Fatalf("writer %d: %v", i, tk.err)
		}
	}
	if len(epochs) == 0 {
		t.Fatal("no writer took the ledger")
	}
	// One writer's manifests per epoch, epochs increasing with the
	// manifests' numbers (older manifests may be deleted by now: the
	// recorder saw every one stored).
	rec.mu.Lock()
	manifests := slices.Clone(rec.manifests)
	rec.mu.Unlock()
	sort.Slice(manifests, func(i, j int) bool { return manifests[i].key < manifests[j].key })
	byEpoch := map[uint64]string{}
	var last uint64
	for _, m := range manifests {
		if m.epoch < last {
			t.Fatalf("manifest %s has epoch %d after epoch %d", m.key, m.epoch, last)
		}
		last = m.epoch
		if h, ok := byEpoch[m.epoch]; ok && h != m.host {
			t.Fatalf("epoch %d has manifests of %s and %s", m.epoch, h, m.host)
		}
		byEpoch[m.epoch] = m.host
	}
	for e, i := range epochs {
		if byEpoch[e] != fmt.Sprintf("writer-%d", i) {
			t.Fatalf("epoch %d: writer %d took it, the manifest names %q", e, i, byEpoch[e])
		}
	}
	seq := sl.append(1, 0)
	for i, tk := range takers {
		if tk.w == nil {
			continue
		}
		err := tk.w.Wait(ctx, seq)
		switch {
		case tk.epoch == top && err != nil:
			t.Fatalf("the last taker (writer %d, epoch %d): %v", i, tk.epoch, err)
		case tk.epoch != top && !errors.Is(err, replica.ErrFenced):
			t.Fatalf("writer %d (epoch %d, the last is %d): Wait = %v, want ErrFenced", i, tk.epoch, top, err)
		}
		_ = tk.w.Close(ctx)
	}
	_, tail, err := replica.Open(ctx, writerConfig(st, sl, "reader"))
	if err != nil {
		t.Fatal(err)
	}
	if tail.Seq != seq || tail.ID != sl.Head().ID {
		t.Fatalf("the bucket's tail after the race: record %d, want %d", tail.Seq, seq)
	}
	t.Logf("%d of 8 took the ledger, epochs up to %d", len(epochs), top)
}
