package canon

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// plain[b] is true for the bytes a canonical string holds unchanged and that
// need no further look: ASCII from U+0020 up, except '"' and '\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 0x80; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// decodeRune decodes the UTF-8 sequence at the start of b. size is 0 when
// b is empty or does not start with valid UTF-8 (Go's decoder also refuses
// overlong forms and encoded surrogates, as RFC 3629 requires).
func decodeRune(b []byte) (r rune, size int) {
	r, size = utf8.DecodeRune(b)
	if r == utf8.RuneError && size <= 1 {
		return r, 0
	}
	return r, size
}

// plainRun returns the end of the run of plain bytes starting at src[i].
// It tests eight bytes at a time while it can: a word holds only plain bytes
// when no byte is below 0x20, none is '"' or '\', and none has the high bit.
func plainRun(src []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for i+8 <= len(src) {
		w := binary.LittleEndian.Uint64(src[i:])
		quote := w ^ (ones * '"')
		slash := w ^ (ones * '\\')
		// A byte of x is zero iff the same byte of (x-ones)&^x has its high bit
		// set (exact when no byte of x has its high bit, which w &highs tests).
		bad := (w - ones*0x20) | (quote - ones) | (slash - ones) | w
		if bad&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(src) && plain[src[i]] {
		i++
	}
	return i
}

// appendString reads the string literal at src[i] (which is '"'), appends
// its canonical form, quotes included, to dst and returns the index after
// the closing quote. escaped reports whether the canonical form holds a
// backslash escape, i.e. whether its content differs from the decoded text.
func appendString(dst, src []byte, i int) (out []byte, next int, escaped bool, err error) {
	dst = append(dst, '"')
	i++
	for {
		j := plainRun(src, i)
		dst = append(dst, src[i:j]...)
		i = j
		if i >= len(src) {
			return dst, i, escaped, unexpected(src, i, `'"' to end the string`)
		}
		switch b := src[i]; {
		case b == '"':
			return append(dst, '"'), i + 1, escaped, nil
		case b == '\\':
			r, n, err := readEscape(src, i)
			if err != nil {
				return dst, i, escaped, err
			}
			var esc bool
			dst, esc = appendRune(dst, r)
			escaped = escaped || esc
			i = n
		case b < 0x20:
			return dst, i, escaped, rawControl(i, b)
		default:
			_, size := decodeRune(src[i:])
			if size == 0 {
				return dst, i, escaped, newError(ErrInvalidUTF8, i, "invalid UTF-8 byte 0x"+hex2(b)+" in string")
			}
			dst = append(dst, src[i:i+size]...)
			i += size
		}
	}
}

// appendUnquoted is appendString's twin that appends the decoded text,
// without quotes, instead of the canonical literal.
func appendUnquoted(dst, src []byte, i int) (out []byte, next int, err error) {
	i++
	for {
		j := plainRun(src, i)
		dst = append(dst, src[i:j]...)
		i = j
		if i >= len(src) {
			return dst, i, unexpected(src, i, `'"' to end the string`)
		}
		switch b := src[i]; {
		case b == '"':
			return dst, i + 1, nil
		case b == '\\':
			r, n, err := readEscape(src, i)
			if err != nil {
				return dst, i, err
			}
			dst = utf8.AppendRune(dst, r)
			i = n
		case b < 0x20:
			return dst, i, rawControl(i, b)
		default:
			_, size := decodeRune(src[i:])
			if size == 0 {
				return dst, i, newError(ErrInvalidUTF8, i, "invalid UTF-8 byte 0x"+hex2(b)+" in string")
			}
			dst = append(dst, src[i:i+size]...)
			i += size
		}
	}
}

func rawControl(i int, b byte) *Error {
	return newError(ErrSyntax, i, "raw control character U+00"+hex2(b)+" in string (must be escaped)")
}

// readEscape decodes the escape sequence at src[i] (which is '\') and
// returns the character and the index after the sequence. A \u escape of a
// high surrogate must be followed at once by a \u escape of a low surrogate.
func readEscape(src []byte, i int) (r rune, next int, err error) {
	if i+1 >= len(src) {
		return 0, i, unexpected(src, i+1, "escape character")
	}
	switch src[i+1] {
	case '"':
		return '"', i + 2, nil
	case '\\':
		return '\\', i + 2, nil
	case '/':
		return '/', i + 2, nil
	case 'b':
		return '\b', i + 2, nil
	case 'f':
		return '\f', i + 2, nil
	case 'n':
		return '\n', i + 2, nil
	case 'r':
		return '\r', i + 2, nil
	case 't':
		return '\t', i + 2, nil
	case 'u':
	default:
		return 0, i, unexpected(src, i+1, `escape character (one of "\/bfnrtu)`)
	}
	r, err = readHex4(src, i+2)
	if err != nil {
		return 0, i, err
	}
	switch {
	case r < 0xd800 || r > 0xdfff:
		return r, i + 6, nil
	case r >= 0xdc00:
		return 0, i, newError(ErrLoneSurrogate, i, `lone low surrogate \u`+strconv.FormatInt(int64(r), 16))
	}
	if i+7 < len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
		lo, err := readHex4(src, i+8)
		if err != nil {
			return 0, i, err
		}
		if lo >= 0xdc00 && lo <= 0xdfff {
			return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), i + 12, nil
		}
	}
	return 0, i, newError(ErrLoneSurrogate, i, `high surrogate \u`+strconv.FormatInt(int64(r), 16)+` not followed by a low surrogate`)
}

