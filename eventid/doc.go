// Package eventid implements the Event ID: the 128-bit name of an event that
// also tells its time, its ledger, and a checksum of its content chained to
// the event before it (version 1 of the algorithm, the Evently design).
//
// # The 16 bytes
//
// An ID is 16 bytes (offsets above the boxes), every field big-endian, so
// that byte order is time order:
//
//	0                               8               12              16
//	+-------------------------------+---------------+---------------+
//	|           timestamp           |   checksum    |   ledger ID   |
//	|    u64, µs since 1970 UTC     |  u32, CRC32C  | 30 bits | ver |
//	+-------------------------------+---------------+---------+-----+
//
// The fields:
//
//   - timestamp: microseconds since the Unix epoch. Within a ledger every
//     event's timestamp is greater than the one before ([Clock] makes them).
//   - checksum: the event checksum ([Content.Checksum]).
//   - ledger ID: names the ledger ([Content.LedgerID]); its low 2 bits are
//     the ID version, 00 today.
//
// The genesis ID of a ledger, [Genesis], is (0, 0, ledger ID). It names no
// event; it is the previous ID of the ledger's first event.
//
// # Checksum and ledger ID
//
// The checksum of an event is one running CRC32C (Castagnoli) over these
// UTF-8 bytes, with no separators:
//
//  1. entity  2. key  3. event name
//  4. meta as canonical JSON  5. data as canonical JSON
//  6. ledger ID as 8 lower-case hex digits
//  7. timestamp as 16 lower-case hex digits
//  8. previous event's ID as 32 lower-case hex digits
//
// The ledger ID is the CRC32C of steps 1-5 of the ledger's first event, with
// the version bits cleared (& 0xfffffffc). So a ledger is a CRC chain: each
// ID depends on the event's content and on the ID before it, and any
// implementation of the algorithm can verify it end to end. Canonical JSON
// is made by package canon; this package takes its bytes as given.
//
// # Text forms
//
// Every text form has a fixed length and sorts, as a string, exactly as the
// IDs sort, so [Parse] tells them apart by length. The first event of the
// Evently examples ledger:
//
//	form    length  text                                    made by
//	hex     32      0005d5813bf9c44943545b8f9e961c04        String, AppendHex (canonical)
//	UUID    36      0005d581-3bf9-c449-4354-5b8f9e961c04    UUID, AppendUUID
//	base64  22      --0SL0Dzb3HJCJLsyT_Wk3                  Base64, AppendBase64
//	base32  26      000QAR2EZSRH4M6N2VHYF9C704              Base32, AppendBase32
//
// The hex form is canonical: it is what the checksum feeds, what
// MarshalText, MarshalJSON and Value write, and the form to show people.
// Hex and UUID digits parse in either case. The UUID form carries no UUID
// version or variant bits. base64 is the 128-bit number in 22 digits of the
// alphabet "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
// (ASCII order; not RFC 4648), most significant first; base32 is Crockford's
// base 32 as ULID writes 128 bits, upper case, parsed in either case.
//
// # Time bounds
//
// [MinForTime] and [MaxForTime] give the lowest and highest ID of a
// microsecond, so a time range scan is one seek and a forward walk.
package eventid
