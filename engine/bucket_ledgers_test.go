package engine

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// requestCountingStore counts the List and Folders requests made through
// it: each is one ListObjectsV2 on S3.
type requestCountingStore struct {
	store.Store
	lists, folders atomic.Int64
}

func (s *requestCountingStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *requestCountingStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	s.folders.Add(1)
	return s.Store.Folders(ctx, prefix, after, limit)
}

// ledgersOneListEach is how the bucket's ledgers were listed before
// store.Folders: one List of one key per ledger, each starting after the
// folder before. It is the reference bucketLedgers must agree with.
func ledgersOneListEach(ctx context.Context, s store.Store) ([]eventid.LedgerID, error) {
	const prefix = "ledgers/"
	var ids []eventid.LedgerID
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, 1)
		if err != nil {
			return nil, err
		}
		if len(page.Objects) == 0 {
			return ids, nil
		}
		key := page.Objects[0].Key
		name, _, ok := strings.Cut(strings.TrimPrefix(key, prefix), "/")
		id, err := eventid.ParseLedgerID(name)
		if ok && err == nil && replica.LedgerPrefix(id) == prefix+name+"/" {
			ids = append(ids, id)
		}
		after = key
		if ok {
			after = prefix + name + "0"
		}
	}
}

// TestBucketLedgersOneRequestPerThousand: a bucket of 2,500 ledger
// folders, among objects directly under ledgers/ and folders that are no
// ledger's, is listed by bucketLedgers in 3 requests (pages of 1,000
// folders), not one per ledger, and gives the ledgers the one-List-per-
// ledger listing gave, in the same order.
func TestBucketLedgersOneRequestPerThousand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := store.NewMemory()
	var want []eventid.LedgerID
	for i := range 2500 {
		id := eventid.LedgerID(i*7919 + 1)
		want = append(want, id)
		for _, k := range []string{"checkpoint", "manifest/00000000000000000001", "wal/00000000000000000001"} {
			if _, err := mem.Put(ctx, replica.LedgerPrefix(id)+k, []byte("x"), store.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(want)
	for _, k := range []string{
		"ledgers/stray", "ledgers/00000001", "ledgers/zzzz", // objects directly under ledgers/
		"ledgers/notes/readme", "ledgers/0000ABCD/checkpoint", // folders that are no ledger's: not hex
		"ledgers/123/checkpoint", "ledgers/000000001/checkpoint", // nor 8 digits
		"ledgers//checkpoint", "nodes/n1", "names/cash", // an empty folder name; outside ledgers/
	} {
		if _, err := mem.Put(ctx, k, []byte("x"), store.Condition{}); err != nil {
			t.Fatal(err)
		}
	}

	st := &requestCountingStore{Store: mem}
	got, err := bucketLedgers(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bucketLedgers gave %d ledgers, want the %d stored (first %v, want %v)", len(got), len(want), got[:min(3, len(got))], want[:3])
	}
	if n, l := st.folders.Load(), st.lists.Load(); n != 3 || l != 0 {
		t.Fatalf("bucketLedgers of 2,500 ledgers made %d Folders and %d List requests, want 3 and 0", n, l)
	}

	old := &requestCountingStore{Store: mem}
	before, err := ledgersOneListEach(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, before) {
		t.Fatalf("bucketLedgers and the one-List-per-ledger listing disagree: %d and %d ledgers", len(got), len(before))
	}
	t.Logf("2,500 ledgers: %d requests with Folders, %d with one List per ledger", st.folders.Load(), old.lists.Load())
}

// TestBucketLedgersEmptyBucket: a bucket without ledgers/ lists no
// ledger, in one request.
func TestBucketLedgersEmptyBucket(t *testing.T) {
	t.Parallel()
	st := &requestCountingStore{Store: store.NewMemory()}
	if _, err := st.Put(context.Background(), "nodes/n1", []byte("x"), store.Condition{}); err != nil {
		t.Fatal(err)
	}
	ids, err := bucketLedgers(context.Background(), st)
	if err != nil || len(ids) != 0 || st.folders.Load() != 1 {
		t.Fatalf("bucketLedgers of a bucket without ledgers = %v, %v in %d requests; want none in 1", ids, err, st.folders.Load())
	}
}
