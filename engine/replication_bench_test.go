package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// sleepingStore is a store whose chunk PUTs take at least d and no CPU:
// a remote store's latency, without the CPU an S3 server on the same
// machine takes from the appenders.
type sleepingStore struct {
	store.Store
	d time.Duration
}

func (s sleepingStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	time.Sleep(s.d)
	return s.Store.Put(ctx, key, data, cond)
}

// closedLoop runs appenders goroutines, each appending one event to
// ledger "l" of db and waiting for it, for d; it returns the events
// appended a second.
func closedLoop(b *testing.B, db *DB, appenders int, d time.Duration) float64 {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	start := time.Now()
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := a; time.Since(start) < d; i += appenders {
				if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
					b.Error(err)
					return
				}
				n++
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// BenchmarkReplicatedOnSleepingStore: 64 appenders each append one event
// and wait for it, in Replicated mode, on a store whose PUTs sleep 1 ms
// and take no CPU. It reports events/s, the Writer's mean upload
// (upload-ms: what the sleep really took), and the closed loop's bound,
// 64 ÷ (a local Sync append's mean time with 64 appenders, measured
// first for a second + the mean upload), as bound-events/s: the Writer
// near its bound says that what slows Replicated mode on a loopback S3
// server (bench/cmd/replbench) is the server's CPU, not the Writer.
func BenchmarkReplicatedOnSleepingStore(b *testing.B) {
	ctx := context.Background()
	const appenders = 64
	local, err := Open(b.TempDir(), &Options{Durability: Sync})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := local.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		b.Fatal(err)
	}
	localRate := closedLoop(b, local, appenders, time.Second)
	if err := local.Close(); err != nil {
		b.Fatal(err)
	}
	o := replOptions(sleepingStore{Store: store.NewMemory(), d: time.Millisecond}, Replicated)
	o.SegmentSize = 0
	db, err := Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		b.Fatal(err)
	}
	st0, err := db.ReplicaStatus("l")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	work := make(chan int, appenders)
	b.ResetTimer()
	for range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := db.Append(ctx, "l", []EventInput{order(i)}, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; b.Loop(); i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	st, err := db.ReplicaStatus("l")
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "events/s")
	if n := st.Uploads - st0.Uploads; n > 0 {
		upload := (st.UploadTime - st0.UploadTime) / time.Duration(n)
		b.ReportMetric(float64(upload)/float64(time.Millisecond), "upload-ms")
		b.ReportMetric(float64(b.N)/float64(n), "events/chunk")
		commit := float64(appenders) / localRate // seconds
		b.ReportMetric(float64(appenders)/(commit+upload.Seconds()), "bound-events/s")
		b.ReportMetric(localRate, "local-events/s")
	}
}
