package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
	"github.com/klauspost/crc32"
)

// ChunkHeaderSize is the size of a WAL chunk's header (docs/replication.md,
// "A WAL chunk").
const ChunkHeaderSize = 160

// ChunkVersion is the chunk format this package writes and reads.
const ChunkVersion = 1

const chunkMagic = "annalwal"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Hash is a SHA-256 digest: of a whole chunk object (Chunk.Prev) or a
// Merkle tree root (Chunk.Root).
type Hash [32]byte

// Sum is the SHA-256 of a whole chunk object, as the next chunk's Prev
// names it.
func Sum(object []byte) Hash { return sha256.Sum256(object) }

// Chunk is one WAL chunk: consecutive records of a ledger, byte for byte
// as its segment file holds them, after a header. A fence chunk holds no
// record: LastSeq is FirstSeq - 1.
type Chunk struct {
	Ledger eventid.LedgerID
	// Number is the chunk's number, the one in its key.
	Number uint64
	// Epoch is the epoch of the writer that wrote it.
	Epoch uint64
	// FirstSeq and LastSeq are the sequence numbers of the first and last
	// records (a fence chunk: LastSeq = FirstSeq - 1).
	FirstSeq, LastSeq uint64
	// FirstMicros and LastMicros are the first and last records' times
	// (a fence chunk: the time of the record before it, both).
	FirstMicros, LastMicros uint64
	// Prev is the SHA-256 of the whole previous chunk object; zero for
	// chunk 1.
	Prev Hash
	// TreeSize and Root are the Merkle tree after the chunk: TreeSize is
	// LastSeq.
	TreeSize uint64
	Root     Hash
	// Segment and Offset are where the first record is (a fence chunk:
	// where the next record would go), so that a restore lays the
	// records out as the writer did.
	Segment uint32
	Offset  uint32
	// Records are the frames, as the segment holds them.
	Records []byte
}

// Fence says whether the chunk is a fence chunk (no record).
func (c *Chunk) Fence() bool { return c.LastSeq+1 == c.FirstSeq }

// Encode returns the chunk object: the header, then the records.
func (c *Chunk) Encode() []byte {
	b := make([]byte, ChunkHeaderSize, ChunkHeaderSize+len(c.Records))
	c.putHeader(b)
	return append(b, c.Records...)
}

// putHeader writes c's header (every field but Records) into
// b[:ChunkHeaderSize].
func (c *Chunk) putHeader(b []byte) {
	copy(b, chunkMagic)
	binary.BigEndian.PutUint16(b[8:], ChunkVersion)
	binary.BigEndian.PutUint16(b[10:], ChunkHeaderSize)
	binary.BigEndian.PutUint32(b[12:], uint32(c.Ledger))
	binary.BigEndian.PutUint64(b[16:], c.Number)
	binary.BigEndian.PutUint64(b[24:], c.Epoch)
	binary.BigEndian.PutUint64(b[32:], c.FirstSeq)
	binary.BigEndian.PutUint64(b[40:], c.LastSeq)
	binary.BigEndian.PutUint64(b[48:], c.FirstMicros)
	binary.BigEndian.PutUint64(b[56:], c.LastMicros)
	copy(b[64:96], c.Prev[:])
	binary.BigEndian.PutUint64(b[96:], c.TreeSize)
	copy(b[104:136], c.Root[:])
	binary.BigEndian.PutUint32(b[136:], c.Segment)
	binary.BigEndian.PutUint32(b[140:], c.Offset)
	clear(b[144:156])
	binary.BigEndian.PutUint32(b[156:], crc32.Checksum(b[:156], castagnoli))
}

// DecodeChunk parses the chunk object stored under key: its header's
// CRC, magic, version and sizes, and that its ledger and number are the
// key's. It does not verify the records (their frames and chain): the
// caller does, with the segment package. Records alias object. A bad
// chunk is an error that matches corruption.Err and names key.
func DecodeChunk(key string, ledger eventid.LedgerID, object []byte) (Chunk, error) {
	bad := func(format string, args ...any) (Chunk, error) {
		return Chunk{}, fmt.Errorf("%w: chunk %s: %s", corruption.Err, key, fmt.Sprintf(format, args...))
	}
	if len(object) < ChunkHeaderSize {
		return bad("%d bytes, shorter than its %d-byte header", len(object), ChunkHeaderSize)
	}
	b := object[:ChunkHeaderSize]
	if want, got := crc32.Checksum(b[:156], castagnoli), binary.BigEndian.Uint32(b[156:]); want != got {
		return bad("header CRC is %08x, its bytes give %08x", got, want)
	}
	if string(b[:8]) != chunkMagic {
		return bad("magic is %q, want %q", b[:8], chunkMagic)
	}
	if v := binary.BigEndian.Uint16(b[8:]); v != ChunkVersion {
		return bad("format version %d; this annal reads version %d", v, ChunkVersion)
	}
	if n := binary.BigEndian.Uint16(b[10:]); n != ChunkHeaderSize {
		return bad("header size %d, want %d", n, ChunkHeaderSize)
	}
	c := Chunk{
		Ledger:      eventid.LedgerID(binary.BigEndian.Uint32(b[12:])),
		Number:      binary.BigEndian.Uint64(b[16:]),
		Epoch:       binary.BigEndian.Uint64(b[24:]),
		FirstSeq:    binary.BigEndian.Uint64(b[32:]),
		LastSeq:     binary.BigEndian.Uint64(b[40:]),
		FirstMicros: binary.BigEndian.Uint64(b[48:]),
		LastMicros:  binary.BigEndian.Uint64(b[56:]),
		TreeSize:    binary.BigEndian.Uint64(b[96:]),
		Segment:     binary.BigEndian.Uint32(b[136:]),
		Offset:      binary.BigEndian.Uint32(b[140:]),
		Records:     object[ChunkHeaderSize:],
	}
	copy(c.Prev[:], b[64:96])
	copy(c.Root[:], b[104:136])
	if c.Ledger != ledger {
		return bad("ledger %08x, the key's is %08x", uint32(c.Ledger), uint32(ledger))
	}
	if n, ok := ParseNumber(key); !ok || n != c.Number {
		return bad("chunk number %d is not its key's", c.Number)
	}
	switch {
	case c.FirstSeq == 0:
		return bad("first sequence number 0")
	case c.LastSeq+1 < c.FirstSeq:
		return bad("last sequence number %d before first %d - 1", c.LastSeq, c.FirstSeq)
	case c.TreeSize != c.LastSeq:
		return bad("tree size %d, last sequence number %d", c.TreeSize, c.LastSeq)
	case c.Fence() != (len(c.Records) == 0):
		return bad("%d records' bytes for sequence numbers %d to %d", len(c.Records), c.FirstSeq, c.LastSeq)
	case c.LastMicros < c.FirstMicros:
		return bad("last time %d before first %d", c.LastMicros, c.FirstMicros)
	case c.Number == 1 && c.Prev != (Hash{}):
		return bad("chunk 1 names a previous chunk")
	}
	for _, x := range b[144:156] {
		if x != 0 {
			return bad("reserved bytes are not zero")
		}
	}
	return c, nil
}
