package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/segment"
	"github.com/tidwall/wal"
)

// The segment benchmarks run on the real file system
// (vfs.Default) in b.TempDir(), because the cost of fsync is the point.
//
//	go test -run='^$' -bench=. -benchtime=2s ./...

var verifyDir string // ledgers built for BenchmarkVerify, removed by TestMain

func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range verifyLogs {
		l.Close()
	}
	if verifyDir != "" {
		os.RemoveAll(verifyDir)
	}
	os.Exit(code)
}

// TestWorkload checks that the workload is what the benchmarks claim: meta
// and data canonical, records of about 250 bytes, tidwall/wal records of
// exactly annal's frame size on disk, and both logs accepting it.
func TestWorkload(t *testing.T) {
	p := GetPool()
	var total int
	for i, e := range p.Entries {
		for _, js := range [][]byte{e.Meta, e.Data} {
			c, err := canon.Append(nil, js)
			if err != nil || !bytes.Equal(c, js) {
				t.Fatalf("entry %d: %s is not canonical (%s, %v)", i, js, c, err)
			}
		}
		if got, want := WALDiskLen(p.Records[i]), FrameLen(e); got != want {
			t.Fatalf("entry %d: tidwall/wal writes %d bytes, annal %d", i, got, want)
		}
		total += FrameLen(e)
	}
	if avg := total / len(p.Entries); avg < 230 || avg > 270 {
		t.Fatalf("average record %d bytes, want about 250", avg)
	}

	l, err := CreateAnnal(t.TempDir(), segment.Sync, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := AnnalBatches(l, p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 2*BatchSize || r.Syncs != 2 {
		t.Fatalf("annal batches: %+v", r)
	}
	var want int64
	for _, e := range p.Entries[:2*BatchSize] {
		want += int64(FrameLen(e))
	}
	if r.Bytes != want {
		t.Fatalf("annal wrote %d bytes for 2 batches, FrameLen says %d", r.Bytes, want)
	}
	if r, err = AnnalConcurrent(l, p, 200, 8); err != nil || r.Records != 200 {
		t.Fatalf("annal concurrent: %+v %v", r, err)
	}
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	w, err := OpenWAL(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wr, err := WALBatches(w, p, 2)
	if err != nil || wr.Bytes != want || wr.Records != 2*BatchSize {
		t.Fatalf("tidwall/wal batches: %+v %v (annal bytes %d)", wr, err, want)
	}
	if _, err := WALConcurrentMutex(w, p, 200, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := WALSingles(w, p, 3); err != nil {
		t.Fatal(err)
	}
	if last, _ := w.LastIndex(); last != 2*BatchSize+203 {
		t.Fatalf("tidwall/wal last index %d", last)
	}
}

// TestIdealGroupCommit checks that the ideal group commit appends n
// records of annal's frame sizes, sharing fsyncs among concurrent writers
// and fsyncing every record of a single writer.
func TestIdealGroupCommit(t *testing.T) {
	p := GetPool()
	var want int64
	for _, e := range p.Entries[:200] {
		want += int64(FrameLen(e))
	}
	for _, g := range []int{1, 8} {
		r, err := IdealGroupCommit(t.TempDir(), 200, g)
		if err != nil {
			t.Fatal(err)
		}
		if r.Records != 200 || r.Bytes != want || r.Syncs < 1 || r.Syncs > 200 || (g == 1 && r.Syncs != 200) {
			t.Fatalf("G=%d: %+v, want 200 records, %d bytes, 1-200 fsyncs (200 for G=1)", g, r, want)
		}
	}
	a, err := NewIdealGroup(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var total int64
	for range 3 {
		r, err := a.Run(100, 16)
		if err != nil || r.Records != 100 || r.Syncs < 1 {
			t.Fatalf("run: %+v %v", r, err)
		}
		total += r.Bytes
	}
	if fi, err := a.f.Stat(); err != nil || fi.Size() != total {
		t.Fatalf("file of %v bytes (%v), wrote %d", fi.Size(), err, total)
	}
}

// report adds the throughput figures of r to b.
func report(b *testing.B, r Result) {
	b.ReportMetric(r.RecordsPerSec(), "records/s")
	b.ReportMetric(r.MBPerSec(), "MB/s")
	b.ReportMetric(r.RecordsPerSync(), "records/fsync")
}

func newAnnal(b *testing.B) *segment.Log {
	b.Helper()
	l, err := CreateAnnal(b.TempDir(), segment.Sync, 0)
	if err != nil {
		b.Fatal(err)
	}
	Settle()
	return l
}

func newWAL(b *testing.B) *wal.Log {
	b.Helper()
	w, err := OpenWAL(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	Settle()
	return w
}

// closeAfter closes a log outside the timer.
// measure runs a workload of b.N operations and reports its figures.
func measure(b *testing.B, work func(n int) (Result, error)) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	r, err := work(b.N)
	if err != nil {
		b.Fatal(err)
	}
	report(b, r)
}

func closeAfter(b *testing.B, close func() error) {
	b.StopTimer()
	if err := close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBatchAppendSync: one op is a batch of 1,000 records of about
// 250 bytes, made durable with one fsync.
func BenchmarkBatchAppendSync(b *testing.B) {
	p := GetPool()
	b.Run("annal", func(b *testing.B) {
		l := newAnnal(b)
		defer closeAfter(b, l.Close)
		measure(b, func(n int) (Result, error) { return AnnalBatches(l, p, n) })
	})
	b.Run("tidwallwal", func(b *testing.B) {
		w := newWAL(b)
		defer closeAfter(b, w.Close)
		measure(b, func(n int) (Result, error) { return WALBatches(w, p, n) })
	})
}

// BenchmarkSingleAppendSync: one op is one record appended and fsynced,
// from one goroutine.
func BenchmarkSingleAppendSync(b *testing.B) {
	p := GetPool()
	b.Run("annal", func(b *testing.B) {
		l := newAnnal(b)
		defer closeAfter(b, l.Close)
		measure(b, func(n int) (Result, error) { return AnnalSingles(l, p, n) })
	})
	b.Run("tidwallwal", func(b *testing.B) {
		w := newWAL(b)
		defer closeAfter(b, w.Close)
		measure(b, func(n int) (Result, error) { return WALSingles(w, p, n) })
	})
}

// BenchmarkConcurrentSync: one op is one record appended with Sync
// durability by one of G goroutines. annal's group commit shares one write
// and one fsync among the appends waiting at that moment; records/fsync
// says how many did. tidwall/wal needs the caller to serialize index
// allocation and Write (see WALConcurrentMutex), so its 64-goroutine
// variant is labelled -mutex. ideal-G is the disk's limit: an ideal group
// commit on a plain *os.File (IdealGroup), records of annal's frame
// sizes, no encoding or bookkeeping.
func BenchmarkConcurrentSync(b *testing.B) {
	p := GetPool()
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("annal-%d", g), func(b *testing.B) {
			l := newAnnal(b)
			defer closeAfter(b, l.Close)
			measure(b, func(n int) (Result, error) { return AnnalConcurrent(l, p, n, g) })
		})
	}
	for _, g := range []int{1, 64} {
		name := fmt.Sprintf("tidwallwal-%d", g)
		if g > 1 {
			name += "-mutex"
		}
		b.Run(name, func(b *testing.B) {
			w := newWAL(b)
			defer closeAfter(b, w.Close)
			measure(b, func(n int) (Result, error) { return WALConcurrentMutex(w, p, n, g) })
		})
	}
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("ideal-%d", g), func(b *testing.B) {
			a, err := NewIdealGroup(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer closeAfter(b, a.Close)
			Settle()
			measure(b, func(n int) (Result, error) { return a.Run(n, g) })
		})
	}
}

// VerifyRecords is the size of the ledger BenchmarkVerify verifies.
const VerifyRecords = 200_000

var (
	verifyMu   sync.Mutex
	verifyLogs = map[int64]*segment.Log{}
)

// verifyLedger returns the ledger of VerifyRecords records with segments
// of segSize bytes, built once per process (outside any timer).
func verifyLedger(b *testing.B, segSize int64) *segment.Log {
	verifyMu.Lock()
	defer verifyMu.Unlock()
	if l, ok := verifyLogs[segSize]; ok {
		return l
	}
	if verifyDir == "" {
		d, err := os.MkdirTemp("", "annal-bench-verify-")
		if err != nil {
			b.Fatal(err)
		}
		verifyDir = d
	}
	l, err := BuildLedger(filepath.Join(verifyDir, fmt.Sprint(segSize)), VerifyRecords, segSize)
	if err != nil {
		b.Fatal(err)
	}
	verifyLogs[segSize] = l
	return l
}

// BenchmarkVerify: one op is Verify of the whole ledger of VerifyRecords
// records (about 51 MB; in the page cache after the first op). With the
// default 64 MiB segments the ledger is one segment, verified by one
// goroutine; Verify runs one goroutine per segment, so the 8MiB variant
// (7 segments) shows the parallel verification on the machine's cores.
func BenchmarkVerify(b *testing.B) {
	for _, v := range []struct {
		name    string
		segSize int64
	}{{"annal", 0}, {"annal-8MiB-segments", 8 << 20}} {
		b.Run(v.name, func(b *testing.B) {
			b.StopTimer()
			l := verifyLedger(b, v.segSize)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.StartTimer()
			var total Result
			for range b.N {
				r, err := AnnalVerify(ctx, l)
				if err != nil {
					b.Fatal(err)
				}
				if r.Records != VerifyRecords+1 {
					b.Fatalf("verified %d records, want %d", r.Records, VerifyRecords+1)
				}
				total.Records += r.Records
				total.Bytes += r.Bytes
				total.Elapsed += r.Elapsed
			}
			b.ReportMetric(total.RecordsPerSec(), "records/s")
			b.ReportMetric(total.MBPerSec(), "MB/s")
		})
	}
}
