package eventid

import (
	"math"
	"time"
)

// MaxMicros is the last microsecond an event may have:
// 9999-12-31T23:59:59.999999Z, the last time the interchange format
// (ISO-8601 with a four-digit year, see engine/ndjson) can write. An ID
// can hold times up to about the year 586,524, but an event after
// MaxMicros could be stored and never exported, verified or imported, so
// no event is given a later time: see [ErrTimeLimit].
const MaxMicros uint64 = 253402300799999999

// MaxTime is [MaxMicros] as a time.Time.
var MaxTime = time.UnixMicro(int64(MaxMicros)).UTC()

// MaxForLedger returns the highest ID of ledger l: the upper bound of a
// scan of the whole ledger, whatever its events' times. Every ID of l,
// even one after [MaxMicros], is at or below it.
func MaxForLedger(l LedgerID) ID {
	return New(math.MaxUint64, math.MaxUint32, l)
}

// MinForLedger returns the lowest ID of ledger l, (0, 0, l): the lower
// bound of a scan of the whole ledger.
func MinForLedger(l LedgerID) ID {
	return New(0, 0, l)
}

// Time bounds for range scans. Every ID whose timestamp is a given
// microsecond lies, in byte order, between MinForMicros and MaxForMicros of
// that microsecond, and MaxForMicros(us) < MinForMicros(us+1); so a scan of
// a time range seeks to the Min of its first microsecond and stops after the
// Max of its last.

// MinForMicros returns the lowest ID with timestamp us: (us, 0, 0).
func MinForMicros(us uint64) ID {
	return New(us, 0, 0)
}

// MaxForMicros returns the highest ID with timestamp us:
// (us, 0xffffffff, 0xffffffff).
func MaxForMicros(us uint64) ID {
	return New(us, math.MaxUint32, math.MaxUint32)
}

// MinForTime returns the lowest ID of the microsecond of t (t truncated to
// the microsecond; times before 1970 clamp to 0, see [MinForMicros]).
func MinForTime(t time.Time) ID {
	return MinForMicros(micros(t))
}

// MaxForTime returns the highest ID of the microsecond of t (t truncated to
// the microsecond; times before 1970 clamp to 0, see [MaxForMicros]).
func MaxForTime(t time.Time) ID {
	return MaxForMicros(micros(t))
}

// MinForTime returns the lowest ID of ledger l in the microsecond of t:
// (us, 0, l).
func (l LedgerID) MinForTime(t time.Time) ID {
	return New(micros(t), 0, l)
}

// MaxForTime returns the highest ID of ledger l in the microsecond of t:
// (us, 0xffffffff, l).
func (l LedgerID) MaxForTime(t time.Time) ID {
	return New(micros(t), math.MaxUint32, l)
}

// maxSeconds is the last whole second whose microseconds fit in a uint64.
const maxSeconds = math.MaxUint64 / 1_000_000

// micros returns t in microseconds since the Unix epoch, truncated (t's
// nanoseconds below the microsecond are dropped). An ID cannot hold a time
// before 1970, so such times clamp to 0; times past math.MaxUint64 µs
// (about the year 586,524) clamp to math.MaxUint64.
func micros(t time.Time) uint64 {
	s := t.Unix()
	switch {
	case s < 0:
		return 0
	case uint64(s) > maxSeconds:
		return math.MaxUint64
	}
	us := uint64(s)*1e6 + uint64(t.Nanosecond()/1e3)
	if us < uint64(s)*1e6 { // the last, partial second
		return math.MaxUint64
	}
	return us
}
