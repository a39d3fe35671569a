package s3test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/internal/replica/tilecheck"
)

// TestVersityGWTilesVerifyWithTlogAlone: a ledger replicated to
// versitygw, Replicated then (reopened) Shipped, with a checkpoint after
// each of ten rounds of appends (one event of 70,000 bytes among them).
// From the bucket's objects alone, with x/mod's tlog and note (package
// tilecheck), the inclusion of 100 events in the last checkpoint (each
// entry the event's export line) and the consistency of each checkpoint
// with the last verify; the large event's entry is empty and fails, its
// leaf object verifies; a tile changed in the bucket fails.
func TestVersityGWTilesVerifyWithTlogAlone(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	url := fmt.Sprintf("s3://%s/tiles%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	dir := t.TempDir()
	opts := &engine.Options{Replica: url, PublishTiles: true, SegmentSize: 64 << 10, CheckpointInterval: -1,
		SigningKeyFile: filepath.Join(t.TempDir(), "signer.key")}
	db, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "cash"})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := store.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenS3(ctx, loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := replica.LedgerPrefix(info.ID)
	var notes [][]byte
	seq := uint64(1)
	for round, n := range []int{1, 200, 55, 300, 44, 1, 250, 6, 150, 93} {
		if round == 5 {
			// The rest Shipped, by a new writer (a new epoch).
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			opts.Replication = engine.Shipped
			if db, err = engine.Open(dir, opts); err != nil {
				t.Fatal(err)
			}
		}
		events := make([]engine.EventInput, n)
		for i := range events {
			data := fmt.Sprintf(`{"round":%d,"n":%d}`, round, i)
			if seq+uint64(i)+1 == 600 {
				data = fmt.Sprintf(`{"big":"%s"}`, strings.Repeat("y", 70000))
			}
			events[i] = engine.EventInput{Entity: "acct", Key: fmt.Sprintf("a%d", i%5), Event: "credited", Data: []byte(data)}
		}
		if _, err := db.Append(ctx, "cash", events, nil); err != nil {
			t.Fatal(err)
		}
		seq += uint64(n)
		if _, err := db.Checkpoint(ctx, "cash"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			o, err := s.Get(ctx, replica.CheckpointKey(info.ID))
			if err == nil && strings.Contains(string(o.Data), "\n"+strconv.FormatUint(seq, 10)+"\n") {
				notes = append(notes, o.Data)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the bucket's checkpoint does not reach %d events: %v", round, seq, err)
			}
		}
	}
	var export bytes.Buffer
	if _, err := db.Export(ctx, "cash", &export, engine.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(export.Bytes(), []byte("\n")), []byte("\n"))
	vkey := db.VerifierKey()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	lg, err := tilecheck.New(func(path string) ([]byte, error) {
		o, err := s.Get(ctx, prefix+path)
		return o.Data, err
	}, vkey)
	if err != nil {
		t.Fatal(err)
	}
	head, _, err := lg.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if head.N != int64(len(lines)) || uint64(head.N) != seq {
		t.Fatalf("the bucket's checkpoint is of %d events, the ledger has %d", head.N, len(lines))
	}
	big := int64(599)
	for i := int64(0); i < 100; i++ {
		j := i * head.N / 100
		if i == 99 {
			j = head.N - 1
		}
		entry, err := lg.VerifyInclusion(head, j)
		if err != nil {
			t.Fatalf("leaf %d: %v", j, err)
		}
		if !bytes.Equal(entry, lines[j]) {
			t.Fatalf("leaf %d's entry is\n%.200s\nthe export's line\n%.200s", j, entry, lines[j])
		}
	}
	if entry, err := lg.VerifyInclusion(head, big); err == nil || len(entry) != 0 {
		t.Fatalf("leaf %d (%d bytes): its entry is %d bytes and verifies (%v): want an empty entry that fails", big, len(lines[big]), len(entry), err)
	}
	whole, err := s.Get(ctx, replica.LeafKey(info.ID, uint64(big)))
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.VerifyEntry(head, big, whole.Data); err != nil || !bytes.Equal(whole.Data, lines[big]) {
		t.Fatalf("leaf %d from its leaf object: %v", big, err)
	}
	var trees []tlog.Tree
	for i, n := range notes {
		tr, err := lg.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := lg.VerifyConsistency(tr, head); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		trees = append(trees, tr)
	}
	if len(trees) != 10 {
		t.Fatalf("%d checkpoints, want 10", len(trees))
	}

	key := prefix + "tile/0/002"
	orig, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), orig.Data...)
	bad[100] ^= 0x80
	if _, err := s.Put(ctx, key, bad, store.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.VerifyInclusion(head, 600); err == nil {
		t.Fatalf("%s changed: leaf 600 still verifies", key)
	}
	if err := lg.VerifyConsistency(trees[3], head); err == nil {
		t.Fatalf("%s changed: the consistency of %d with %d still verifies", key, trees[3].N, head.N)
	}
}
