package canon

import (
	"errors"
	"strconv"
)

// The errors canon reports. Every error returned by this package for bad
// input is an *Error that wraps exactly one of these sentinels, so callers
// can test the kind with errors.Is and get the byte offset with errors.As.
var (
	// ErrSyntax occurs when the input is not JSON as RFC 8259 defines it:
	// an unexpected byte or end of input, a malformed number or escape,
	// a raw control character (below U+0020) inside a string, or empty input.
	ErrSyntax = errors.New("canon: invalid JSON")

	// ErrInvalidUTF8 occurs when a string holds bytes that are not valid
	// UTF-8, or when a byte that cannot start valid UTF-8 stands where the
	// grammar expected something else.
	ErrInvalidUTF8 = errors.New("canon: invalid UTF-8")

	// ErrDuplicateKey occurs when one object names the same key twice. Keys
	// are compared after unescaping, so "a" and "\u0061" are the same key.
	// The offset is that of the second occurrence.
	ErrDuplicateKey = errors.New("canon: duplicate key")

	// ErrLoneSurrogate occurs when a \u escape in D800-DFFF is not part of a
	// high-low surrogate pair: JavaScript would keep such a string, but it
	// has no UTF-8 form.
	ErrLoneSurrogate = errors.New("canon: lone surrogate")

	// ErrNumberOverflow occurs when a number's magnitude rounds to infinity
	// as an IEEE-754 double (for example 1e400).
	ErrNumberOverflow = errors.New("canon: number overflows a double")

	// ErrNumberPrecision occurs when a number's canonical text denotes a
	// different decimal value than the input text: the number has more
	// precision than a double holds (12345678901234567890), or underflows
	// (1e-400 would become 0).
	ErrNumberPrecision = errors.New("canon: number not exactly representable")

	// ErrTooDeep occurs when arrays and objects nest deeper than MaxDepth.
	// The offset is that of the bracket that goes one level too deep.
	ErrTooDeep = errors.New("canon: nesting too deep")

	// ErrTrailingData occurs when anything but whitespace follows the value.
	ErrTrailingData = errors.New("canon: trailing data after JSON value")

	// ErrNotObject occurs when AppendObject or Members is given valid JSON
	// whose value is not an object. The offset is that of the value.
	ErrNotObject = errors.New("canon: JSON value is not an object")
)

// Error describes why an input was rejected and where. Its Unwrap method
// returns the sentinel that names the kind of problem (ErrSyntax,
// ErrDuplicateKey, ...), so errors.Is works on it.
type Error struct {
	// Err is the sentinel naming the kind of problem, e.g. ErrDuplicateKey.
	Err error
	// Offset is the byte offset in the input where the problem was found.
	Offset int64
	// Problem says what was wrong, e.g. `duplicate key "a"`.
	Problem string
}

// Error returns the problem and its offset, e.g.
// `canon: duplicate key "a" at offset 12`.
func (e *Error) Error() string {
	return "canon: " + e.Problem + " at offset " + strconv.FormatInt(e.Offset, 10)
}

// Unwrap returns the sentinel error, for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

func newError(kind error, offset int, problem string) *Error {
	return &Error{Err: kind, Offset: int64(offset), Problem: problem}
}

// describeAt names what stands at src[i] for an error message, and says
// whether it is invalid UTF-8 (which then takes precedence as the kind).
func describeAt(src []byte, i int) (desc string, invalidUTF8 bool) {
	if i >= len(src) {
		return "end of input", false
	}
	b := src[i]
	switch {
	case b >= 0x20 && b < 0x7f:
		return strconv.QuoteRune(rune(b)), false
	case b < 0x80:
		return "byte 0x" + hex2(b), false
	}
	r, size := decodeRune(src[i:])
	if size == 0 {
		return "byte 0x" + hex2(b), true
	}
	return strconv.QuoteRune(r) + " (U+" + strconv.FormatInt(int64(r), 16) + ")", false
}

// unexpected builds the error for a byte the grammar did not allow, where
// want says what the grammar expected.
func unexpected(src []byte, i int, want string) *Error {
	desc, bad := describeAt(src, i)
	if bad {
		return newError(ErrInvalidUTF8, i, "invalid UTF-8 "+desc+" (expected "+want+")")
	}
	return newError(ErrSyntax, i, "expected "+want+", found "+desc)
}

func hex2(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}
