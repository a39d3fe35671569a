package eventid

import (
	"encoding/binary"
	"slices"
)

// Lengths of the text forms.
const (
	hexLen    = 32
	uuidLen   = 36
	base64Len = 22
	base32Len = 26
)

const (
	hexDigits = "0123456789abcdef"
	// base64Digits is in ASCII order, so the text sorts as the number does.
	base64Digits = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
	// base32Digits is Crockford's alphabet, as ULID uses it; also in ASCII
	// order.
	base32Digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

// invalid marks a byte that is no digit in a decoding table.
const invalid = 0xff

// Decoding tables: the digit value of each byte, or invalid.
var hexValues, base64Values, base32Values = func() (h, b64, b32 [256]byte) {
	for i := range 256 {
		h[i], b64[i], b32[i] = invalid, invalid, invalid
	}
	for i := range 16 {
		h[hexDigits[i]] = byte(i)
		h["0123456789ABCDEF"[i]] = byte(i)
	}
	for i := range len(base64Digits) {
		b64[base64Digits[i]] = byte(i)
	}
	for i := range len(base32Digits) {
		b32[base32Digits[i]] = byte(i)
		b32[base32Digits[i]|0x20] = byte(i) // lower case; digits are unchanged
	}
	// Crockford decoding, as ULID libraries do: I and L read as 1, O as 0.
	for _, c := range []byte("IiLl") {
		b32[c] = 1
	}
	b32['O'], b32['o'] = 0, 0
	return
}()

// hex8 returns the 8 lower-case hex digits of v packed in a uint64, the
// first digit in the top byte: bytes in big-endian order.
func hex8(v uint32) uint64 {
	// Spread the 8 nibbles of v over the 8 bytes of x, top nibble on top.
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	// Each byte n becomes '0'+n, plus 'a'-'0'-10 where n >= 10 (where
	// n+6 carries into bit 4; no byte carries into the next).
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101
	return x + 0x3030303030303030 + letters*('a'-'0'-10)
}

// putHex32 writes v as 8 lower-case hex digits into b[:8].
func putHex32(b []byte, v uint32) {
	binary.BigEndian.PutUint64(b, hex8(v))
}

// putHex writes the ID as 32 lower-case hex digits into b[:32].
func (id *ID) putHex(b []byte) {
	_ = b[31]
	for i := 0; i < Size; i += 4 {
		putHex32(b[2*i:], binary.BigEndian.Uint32(id[i:]))
	}
}

// grow extends dst by n bytes, allocating only if its capacity is short,
// and returns the extended slice and the n new bytes.
func grow(dst []byte, n int) (all, tail []byte) {
	dst = slices.Grow(dst, n)
	all = dst[:len(dst)+n]
	return all, all[len(dst):]
}

// String returns the canonical text form: 32 lower-case hex digits.
func (id ID) String() string {
	var b [hexLen]byte
	id.putHex(b[:])
	return string(b[:])
}

// AppendHex appends the canonical form, 32 lower-case hex digits, to dst.
func (id ID) AppendHex(dst []byte) []byte {
	dst, b := grow(dst, hexLen)
	id.putHex(b)
	return dst
}

// UUID returns the ID in the 8-4-4-4-12 form of a UUID, lower-case, e.g.
// for storing in a UUID column. It is the same 16 bytes, so it sorts the
// same; but an ID sets no UUID version or variant bits, so it is not a
// valid RFC 9562 UUID and software that checks those bits will reject it.
func (id ID) UUID() string {
	var b [uuidLen]byte
	id.putUUID(b[:])
	return string(b[:])
}

// AppendUUID appends the UUID form (see [ID.UUID]) to dst.
func (id ID) AppendUUID(dst []byte) []byte {
	dst, b := grow(dst, uuidLen)
	id.putUUID(b)
	return dst
}

func (id *ID) putUUID(b []byte) {
	var h [hexLen]byte
	id.putHex(h[:])
	_ = b[35]
	copy(b[0:8], h[0:8])
	b[8] = '-'
	copy(b[9:13], h[8:12])
	b[13] = '-'
	copy(b[14:18], h[12:16])
	b[18] = '-'
	copy(b[19:23], h[16:20])
	b[23] = '-'
	copy(b[24:36], h[20:32])
}

// Base64 returns the ID as 22 base-64 digits: the 128-bit number, most
// significant digit first, in the alphabet
// "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz", which
// is in ASCII order, so the text sorts as the ID does. 22 digits hold 132
// bits, so the first digit is one of '-', '0', '1', '2'. This is not RFC
// 4648 base64: the alphabet and the bit alignment differ.
func (id ID) Base64() string {
	var b [base64Len]byte
	id.putBase64(b[:])
	return string(b[:])
}

// AppendBase64 appends the base-64 form (see [ID.Base64]) to dst.
func (id ID) AppendBase64(dst []byte) []byte {
	dst, b := grow(dst, base64Len)
	id.putBase64(b)
	return dst
}

func (id *ID) putBase64(b []byte) {
	hi, lo := binary.BigEndian.Uint64(id[0:8]), binary.BigEndian.Uint64(id[8:16])
	_ = b[base64Len-1]
	for i := base64Len - 1; i >= 0; i-- {
		b[i] = base64Digits[lo&63]
		lo = lo>>6 | hi<<58
		hi >>= 6
	}
}

// Base32 returns the ID as 26 upper-case digits of Crockford's base 32,
// the way ULID encodes its 128 bits: most significant digit first, 130
// bits, so the first digit is 0-7. The text sorts as the ID does.
func (id ID) Base32() string {
	var b [base32Len]byte
	id.putBase32(b[:])
	return string(b[:])
}

// AppendBase32 appends the base-32 form (see [ID.Base32]) to dst.
func (id ID) AppendBase32(dst []byte) []byte {
	dst, b := grow(dst, base32Len)
	id.putBase32(b)
	return dst
}

func (id *ID) putBase32(b []byte) {
	hi, lo := binary.BigEndian.Uint64(id[0:8]), binary.BigEndian.Uint64(id[8:16])
	_ = b[base32Len-1]
	for i := base32Len - 1; i >= 0; i-- {
		b[i] = base32Digits[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
}

// Parse parses an ID in any of its text forms, told apart by length:
//
//	32  hex: 32 hex digits, upper, lower or mixed case
//	36  UUID: 8-4-4-4-12 hex digits joined by '-', either case
//	22  base64: see [ID.Base64]; case matters
//	26  base32: Crockford's base 32 as ULID reads it: either case, I and L
//	    read as 1, O as 0; a first digit above 7 overflows 128 bits
//
// Errors are *ParseError values that name the problem, the form and the
// byte offset of the bad character, and match ErrLength, ErrCharacter or
// ErrOverflow with errors.Is.
func Parse(s string) (ID, error) {
	return parse(s)
}

// ParseBytes is like [Parse] for a byte slice, and does not allocate unless
// it returns an error.
func ParseBytes(b []byte) (ID, error) {
	return parse(b)
}

// MustParse is like [Parse] but panics if s is not an ID. It is for tests
// and for IDs written in the program text.
func MustParse(s string) ID {
	id, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return id
}

func parse[T ~string | ~[]byte](s T) (ID, error) {
	switch len(s) {
	case hexLen:
		return parseHex(s)
	case uuidLen:
		return parseUUID(s)
	case base64Len:
		return parseBase64(s)
	case base32Len:
		return parseBase32(s)
	}
	return ID{}, parseError("", s, -1, ErrLength)
}

func parseHex[T ~string | ~[]byte](s T) (ID, error) {
	var id ID
	for i := range Size {
		h, l := hexValues[s[2*i]], hexValues[s[2*i+1]]
		if h|l > 0xf {
			return ID{}, badHex("hex", s)
		}
		id[i] = h<<4 | l
	}
	return id, nil
}

// uuidGroups are the offsets of the hex pairs of the UUID form, in order.
var uuidGroups = [Size]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

func parseUUID[T ~string | ~[]byte](s T) (ID, error) {
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return ID{}, badHex("UUID", s)
	}
	var id ID
	for i, at := range uuidGroups {
		h, l := hexValues[s[at]], hexValues[s[at+1]]
		if h|l > 0xf {
			return ID{}, badHex("UUID", s)
		}
		id[i] = h<<4 | l
	}
	return id, nil
}

// badHex returns the error for the first character of s that is not a hex
// digit (or, in the UUID form, not a '-' where one belongs, or a '-' where
// none does).
func badHex[T ~string | ~[]byte](form string, s T) error {
	for i := range len(s) {
		dash := form == "UUID" && (i == 8 || i == 13 || i == 18 || i == 23)
		if dash != (s[i] == '-') || (!dash && hexValues[s[i]] == invalid) {
			return parseError(form, s, i, ErrCharacter)
		}
	}
	return parseError(form, s, -1, ErrCharacter) // not reached
}

func parseBase64[T ~string | ~[]byte](s T) (ID, error) {
	// 22*6 = 132 bits: the top 4 must be 0, so the first digit is 0-3.
	if v := base64Values[s[0]]; v != invalid && v > 3 {
		return ID{}, parseError("base64", s, 0, ErrOverflow)
	}
	var hi, lo uint64
	for i := range base64Len {
		v := base64Values[s[i]]
		if v == invalid {
			return ID{}, parseError("base64", s, i, ErrCharacter)
		}
		hi = hi<<6 | lo>>58
		lo = lo<<6 | uint64(v)
	}
	return fromUint128(hi, lo), nil
}

func parseBase32[T ~string | ~[]byte](s T) (ID, error) {
	// 26*5 = 130 bits: the top 2 must be 0, so the first digit is 0-7.
	if v := base32Values[s[0]]; v != invalid && v > 7 {
		return ID{}, parseError("base32", s, 0, ErrOverflow)
	}
	var hi, lo uint64
	for i := range base32Len {
		v := base32Values[s[i]]
		if v == invalid {
			return ID{}, parseError("base32", s, i, ErrCharacter)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	return fromUint128(hi, lo), nil
}

func fromUint128(hi, lo uint64) ID {
	var id ID
	binary.BigEndian.PutUint64(id[0:8], hi)
	binary.BigEndian.PutUint64(id[8:16], lo)
	return id
}

// ParseLedgerID parses a ledger ID: 8 hex digits, either case.
func ParseLedgerID(s string) (LedgerID, error) {
	if len(s) != 8 {
		return 0, parseError("ledger", s, -1, ErrLength)
	}
	var v uint32
	for i := range 8 {
		d := hexValues[s[i]]
		if d == invalid {
			return 0, parseError("ledger", s, i, ErrCharacter)
		}
		v = v<<4 | uint32(d)
	}
	return LedgerID(v), nil
}
