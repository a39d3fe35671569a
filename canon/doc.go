// Package canon turns a JSON text into its canonical bytes: exactly the
// bytes that JavaScript's JSON.stringify writes for the parsed value after
// every object's keys have been put in Array.prototype.sort() order. The
// checksum of every event covers the canonical form of its meta and data,
// so these bytes must match, byte for byte, what produced the ledgers we
// verify (RFC 8785, JCS, with the key-order quirk of JavaScript objects
// described below).
//
// # Input
//
// Strict RFC 8259 JSON in UTF-8: one value, with optional whitespace (space,
// tab, LF, CR) before and after it. No comments, no trailing commas, no
// NaN or Infinity, no leading zeros, no byte order mark.
//
// # Output
//
// Compact: no whitespace anywhere. Arrays keep their order. The literals
// true, false and null are written as they are.
//
// Object members are ordered as a JavaScript object orders its own keys
// when they were inserted in sorted order:
//
//  1. keys that are array indices, the canonical decimal form of an integer
//     from 0 to 4294967294 ("0", "7", "4294967294"; not "01", "-1", "1.0" or
//     "4294967295"), in numeric order;
//  2. then every other key in UTF-16 code-unit order, which is not UTF-8
//     byte order: a key holding a character from U+10000 up (a surrogate
//     pair, D800-DBFF DC00-DFFF) sorts before one holding a character in
//     U+E000..U+FFFF at the same place, so "📒" (U+1F4D2) < "～" (U+FF5E).
//
// Keys are compared after unescaping, so `{"a":1,"\u0061":2}` repeats a key.
//
// Strings are written as JSON.stringify writes them: '"' as \" and '\' as
// \\; control characters below U+0020 as \b \t \n \f \r, or else as \u00xx
// with lower-case hex; everything else raw as UTF-8, including '/', '<',
// '>', '&', U+007F, U+2028 and U+2029. Escapes in the input (\/, \u0041,
// surrogate pairs such as \ud83d\udcd2) are decoded and written again by
// these rules.
//
// Numbers are read as IEEE-754 doubles (rounding to nearest) and written as
// ECMAScript's Number::toString writes them. With the shortest digits
// d1…dk that read back as the same double and the exponent n for which the
// value is 0.d1…dk × 10^n:
//
//	k <= n <= 21    digits, then n-k zeros         1E2 -> 100, 1e20 -> 100000000000000000000
//	0 < n <= 21     digits with a point after n    1.50 -> 1.5
//	-6 < n <= 0     "0.", -n zeros, digits         0.000001 -> 0.000001
//	otherwise       d1[.d2…dk]e+X or e-X           1e21 -> 1e+21, 1e-7 -> 1e-7, 123e-20 -> 1.23e-18
//
// Zero of either sign is written 0.
//
// # Rejections
//
// No data is lost silently. canon rejects, with an *Error that names the
// problem and the byte offset where it was found and wraps one of the
// sentinels in errors.go:
//
//   - text that is not JSON, including empty input and raw control
//     characters inside strings (ErrSyntax);
//   - bytes that are not valid UTF-8, in strings or anywhere else
//     (ErrInvalidUTF8);
//   - an object that repeats a key (ErrDuplicateKey, at the second one);
//   - a \u escape of a surrogate that is not part of a pair (ErrLoneSurrogate);
//   - a number whose magnitude rounds to infinity (ErrNumberOverflow);
//   - a number whose canonical text denotes a different decimal value than
//     the input: 12345678901234567890 would become 12345678901234567000, and
//     1e-400 would become 0 (ErrNumberPrecision). Numbers such as 0.1, 1.50,
//     1E2, 5e-324 and 0.30000000000000004 are exact and accepted;
//   - arrays and objects nested deeper than MaxDepth (ErrTooDeep);
//   - anything but whitespace after the value (ErrTrailingData).
//
// When an input has several problems, the one reported is the first the
// reader meets in one pass from the start, except that a repeated key is
// only known once its object has been read (at the latest when the object
// ends).
//
// # Use
//
// Append and AppendObject canonicalize into a caller's buffer and allocate
// nothing once it has room; a Canonicalizer does the same with its own
// scratch buffers. Members walks the members of an object without
// canonicalizing them, AppendString writes a canonical string literal and
// Unquote decodes one.
package canon
