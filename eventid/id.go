package eventid

import (
	"database/sql/driver"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// Size is the length of an ID in bytes.
const Size = 16

// ID is an Event ID: 16 bytes, big-endian, laid out as described in the
// package documentation. It is a value type; the zero value ID{} is the
// lowest ID and names no event.
type ID [Size]byte

// LedgerID names a ledger. Its low 2 bits are the ID algorithm version
// (0 today); the other 30 bits come from the checksum of the ledger's
// genesis event (see [Content.LedgerID]).
type LedgerID uint32

// versionMask selects the version bits of a LedgerID.
const versionMask = 0x3

// New returns the ID made of a timestamp in microseconds since the Unix
// epoch, an event checksum and a ledger ID.
func New(micros uint64, checksum uint32, ledger LedgerID) ID {
	var id ID
	binary.BigEndian.PutUint64(id[0:8], micros)
	binary.BigEndian.PutUint32(id[8:12], checksum)
	binary.BigEndian.PutUint32(id[12:16], uint32(ledger))
	return id
}

// Genesis returns the genesis ID of a ledger: timestamp 0, checksum 0 and
// the ledger ID, i.e. 24 zero hex digits followed by the ledger ID in hex.
// It names no event; it is the previous ID of the ledger's first event.
func Genesis(ledger LedgerID) ID {
	return New(0, 0, ledger)
}

// IsZero reports whether id is the zero ID, ID{}.
func (id ID) IsZero() bool {
	return id == ID{}
}

// Micros returns the ID's timestamp in microseconds since the Unix epoch.
func (id ID) Micros() uint64 {
	return binary.BigEndian.Uint64(id[0:8])
}

// Time returns the ID's timestamp as a UTC time. Every uint64 microsecond
// value has an exact time.Time, so no ID's time is clamped.
func (id ID) Time() time.Time {
	us := id.Micros()
	return time.Unix(int64(us/1e6), int64(us%1e6)*1e3).UTC()
}

// Checksum returns the ID's event checksum (bytes 8-11).
func (id ID) Checksum() uint32 {
	return binary.BigEndian.Uint32(id[8:12])
}

// Ledger returns the ID of the ledger the event belongs to (bytes 12-15).
func (id ID) Ledger() LedgerID {
	return LedgerID(binary.BigEndian.Uint32(id[12:16]))
}

// Version returns the ID algorithm version, the low 2 bits of the ledger ID.
func (id ID) Version() uint8 {
	return id.Ledger().Version()
}

// Compare returns -1, 0 or +1 as id sorts before, equal to or after o,
// with the semantics of bytes.Compare on the 16 bytes. Because the
// timestamp leads, this is time order.
func (id ID) Compare(o ID) int {
	a, b := binary.BigEndian.Uint64(id[0:8]), binary.BigEndian.Uint64(o[0:8])
	if a == b {
		a, b = binary.BigEndian.Uint64(id[8:16]), binary.BigEndian.Uint64(o[8:16])
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return +1
	}
	return 0
}

// Less reports whether id sorts before o; see [ID.Compare].
func (id ID) Less(o ID) bool {
	return id.Compare(o) < 0
}

// Version returns the ID algorithm version held in the low 2 bits.
func (l LedgerID) Version() uint8 {
	return uint8(l & versionMask)
}

// String returns the ledger ID as 8 lower-case hex digits, the form the
// checksum feeds and the last 8 digits of every hex ID of the ledger.
func (l LedgerID) String() string {
	var b [8]byte
	putHex32(b[:], uint32(l))
	return string(b[:])
}

// AppendHex appends the 8 lower-case hex digits of l to dst.
func (l LedgerID) AppendHex(dst []byte) []byte {
	var b [8]byte
	putHex32(b[:], uint32(l))
	return append(dst, b[:]...)
}

// MarshalText implements [encoding.TextMarshaler] with the 8 lower-case
// hex digits of [LedgerID.String]; encoding/json writes it as a string
// ("e95bff80"), as a value and as a map key.
func (l LedgerID) MarshalText() ([]byte, error) {
	return l.AppendHex(make([]byte, 0, 8)), nil
}

// AppendText implements [encoding.TextAppender] with the 8 hex digits.
func (l LedgerID) AppendText(dst []byte) ([]byte, error) {
	return l.AppendHex(dst), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]: 8 hex digits, either
// case, as [ParseLedgerID] reads them.
func (l *LedgerID) UnmarshalText(text []byte) error {
	v, err := ParseLedgerID(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// UnmarshalJSON implements [json.Unmarshaler]: a JSON string of 8 hex
// digits (what MarshalText gives encoding/json), or a JSON number from 0 to
// 2^32-1, the form encoding/json wrote before LedgerID had a text form. Any
// other value is an error wrapping [ErrJSONType]; null leaves l unchanged,
// as for [ID.UnmarshalJSON].
func (l *LedgerID) UnmarshalJSON(data []byte) error {
	switch {
	case string(data) == "null":
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("eventid: ledger ID in JSON: %w", err)
		}
		return l.UnmarshalText([]byte(s))
	}
	var n uint32
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("%w, found %s", ErrJSONType, quoteInput(string(data)))
	}
	*l = LedgerID(n)
	return nil
}

// MarshalText implements [encoding.TextMarshaler] with the canonical hex
// form (see [ID.String]).
func (id ID) MarshalText() ([]byte, error) {
	return id.AppendHex(make([]byte, 0, hexLen)), nil
}

// AppendText implements [encoding.TextAppender] with the canonical hex form.
func (id ID) AppendText(dst []byte) ([]byte, error) {
	return id.AppendHex(dst), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]. It accepts every text
// form that [Parse] accepts.
func (id *ID) UnmarshalText(text []byte) error {
	v, err := ParseBytes(text)
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalBinary implements [encoding.BinaryMarshaler]: the 16 bytes.
func (id ID) MarshalBinary() ([]byte, error) {
	return append(make([]byte, 0, Size), id[:]...), nil
}

// AppendBinary implements [encoding.BinaryAppender]: appends the 16 bytes.
func (id ID) AppendBinary(dst []byte) ([]byte, error) {
	return append(dst, id[:]...), nil
}

// UnmarshalBinary implements [encoding.BinaryUnmarshaler]. data must be
// exactly 16 bytes; anything else is an error wrapping [ErrLength].
func (id *ID) UnmarshalBinary(data []byte) error {
	if len(data) != Size {
		return fmt.Errorf("%w %d for a binary ID: want %d bytes", ErrLength, len(data), Size)
	}
	copy(id[:], data)
	return nil
}

// MarshalJSON implements [json.Marshaler]: a JSON string of the canonical
// hex form.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, hexLen+2)
	b = append(b, '"')
	b = id.AppendHex(b)
	return append(b, '"'), nil
}

// UnmarshalJSON implements [json.Unmarshaler]. It accepts a JSON string
// holding any text form that [Parse] accepts; any other JSON value is an
// error wrapping [ErrJSONType].
//
// JSON null leaves id unchanged and is not an error. That is the convention
// of encoding/json (a null for a Go value is a no-op), and it lets an
// optional ID be a plain ID field whose absence reads as ID{}; a caller that
// requires an ID checks [ID.IsZero], or uses *ID to tell null from absent.
func (id *ID) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return fmt.Errorf("%w, found %s", ErrJSONType, quoteInput(string(data)))
	}
	text := data[1 : len(data)-1]
	for _, c := range text {
		if c == '\\' {
			// An escaped string: rare for an ID, so let encoding/json
			// decode the escapes.
			var s string
			if err := json.Unmarshal(data, &s); err != nil {
				return fmt.Errorf("eventid: ID in JSON: %w", err)
			}
			return id.UnmarshalText([]byte(s))
		}
	}
	return id.UnmarshalText(text)
}

// Value implements [driver.Valuer]: the canonical hex string, which sorts in
// a text column as the ID sorts.
func (id ID) Value() (driver.Value, error) {
	return id.String(), nil
}

// Scan implements [database/sql.Scanner]. It accepts a string in any text
// form, or a []byte that is either the 16 raw bytes (as a binary or UUID
// column returns them) or any text form. SQL NULL is an error wrapping
// [ErrNull], as database/sql does for a non-nullable destination; scan into
// *ID or sql.Null[ID] for a nullable column.
func (id *ID) Scan(src any) error {
	switch v := src.(type) {
	case string:
		p, err := Parse(v)
		if err != nil {
			return err
		}
		*id = p
		return nil
	case []byte:
		if len(v) == Size {
			copy(id[:], v)
			return nil
		}
		return id.UnmarshalText(v)
	case nil:
		return ErrNull
	default:
		return fmt.Errorf("%w %T", ErrScanType, src)
	}
}
