package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/annal-db/annal/eventid"
)

// timeForms says which forms parseTime accepts, for its errors and help.
const timeForms = `RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00.5+02:00), a date (2024-05-01, UTC), "now", a time relative to now (-1h, -30m, -7d, -1h30m, +2w; units ms s m h d w), or an Event ID (its time)`

// parseTime parses a time bound of scan: RFC 3339, a date, "now", a
// relative time, or an Event ID standing for its own time.
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		if d, err := parseRelative(s); err == nil {
			return now.Add(d), nil
		} else if _, idErr := eventid.Parse(s); idErr != nil {
			return time.Time{}, err
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if id, err := eventid.Parse(s); err == nil {
		return id.Time(), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want %s", s, timeForms)
}

// relativeUnits are the units of a relative time.
var relativeUnits = map[string]time.Duration{
	"ms": time.Millisecond,
	"s":  time.Second,
	"m":  time.Minute,
	"h":  time.Hour,
	"d":  24 * time.Hour,
	"w":  7 * 24 * time.Hour,
}

var errRelative = errors.New("not a relative time")

// parseRelative parses a signed sum of numbers with units, such as -1h,
// -30m, -7d, -1h30m, +1.5d, into a duration. The sign is required: it says
// before or after now.
func parseRelative(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("%w: %q: %s (e.g. -1h, -30m, -7d, -1h30m; units ms s m h d w)", errRelative, s, why)
	}
	if len(s) < 3 || (s[0] != '-' && s[0] != '+') {
		return bad("want a sign, then numbers with units")
	}
	neg := s[0] == '-'
	rest := s[1:]
	var total float64
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return bad(fmt.Sprintf("a number is missing before %q", rest))
		}
		num, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || rest[0] == '.' || rest[i-1] == '.' {
			return bad(fmt.Sprintf("%q is not a number", rest[:i]))
		}
		j := i
		for j < len(rest) && rest[j] >= 'a' && rest[j] <= 'z' {
			j++
		}
		unit, ok := relativeUnits[rest[i:j]]
		if !ok {
			if j == i {
				return bad(fmt.Sprintf("%q has no unit", rest[:i]))
			}
			return bad(fmt.Sprintf("unknown unit %q", rest[i:j]))
		}
		total += num * float64(unit)
		rest = rest[j:]
	}
	if total >= math.MaxInt64 {
		return bad("too long")
	}
	d := time.Duration(math.Round(total))
	if neg {
		d = -d
	}
	return d, nil
}
