package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/testseed"
)

// replicatedLedger is a closed data directory holding one ledger, made
// with the engine, and the options (its key) it opens with.
type replicatedLedger struct {
	dir  string
	opts *engine.Options
	id   eventid.LedgerID
	n    int
}

const restoreLedger = "orders"

// makeLedger makes a ledger of n events (its genesis included), appended
// in batches of 5, in segments of segSize bytes.
func makeLedger(t testing.TB, n int, segSize int64) *replicatedLedger {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(dir, &engine.Options{SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: restoreLedger})
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]engine.EventInput, 0, 500)
	for i := 1; i < n; {
		evs = evs[:0]
		for ; len(evs) < 500 && i < n; i++ {
			evs = append(evs, engine.EventInput{Entity: "order", Key: fmt.Sprintf("o-%d", i%97), Event: "placed",
				Data: fmt.Appendf(nil, `{"n":%d,"total":"%d.50"}`, i, i%1000)})
		}
		for j := 0; j < len(evs); j += 5 {
			if _, err := db.Append(ctx, restoreLedger, evs[j:min(j+5, len(evs))], &engine.AppendOptions{Durability: engine.None}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.Checkpoint(ctx, restoreLedger); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return &replicatedLedger{dir: dir, opts: &engine.Options{SigningKeyFile: filepath.Join(dir, "signing.key")}, id: info.ID, n: n}
}

func (l *replicatedLedger) folder() string {
	return filepath.Join(l.dir, "ledgers", l.id.String())
}

// leaf is the engine's Merkle leaf of a record (format.md §9.1): SHA-256
// of 0x00 and its export line without the newline.
func leaf(buf []byte, r *segment.Record) (tree.Hash, []byte) {
	buf = append(buf[:0], 0)
	buf = ndjson.AppendLine(buf, r.ID, r.ID.Micros(), string(r.Entity), string(r.Key), string(r.Event), r.Meta, r.Data)
	return sha256.Sum256(buf[:len(buf)-1]), buf
}

// upload stores the ledger in st as the replica Writer lays it out: its
// segments but the last two under seg/, the records of the last two in
// chunks of chunkRecords (a multiple of 5: the appends' batches) after an
// epoch 1 fence, with epoch 2's fence in the middle of the last segment,
// two manifests and the checkpoint. It returns the number of objects.
func upload(t testing.TB, st store.Store, l *replicatedLedger, chunkRecords int) int {
	t.Helper()
	ctx := context.Background()
	objects := 0
	put := func(key string, data []byte) {
		if _, err := st.Put(ctx, key, data, store.CreateOnly()); err != nil {
			t.Fatal(err)
		}
		objects++
	}
	type rec struct {
		seq, micros uint64
		loc         segment.Location
		leaf        tree.Hash
	}
	var files [][]byte
	for n := uint64(1); ; n++ {
		b, err := os.ReadFile(filepath.Join(l.folder(), segment.FileName(n)))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if len(files) < 3 {
		t.Fatalf("%d segments: too few", len(files))
	}
	sealed := len(files) - 2
	var tb tree.Builder
	var buf []byte
	var prevChunk replica.Hash
	chunkN, epoch := uint64(0), uint64(1)
	var fence uint64
	head := segment.Head{ID: eventid.Genesis(l.id)}
	var sealedSeq uint64
	for i, f := range files {
		var recs []rec
		first := head
		var err error
		head, err = segment.VerifyFile(l.id, uint64(i)+1, head, "source", f, func(r *segment.Record, loc segment.Location) error {
			var h tree.Hash
			h, buf = leaf(buf, r)
			recs = append(recs, rec{seq: r.Seq, micros: r.ID.Micros(), loc: loc, leaf: h})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i < sealed {
			put(replica.SegmentKey(l.id, first.Seq+1, head.Seq), f)
			for _, r := range recs {
				tb.Add(r.leaf)
			}
			sealedSeq = head.Seq
			continue
		}
		add := func(c replica.Chunk) {
			chunkN++
			c.Ledger, c.Number, c.Epoch, c.Prev, c.TreeSize, c.Root = l.id, chunkN, epoch, prevChunk, c.LastSeq, replica.Hash(tb.Root())
			obj := c.Encode()
			put(replica.ChunkKey(l.id, chunkN), obj)
			prevChunk = replica.Sum(obj)
		}
		fenceAt := func(j int) {
			before := first.ID.Micros()
			if j > 0 {
				before = recs[j-1].micros
			}
			next := recs[j]
			add(replica.Chunk{FirstSeq: next.seq, LastSeq: next.seq - 1, FirstMicros: before, LastMicros: before, Segment: uint32(next.loc.Segment), Offset: uint32(next.loc.Offset)})
		}
		if chunkN == 0 {
			fenceAt(0)
		}
		for j := 0; j < len(recs); j += chunkRecords {
			if i == len(files)-1 && epoch == 1 && j >= len(recs)/2 {
				epoch = 2
				fenceAt(j)
				fence = chunkN
			}
			part := recs[j:min(j+chunkRecords, len(recs))]
			for _, r := range part {
				tb.Add(r.leaf)
			}
			start, end := part[0].loc.Offset, part[len(part)-1].loc.End()
			add(replica.Chunk{FirstSeq: part[0].seq, LastSeq: part[len(part)-1].seq, FirstMicros: part[0].micros, LastMicros: part[len(part)-1].micros,
				Segment: uint32(i + 1), Offset: uint32(start), Records: f[start:end]})
		}
	}
	for i, m := range []replica.Manifest{
		{V: 1, Ledger: l.id.String(), Name: restoreLedger, Epoch: 1, Fence: 1, Segments: uint64(sealed), SealedSeq: sealedSeq, GC: 1},
		{V: 1, Ledger: l.id.String(), Name: restoreLedger, Epoch: 2, Fence: fence, Segments: uint64(sealed), SealedSeq: sealedSeq, GC: 1},
	} {
		put(replica.ManifestKey(l.id, uint64(i)+1), m.Encode())
	}
	ck, err := os.ReadFile(filepath.Join(l.folder(), "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, replica.CheckpointKey(l.id), ck, store.Condition{}); err != nil {
		t.Fatal(err)
	}
	return objects + 1
}

// bucketURL is the URL of prefix in the test bucket at endpoint url.
func bucketURL(url, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&path-style=true", bucket, prefix, url)
}

// openPrefix opens the store of prefix in the test bucket, on the
// gateway itself.
func openPrefix(t testing.TB, prefix string) store.Store {
	t.Helper()
	loc, err := store.ParseLocation(bucketURL(endpoint, prefix))
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenS3(context.Background(), loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ledgerFiles returns the files of a restored ledger's folder that the
// bucket gives (segments, NAME, checkpoint), by name.
func ledgerFiles(t testing.TB, dir string, id eventid.LedgerID) map[string][]byte {
	t.Helper()
	folder := filepath.Join(dir, "ledgers", id.String())
	entries, err := os.ReadDir(folder)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if filepath.Ext(name) != ".seg" && name != "NAME" && name != "checkpoint" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(folder, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

// TestRestoreThroughFaults: a restore from versitygw through a proxy that
// fails 5% of the requests in every way the store retries gives the same
// directory, byte for byte, as one without faults, and it opens and
// verifies whole.
func TestRestoreThroughFaults(t *testing.T) {
	credentialsInEnvironment(t, secret)
	l := makeLedger(t, 8000, 8<<10)
	prefix := fmt.Sprintf("r%d", prefixes.Add(1))
	objects := upload(t, openPrefix(t, prefix), l, 5)
	ctx := context.Background()
	clean := filepath.Join(t.TempDir(), "clean")
	if _, err := engine.Restore(ctx, clean, engine.RestoreOptions{Replica: bucketURL(endpoint, prefix), Options: l.opts}); err != nil {
		t.Fatal(err)
	}
	// A restore makes some 150 requests: at 5%, one in 2,000 meets no
	// fault; it is run again then (at most 3 times).
	p := startFaultProxy(t, testseed.Seed(t), 0.05, fail500, fail503, lostResponse, succeededThen500, resetMidBody, latency)
	var faulty string
	var res []engine.RestoredLedger
	for try := 0; try < 3 && p.faults() == 0; try++ {
		faulty = filepath.Join(t.TempDir(), "faulty")
		var err error
		res, err = engine.Restore(ctx, faulty, engine.RestoreOptions{Replica: bucketURL(p.url, prefix), Options: l.opts})
		if err != nil {
			t.Fatal(err)
		}
	}
	p.report(t)
	if p.faults() == 0 {
		t.Fatalf("no fault in %d requests", p.requests.Load())
	}
	if len(res) != 1 || res[0].Events != uint64(l.n) {
		t.Fatalf("restored %+v, want %d events", res, l.n)
	}
	want, got := ledgerFiles(t, clean, l.id), ledgerFiles(t, faulty, l.id)
	if len(got) != len(want) || len(got) < 4 {
		t.Fatalf("restored files %d, without faults %d", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Fatalf("%s differs from the restore without faults", name)
		}
	}
	// The records of every segment, the bucket's checkpoint and the
	// ledger's name are the source's, byte for byte.
	for name, b := range got {
		src, err := os.ReadFile(filepath.Join(l.folder(), name))
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(name) == ".seg" && !bytes.Equal(src[segment.HeaderSize:], b[segment.HeaderSize:]) {
			t.Fatalf("%s: its records differ from the source's", name)
		}
	}
	db, err := engine.Open(faulty, l.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Verify(ctx, restoreLedger, nil)
	if err != nil || rep.Events != uint64(l.n) {
		t.Fatalf("full Verify: %+v, %v", rep, err)
	}
	t.Logf("%d events, %d objects; %d requests through the proxy", l.n, objects, p.requests.Load())
}

// BenchmarkRestoreFromVersityGW measures a restore of 10^5 events (and
// 10^6 with -bench 'RestoreFromVersityGW/1000000') from versitygw on the
// loopback: events/s of the whole restore (reading and verifying every
// object, writing and syncing the files, the Open that builds the index
// and the tree).
func BenchmarkRestoreFromVersityGW(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			credentialsInEnvironment(b, secret)
			l := makeLedger(b, n, 1<<20)
			prefix := fmt.Sprintf("b%d", prefixes.Add(1))
			objects := upload(b, openPrefix(b, prefix), l, 5000)
			b.ResetTimer()
			var took time.Duration
			for i := 0; i < b.N; i++ {
				dir := filepath.Join(b.TempDir(), "r")
				start := time.Now()
				if _, err := engine.Restore(context.Background(), dir, engine.RestoreOptions{Replica: bucketURL(endpoint, prefix), Options: l.opts}); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
			}
			b.ReportMetric(float64(n)*float64(b.N)/took.Seconds(), "events/s")
			b.Logf("%d events in %d objects: %.0f events/s", n, objects, float64(n)*float64(b.N)/took.Seconds())
		})
	}
}
