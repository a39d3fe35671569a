package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// probePut is the p50 of n PUTs of size bytes to the gateway, each to a
// new key under prefix, with the S3 SDK (as the replica's store does).
func probePut(gw *gateway, size int, prefix string, n int) (time.Duration, error) {
	body := bytes.Repeat([]byte{0xa5}, size)
	ds := make([]time.Duration, 0, n)
	for i := range n {
		t := time.Now()
		_, err := gw.client.PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%s%06d", prefix, i)),
			Body: bytes.NewReader(body), IfNoneMatch: aws.String("*"),
		})
		if err != nil {
			return 0, fmt.Errorf("probe: PUT %s%06d: %w", prefix, i, err)
		}
		ds = append(ds, time.Since(t))
	}
	return p50(ds), nil
}

// probeFsync is the p50 of n appends of size bytes to a plain file in
// dir, each followed by an fsync: one group commit's disk cost.
func probeFsync(dir string, size int, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := bytes.Repeat([]byte{0x5a}, size)
	ds := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("probe: fsync %s: %w", filepath.Base(f.Name()), err)
		}
		ds = append(ds, time.Since(t))
	}
	return p50(ds), nil
}

func p50(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// probePutRate is the PUTs per second that k PUT loops of size bytes,
// each to a new key under prefix, get from the gateway in d: the store's
// capacity at the Writer's depth of uploads in flight.
func probePutRate(gw *gateway, size int, prefix string, k int, d time.Duration) (float64, error) {
	body := bytes.Repeat([]byte{0xa5}, size)
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for w := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for ; time.Since(start) < d; n++ {
				_, err := gw.client.PutObject(context.Background(), &s3.PutObjectInput{
					Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%s%02d-%06d", prefix, w, n)),
					Body: bytes.NewReader(body), IfNoneMatch: aws.String("*"),
				})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("probe: PUT %s%02d-%06d: %w", prefix, w, n, err)
					}
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds(), first
}
