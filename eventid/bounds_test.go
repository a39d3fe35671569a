package eventid

import (
	"math"
	"testing"
	"time"
)

func TestMaxMicros(t *testing.T) {
	want := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	if !MaxTime.Equal(want) || MaxTime.UnixMicro() != int64(MaxMicros) {
		t.Fatalf("MaxTime %v, MaxMicros %d; want %v", MaxTime, MaxMicros, want)
	}
}

// TestLedgerBounds: every ID of a ledger, whatever its time, lies between
// MinForLedger and MaxForLedger; IDs of the ledgers next to it do not.
func TestLedgerBounds(t *testing.T) {
	const l = LedgerID(0x1234)
	lo, hi := MinForLedger(l), MaxForLedger(l)
	for _, us := range []uint64{0, 1, 1 << 52, 4611686018427387, 4611686018427388, MaxMicros, MaxMicros + 1, math.MaxUint64} {
		for _, n := range []uint32{0, 1, math.MaxUint32} {
			id := New(us, n, l)
			if id.Compare(lo) < 0 || id.Compare(hi) > 0 {
				t.Errorf("%s (%d µs) outside [%s, %s]", id, us, lo, hi)
			}
		}
	}
	if got := hi.Ledger(); got != l {
		t.Errorf("MaxForLedger's ledger %s", got)
	}
	if hi.Compare(New(math.MaxUint64, math.MaxUint32, l+1)) >= 0 || lo.Compare(New(0, 0, l-1)) <= 0 {
		t.Error("the bounds reach a neighbouring ledger")
	}
}

func TestClockNextAtMost(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(0, func() time.Time { return now })
	base := uint64(now.UnixMicro())
	if got, ok := c.NextAtMost(base); !ok || got != base {
		t.Fatalf("NextAtMost(now) = %d, %v; want %d, true", got, ok, base)
	}
	// The next is base+1, above the limit: refused, and Last stays.
	if got, ok := c.NextAtMost(base); ok || got != base+1 || c.Last() != base {
		t.Fatalf("NextAtMost(now) again = %d, %v (Last %d); want %d, false, Last %d", got, ok, c.Last(), base+1, base)
	}
	// A time source past the limit, then back: nothing handed out, then
	// timestamps again.
	now = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, ok := c.NextAtMost(MaxMicros); ok || got <= MaxMicros || c.Last() != base {
		t.Fatalf("NextAtMost(MaxMicros) at year 10000 = %d, %v (Last %d)", got, ok, c.Last())
	}
	now = time.Date(2000, 1, 1, 0, 0, 1, 0, time.UTC)
	if got, ok := c.NextAtMost(MaxMicros); !ok || got != uint64(now.UnixMicro()) {
		t.Fatalf("NextAtMost once the time source is back = %d, %v", got, ok)
	}
	full := NewClock(MaxMicros, func() time.Time { return now })
	if got, ok := full.NextAtMost(MaxMicros); ok || got != MaxMicros+1 {
		t.Fatalf("NextAtMost after a last of MaxMicros = %d, %v", got, ok)
	}
	if got := full.Next(); got != MaxMicros+1 {
		t.Fatalf("Next, unlimited, after MaxMicros = %d", got)
	}
}
