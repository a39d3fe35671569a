package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Human formats a value with its unit for a person: counts and rates get
// an SI prefix (1.23M events/s, 456k events/s), times are moved to the
// unit that suits them (12.3 ms, 850 µs, 1.5 s), and units that carry a
// prefix of their own (MB/s, MiB) keep it (1234 MB/s, 12.3 MB/s). Three
// significant digits are shown, and all the digits of a number of 1,000
// or more.
func Human(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strings.TrimSpace(fmt.Sprint(v) + " " + unit)
	}
	if secs, ok := timeUnits[unit]; ok {
		return humanSeconds(v * secs)
	}
	if prefixed(unit) {
		return strings.TrimSpace(Sig3(v) + " " + unit)
	}
	n := si(v)
	if unit == "" {
		return n
	}
	return n + " " + unit
}

// timeUnits are the units Human knows as times, in seconds.
var timeUnits = map[string]float64{
	"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1,
}

// prefixed reports whether unit starts with a decimal or binary prefix of
// its own (MB/s, GiB, kB), so that Human should not add another.
func prefixed(unit string) bool {
	for _, p := range []string{"kB", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"} {
		if strings.HasPrefix(unit, p) {
			return true
		}
	}
	return false
}

// si formats v with three significant digits and an SI prefix: 456, 45.6k,
// 1.23M, 4.56G. Values below 1000 keep all their integer digits.
func si(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 999.5e9: // not 1e12, so that 999.7e9 is 1.00T, not 1000G
		return Sig3(v/1e12) + "T"
	case a >= 999.5e6:
		return Sig3(v/1e9) + "G"
	case a >= 999.5e3:
		return Sig3(v/1e6) + "M"
	case a >= 999.5:
		return Sig3(v/1e3) + "k"
	}
	return Sig3(v)
}

// Sig3 formats v with three significant digits, never in exponent form, and
// with all the integer digits of a number of 1,000 or more: 0.0123, 1.23,
// 12.3, 123, 1234.
func Sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 99.95:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 9.995:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.9995:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	// Below 1: three significant digits, e.g. 0.123, 0.0456.
	decimals := 2 - int(math.Floor(math.Log10(a)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// humanSeconds formats a time given in seconds in the unit that suits it.
func humanSeconds(s float64) string {
	a := math.Abs(s)
	switch {
	case a == 0:
		return "0 s"
	case a < 0.9995e-6:
		return Sig3(s*1e9) + " ns"
	case a < 0.9995e-3:
		return Sig3(s*1e6) + " µs"
	case a < 0.9995:
		return Sig3(s*1e3) + " ms"
	}
	return Sig3(s) + " s"
}

// Micros formats a latency given in microseconds (as in Result.P50): 250 ns,
// 12.3 µs, 4.56 ms, 1.20 s. It returns "-" for 0 (not measured).
func Micros(us float64) string {
	if us == 0 {
		return "-"
	}
	return humanSeconds(us * 1e-6)
}

// RatioString formats a ratio as "0.74x", "1.35x", "12.3x" or "123x", or
// "n/a" when it is not known.
func RatioString(r float64) string {
	switch {
	case !(Summary{Ratio: r}).HasRatio():
		return NA
	case r < 0.1:
		// Two significant digits: 0.0043x, not 0.00x.
		return strconv.FormatFloat(r, 'g', 2, 64) + "x"
	case r < 9.995:
		return strconv.FormatFloat(r, 'f', 2, 64) + "x"
	}
	return Sig3(r) + "x"
}

// MiB formats a number of bytes in MiB: "123", "12.3", or "-" for 0.
func MiB(b int64) string {
	if b == 0 {
		return "-"
	}
	return Sig3(float64(b) / (1 << 20))
}
