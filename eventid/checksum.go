package eventid

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/klauspost/crc32"
)

// castagnoli is the CRC32C table, made once. klauspost/crc32 recognises it
// and uses the CPU's CRC32 instructions where there are any.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// slicing8 are the slicing-by-8 tables of CRC32C, for crcHex8.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *castagnoli
	for i := range 256 {
		crc := t[0][i]
		for j := 1; j < 8; j++ {
			crc = t[0][crc&0xff] ^ crc>>8
			t[j][i] = crc
		}
	}
	return t
}()

// crcHex8 continues a CRC32C over the 8 lower-case hex digits of v. crc is
// the inverted running state (^ of what crc32.Update takes and returns).
//
// Steps 6-8 of the checksum go through crcHex8 rather than crc32.Update on a
// buffer because crc32.Update reaches its assembly through a function
// variable, so escape analysis must assume the buffer escapes and moves a
// stack array to the heap: one allocation per event. Here the digits never
// touch memory, and slicing-by-8 over 56 bytes is as fast as the CRC
// instruction plus a call.
func crcHex8(crc uint32, v uint32) uint32 {
	w := bits.ReverseBytes64(hex8(v)) // the digits in memory order
	crc ^= uint32(w)
	return slicing8[0][byte(w>>56)] ^ slicing8[1][byte(w>>48)] ^
		slicing8[2][byte(w>>40)] ^ slicing8[3][byte(w>>32)] ^
		slicing8[4][crc>>24] ^ slicing8[5][byte(crc>>16)] ^
		slicing8[6][byte(crc>>8)] ^ slicing8[7][byte(crc)]
}

// Content is what an event's checksum covers besides its place in the
// ledger. Meta and Data must already be canonical JSON (package canon makes
// them): the checksum is over these exact bytes, so a different but
// equivalent spelling of the same JSON gives a different checksum.
type Content struct {
	Entity string // entity name, e.g. "order"
	Key    string // entity key, e.g. "order-42"
	Event  string // event name, e.g. "order-placed"
	Meta   []byte // canonical JSON object
	Data   []byte // canonical JSON value
}

// contentCRC returns the running CRC32C after steps 1-5: entity, key,
// event name, meta and data, with no separators.
func (c *Content) contentCRC() uint32 {
	crc := crc32.Update(0, castagnoli, stringBytes(c.Entity))
	crc = crc32.Update(crc, castagnoli, stringBytes(c.Key))
	crc = crc32.Update(crc, castagnoli, stringBytes(c.Event))
	crc = crc32.Update(crc, castagnoli, c.Meta)
	return crc32.Update(crc, castagnoli, c.Data)
}

// LedgerID returns the ID of the ledger that c is the genesis (first) event
// of: the CRC32C of steps 1-5 with the 2 version bits cleared (version 0).
func (c *Content) LedgerID() LedgerID {
	return LedgerID(c.contentCRC() &^ versionMask)
}

// Checksum returns the event checksum of c as the event of ledger at
// timestamp micros that follows the event prev (for a ledger's first
// event, prev is [Genesis](ledger)). It is one running CRC32C over, with no
// separators:
//
//  1. entity  2. key  3. event name  4. meta  5. data
//  6. ledger as 8 lower-case hex digits
//  7. micros as 16 lower-case hex digits
//  8. prev as 32 lower-case hex digits
//
// It does not allocate.
func (c *Content) Checksum(ledger LedgerID, micros uint64, prev ID) uint32 {
	crc := ^c.contentCRC()
	crc = crcHex8(crc, uint32(ledger))
	crc = crcHex8(crc, uint32(micros>>32))
	crc = crcHex8(crc, uint32(micros))
	for i := 0; i < Size; i += 4 {
		crc = crcHex8(crc, binary.BigEndian.Uint32(prev[i:]))
	}
	return ^crc
}

// ID returns the ID of c as the event of ledger at timestamp micros that
// follows the event prev: New(micros, c.Checksum(ledger, micros, prev), ledger).
func (c *Content) ID(ledger LedgerID, micros uint64, prev ID) ID {
	return New(micros, c.Checksum(ledger, micros, prev), ledger)
}

// stringBytes returns the bytes of s without copying; the CRC only reads
// them.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
