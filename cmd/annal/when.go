package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/eventid"
)

// timeForms says which forms parseTime accepts, for its errors and help.
const timeForms = `RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00.5+02:00), a date and time with a space (2024-05-01 12:00:00, UTC unless a zone follows: 2024-05-01 14:00:00+02:00), a date (2024-05-01, midnight UTC), "now", a time relative to now (1h or -1h: an hour ago; 90m, 2d, 1h30m ago; +2w: two weeks ahead; units ms s m h d w), Unix seconds (1714564800, or 1714564800.250 for milliseconds), or an Event ID (its time)`

// timeLayouts are the layouts of an absolute time parseTime accepts, in
// the order it tries them. A layout without a zone is read as UTC, the
// zone of every time the command prints.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04Z07:00",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	time.DateOnly,
}

// maxUnixSeconds bounds a Unix time in seconds: 10^11 s is the year 5138,
// so a larger number is milliseconds or microseconds written without a
// point, which parseTime refuses rather than guess.
const maxUnixSeconds = 1e11

// parseTime parses a time bound of scan: RFC 3339, a date and time, a
// date, "now", a relative time (signed: before or after now; unsigned: that
// long ago, as kubectl's and nats's --since read it), Unix seconds, or an
// Event ID standing for its own time.
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
	// An Event ID (22 characters at least) before the forms it could be
	// mistaken for: hex digits can read as numbers with a unit "d".
	if id, err := eventid.Parse(s); err == nil {
		return id.Time(), nil
	}
	if len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
		if d, err := parseRelative("-" + s); err == nil {
			return now.Add(d), nil // 1h: an hour ago
		}
		if t, ok, err := parseUnix(s); ok {
			return t, err
		}
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want %s", s, timeForms)
}

// parseUnix parses Unix seconds, with a fraction or not (1714564800,
// 1714564800.25). ok is false if s is not a number of that form.
func parseUnix(s string) (t time.Time, ok bool, err error) {
	sec, frac, hasPoint := strings.Cut(s, ".")
	if sec == "" || strings.Trim(sec, "0123456789") != "" || hasPoint && (frac == "" || strings.Trim(frac, "0123456789") != "") {
		return time.Time{}, false, nil
	}
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n >= maxUnixSeconds {
		return time.Time{}, true, fmt.Errorf("%q is too large for Unix seconds (the year 5138 or later): a Unix time is in seconds here; write milliseconds as a fraction, 1714564800.250", s)
	}
	var nanos int64
	if hasPoint {
		frac = (frac + "000000000")[:9] // to nanoseconds; more digits are cut
		nanos, _ = strconv.ParseInt(frac, 10, 64)
	}
	return time.Unix(n, nanos).UTC(), true, nil
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
