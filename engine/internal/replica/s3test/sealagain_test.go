package s3test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// TestSealedSegmentStoredBeforeDiskLoss: a writer stored a sealed
// segment under seg/ and its disk was lost before the manifest naming it
// was written. The restore lays that segment out from its chunks, under
// a header made anew (created at its first record's time); the next
// writer stores the sealed segment again, meets the other object under
// the key, the same records under another header that verifies, takes
// it for the same segment and goes on: its appends are stored and its
// manifest names the segment.
func TestSealedSegmentStoredBeforeDiskLoss(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	prefix := fmt.Sprintf("seal%d", prefixes.Add(1))
	url := bucketURL(endpoint, prefix)
	opts := &engine.Options{Replica: url, SegmentSize: 8 << 10, GCGrace: time.Hour,
		SigningKeyFile: filepath.Join(t.TempDir(), "signer.key")}
	dir := filepath.Join(t.TempDir(), "lost")
	db, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: lossLedger})
	if err != nil {
		t.Fatal(err)
	}
	appendOne := func(db *engine.DB, i int) {
		t.Helper()
		if _, err := db.Append(ctx, lossLedger, []engine.EventInput{{Entity: "account", Key: "a", Event: "paid",
			Data: []byte(eventData(1, 0, i))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 150 {
		appendOne(db, i)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := openPrefix(t, prefix)
	newest, num := newestManifest(t, st, info.ID)
	if newest.Segments < 2 {
		t.Fatalf("the bucket's newest manifest names %d sealed segments: too few", newest.Segments)
	}
	// The disk is lost after the last seg/ object was stored, before the
	// manifest naming it.
	if err := st.Delete(ctx, replica.ManifestKey(info.ID, num)); err != nil {
		t.Fatal(err)
	}
	if m, _ := newestManifest(t, st, info.ID); m.Segments >= newest.Segments {
		t.Fatalf("the manifest before the newest names %d segments, the newest %d", m.Segments, newest.Segments)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := engine.Restore(ctx, restored, engine.RestoreOptions{Replica: url, Options: &engine.Options{SigningKeyFile: opts.SigningKeyFile}}); err != nil {
		t.Fatal(err)
	}
	n := newest.Segments
	local, err := os.ReadFile(filepath.Join(restored, "ledgers", info.ID.String(), segment.FileName(n)))
	if err != nil {
		t.Fatal(err)
	}
	stored := segmentObject(t, st, info.ID, n)
	if bytes.Equal(local, stored) || !bytes.Equal(local[segment.RecordsStart:], stored[segment.RecordsStart:]) {
		t.Fatalf("segment %d: the restored file and the seg/ object should hold the same records under different headers", n)
	}

	db, err = engine.Open(restored, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 150; i < 160; i++ {
		appendOne(db, i)
	}
	rs, err := db.ReplicaStatus(lossLedger)
	if err != nil || rs.LastError != nil || rs.Fenced {
		t.Fatalf("replica status %+v, %v", rs, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close (the sealed segments stored): %v", err)
	}
	if m, _ := newestManifest(t, st, info.ID); m.Segments < n {
		t.Fatalf("the newest manifest names %d segments, want at least %d", m.Segments, n)
	}
}

// newestManifest returns the bucket's newest manifest of the ledger and
// its number.
func newestManifest(t *testing.T, st store.Store, id eventid.LedgerID) (replica.Manifest, uint64) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for after := ""; ; {
		p, err := st.List(ctx, replica.LedgerPrefix(id)+"manifest/", after, 0)
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
	if len(keys) == 0 {
		t.Fatalf("no manifest of ledger %s", id)
	}
	key := keys[len(keys)-1]
	num, ok := replica.ParseNumber(key)
	if !ok {
		t.Fatalf("%s: not a manifest's key", key)
	}
	o, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m, err := replica.DecodeManifest(key, id, o.Data)
	if err != nil {
		t.Fatal(err)
	}
	return m, num
}

// segmentObject returns the seg/ object of sealed segment n (the n-th by
// its first event).
func segmentObject(t *testing.T, st store.Store, id eventid.LedgerID, n uint64) []byte {
	t.Helper()
	ctx := context.Background()
	p, err := st.List(ctx, replica.LedgerPrefix(id)+"seg/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range p.Objects {
		keys = append(keys, o.Key)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _, _ := replica.ParseSegmentKey(keys[i])
		b, _, _ := replica.ParseSegmentKey(keys[j])
		return a < b
	})
	if uint64(len(keys)) < n || p.Truncated {
		t.Fatalf("%d seg/ objects listed, want segment %d", len(keys), n)
	}
	o, err := st.Get(ctx, keys[n-1])
	if err != nil {
		t.Fatal(err)
	}
	return o.Data
}
