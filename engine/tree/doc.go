// Package tree keeps the Merkle tree of a ledger and the signed
// checkpoints and proofs built on it: the cryptographic layer beside the
// Event IDs' CRC32C chain (docs/format.md, section 9).
//
// One leaf per event, in ledger order (the genesis event is leaf 0). The
// leaf's bytes are the event's NDJSON line as annal exports it, without
// its newline, so that anyone holding an export can recompute the tree.
// Hashing is RFC 6962 / RFC 9162:
//
//	leaf hash     = SHA-256(0x00 ‖ line)
//	interior hash = SHA-256(0x01 ‖ left ‖ right)
//
// A ledger's tree is kept in one file, ledgers/LLLLLLLL/tree, of the
// "stored hashes" of the Go checksum database's tlog layout
// (golang.org/x/mod/sumdb/tlog): after a 32-byte header, hash number i of
// tlog.StoredHashIndex order at offset 32 + 32*i. Leaf n adds its leaf
// hash and the hashes of the complete subtrees it closes, so the file
// only grows, and a file of n leaves holds tlog.StoredHashCount(n) hashes:
//
//	byte 0          8           12          16                   32
//	     +----------+-----------+-----------+--------------------+
//	     | magic    | version   | ledger ID | zero               |
//	     | ANNLTREE | u32 BE =1 | u32 BE    | (16 bytes)         |
//	     +----------+-----------+-----------+--------------------+
//	     | stored hash 0 (32 bytes) | stored hash 1 | ...
//
// The file is derived from the segments, as the index is: written (not
// synced) as events are indexed, synced before each checkpoint, rebuilt
// when missing or damaged.
//
// What a crash leaves: the leaves synced (File.Sync) are intact; after
// them, any mix of what was written since, a block at a time: a torn
// last write (bytes that do not complete a leaf, ignored by OpenFile and
// cut by the next Append or Truncate), but also whole hashes that read as
// leaves and are wrong (zeros where a block was lost before one that was
// kept). So the leaves after the last sync are to be checked against
// their events (File.NewCheckerFrom) and the tree cut at the first wrong
// one; and a tree longer than the ledger cut to it (File.Truncate).
//
// A checkpoint is a C2SP tlog-checkpoint (origin, tree size, base64 root
// hash) in a C2SP signed-note envelope with an Ed25519 signature
// (golang.org/x/mod/sumdb/note). Inclusion and consistency proofs are
// those of RFC 9162 (tlog.ProveRecord, tlog.ProveTree).
package tree
