package canon

import (
	"math"
	"strconv"
)

// A number's value is 0.d1d2…dk × 10^n with significant digits d1…dk
// (d1 and dk not zero), sign aside. Two texts denote the same decimal value
// exactly when they have the same sign, digits and n (or are both zero), so
// that is how canon checks that writing a number does not change it.

// fastDigits is the most significant digits a decimal may have to be sure
// to survive the round trip through a double: two decimals of 15 or fewer
// significant digits never round to the same double (DBL_DIG is 15), so the
// shortest digits that give back the double are the input's own digits.
const fastDigits = 15

// fastExp bounds n on the fast path, well inside the normal doubles (from
// about 2.2e-308 to 1.8e308) where the DBL_DIG guarantee holds.
const fastExp = 300

// maxShortest is the most digits the shortest round-trip form of a double
// can have; an input with more significant digits cannot be kept exactly.
const maxShortest = 17

// appendNumber reads the number at src[i] and appends its canonical form.
func appendNumber(dst, src []byte, i int) ([]byte, int, error) {
	start := i
	neg := src[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i < len(src) && src[i] == '0':
		i++
		if i < len(src) && src[i] >= '0' && src[i] <= '9' {
			return dst, i, newError(ErrSyntax, i, "leading zero in number")
		}
	case i < len(src) && src[i] >= '1' && src[i] <= '9':
		i++
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
	default:
		return dst, i, unexpected(src, i, "digit in number")
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(src) && src[i] == '.' {
		i++
		fracStart = i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == fracStart {
			return dst, i, unexpected(src, i, "digit after decimal point")
		}
		fracEnd = i
	}
	exp := 0
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		expNeg := false
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			expNeg = src[i] == '-'
			i++
		}
		expStart := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			if exp < 1e9 { // saturate: anything this large is out of range anyway
				exp = exp*10 + int(src[i]-'0')
			}
			i++
		}
		if i == expStart {
			return dst, i, unexpected(src, i, "digit in exponent")
		}
		if expNeg {
			exp = -exp
		}
	} else if fracStart == fracEnd && exactInteger(src[intStart:intEnd]) {
		if neg && intEnd-intStart == 1 && src[intStart] == '0' {
			return append(dst, '0'), i, nil // -0
		}
		return append(dst, src[start:i]...), i, nil
	}

	// Gather the significant digits (up to maxShortest+1 of them, enough to
	// know there are too many) and find n.
	var sig significand
	sig.n = intEnd - intStart + exp
	sig.add(src[intStart:intEnd])
	sig.add(src[fracStart:fracEnd])
	digits, k, n := sig.digits(), sig.k, sig.n
	if k == 0 {
		return append(dst, '0'), i, nil // zero, of any sign and exponent
	}
	if k <= fastDigits && n >= -fastExp && n <= fastExp {
		return appendDecimal(dst, neg, digits, n), i, nil
	}
	return slowNumber(dst, src, start, i, neg, digits, sig.mant, k, n)
}

// exactInteger reports whether digits (no sign, no leading zero) spell an
// integer of at most 2^53, which is then its own canonical form. A double
// holds it exactly, and its shortest digits are its own: every other
// decimal of no more digits is an integer at least 1 away, while up to 2^53
// the neighbouring doubles are at most 1 away, so such an integer rounds to
// another double (2^53+1 ties to 2^53, but has as many digits, and the
// shortest form takes the nearer one).
func exactInteger(digits []byte) bool {
	if len(digits) <= fastDigits {
		return true
	}
	if len(digits) > 16 {
		return false
	}
	var v uint64
	for _, d := range digits {
		v = v*10 + uint64(d-'0')
	}
	return v <= 1<<53
}

