package s3test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// putTimer times every chunk Put through it.
type putTimer struct {
	store.Store
	mu    sync.Mutex
	times []time.Duration
}

func (p *putTimer) Put(ctx context.Context, key string, data []byte, cond store.Condition) (string, error) {
	start := time.Now()
	etag, err := p.Store.Put(ctx, key, data, cond)
	if err == nil && strings.Contains(key, "/wal/") {
		p.mu.Lock()
		p.times = append(p.times, time.Since(start))
		p.mu.Unlock()
	}
	return etag, err
}

// TestVersityGWWriterChunkRate measures, on versitygw over loopback, the
// chunks a Replicated Writer stores per second and one chunk upload's
// latency (p50, p99) under 1 and 64 appenders that each append one
// event and wait for it, again and again. It logs the figures; it
// checks only that every Wait succeeded and the bucket holds every
// record.
func TestVersityGWWriterChunkRate(t *testing.T) {
	for _, appenders := range []int{1, 64} {
		pt := &putTimer{Store: openStore(t)}
		sl := newSpanLog(t)
		ctx := context.Background()
		w, _, err := replica.Open(ctx, writerConfig(pt, sl, "rate"))
		if err != nil {
			t.Fatal(err)
		}
		sl.attach(w)
		if err := w.Take(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		pt.mu.Lock()
		pt.times = nil
		pt.mu.Unlock()
		const run = 2 * time.Second
		start := time.Now()
		var wg sync.WaitGroup
		for i := range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < run {
					if err := w.Wait(ctx, sl.append(1, i)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_, tail, err := replica.Open(ctx, writerConfig(pt, sl, "check"))
		if err != nil {
			t.Fatal(err)
		}
		if tail.Seq != sl.Head().Seq {
			t.Fatalf("%d appenders: the bucket ends at %d, the log at %d", appenders, tail.Seq, sl.Head().Seq)
		}
		pt.mu.Lock()
		times := slices.Clone(pt.times)
		pt.mu.Unlock()
		slices.Sort(times)
		records := sl.Head().Seq - 1
		t.Logf("%2d appenders: %d records in %d chunks in %s: %.0f chunks/s, %.0f records/s; chunk upload p50 %s, p99 %s",
			appenders, records, len(times), elapsed.Round(time.Millisecond),
			float64(len(times))/elapsed.Seconds(), float64(records)/elapsed.Seconds(),
			times[len(times)/2].Round(10*time.Microsecond), times[len(times)*99/100].Round(10*time.Microsecond))
	}
}
