// Package index is annal's Pebble index. Everything in it can be rebuilt
// from the segment files (package segment), which stay the one source of
// truth: for every ledger it maps an event ID to its sequence number and
// location, a sequence number to its ID, an (entity, key) stream and an
// event name to their events in order, an idempotency key to the batch it
// appended, and it records how far the ledger has been indexed.
//
// # Keys and values
//
// Every key starts with a one-byte family tag and, except V, the ledger ID,
// so one family of one ledger is one contiguous key range (which is how
// [Index.DeleteLedger] removes a ledger). Integers in keys are fixed-width and
// big-endian, so byte order is numeric order. Every variable-length part
// (entity, key, event name, idempotency key) is preceded by its length as a
// uvarint: a uvarint is prefix-free, so no byte of a name can be read as a
// boundary and two different tuples never share an encoding (entity "a" key
// "bc" is 01 61 02 62 63, entity "ab" key "c" is 02 61 62 01 63). No
// separator byte is ever relied on.
//
//	family  key                                                       value
//	------  --------------------------------------------------------  ----------------------------------------------
//	V       'V'                                                       format version u32 (= 4)
//	T       'T' ledger u32 | last id [16]                             a block of up to 64 events (below)
//	S       'S' ledger u32 | last seq u64                             last id [16]: the T key of the block
//	E       'E' ledger u32 | uvarint n | entity [n] |                 posting: events' locations and IDs (below)
//	               uvarint m | key [m] | first seq u64
//	A       'A' ledger u32 | uvarint n | entity [n] | first seq u64   posting
//	N       'N' ledger u32 | uvarint n | event name [n] |             posting
//	               first seq u64
//	K       'K' ledger u32 | uvarint n | idempotency key [n]          first seq u64 | count u32 | digest [32]
//	P       'P' ledger u32                                            head id [16] | seq u64 | segment u64 |
//	                                                                      offset u64 | size u32
//	                                                                      [ | durable id [16] | seq u64 |
//	                                                                        segment u64 | offset u64 | size u32 ]
//
// A T block holds a run of consecutive events of one ledger written by
// one commit ([Batch.Commit]): consecutive sequence numbers, consecutive
// frames of one segment, increasing timestamps, at most 64 (blockMax).
// Its key is the ID of its last event; its value is
//
//	uvarint first seq | uvarint segment | uvarint offset of the first frame |
//	uvarint first timestamp (µs) | checksum u32 | uvarint frame size
//	[ uvarint timestamp delta (> 0) | checksum u32 | uvarint frame size ]...
//
// one checksum and size for the first event, then one delta, checksum
// and size for each later one. The sequence number of the i-th event is
// the first plus i, its frame's offset the first's plus the sizes before
// it, its ID the timestamp, checksum and the key's ledger (see package
// eventid); the last must be the key's ID. A ledger's IDs grow with its
// sequence numbers (the segments refuse a timestamp that is not after
// the one before), so the blocks of a ledger are in the same order by
// last ID and by last sequence number, and their ranges do not overlap:
// the block of an ID is the first whose key is at or after it (SeekGE),
// and the block of a sequence number the first whose S key is.
//
// A posting lists one commit's events of one stream (E), entity (A) or
// event name (N), in order, at most 256 (postingMax) an entry, with what a
// reader needs to yield their positions without S and T: the first
// sequence number is in the key, and the value is
//
//	uvarint segment | uvarint offset | uvarint size | uvarint first µs |
//	checksum u32                                          (the first event)
//	[ uvarint seq delta (> 0) | uvarint segment delta | uvarint offset or gap |
//	  uvarint size | uvarint µs delta (> 0) | checksum u32 ]...  (each later one)
//
// where the offset or gap is, in the segment of the event before, the gap
// from the end of its frame, and in a later segment the offset. Each
// event's sequence number, timestamp and frame are after the one
// before's (an event that is not starts a new entry). Format 3 held only
// the sequence number deltas, and readers went through S and T for each.
//
// (segment, offset, size) is a [segment.Location]: the segment number, the
// offset of the record's frame in it and the frame's size. S values are
// 16 bytes, K 44, P 44 or 88; a value of any other size, a block or a
// posting that does not decode as above (a truncated or overlong varint,
// a delta of 0, a sum beyond 2^64-1, an offset above the largest int64, a
// size above the largest uint32, bytes after the last event, a last event
// other than the key's), is reported as [ErrCorruption] naming the key,
// never a panic.
//
// Format 2 had five entries an event (T by ID, S by seq, and E, A, N
// each repeating the ID and location); format 3 writes, for a commit of n
// events of one stream, about n/64 T and S entries and 3 postings (per
// distinct stream, entity and name), which is what made appends cheaper
// (docs/decisions/index-format-3.md); format 4 put the IDs and
// locations in the postings (docs/decisions/index-format-4.md).
//
// # Order
//
//   - T: by the last ID of each block within a ledger. The ID begins with
//     its timestamp, so this is time order, and [Index.TimeRange] is one
//     seek and a walk.
//   - S: by the last sequence number of each block.
//   - E: grouped by entity, then by key, then by sequence number. Because the
//     key is length-prefixed, keys are grouped in the byte order of their
//     encoding (uvarint length, then bytes), not in lexical order: every
//     key of length 1 comes before every key of length 2, and so on for
//     lengths below 128. [Index.Stream] reads one (entity, key) group in
//     sequence order; [Index.Entity] reads all the groups of an entity one
//     after the other, in this order.
//   - A: grouped by entity, then by sequence number: all keys of an entity
//     in ledger order ([Index.EntityEvents]).
//   - N: grouped by event name, then by sequence number.
//
// # Durability
//
// Pebble runs without a write-ahead log: a commit ([Batch.Commit] with
// sync false) goes to its memtable and does no I/O, so a full disk or an
// I/O error never fails it. A crash loses what was committed since the
// memtables were last flushed (by [Index.Flush], which the engine calls on
// Close, or when a memtable fills), and reopening the engine re-indexes it
// from the segments. The progress marker P of a ledger is written in the
// same Pebble batch as the entries it covers, Pebble applies a batch
// atomically, and a flush writes every batch up to some point: what
// survives is a prefix of the batches. Invariant: every entry of a ledger
// is covered by its P; entries beyond P never exist.
//
// A P value of 88 bytes also holds the durable head: the last record the
// segment log knew to be on stable storage when the batch was committed
// ([Batch.SetProgressDurable], [Index.Durable]). The engine uses it, with
// the one in its metadata, as a witness that the segments must still hold.
// A P value of 44 bytes (an index written before the durable head was
// added, format version 1 all the same) has none; an older annal reading
// an 88-byte value reports [ErrCorruption], and its engine rebuilds the
// index from the segments.
//
// The digest in a K value is the engine's digest of the content of the
// batch's events (SHA-256; see "Idempotency" in docs/format.md), which it
// compares a retry's with; it is computed from the records in the segments
// when the index is rebuilt, as it was on the append.
//
// # Version
//
// Open writes V when it creates an index and refuses one whose V is newer
// than this package knows, with [ErrFormatVersion], or older (version 1,
// whose K values had no digest, 2, five entries an event, or 3, postings
// of sequence numbers only), with
// [ErrOldFormat]: the index is derived data, and the engine rebuilds it
// from the segments.
package index
