package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/internal/replica/store/storetest"
	"github.com/annal-db/annal/segment/testseed"
)

// openProxiedStore opens a store on a fresh prefix of the test bucket
// through p, with short waits between attempts so that the tests stay
// quick.
func openProxiedStore(t *testing.T, p *faultProxy) *store.S3 {
	t.Helper()
	return openProxiedStoreWith(t, p, store.S3Options{BaseBackoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
}

// openProxiedStoreWith opens a store on a fresh prefix through p with
// opts.
func openProxiedStoreWith(t *testing.T, p *faultProxy, opts store.S3Options) *store.S3 {
	t.Helper()
	credentialsInEnvironment(t, secret)
	url := fmt.Sprintf("s3://%s/f%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), p.url)
	loc, err := store.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	s, err := store.OpenS3(context.Background(), loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unambiguous reports whether f leaves a request's outcome as the
// conformance table expects it: every fault but latency makes a
// conditional Put ambiguous to the client (a 5xx may come after the write
// landed), whose 412 then says it may have been applied, which the table
// checks is not said without cause. Other requests may meet any fault.
func unambiguous(r *http.Request, f fault) bool {
	if f == latency || r.Method != http.MethodPut {
		return true
	}
	return r.Header.Get("If-None-Match") == "" && r.Header.Get("If-Match") == ""
}

// TestFaultProxyConformance: the store's contract holds with 5% of the
// requests failing in every way the client retries. The table runs
// several times so that every class of fault is met.
func TestFaultProxyConformance(t *testing.T) {
	p := startFaultProxy(t, testseed.Seed(t), 0.05, fail500, fail503, lostResponse, succeededThen500, resetMidBody, latency)
	p.eligible = unambiguous
	for round := range 8 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return openProxiedStore(t, p) })
		})
	}
	p.report(t)
	if p.faults() == 0 {
		t.Fatal("no fault was injected")
	}
}

// TestFaultProxyLostCreates: create-only Puts whose answers are lost
// after they landed. Each Put succeeds or reports a 412 that may be its
// own earlier attempt; a read back then finds the caller's bytes (no
// false fence), and every key ends with its writer's bytes.
func TestFaultProxyLostCreates(t *testing.T) {
	p := startFaultProxy(t, testseed.Seed(t), 0.10, lostResponse)
	s := openProxiedStore(t, p)
	ctx := context.Background()
	maybe := 0
	for i := range 200 {
		key, data := fmt.Sprintf("wal/%03d", i), []byte(fmt.Sprintf("chunk %d", i))
		_, err := s.Put(ctx, key, data, store.CreateOnly())
		switch {
		case err == nil:
		case errors.Is(err, store.ErrPreconditionFailed) && errors.Is(err, store.ErrMaybeApplied):
			maybe++
			if o, err := s.Get(ctx, key); err != nil || !bytes.Equal(o.Data, data) {
				t.Fatalf("%s: after %v, read back %q, %v; want the caller's bytes", key, err, o.Data, err)
			}
		default:
			t.Fatalf("create %s: %v; want success or ErrPreconditionFailed with ErrMaybeApplied", key, err)
		}
	}
	for i := range 200 {
		key, data := fmt.Sprintf("wal/%03d", i), []byte(fmt.Sprintf("chunk %d", i))
		if o, err := s.Get(ctx, key); err != nil || !bytes.Equal(o.Data, data) {
			t.Fatalf("%s holds %q, %v; want %q", key, o.Data, err, data)
		}
	}
	p.report(t)
	t.Logf("%d of 200 creates answered 412 after an ambiguous attempt, all with the caller's bytes", maybe)
	if p.counts[lostResponse].Load() == 0 {
		t.Fatal("no response was lost")
	}
}

// TestFaultProxyBoundedCall: with the server failing every request, a Put
// gives up by its context's deadline or its attempts, rather than block.
// The waits between attempts are the defaults, under which ten attempts
// take longer than the context allows.
func TestFaultProxyBoundedCall(t *testing.T) {
	p := startFaultProxy(t, testseed.Seed(t), 1, fail503)
	s := openProxiedStoreWith(t, p, store.S3Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "wal/1", []byte("chunk"), store.CreateOnly())
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Put against a server that always answers 503 did not return")
	}
	if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put = %v; want ErrUnavailable or the context's deadline", err)
	}
	p.report(t)
	t.Logf("Put: %v", err)
}

// TestFaultProxyRacingCreates: two writers create the same keys through
// the proxy with faults. For each key exactly one writer's bytes are
// stored, and once the 412s that may be a writer's own earlier attempt
// are resolved by a read back, exactly that writer thinks it won.
func TestFaultProxyRacingCreates(t *testing.T) {
	p := startFaultProxy(t, testseed.Seed(t), 0.10, fail500, fail503, lostResponse, succeededThen500, resetMidBody, latency)
	const keys = 60
	first := openProxiedStore(t, p)
	// The second writer shares the first's prefix.
	second, err := store.OpenS3(context.Background(), first.Location(), store.S3Options{
		BaseBackoff: 2 * time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
		HTTPClient:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	})
	if err != nil {
		t.Fatal(err)
	}
	writers := []*store.S3{first, second}
	ctx := context.Background()
	bytesOf := func(w, i int) []byte { return []byte(fmt.Sprintf("writer %d chunk %d", w, i)) }
	var errs [2][keys]error
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range keys {
				_, errs[w][i] = writers[w].Put(ctx, fmt.Sprintf("wal/%03d", i), bytesOf(w, i), store.CreateOnly())
			}
		})
	}
	wg.Wait()
	wins := [2]int{}
	for i := range keys {
		key := fmt.Sprintf("wal/%03d", i)
		o, err := writers[0].Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		winners := 0
		for w := range writers {
			own := bytes.Equal(o.Data, bytesOf(w, i))
			err := errs[w][i]
			won := false
			switch {
			case err == nil:
				won = true
			case errors.Is(err, store.ErrPreconditionFailed):
				// A 412 after an ambiguous attempt may be the writer's own
				// object: the read back tells.
				won = own && errors.Is(err, store.ErrMaybeApplied)
			default:
				t.Fatalf("writer %d, %s: %v; want success or ErrPreconditionFailed", w, key, err)
			}
			if won != own {
				t.Fatalf("writer %d, %s: Put = %v but the key holds %q", w, key, err, o.Data)
			}
			if won {
				winners++
				wins[w]++
			}
		}
		if winners != 1 {
			t.Fatalf("%s holds %q: %d writers won it", key, o.Data, winners)
		}
	}
	p.report(t)
	t.Logf("keys won: writer 0 %d, writer 1 %d", wins[0], wins[1])
}
