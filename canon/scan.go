package canon

import "unicode/utf8"

// scanMaxDepth bounds the nesting ScanCanonical follows; deeper values are
// left to Append (they are valid up to MaxDepth, just not worth a fast path).
const scanMaxDepth = 64

// ScanCanonical reports whether src begins with a JSON value that is
// already in canonical form (exactly the bytes Append would write for it),
// and returns its length. It builds nothing and allocates nothing: it is a
// validating byte scan for the common case of input that a canonicalizer
// wrote (an export, a re-import).
//
// It is conservative: ok == true guarantees that Append(nil, src[:n])
// returns src[:n] unchanged and no error; ok == false says nothing (the
// value may be invalid, not canonical, or canonical in a way the scan does
// not confirm, such as a number with an exponent, a key with an escape or
// nesting deeper than 64). The caller then uses Append, which gives the
// canonical form or the error.
func ScanCanonical(src []byte) (n int, ok bool) {
	n = scanValue(src, 0, 0)
	return n, n > 0
}

// IsCanonical reports whether src is one JSON value already in canonical
// form, with nothing around it (see ScanCanonical).
func IsCanonical(src []byte) bool {
	n, ok := ScanCanonical(src)
	return ok && n == len(src)
}

// scanValue returns the end of the canonical value at src[i], or -1.
func scanValue(src []byte, i, depth int) int {
	if i >= len(src) {
		return -1
	}
	switch b := src[i]; b {
	case '"':
		return scanString(src, i)
	case '{':
		return scanObject(src, i, depth+1)
	case '[':
		return scanArray(src, i, depth+1)
	case 't':
		return scanLiteral(src, i, "true")
	case 'f':
		return scanLiteral(src, i, "false")
	case 'n':
		return scanLiteral(src, i, "null")
	default:
		if b == '-' || b >= '0' && b <= '9' {
			return scanNumber(src, i)
		}
		return -1
	}
}

func scanLiteral(src []byte, i int, lit string) int {
	if len(src)-i < len(lit) || string(src[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// shortEscape[b] is true for the escapes JSON.stringify writes as two
// characters: \" \\ \b \t \n \f \r.
var shortEscape = [256]bool{'"': true, '\\': true, 'b': true, 't': true, 'n': true, 'f': true, 'r': true}

// scanString returns the end of the canonical string literal at src[i]
// (which is '"'), or -1. Canonical strings hold raw UTF-8 (no escape but
// the short ones and \u00xx, lower-case, for the other control
// characters).
func scanString(src []byte, i int) int {
	i++
	for {
		i = plainRun(src, i)
		if i >= len(src) {
			return -1
		}
		switch b := src[i]; {
		case b == '"':
			return i + 1
		case b == '\\':
			if i+1 >= len(src) {
				return -1
			}
			e := src[i+1]
			if shortEscape[e] {
				i += 2
				continue
			}
			if e != 'u' || i+6 > len(src) || src[i+2] != '0' || src[i+3] != '0' {
				return -1
			}
			hi, lo := src[i+4], src[i+5]
			if hi != '0' && hi != '1' || !(lo >= '0' && lo <= '9' || lo >= 'a' && lo <= 'f') {
				return -1
			}
			switch c := (hi-'0')<<4 | hexVal(lo); c {
			case '\b', '\t', '\n', '\f', '\r':
				return -1 // written short
			}
			i += 6
		case b < 0x20:
			return -1 // a raw control character: invalid
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size <= 1 {
				return -1
			}
			i += size
		}
	}
}

func hexVal(b byte) byte {
	if b <= '9' {
		return b - '0'
	}
	return b - 'a' + 10
}

// scanNumber returns the end of the canonical number at src[i], or -1. It
// confirms only numbers written without an exponent whose digits (all of
// them, leading zeros of a fraction aside) are at most 15: every decimal of
// at most 15 significant digits reads back from the nearest double, so its
// shortest round-trip form is itself. The fraction must not end in '0',
// and a value below 1 may have at most 5 zeros after the point (0.000001
// is canonical, 0.0000001 is 1e-7).
func scanNumber(src []byte, i int) int {
	start := i
	if src[i] == '-' {
		i++
	}
	if i >= len(src) {
		return -1
	}
	digits := 0
	intZero := false
	switch c := src[i]; {
	case c == '0':
		intZero = true
		i++
	case c >= '1' && c <= '9':
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
			digits++
		}
	default:
		return -1
	}
	if i < len(src) && src[i] == '.' {
		i++
		fracStart := i
		zeros := 0
		for i < len(src) && src[i] == '0' && intZero {
			i++
			zeros++
		}
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
			digits++
		}
		if i == fracStart || src[i-1] == '0' || zeros > 5 {
			return -1
		}
	} else if intZero && src[start] == '-' {
		return -1 // -0 is written 0
	}
	if digits > 15 {
		return -1
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E' || src[i] >= '0' && src[i] <= '9' || src[i] == '.') {
		return -1
	}
	return i
}

func scanArray(src []byte, i, depth int) int {
	if depth > scanMaxDepth {
		return -1
	}
	i++
	if i < len(src) && src[i] == ']' {
		return i + 1
	}
	for {
		if i = scanValue(src, i, depth); i < 0 || i >= len(src) {
			return -1
		}
		switch src[i] {
		case ',':
			i++
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

// scanObject returns the end of the canonical object at src[i], or -1: its
// keys hold no escape and are in canonical order, strictly (no repeat).
func scanObject(src []byte, i, depth int) int {
	if depth > scanMaxDepth {
		return -1
	}
	i++
	if i < len(src) && src[i] == '}' {
		return i + 1
	}
	var prev []byte
	first := true
	for {
		if i >= len(src) || src[i] != '"' {
			return -1
		}
		end := scanString(src, i)
		if end < 0 {
			return -1
		}
		key := src[i+1 : end-1]
		for _, b := range key {
			if b == '\\' {
				return -1
			}
		}
		if !first && compareKeys(prev, key) >= 0 {
			return -1
		}
		prev, first = key, false
		i = end
		if i >= len(src) || src[i] != ':' {
			return -1
		}
		if i = scanValue(src, i+1, depth); i < 0 || i >= len(src) {
			return -1
		}
		switch src[i] {
		case ',':
			i++
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// compareKeys orders two decoded keys as canonical objects order them
// (see Canonicalizer.compare).
func compareKeys(a, b []byte) int {
	ai, aIdx := arrayIndex(a)
	bi, bIdx := arrayIndex(b)
	switch {
	case aIdx && bIdx:
		return cmpUint32(ai, bi)
	case aIdx:
		return -1
	case bIdx:
		return 1
	}
	return compareUTF16(a, b)
}
