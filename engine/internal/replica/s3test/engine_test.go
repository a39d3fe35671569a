package s3test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// TestVersityGWEngineReplicated: the engine, given the replica as a URL,
// appends in Replicated mode from 8 goroutines against versitygw, closes,
// reopens (taking the ledger again) and appends more: every acknowledged
// event is in the bucket's chunks and sealed segments, which verify
// record by record, and the bucket's head is the directory's.
func TestVersityGWEngineReplicated(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	url := fmt.Sprintf("s3://%s/engine%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	dir := t.TempDir()
	opts := &engine.Options{Replica: url, SegmentSize: 32 << 10}
	db, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[eventid.ID]bool{info.Genesis: true}
	round := func(db *engine.DB, round int) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					res, err := db.Append(ctx, "cash", []engine.EventInput{{Entity: "acct", Key: fmt.Sprintf("a%d", w), Event: "credited",
						Data: []byte(fmt.Sprintf(`{"round":%d,"n":%d,"pad":"%s"}`, round, i, strings.Repeat("x", 200)))}}, nil)
					if err != nil {
						t.Errorf("round %d, worker %d: %v", round, w, err)
						return
					}
					mu.Lock()
					acked[res.IDs[0]] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	round(db, 1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = engine.Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	round(db, 2)
	head, err := db.Ledger("cash")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	bl, err := engine.InspectReplica(ctx, url, []eventid.LedgerID{info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(bl) != 1 || bl[0].Stored != head.Count || bl[0].Head != head.Head || bl[0].Epoch < 2 || bl[0].Name != "cash" {
		t.Fatalf("the bucket: %+v; the directory's head #%d %s", bl, head.Count, head.Head)
	}
	loc, err := store.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenS3(ctx, loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[eventid.ID]bool{}
	keep := func(r *segment.Record, _ segment.Location) error { stored[r.ID] = true; return nil }
	var keys []string
	for after := ""; ; {
		p, err := s.List(ctx, replica.LedgerPrefix(info.ID), after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			keys = append(keys, o.Key)
		}
		if !p.Truncated || len(p.Objects) == 0 {
			break
		}
		after = p.Objects[len(p.Objects)-1].Key
	}
	segs := 0
	for _, key := range keys {
		o, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		var first uint64
		var seg uint64
		var off int64
		switch {
		case strings.Contains(key, "/wal/"):
			c, err := replica.DecodeChunk(key, info.ID, o.Data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Fence() {
				continue
			}
			b, first, seg, off = c.Records, c.FirstSeq, uint64(c.Segment), int64(c.Offset)
		case strings.Contains(key, "/seg/"):
			f, _, ok := replica.ParseSegmentKey(key)
			if !ok {
				t.Fatalf("bad key %s", key)
			}
			segs++
			b, first, seg, off = o.Data[segment.RecordsStart:], f, 1, segment.RecordsStart
		default:
			continue
		}
		prev, err := segment.SpanPrev(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := segment.VerifySpan(info.ID, segment.Head{ID: prev, Seq: first - 1}, key, seg, off, b, keep); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	for id := range acked {
		if !stored[id] {
			t.Fatalf("acknowledged %s is not in the bucket (%d events there)", id, len(stored))
		}
	}
	if segs == 0 {
		t.Fatal("no sealed segment in the bucket: the test covers only chunks")
	}
	if !bytes.Contains([]byte(strings.Join(keys, "\n")), []byte("/checkpoint")) {
		t.Fatalf("no checkpoint in the bucket: %v", keys)
	}
	t.Logf("%d events acknowledged, %d in the bucket, %d sealed segments, %d objects", len(acked), len(stored), segs, len(keys))
}
