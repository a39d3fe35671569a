package eventid

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Errors of parsing and scanning an ID. Match them with errors.Is; text
// parsing errors are *ParseError values that wrap one of the first three.
var (
	// ErrLength is returned when a text or binary ID has a length that no
	// form has: 32 (hex), 36 (UUID), 22 (base64) or 26 (base32) characters,
	// 8 hex characters for a ledger ID, 16 bytes for a binary ID.
	ErrLength = errors.New("eventid: invalid length")

	// ErrCharacter is returned when a text ID of a valid length holds a
	// character that its form does not allow at that position.
	ErrCharacter = errors.New("eventid: invalid character")

	// ErrOverflow is returned when a base64 or base32 ID denotes a number
	// of more than 128 bits: its first character is above '2' (base64) or
	// above '7' (base32).
	ErrOverflow = errors.New("eventid: overflows 128 bits")

	// ErrJSONType is returned when a JSON value for an ID is neither a
	// string nor null (for a LedgerID, nor a number).
	ErrJSONType = errors.New("eventid: ID in JSON must be a string")

	// ErrNull is returned when SQL NULL is scanned into an ID.
	ErrNull = errors.New("eventid: cannot scan NULL into an ID")

	// ErrScanType is returned when a database value of a type other than
	// string, []byte or nil is scanned into an ID.
	ErrScanType = errors.New("eventid: cannot scan into an ID a value of type")
)

// Errors of an event's time.
var (
	// ErrTimeLimit: an event would get a time after [MaxMicros] (a clock past
	// the year 9999, or a ledger whose last event is at MaxMicros, after which
	// no time is left). Nothing is stored.
	ErrTimeLimit = errors.New("eventid: time after 9999-12-31T23:59:59.999999Z, the last an event can have")
)

// ParseError describes a text ID or ledger ID that could not be parsed.
type ParseError struct {
	// Form is the text form the input was read as, chosen by its length:
	// "hex", "UUID", "base64", "base32" or "ledger"; empty when the length
	// fits no form.
	Form string
	// Input is the input quoted as a Go string, cut to its first 40 bytes
	// (and "..." added) when longer, so that hostile input is not echoed
	// whole.
	Input string
	// Len is the length of the whole input in bytes.
	Len int
	// Pos is the byte offset, from 0, of the offending character; -1 for
	// a length error.
	Pos int
	// Char is the offending character: the UTF-8 sequence at Pos, or the
	// single byte there if that is not valid UTF-8.
	Char string
	// Err is ErrLength, ErrCharacter or ErrOverflow.
	Err error
}

// maxEcho is how many bytes of bad input an error repeats.
const maxEcho = 40

// Error returns a message naming the problem, the form and the position, e.g.
// eventid: invalid character 'g' at position 5 in hex ID "0005dg813bf9c44943545b8f9e961c04".
func (e *ParseError) Error() string {
	switch e.Err {
	case ErrLength:
		want := "32 (hex), 36 (UUID), 22 (base64) or 26 (base32) characters"
		what := "an ID"
		if e.Form == "ledger" {
			want, what = "8 hex characters", "a ledger ID"
		}
		return fmt.Sprintf("eventid: invalid length %d for %s %s: want %s", e.Len, what, e.Input, want)
	case ErrOverflow:
		limit := "'2'"
		if e.Form == "base32" {
			limit = "'7'"
		}
		return fmt.Sprintf("eventid: %s ID %s overflows 128 bits: first character %s is above %s",
			e.Form, e.Input, e.Char, limit)
	}
	msg := fmt.Sprintf("eventid: invalid character %s at position %d in %s ID %s", e.Char, e.Pos, e.Form, e.Input)
	if e.Form == "UUID" && (e.Pos == 8 || e.Pos == 13 || e.Pos == 18 || e.Pos == 23) {
		msg += " (want '-')"
	}
	return msg
}

// Unwrap returns the sentinel error: ErrLength, ErrCharacter or ErrOverflow.
func (e *ParseError) Unwrap() error { return e.Err }

// parseError builds the error for input s; it runs only on failure, so the
// success path of parsing never allocates.
func parseError[T ~string | ~[]byte](form string, s T, pos int, err error) *ParseError {
	// One byte past maxEcho is enough for quoteInput to see the input was
	// cut, and copies no more of a huge []byte.
	e := &ParseError{Form: form, Input: quoteInput(string(s[:min(len(s), maxEcho+1)])), Len: len(s), Pos: pos, Err: err}
	if pos >= 0 && pos < len(s) {
		r, n := utf8.DecodeRuneInString(string(s[pos:min(len(s), pos+utf8.UTFMax)]))
		if r == utf8.RuneError && n <= 1 {
			e.Char = fmt.Sprintf("byte 0x%02x", s[pos])
		} else {
			e.Char = strconv.QuoteRune(r)
		}
	}
	return e
}

// quoteInput quotes s for an error message, cut to maxEcho bytes at a
// character boundary, with "..." when cut.
func quoteInput(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > maxEcho-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
