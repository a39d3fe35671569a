// Package segment stores one ledger's events in checksum-chained segment
// files, the one source of truth of annal: everything else (the index, the
// metadata) can be rebuilt from them.
//
// A ledger's segments live in one directory, numbered from 1 without gaps,
// named by their number in 20 decimal digits: 00000000000000000001.seg,
// 00000000000000000002.seg, … Only the last one is ever written; a segment
// is sealed (synced, never written again) before the next one is created.
//
// # Segment header (64 bytes)
//
//	 0       8    10   12       16               24                               40               48               56    60     64
//	+--------+----+----+--------+----------------+--------------------------------+----------------+----------------+-----+------+
//	| magic  |ver |hlen| ledger | segment number | previous ID                    | previous seq   | created (µs)   | 0   | CRC  |
//	|annalseg| u16| u16|  u32   |      u64       | 16 bytes                       |      u64       |      u64       | u32 | u32  |
//	+--------+----+----+--------+----------------+--------------------------------+----------------+----------------+-----+------+
//
// The previous ID and sequence number are those of the last record of the
// segment before (for segment 1: the ledger's genesis ID and 0), so the
// chain crosses files and a segment can be verified on its own. The CRC is
// CRC32C of bytes 0 to 59. All integers are big-endian.
//
// # Record frame
//
//	 0        4        8        12
//	+--------+--------+--------+---------------------- … -+
//	| length |  CRC   | synced | payload (length bytes)    |
//	|  u32   |  u32   |  u32   |                           |
//	+--------+--------+--------+---------------------- … -+
//
// CRC is the CRC32C of the frame without the CRC field: length, synced and
// payload. synced is the offset in this segment up to which the writer knew
// the file to be on stable storage when it wrote this record: a record
// found after a crash vouches for every byte before its synced offset, which
// is how recovery tells a torn write (never synced) from corruption of data
// that was synced (see docs/recovery.md).
//
// # Payload, version 1 (56 bytes, then the strings and JSON)
//
//	 0    1    2      4      6      8        12       16      24          40          56
//	+----+----+------+------+------+--------+--------+-------+-----------+-----------+--------------------------------+
//	|kind|flag|entity| key  |event | meta   | data   | seq   | event ID  | previous  | entity key event meta data     |
//	| =1 | =0 | len  | len  | len  | len    | len    |       |           | event ID  | (raw bytes, in this order)     |
//	| u8 | u8 | u16  | u16  | u16  | u32    | u32    | u64   | 16 bytes  | 16 bytes  |                                |
//	+----+----+------+------+------+--------+--------+-------+-----------+-----------+--------------------------------+
//
// Flags bit 0 (0x01) marks the first record of a batch appended with an
// idempotency key; the payload then ends with a trailer: the batch's
// record count (u32), the key's length (u16) and the key. The trailer is
// not part of the event (the checksum does not cover it; the frame CRC
// does); it is there so that the index of idempotency keys can be rebuilt
// from the segments.
//
// Flags bit 1 (0x02) marks every record of a batch but its last. A batch
// never spans segments, so a last segment that ends with the bit set ends
// inside a batch that was never acknowledged: Open cuts the whole batch,
// as a torn write, so that a batch is all or nothing after a crash too.
//
// meta and data are canonical JSON (package canon), so verifying a record
// is CRC work: recompute the event checksum with package eventid over the
// stored bytes and compare with the ID. A fixed layout was chosen over
// msgpack: it decodes with a few loads and no allocation, and its size is
// known before encoding.
//
// # Guarantees
//
// A record is verified by: its frame CRC; its ledger; its event checksum
// recomputed; its previous ID equal to the ID of the record before it; its
// timestamp greater than that record's; its sequence number one more.
// Recovery on [Open] verifies every record after a progress marker; a partly
// written record at the very end of the last segment is a torn write and is
// cut off; anything else is [ErrCorruption] and nothing is cut.
package segment
