package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// BenchmarkS3Put measures one create-only Put through the S3 client
// against a local HTTP server that reads the body and answers 200: the
// client's CPU per PUT (request building, signing, the payload's hash,
// the HTTP transport) plus the bare server's, which no client option
// changes. The sizes are a Replicated chunk's with 64 appenders (5 KiB)
// and a Shipped chunk's at a high rate (7 MiB); "known-sha256" gives the
// data's SHA-256 (WithSHA256), as the Writer does for its chunks.
func BenchmarkS3Put(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	b.Setenv("AWS_ACCESS_KEY_ID", "bench")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret")
	b.Setenv("AWS_CONFIG_FILE", b.TempDir()+"/none")
	b.Setenv("AWS_SHARED_CREDENTIALS_FILE", b.TempDir()+"/none")
	s, err := OpenS3(context.Background(), Location{Bucket: "bench", Endpoint: srv.URL, PathStyle: true, Region: "us-east-1"}, S3Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{5 << 10, 7 << 20} {
		data := make([]byte, size)
		for _, known := range []bool{false, true} {
			name := fmt.Sprintf("%dKiB", size>>10)
			ctx := context.Background()
			if known {
				name += "/known-sha256"
				ctx = WithSHA256(ctx, sha256.Sum256(data))
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					if _, err := s.Put(ctx, "ledgers/00000001/wal/00000000000000000001", data, CreateOnly()); err != nil {
						b.Fatal(err)
					}
				}
				// The process's CPU (client and server), steadier than the
				// time on a machine shared with other work.
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the process's CPU time so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
