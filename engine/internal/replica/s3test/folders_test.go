package s3test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// BenchmarkLedgerFoldersFromVersityGW measures listing the 2,500 ledger
// folders of a bucket on versitygw on the loopback, each holding three
// objects: with store.Folders (a page of 1,000 folders a request, as the
// engine lists a bucket's ledgers), and with one List of one key per
// folder, each starting after the folder before (as it listed them
// before Folders). It reports the requests and the CPU time of a
// listing: the process's, the gateway's (in-process) and the client's
// together, which the load of other work on the machine does not change
// as it changes the wall time.
func BenchmarkLedgerFoldersFromVersityGW(b *testing.B) {
	const n = 2500
	credentialsInEnvironment(b, secret)
	s := openPrefix(b, fmt.Sprintf("folders%d", prefixes.Add(1)))
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		for _, name := range []string{"checkpoint", "manifest/00000000000000000001", "wal/00000000000000000001"} {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := s.Put(ctx, fmt.Sprintf("ledgers/%08x/%s", i, name), []byte("x"), store.Condition{}); err != nil {
					b.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	for _, way := range []struct {
		name string
		list func() (folders, requests int)
	}{
		{"Folders", func() (int, int) {
			folders, requests, after := 0, 0, ""
			for {
				p, err := s.Folders(ctx, "ledgers/", after, 0)
				requests++
				if err != nil {
					b.Fatal(err)
				}
				folders += len(p.Folders)
				if !p.Truncated {
					return folders, requests
				}
				after = p.Folders[len(p.Folders)-1]
			}
		}},
		{"ListPerFolder", func() (int, int) {
			folders, requests, after := 0, 0, ""
			for {
				p, err := s.List(ctx, "ledgers/", after, 1)
				requests++
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Objects) == 0 {
					return folders, requests
				}
				name, _, _ := strings.Cut(strings.TrimPrefix(p.Objects[0].Key, "ledgers/"), "/")
				folders++
				after = "ledgers/" + name + "0"
			}
		}},
	} {
		b.Run(way.name, func(b *testing.B) {
			var requests int
			cpu0 := processCPU(b)
			start := time.Now()
			for range b.N {
				folders, r := way.list()
				if folders != n {
					b.Fatalf("listed %d folders, want %d", folders, n)
				}
				requests += r
			}
			cpu := (processCPU(b) - cpu0) / time.Duration(b.N)
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
			b.ReportMetric(float64(cpu.Microseconds())/1000, "cpu-ms/op")
			b.Logf("%d folders: %d requests, %v of CPU and %v of wall time a listing", n, requests/b.N, cpu, time.Since(start)/time.Duration(b.N))
		})
	}
}

// processCPU is the CPU time, user and system, the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
