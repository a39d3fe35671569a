package eventid

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeTime returns a time source that reads the given microseconds in turn
// and then keeps reading the last one.
func fakeTime(us ...uint64) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		v := us[0]
		if len(us) > 1 {
			us = us[1:]
		}
		return time.UnixMicro(int64(v))
	}
}

func nextN(c *Clock, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = c.Next()
	}
	return out
}

func TestClockConcurrent(t *testing.T) {
	const goroutines, calls = 8, 100_000
	c := NewClock(0, nil)
	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range got {
		wg.Go(func() { got[g] = nextN(c, calls) })
	}
	wg.Wait()
	var all []uint64
	for g, ts := range got {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Fatalf("goroutine %d: call %d returned %d after %d", g, i, ts[i], ts[i-1])
			}
		}
		all = append(all, ts...)
	}
	slices.Sort(all)
	if n := len(slices.Compact(slices.Clone(all))); n != len(all) {
		t.Fatalf("%d duplicate timestamps among %d", len(all)-n, len(all))
	}
	if c.Last() != all[len(all)-1] {
		t.Errorf("Last = %d, want the greatest timestamp %d", c.Last(), all[len(all)-1])
	}
	// Timestamps stay near the wall clock: each call runs at most 1 µs
	// ahead of it.
	if ahead := int64(c.Last()) - time.Now().UnixMicro(); ahead > goroutines*calls {
		t.Errorf("clock ran %d µs ahead of the wall clock", ahead)
	}
	if c.Backwards() != 0 {
		t.Logf("the wall clock stepped back %d times during the test", c.Backwards())
	}
}

func TestClockStepBack(t *testing.T) {
	c := NewClock(0, fakeTime(1000, 1001, 500, 501, 2000, 2000, 1999))
	got := nextN(c, 8)
	want := []uint64{1000, 1001, 1002, 1003, 2000, 2001, 2002, 2003}
	if !slices.Equal(got, want) {
		t.Errorf("Next = %v, want %v", got, want)
	}
	// 1001 -> 500 and 2000 -> 1999 are steps back; 500 -> 501 and the
	// repeated 2000 and 1999 are not.
	if c.Backwards() != 2 {
		t.Errorf("Backwards = %d, want 2", c.Backwards())
	}
	if c.Last() != 2003 {
		t.Errorf("Last = %d, want 2003", c.Last())
	}
}

func TestClockResume(t *testing.T) {
	// The stored last timestamp is ahead of the wall clock (it stepped
	// back while the ledger was closed): the first reading counts.
	c := NewClock(5000, fakeTime(1000, 1001, 6000))
	if got, want := nextN(c, 3), []uint64{5001, 5002, 6000}; !slices.Equal(got, want) {
		t.Errorf("Next = %v, want %v", got, want)
	}
	if c.Backwards() != 1 {
		t.Errorf("Backwards = %d, want 1", c.Backwards())
	}
	// Resuming behind the wall clock is the normal case.
	c = NewClock(5000, fakeTime(7000))
	if got := c.Next(); got != 7000 || c.Backwards() != 0 {
		t.Errorf("Next = %d, Backwards = %d; want 7000, 0", got, c.Backwards())
	}
}

func TestClockSameMicrosecond(t *testing.T) {
	// A thousand calls in one µs, then a clock that advances 1 µs every
	// 10 calls: the Clock runs ahead of the wall clock; nothing stepped back.
	c := NewClock(0, fakeTime(1000))
	got := nextN(c, 1000)
	for i, ts := range got {
		if ts != 1000+uint64(i) {
			t.Fatalf("call %d returned %d, want %d", i, ts, 1000+i)
		}
	}
	var readings []uint64
	for i := range 1000 {
		readings = append(readings, 3000+uint64(i/10))
	}
	c2 := NewClock(0, fakeTime(readings...))
	nextN(c2, 1000)
	if c.Backwards() != 0 || c2.Backwards() != 0 {
		t.Errorf("Backwards = %d, %d; want 0", c.Backwards(), c2.Backwards())
	}
	if c2.Last() != 3999 {
		t.Errorf("Last = %d, want 3999", c2.Last())
	}
}

func TestClockObserve(t *testing.T) {
	c := NewClock(0, fakeTime(1000, 1001, 1002))
	c.Observe(5000)
	c.Observe(4000) // never lowers
	if c.Last() != 5000 {
		t.Errorf("Last = %d, want 5000", c.Last())
	}
	if got := c.Next(); got != 5001 {
		t.Errorf("Next = %d, want 5001", got)
	}
	if c.Backwards() != 0 {
		t.Errorf("Backwards = %d, want 0: Observe is not a reading", c.Backwards())
	}
}

func TestClockExhausted(t *testing.T) {
	c := NewClock(math.MaxUint64-1, fakeTime(1000))
	if got := c.Next(); got != math.MaxUint64 {
		t.Fatalf("Next = %d, want MaxUint64", got)
	}
	if got := c.Next(); got != 0 || c.Last() != math.MaxUint64 {
		t.Errorf("Next after MaxUint64 = %d (Last %d), want 0", got, c.Last())
	}
}

func TestClockWallTime(t *testing.T) {
	c := NewClock(0, nil)
	before := time.Now().UnixMicro()
	got := int64(c.Next())
	after := time.Now().UnixMicro()
	if got < before || got > after {
		t.Errorf("Next = %d, not within [%d, %d]", got, before, after)
	}
	// A time source before 1970 reads as 0.
	c = NewClock(0, func() time.Time { return time.Unix(-5, 0) })
	if got := c.Next(); got != 1 {
		t.Errorf("Next with a pre-1970 source = %d, want 1", got)
	}
}
