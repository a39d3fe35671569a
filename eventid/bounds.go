package eventid

import (
	"math"
	"time"
)

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