// readHex4 reads the four hex digits of a \u escape at src[i:i+4].
func readHex4(src []byte, i int) (rune, error) {
	var r rune
	for j := i; j < i+4; j++ {
		if j >= len(src) {
			return 0, unexpected(src, j, `hex digit in \u escape`)
		}
		c := src[j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, unexpected(src, j, `hex digit in \u escape`)
		}
		r = r<<4 | rune(c)
	}
	return r, nil
}

// appendRune appends r as a canonical string writes it and reports whether
// that took a backslash escape.
func appendRune(dst []byte, r rune) ([]byte, bool) {
	switch {
	case r == '"' || r == '\\':
		return append(dst, '\\', byte(r)), true
	case r < 0x20:
		return appendControl(dst, byte(r)), true
	case r < utf8.RuneSelf:
		return append(dst, byte(r)), false
	}
	return utf8.AppendRune(dst, r), false
}

// appendControl appends the escape JSON.stringify writes for a control
// character: by name where JSON has one, else \u00xx in lower case.
func appendControl(dst []byte, b byte) []byte {
	switch b {
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	const digits = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', digits[b>>4], digits[b&15])
}

// AppendString appends s to dst as a canonical JSON string literal, quotes
// included, escaped exactly as JSON.stringify escapes it: '"' and '\' with a
// backslash, control characters below U+0020 as \b \t \n \f \r or \u00xx,
// everything else (including '/', '<', U+007F, U+2028 and all non-ASCII)
// written raw as UTF-8.
//
// s must be valid UTF-8 for the result to be canonical. Each byte of s that
// is not part of valid UTF-8 is written as the escape \ufffd, so the output
// is always valid JSON, but canonicalizing it again gives a raw U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && plain[s[j]] {
			j++
		}
		dst = append(dst, s[i:j]...)
		i = j
		if i >= len(s) {
			break
		}
		switch b := s[i]; {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
			i++
		case b < 0x20:
			dst = appendControl(dst, b)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return append(dst, '"')
}

// Unquote appends to dst the text of raw, which must be exactly one JSON
// string literal, quotes included, with nothing before or after it. It is
// as strict as Append: invalid UTF-8, lone surrogates, raw control
// characters and bad escapes are errors whose offsets are relative to raw.
// On error it returns dst unchanged in length.
func Unquote(dst, raw []byte) ([]byte, error) {
	n := len(dst)
	if len(raw) == 0 || raw[0] != '"' {
		return dst, unexpected(raw, 0, `'"' to start a string`)
	}
	dst, i, err := appendUnquoted(dst, raw, 0)
	if err != nil {
		return dst[:n], err
	}
	if i != len(raw) {
		return dst[:n], trailing(raw, i)
	}
	return dst, nil
}
