package ndjson

import (
	"errors"
	"fmt"

	"github.com/annal-db/annal/eventid"
)

// Errors of the NDJSON format. Each reaches the caller wrapped in a
// *LineError that names the line.
var (
	// ErrRead: the input could not be read (an I/O error, not a bad line).
	ErrRead = errors.New("ndjson: cannot read input")
	// ErrLineTooLong: a line is longer than the Reader's limit.
	ErrLineTooLong = errors.New("ndjson: line too long")
	// ErrEmptyLine: a line holds nothing but whitespace.
	ErrEmptyLine = errors.New("ndjson: empty line")
	// ErrUnknownField: a line has a field the format does not define.
	// Unknown fields are refused because no checksum covers them.
	ErrUnknownField = errors.New("ndjson: unknown field")
	// ErrMissingField: a line lacks one of the seven fields.
	ErrMissingField = errors.New("ndjson: missing field")
	// ErrFieldType: a field has the wrong JSON type or shape.
	ErrFieldType = errors.New("ndjson: wrong field type")
	// ErrTimestamp: the timestamp field is not ISO-8601 UTC with 3 or 6
	// fraction digits.
	ErrTimestamp = errors.New("ndjson: bad timestamp")
	// ErrMismatch: the ID computed from a line differs from its eventId.
	// The error is a *MismatchError.
	ErrMismatch = errors.New("ndjson: event ID mismatch")
	// ErrTimeOrder: an event's timestamp is not after the previous one's.
	ErrTimeOrder = errors.New("ndjson: timestamp not after the previous event's")
	// ErrNoEvents: the input holds no event, so no genesis event either.
	ErrNoEvents = errors.New("ndjson: no events (a ledger starts with its genesis event)")
)

// LineError is an error at one line of the input.
type LineError struct {
	Line int // counting from 1
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the error found at the line.
func (e *LineError) Unwrap() error { return e.Err }

// MismatchError says that a line's eventId is not the ID its content, its
// ledger and the previous event's ID give. It matches [ErrMismatch].
type MismatchError struct {
	Expected eventid.ID // computed from the line
	Found    eventid.ID // the line's eventId
	// Micros is the line's timestamp: when it differs from Found's time,
	// that alone explains the mismatch.
	Micros uint64
	// First: the line is the first of a ledger, whose content must give
	// the ledger ID (the genesis event).
	First bool
}

func (e *MismatchError) Error() string {
	msg := fmt.Sprintf("event ID mismatch: expected %s, found %s", e.Expected, e.Found)
	switch {
	case e.Found.Micros() != e.Micros:
		msg += fmt.Sprintf(" (the timestamp field is %d µs but the eventId carries %d µs)", e.Micros, e.Found.Micros())
	case e.Found.Ledger() != e.Expected.Ledger():
		msg += fmt.Sprintf(" (the eventId names ledger %s, not %s)", e.Found.Ledger(), e.Expected.Ledger())
	default:
		msg += " (checksum differs: the content or the chain was altered)"
	}
	if e.First && e.Found.Ledger() != e.Expected.Ledger() {
		msg += "; the first line must be the ledger's genesis event, whose content gives the ledger ID"
	}
	return msg
}

// Is reports whether target is [ErrMismatch].
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }
