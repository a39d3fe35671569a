package index

import (
	"encoding/binary"
	"math"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// Family tags, the first byte of every key (see the package documentation).
const (
	famVersion  = 'V'
	famTime     = 'T'
	famSeq      = 'S'
	famStream   = 'E'
	famEntity   = 'A'
	famEvent    = 'N'
	famIdem     = 'K'
	famProgress = 'P'
)

// ledgerFamilies are the families that hold a ledger's keys.
var ledgerFamilies = [...]byte{famTime, famSeq, famStream, famEntity, famEvent, famIdem, famProgress}

// formatVersion is the format this package writes and reads. Version 2
// (issue 13) added the digest of the batch's events to the K value;
// version 3 (issue 15) replaced the five entries an event of T, S, E, A
// and N with blocks of events (T, S) and postings of a commit (E, A, N);
// version 4 (issue 15) put each event's ID and location in the postings
// beside its sequence number. Open reports an index of version 1, 2 or 3
// with ErrOldFormat (the engine rebuilds it from the segments).
const formatVersion = 4

// Sizes of keys and values.
const (
	ledgerPrefixLen = 1 + 4                          // tag, ledger
	timeKeyLen      = ledgerPrefixLen + eventid.Size // T key
	seqKeyLen       = ledgerPrefixLen + 8            // S key
	locLen          = 8 + 8 + 4                      // segment, offset, size
	seqValueLen     = eventid.Size                   // S value: the last ID of the block
	idemValueLen    = 8 + 4 + DigestSize             // K value: first seq, count, digest
	progressLen     = eventid.Size + 8 + locLen      // P value: id, seq, location
	progressDurLen  = 2 * progressLen                // P value with the durable head after it
	versionLen      = 4                              // V value
)

func appendLedgerPrefix(dst []byte, fam byte, ledger eventid.LedgerID) []byte {
	return binary.BigEndian.AppendUint32(append(dst, fam), uint32(ledger))
}

// appendName appends a length-prefixed name: uvarint length, then bytes.
func appendName(dst, name []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(name))), name...)
}

func appendTimeKey(dst []byte, ledger eventid.LedgerID, id eventid.ID) []byte {
	return append(appendLedgerPrefix(dst, famTime, ledger), id[:]...)
}

func appendSeqKey(dst []byte, ledger eventid.LedgerID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(appendLedgerPrefix(dst, famSeq, ledger), seq)
}

// appendEntityPrefix appends the prefix of every E key of an entity.
func appendEntityPrefix(dst []byte, ledger eventid.LedgerID, entity []byte) []byte {
	return appendName(appendLedgerPrefix(dst, famStream, ledger), entity)
}

// appendStreamPrefix appends the prefix of every E key of an (entity, key)
// stream; the key of an entry is this prefix and the seq.
func appendStreamPrefix(dst []byte, ledger eventid.LedgerID, entity, key []byte) []byte {
	return appendName(appendEntityPrefix(dst, ledger, entity), key)
}

// appendEntitySeqPrefix appends the prefix of every A key of an entity;
// the key of an entry is this prefix and the seq.
func appendEntitySeqPrefix(dst []byte, ledger eventid.LedgerID, entity []byte) []byte {
	return appendName(appendLedgerPrefix(dst, famEntity, ledger), entity)
}

// appendEventPrefix appends the prefix of every N key of an event name.
func appendEventPrefix(dst []byte, ledger eventid.LedgerID, event []byte) []byte {
	return appendName(appendLedgerPrefix(dst, famEvent, ledger), event)
}

func appendIdemKey(dst []byte, ledger eventid.LedgerID, key []byte) []byte {
	return appendName(appendLedgerPrefix(dst, famIdem, ledger), key)
}

func appendProgressKey(dst []byte, ledger eventid.LedgerID) []byte {
	return appendLedgerPrefix(dst, famProgress, ledger)
}

// checkLoc reports whether loc fits the stored form: the offset as a u64
// that reads back as an int64, the size as a u32.
func checkLoc(loc segment.Location) bool {
	return loc.Offset >= 0 && loc.Size >= 0 && loc.Size <= math.MaxUint32
}

// appendLoc appends segment u64 | offset u64 | size u32; loc must pass
// checkLoc.
func appendLoc(dst []byte, loc segment.Location) []byte {
	dst = binary.BigEndian.AppendUint64(dst, loc.Segment)
	dst = binary.BigEndian.AppendUint64(dst, uint64(loc.Offset))
	return binary.BigEndian.AppendUint32(dst, uint32(loc.Size))
}

// decodeLoc decodes the locLen bytes of b; ok is false when the offset does
// not fit an int64.
func decodeLoc(b []byte) (loc segment.Location, ok bool) {
	off := binary.BigEndian.Uint64(b[8:16])
	if off > math.MaxInt64 {
		return segment.Location{}, false
	}
	return segment.Location{
		Segment: binary.BigEndian.Uint64(b[0:8]),
		Offset:  int64(off),
		Size:    int64(binary.BigEndian.Uint32(b[16:20])),
	}, true
}

// decodeProgress decodes a P value: the progress head, then the durable
// head if the value has one (zero if not: a value of the 44-byte form,
// which indexes written before the durable head was added hold).
func decodeProgress(key, v []byte) (head, durable segment.Head, err error) {
	switch len(v) {
	case progressLen:
	case progressDurLen:
		if durable, err = decodeHead(key, v[progressLen:]); err != nil {
			return head, durable, err
		}
		if durable.Seq == 0 {
			return head, durable, corruptf(key, "durable head of sequence number 0")
		}
	default:
		return head, durable, corruptf(key, "value is %d bytes, want %d or %d", len(v), progressLen, progressDurLen)
	}
	head, err = decodeHead(key, v[:progressLen])
	return head, durable, err
}

// decodeHead decodes a head: id | seq | location.
func decodeHead(key, v []byte) (segment.Head, error) {
	if len(v) != progressLen {
		return segment.Head{}, corruptf(key, "value is %d bytes, want %d", len(v), progressLen)
	}
	loc, ok := decodeLoc(v[eventid.Size+8:])
	if !ok {
		return segment.Head{}, corruptf(key, "offset %d does not fit an int64", binary.BigEndian.Uint64(v[eventid.Size+16:]))
	}
	return segment.Head{
		ID:  eventid.ID(v[:eventid.Size]),
		Seq: binary.BigEndian.Uint64(v[eventid.Size:]),
		Loc: loc,
	}, nil
}

// prefixSuccessor returns the smallest key greater than every key that
// starts with prefix, or nil if there is none (prefix is all 0xff). It is
// the exclusive upper bound of a prefix scan.
func prefixSuccessor(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			s := append([]byte(nil), prefix[:i+1]...)
			s[i]++
			return s
		}
	}
	return nil
}
