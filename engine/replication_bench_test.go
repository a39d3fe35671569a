package engine

import (
	"context"
	"crypto/sha256"
	"sync"
	"syscall"
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
	replicatedClosedLoop(b, sleepingStore{Store: store.NewMemory(), d: time.Millisecond})
}

// busyStore is a store whose PUTs do a fixed amount of CPU work (hash
// work bytes) and then sleep d: an S3 server on the writer's own cores,
// whose every request takes CPU from the appenders.
type busyStore struct {
	store.Store
	work []byte
	d    time.Duration
}

func (s busyStore) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	sha256.Sum256(s.work)
	time.Sleep(s.d)
	return s.Store.Put(ctx, key, data, cond)
}

// BenchmarkReplicatedOnBusyStore: as BenchmarkReplicatedOnSleepingStore,
// on a store whose PUTs each hash 512 KiB (about 0.3 ms of one core)
// and then sleep 0.5 ms: the cost of a PUT in CPU, which the cut policy
// decides the number of. It reports events/chunk and the process's CPU
// per event (cpu-us/event), steadier than events/s on a shared machine.
func BenchmarkReplicatedOnBusyStore(b *testing.B) {
	replicatedClosedLoop(b, busyStore{Store: store.NewMemory(), work: make([]byte, 512<<10), d: 500 * time.Microsecond})
}

// replicatedClosedLoop measures 64 appenders in a closed loop in
// Replicated mode on st (see BenchmarkReplicatedOnSleepingStore).
func replicatedClosedLoop(b *testing.B, st store.Store) {
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
	o := replOptions(st, Replicated)
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
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
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
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	s, err := db.ReplicaStatus("l")
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-us/event")
	if n := s.Uploads - st0.Uploads; n > 0 {
		upload := (s.UploadTime - st0.UploadTime) / time.Duration(n)
		b.ReportMetric(float64(upload)/float64(time.Millisecond), "upload-ms")
		b.ReportMetric(float64(b.N)/float64(n), "events/chunk")
		commit := float64(appenders) / localRate // seconds
		b.ReportMetric(float64(appenders)/(commit+upload.Seconds()), "bound-events/s")
		b.ReportMetric(localRate, "local-events/s")
	}
}
