package engine

import (
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// The Merkle tree of a ledger (docs/format.md, section 9): one leaf per
// event, in ledger order, the leaf bytes being the event's export line
// without its "\n".

// appendLeaf appends the leaf bytes of r to dst: its export line, as
// Export writes it, without the "\n".
func appendLeaf(dst []byte, r *segment.Record) []byte {
	dst = ndjson.AppendLine(dst, r.ID, r.ID.Micros(),
		bytesString(r.Entity), bytesString(r.Key), bytesString(r.Event), r.Meta, r.Data)
	return dst[:len(dst)-1]
}

// leafHash returns the leaf hash of r, using buf as scratch space for its
// leaf bytes, and buf (grown) for reuse.
func leafHash(buf []byte, r *segment.Record) (tree.Hash, []byte) {
	buf = appendLeaf(buf[:0], r)
	return tree.LeafHash(buf), buf
}

// entryLeafHash is leafHash for an appended entry and its ID.
func entryLeafHash(buf []byte, id eventid.ID, e *segment.Entry) (tree.Hash, []byte) {
	buf = ndjson.AppendLine(buf[:0], id, id.Micros(), e.Entity, e.Key, e.Event, e.Meta, e.Data)
	buf = buf[:len(buf)-1]
	return tree.LeafHash(buf), buf
}
