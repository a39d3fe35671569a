package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/annal-db/annal/index"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// TestTailCrashAndClose appends (Sync) while the index's tail of the
// ledger holds records that are not in Pebble, then simulates a crash:
// the reopened DB finds every acknowledged event by every read path
// (Open indexes the tail's records again from the segments). A Close, on
// the other hand, writes the tail: the index's progress marker is then at
// the ledger's head without any catch-up.
func TestTailCrashAndClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	metaPath := filepath.Join(t.TempDir(), metaFile)
	db, err := Open(crashDir, &Options{fs: mem, metaPath: metaPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	type ev struct{ entity, key, event string }
	var acked []ev
	var retry []EventInput // batch 28, appended with an idempotency key
	for b := range 30 {
		var in []EventInput
		for i := range 10 {
			n := b*10 + i
			e := ev{fmt.Sprint("ent", n%3), fmt.Sprint("k", n%5), fmt.Sprint("name", n%4)}
			in = append(in, EventInput{Entity: e.entity, Key: e.key, Event: e.event, Data: []byte(fmt.Sprint(n))})
			acked = append(acked, e)
		}
		var o *AppendOptions
		if b%7 == 0 {
			o = &AppendOptions{IdempotencyKey: fmt.Sprint("idem", b)}
		}
		if _, err := db.Append(ctx, "l", in, o); err != nil {
			t.Fatal(err)
		}
		if b == 28 {
			retry = in
		}
	}
	info, _ := db.Ledger("l")
	if p, _, err := db.idx.Progress(info.ID); err != nil || p.Seq >= info.Count {
		t.Fatalf("the index's progress marker is at #%d (%v) with the head at #%d: the tail is empty, nothing to test", p.Seq, err, info.Count)
	}
	var meta bytes.Buffer
	if err := db.meta.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(&meta)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	all := collect(t, db.Scan(ctx, "l", ScanOptions{}))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Close wrote the tail.
	x, err := index.Open(filepath.Join(crashDir, indexDir), index.Options{FS: mem, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := x.Progress(info.ID); err != nil || p.Seq != info.Count || p.ID != info.Head {
		t.Errorf("after Close the index's progress marker is at #%d %v (%v), want the head #%d %v", p.Seq, p.ID, err, info.Count, info.Head)
	}
	x.Close()

	// The crash: the tail was lost, the segments were synced.
	fs := vfs.NewMem()
	copyMemTree(t, crashed, fs, crashDir)
	metaPath2 := filepath.Join(t.TempDir(), metaFile)
	writeFile(t, metaPath2, meta.Bytes())
	db, err = Open(crashDir, &Options{fs: fs, metaPath: metaPath2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := collect(t, db.Scan(ctx, "l", ScanOptions{}))
	if len(got) != len(all) {
		t.Fatalf("after the crash: %d events, want %d", len(got), len(all))
	}
	rev := collect(t, db.Scan(ctx, "l", ScanOptions{Reverse: true}))
	slices.Reverse(rev)
	for i, e := range all {
		if got[i].ID != e.ID || rev[i].ID != e.ID {
			t.Fatalf("after the crash: event %d is %v (reverse scan %v), want %v", i, got[i].ID, rev[i].ID, e.ID)
		}
		if g, err := db.Get(ctx, e.ID); err != nil || g.Seq != e.Seq {
			t.Fatalf("Get %v after the crash: #%d (%v), want #%d", e.ID, g.Seq, err, e.Seq)
		}
		if g, err := db.GetSeq(ctx, "l", e.Seq); err != nil || g.ID != e.ID {
			t.Fatalf("GetSeq #%d after the crash: %v (%v), want %v", e.Seq, g.ID, err, e.ID)
		}
	}
	// Streams, entities and event names.
	for _, o := range []ReplayOptions{{Entity: "ent1"}, {Entity: "ent2", Keys: []string{"k3"}}, {Events: []string{"name2"}}, {Entity: "ent0", Reverse: true}} {
		var want []uint64
		for i, e := range acked {
			if e.entity == o.Entity && (o.Keys == nil || e.key == o.Keys[0]) || o.Entity == "" && e.event == o.Events[0] {
				want = append(want, uint64(i+2)) // after the genesis event
			}
		}
		if o.Reverse {
			slices.Reverse(want)
		}
		var gotSeqs []uint64
		for _, e := range collect(t, db.Replay(ctx, "l", o)) {
			gotSeqs = append(gotSeqs, e.Seq)
		}
		if !slices.Equal(gotSeqs, want) {
			t.Errorf("Replay %+v after the crash: %v, want %v", o, gotSeqs, want)
		}
	}
	if h, err := db.StreamHead(ctx, "l", "ent2", "k4"); err != nil || h.Seq == 0 {
		t.Errorf("StreamHead after the crash: %+v (%v)", h, err)
	}
	// A retried idempotent append is found.
	res, err := db.Append(ctx, "l", retry, &AppendOptions{IdempotencyKey: "idem28"})
	if err != nil || res.FirstSeq != 2+280 {
		t.Errorf("retry of idem28 after the crash: #%d (%v), want the first append's #%d", res.FirstSeq, err, 2+280)
	}
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Errorf("Verify after the crash: %v", err)
	}
}