// slowNumber handles the numbers that may not survive the trip through a
// double: it rounds src[start:end] to a double, and accepts it only if the
// shortest form of that double has the input's digits and exponent.
func slowNumber(dst, src []byte, start, end int, neg bool, digits []byte, mant uint64, k, n int) ([]byte, int, error) {
	text := src[start:end]
	f, ok := exactFloat(mant, k, n)
	var err error
	if !ok {
		f, err = strconv.ParseFloat(string(text), 64)
	}
	if math.IsInf(f, 0) {
		return dst, start, newError(ErrNumberOverflow, start, "number "+abbrev(text)+" overflows a double")
	}
	if numErr, ok := err.(*strconv.NumError); err != nil && !(ok && numErr.Err == strconv.ErrRange) {
		return dst, start, newError(ErrSyntax, start, "malformed number "+abbrev(text))
	}
	if f == 0 {
		return dst, start, newError(ErrNumberPrecision, start, "number "+abbrev(text)+" underflows a double (it would become 0)")
	}
	// 'e' with precision -1 gives d[.ddd]e±XX with the shortest digits.
	var fbuf [32]byte
	e := strconv.AppendFloat(fbuf[:0], math.Abs(f), 'e', -1, 64)
	var dbuf [maxShortest]byte
	got := dbuf[:0]
	p := 0
	for ; e[p] != 'e'; p++ {
		if e[p] != '.' {
			got = append(got, e[p])
		}
	}
	x := 0
	for _, d := range e[p+2:] {
		x = x*10 + int(d-'0')
	}
	if e[p+1] == '-' {
		x = -x
	}
	gotN := x + 1
	if k != len(got) || n != gotN || string(digits) != string(got) {
		canonical := appendDecimal(nil, neg, got, gotN)
		return dst, start, newError(ErrNumberPrecision, start,
			"number "+abbrev(text)+" is not exactly representable as a double (it would become "+string(canonical)+")")
	}
	return appendDecimal(dst, neg, got, gotN), end, nil
}

// significand collects the significant digits of a number's mantissa.
type significand struct {
	buf     [maxShortest + 1]byte
	len     int    // digits kept in buf
	mant    uint64 // the kept digits as an integer, while k <= 19
	k       int    // significant digits, counting inner zeros
	zeros   int    // zeros since the last non-zero digit, not yet counted
	n       int    // decimal exponent: the value is 0.d1d2…dk × 10^n
	started bool   // a non-zero digit has been seen
}

// add takes the next run of mantissa digits. Leading zeros lower n;
// trailing zeros are dropped.
func (s *significand) add(run []byte) {
	for _, d := range run {
		switch {
		case d != '0':
			for ; s.zeros > 0; s.zeros-- {
				s.keep('0')
			}
			s.keep(d)
			s.started = true
		case s.started:
			s.zeros++
		default:
			s.n--
		}
	}
}

func (s *significand) keep(d byte) {
	if s.len < len(s.buf) {
		s.buf[s.len] = d
		s.len++
		s.mant = s.mant*10 + uint64(d-'0')
	}
	s.k++
}

// pow10 holds the powers of ten that a double holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactFloat returns the double nearest to mant × 10^(n-k) when one IEEE
// multiplication or division of two exact doubles gives it (Clinger's fast
// path: mant < 2^53 and a power of ten up to 1e22, so the operation rounds
// once, correctly). ok is false when the caller must use strconv.
func exactFloat(mant uint64, k, n int) (f float64, ok bool) {
	e := n - k
	if k > maxShortest || mant >= 1<<53 || e < -22 || e > 22 {
		return 0, false
	}
	if e < 0 {
		return float64(mant) / pow10[-e], true
	}
	return float64(mant) * pow10[e], true
}

// digits returns the kept digits: all of them when k <= maxShortest.
func (s *significand) digits() []byte { return s.buf[:s.len] }

// abbrev shortens a long number for an error message.
func abbrev(text []byte) string {
	if len(text) > 40 {
		return string(text[:37]) + "..."
	}
	return string(text)
}

// appendDecimal writes the number 0.digits × 10^n as ECMAScript's
// Number::toString does, digits being the shortest round-trip digits.
func appendDecimal(dst []byte, neg bool, digits []byte, n int) []byte {
	if neg {
		dst = append(dst, '-')
	}
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for ; n > k; n-- {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for ; n < 0; n++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		e := n - 1
		if e < 0 {
			dst = append(dst, 'e', '-')
			e = -e
		} else {
			dst = append(dst, 'e', '+')
		}
		dst = strconv.AppendInt(dst, int64(e), 10)
	}
	return dst
}
