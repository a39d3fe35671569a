package segment

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/annal-db/annal/eventid"
	"github.com/klauspost/crc32"
)

// Format constants; see the package documentation for the layout.
const (
	magic         = "annalseg"
	formatVersion = 1
	headerSize    = 64
	frameSize     = 12 // length, CRC, synced
	payloadFixed  = 56 // payload bytes before the strings
	recordKind    = 1  // payload kind of an event record
	// MaxNameLen is the longest entity, key or event name, in bytes.
	MaxNameLen = 1<<16 - 1
	// minFrame is the smallest record frame: empty names, meta `{}` and
	// data of one byte.
	minFrame = frameSize + payloadFixed + 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a segment's header.
type header struct {
	ledger   eventid.LedgerID
	number   uint64
	prevID   eventid.ID
	prevSeq  uint64
	created  uint64
	version  uint16
	hdrSize  uint16
	reserved uint32
}

func (h *header) encode() []byte {
	b := make([]byte, headerSize)
	copy(b, magic)
	binary.BigEndian.PutUint16(b[8:], formatVersion)
	binary.BigEndian.PutUint16(b[10:], headerSize)
	binary.BigEndian.PutUint32(b[12:], uint32(h.ledger))
	binary.BigEndian.PutUint64(b[16:], h.number)
	copy(b[24:40], h.prevID[:])
	binary.BigEndian.PutUint64(b[40:], h.prevSeq)
	binary.BigEndian.PutUint64(b[48:], h.created)
	binary.BigEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

// decodeHeader parses a header; the error says what is wrong, for a
// CorruptionError.
func decodeHeader(b []byte) (header, error) {
	var h header
	if len(b) < headerSize {
		return h, fmt.Errorf("header is %d bytes, want %d", len(b), headerSize)
	}
	if string(b[:8]) != magic {
		return h, fmt.Errorf("bad magic %q", b[:8])
	}
	// The CRC comes first: a damaged version field is corruption, and a
	// newer format keeps its header CRC at bytes 60-63.
	if want, got := crc32.Checksum(b[:60], castagnoli), binary.BigEndian.Uint32(b[60:]); want != got {
		return h, fmt.Errorf("header CRC %08x, computed %08x", got, want)
	}
	h.version = binary.BigEndian.Uint16(b[8:])
	if h.version > formatVersion {
		return h, fmt.Errorf("%w %d (this annal reads up to %d)", ErrFormatVersion, h.version, formatVersion)
	}
	if h.version == 0 {
		return h, fmt.Errorf("format version 0")
	}
	h.hdrSize = binary.BigEndian.Uint16(b[10:])
	if h.hdrSize != headerSize {
		return h, fmt.Errorf("header size %d, want %d", h.hdrSize, headerSize)
	}
	h.ledger = eventid.LedgerID(binary.BigEndian.Uint32(b[12:]))
	h.number = binary.BigEndian.Uint64(b[16:])
	copy(h.prevID[:], b[24:40])
	h.prevSeq = binary.BigEndian.Uint64(b[40:])
	h.created = binary.BigEndian.Uint64(b[48:])
	h.reserved = binary.BigEndian.Uint32(b[56:])
	return h, nil
}

// Record is one stored event. The byte slices of a Record returned by a
// reader point into the reader's buffer: they are valid until the reader's
// next call, and must not be modified. Copy what must outlive it.
type Record struct {
	ID     eventid.ID
	Prev   eventid.ID // the ID of the record before, or the genesis ID
	Seq    uint64     // 1 for the ledger's first event
	Entity []byte
	Key    []byte
	Event  []byte
	Meta   []byte // canonical JSON object
	Data   []byte // canonical JSON value
	// IdempotencyKey is set on the first record of a batch appended with
	// one, and BatchLen then says how many records the batch has. Neither
	// is covered by the event checksum (they are not part of the event),
	// only by the frame CRC.
	IdempotencyKey []byte
	BatchLen       uint32
	// more: records of the same batch follow (flagMore).
	more bool
}

// More says that more records of r's batch follow it (format.md §6, flag
// bit 1): a cut after r would split its batch, which is all or nothing.
func (r *Record) More() bool { return r.more }

// Content returns what the record's checksum covers. Its strings share
// memory with the record's slices (no copy), so it is valid as long as
// they are.
func (r *Record) Content() eventid.Content {
	return eventid.Content{Entity: unsafeString(r.Entity), Key: unsafeString(r.Key), Event: unsafeString(r.Event), Meta: r.Meta, Data: r.Data}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// frameLen returns the size of the frame of a record with these fields.
func frameLen(entity, key, event string, meta, data, idem []byte) int {
	return frameSize + payloadFixed + len(entity) + len(key) + len(event) + len(meta) + len(data) + trailerLen(idem)
}

// trailerLen is the size of the idempotency trailer: batch length u32, key
// length u16, key; none without a key.
func trailerLen(idem []byte) int {
	if idem == nil {
		return 0
	}
	return 6 + len(idem)
}

// Record flags, payload byte 1.
const (
	// flagIdempotency marks a payload with an idempotency trailer.
	flagIdempotency = 0x01
	// flagMore marks every record of a batch but its last: more records
	// of the same batch follow it, in the same segment. Recovery cuts a
	// batch whose last record is missing, so that a batch is all or
	// nothing after a crash too.
	flagMore = 0x02
	// knownFlags are the flags this version reads.
	knownFlags = flagIdempotency | flagMore
)

// appendFrame appends the frame of a record to dst. idem, if not nil, is
// the idempotency key of the batch the record begins, of batchLen records;
// more says that the batch goes on after this record.
func appendFrame(dst []byte, synced uint32, id, prev eventid.ID, seq uint64, entity, key, event string, meta, data, idem []byte, batchLen uint32, more bool) []byte {
	start := len(dst)
	n := frameLen(entity, key, event, meta, data, idem)
	dst = append(dst, make([]byte, frameSize+payloadFixed)...)
	b := dst[start:]
	binary.BigEndian.PutUint32(b[0:], uint32(n-frameSize))
	binary.BigEndian.PutUint32(b[8:], synced)
	p := b[frameSize:]
	p[0] = recordKind
	p[1] = 0
	if idem != nil {
		p[1] = flagIdempotency
	}
	if more {
		p[1] |= flagMore
	}
	binary.BigEndian.PutUint16(p[2:], uint16(len(entity)))
	binary.BigEndian.PutUint16(p[4:], uint16(len(key)))
	binary.BigEndian.PutUint16(p[6:], uint16(len(event)))
	binary.BigEndian.PutUint32(p[8:], uint32(len(meta)))
	binary.BigEndian.PutUint32(p[12:], uint32(len(data)))
	binary.BigEndian.PutUint64(p[16:], seq)
	copy(p[24:40], id[:])
	copy(p[40:56], prev[:])
	dst = append(dst, entity...)
	dst = append(dst, key...)
	dst = append(dst, event...)
	dst = append(dst, meta...)
	dst = append(dst, data...)
	if idem != nil {
		dst = binary.BigEndian.AppendUint32(dst, batchLen)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(idem)))
		dst = append(dst, idem...)
	}
	f := dst[start:]
	crc := crc32.Update(0, castagnoli, f[0:4])
	crc = crc32.Update(crc, castagnoli, f[8:])
	binary.BigEndian.PutUint32(f[4:], crc)
	return dst
}

// frameInfo is what the first bytes of a frame say.
type frameInfo struct {
	length uint32 // payload length
	crc    uint32
	synced uint32
}

func readFrameInfo(b []byte) frameInfo {
	return frameInfo{
		length: binary.BigEndian.Uint32(b[0:]),
		crc:    binary.BigEndian.Uint32(b[4:]),
		synced: binary.BigEndian.Uint32(b[8:]),
	}
}

// frameCRC computes the CRC of a whole frame f (header and payload).
func frameCRC(f []byte) uint32 {
	crc := crc32.Update(0, castagnoli, f[0:4])
	return crc32.Update(crc, castagnoli, f[8:])
}

// decodePayload parses a payload into r. It checks only the layout; the
// caller checks the CRC first.
func decodePayload(p []byte, r *Record) error {
	if len(p) < payloadFixed {
		return fmt.Errorf("payload of %d bytes is shorter than %d", len(p), payloadFixed)
	}
	if p[0] != recordKind {
		return fmt.Errorf("unknown record kind %d", p[0])
	}
	if p[1]&^knownFlags != 0 {
		return fmt.Errorf("unknown record flags %#x", p[1])
	}
	r.more = p[1]&flagMore != 0
	le := int(binary.BigEndian.Uint16(p[2:]))
	lk := int(binary.BigEndian.Uint16(p[4:]))
	lv := int(binary.BigEndian.Uint16(p[6:]))
	lm := int(binary.BigEndian.Uint32(p[8:]))
	ld := int(binary.BigEndian.Uint32(p[12:]))
	total := payloadFixed + le + lk + lv + lm + ld
	r.IdempotencyKey, r.BatchLen = nil, 0
	if p[1]&flagIdempotency != 0 {
		if len(p) < total+6 {
			return fmt.Errorf("idempotency trailer missing: payload is %d bytes, fields need %d", len(p), total+6)
		}
		r.BatchLen = binary.BigEndian.Uint32(p[total:])
		n := int(binary.BigEndian.Uint16(p[total+4:]))
		if r.BatchLen == 0 {
			return fmt.Errorf("idempotency trailer with a batch of 0 records")
		}
		r.IdempotencyKey = p[total+6 : total+6+min(n, len(p)-total-6)]
		total += 6 + n
	}
	if total != len(p) {
		return fmt.Errorf("field lengths add up to %d bytes, payload is %d", total, len(p))
	}
	r.Seq = binary.BigEndian.Uint64(p[16:])
	copy(r.ID[:], p[24:40])
	copy(r.Prev[:], p[40:56])
	i := payloadFixed
	r.Entity, i = p[i:i+le:i+le], i+le
	r.Key, i = p[i:i+lk:i+lk], i+lk
	r.Event, i = p[i:i+lv:i+lv], i+lv
	r.Meta, i = p[i:i+lm:i+lm], i+lm
	r.Data = p[i : i+ld : i+ld]
	return nil
}

// segmentName returns the file name of segment n.
func segmentName(n uint64) string { return fmt.Sprintf("%020d.seg", n) }

// FileName returns the file name of segment n of a ledger's directory
// (20 decimal digits and ".seg"), for a program that copies a ledger's
// files (the engine's backup).
func FileName(n uint64) string { return segmentName(n) }

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != 24 || name[20:] != ".seg" {
		return 0, false
	}
	var n uint64
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n > 0
}
