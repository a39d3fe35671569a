package eventid

import (
	"math"
	"sync"
	"time"
)

// Clock hands out the timestamps of one ledger's events: strictly
// increasing microseconds, close to the wall clock, also when the wall
// clock steps back and across restarts (the ledger's last timestamp is
// given to NewClock). It is safe for concurrent use.
//
// A Clock holds a mutex and reads the time source while holding it. That is
// as fast as a lock-free compare-and-swap loop on one core and faster on
// two (a failed swap must read the time again), and because readings are
// then taken in the order their timestamps are handed out, Backwards counts
// exactly the steps back of the time source, never an overtaken reader.
type Clock struct {
	now func() time.Time // nil: time.Now, called directly

	mu sync.Mutex
	// last is the last timestamp handed out or observed.
	// Invariant: last only grows; Next returns last+1 or more (or 0 once
	// last is math.MaxUint64, see Next).
	last uint64
	// reading is the previous reading of the time source in µs (last, as
	// given to NewClock, before the first reading).
	reading uint64
	// backwards counts the readings that were below the reading before.
	backwards uint64
}

// NewClock returns a Clock for a ledger whose last stored timestamp is last
// microseconds since the Unix epoch (0 for a new ledger). now is the time
// source; nil means time.Now. Readings before 1970 count as 0.
func NewClock(last uint64, now func() time.Time) *Clock {
	return &Clock{now: now, last: last, reading: last}
}

// Next returns the timestamp for the next event: the time source's reading
// in microseconds, or Last()+1 if that is greater, so that it is greater
// than every timestamp handed out or observed before, whichever goroutine
// asked. A reading below the previous one (the wall clock stepped back) is
// counted in Backwards.
//
// When Last() is math.MaxUint64 (about the year 586,524, so only after
// Observe or NewClock was given a corrupt timestamp) there is no next
// timestamp: Next returns 0, which no caller can take for one, since every
// timestamp Next hands out is at least 1, and leaves the Clock unchanged.
func (c *Clock) Next() uint64 {
	next, _ := c.NextAtMost(math.MaxUint64)
	return next
}

// NextAtMost is Next for timestamps up to limit: it returns the timestamp
// Next would hand out and true, or, if that timestamp would be above limit
// (the time source reads later, or Last() is limit or above), that
// timestamp (0 once Last() is math.MaxUint64) and false, and then hands
// nothing out: Last stays as it was, so a clock that read too far ahead
// and came back hands out timestamps again. The engine passes
// [MaxMicros].
func (c *Clock) NextAtMost(limit uint64) (uint64, bool) {
	c.mu.Lock()
	if c.last == math.MaxUint64 {
		c.mu.Unlock()
		return 0, false
	}
	var t time.Time
	if c.now == nil {
		t = time.Now()
	} else {
		t = c.now()
	}
	now := micros(t)
	if now < c.reading {
		c.backwards++
	}
	c.reading = now
	next := max(now, c.last+1)
	if next > limit {
		c.mu.Unlock()
		return next, false
	}
	c.last = next
	c.mu.Unlock()
	return next, true
}

// Last returns the last timestamp handed out by Next or raised to by
// Observe or NewClock.
func (c *Clock) Last() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Backwards returns how many times the time source returned a time earlier
// than its previous reading (for the first reading, earlier than the last
// timestamp given to NewClock): how often the wall clock stepped back.
// Calls that fall in one microsecond, or a Clock that runs ahead of the
// wall clock because it is asked more than once a microsecond, do not
// count; neither does Observe.
func (c *Clock) Backwards() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.backwards
}

// Observe raises Last to at least us, so that Next hands out only later
// timestamps; use it when storing events whose timestamps were given (an
// import). It never lowers Last, and it is not a reading of the time source.
func (c *Clock) Observe(us uint64) {
	c.mu.Lock()
	c.last = max(c.last, us)
	c.mu.Unlock()
}
