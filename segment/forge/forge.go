// Package forge is the in-place forgery of the trust tests (engine's and
// the command's), done as an attacker with write access to a data
// directory and no signing key would do it: an event's bytes are changed
// in its segment file, and 8 characters of a free-text field of the same
// event are chosen so that the event's CRC32C checksum (docs/format.md,
// section 3) is unchanged. The checksum is affine over GF(2) in the bits
// of the message: flipping a set of bits XORs the CRC with the XOR of each
// bit's own effect, so the bits to flip are the solution of a 32 x K
// linear system. The record's frame CRC is then recomputed. The Event ID,
// every later ID, the chain, the index and every segment-level check stay
// as they were; only the Merkle tree (SHA-256) tells.
//
// It is for tests only: the engine's and the command's trust tests import it.
package forge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/annal-db/annal/eventid"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record says what Event changed.
type Record struct {
	File      string // the segment file
	Offset    int64  // of the record's frame
	Seq       uint64
	ID        eventid.ID
	Old, Data []byte // the event's data before and after
}

// Event rewrites, in the segment files in dir (a ledger's directory), the
// event with sequence number seq: from in its data becomes to (same
// length), and characters of the value of its "memo" member are chosen
// so that the event checksum is unchanged. The frame CRC is recomputed.
func Event(dir string, seq uint64, from, to string, rng *rand.Rand) (Record, error) {
	if len(from) != len(to) {
		return Record{}, fmt.Errorf("forge: from and to must have the same length")
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(names) == 0 {
		return Record{}, fmt.Errorf("forge: no segment in %s (%v)", dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return Record{}, err
		}
		for off := int64(64); off+12 <= int64(len(b)); {
			n := int64(binary.BigEndian.Uint32(b[off:]))
			if n == 0 || off+12+n > int64(len(b)) {
				break
			}
			frame := b[off : off+12+n]
			p := frame[12:]
			if p[0] == 1 && binary.BigEndian.Uint64(p[16:]) == seq {
				r, err := forgeFrame(frame, from, to, rng)
				if err != nil {
					return Record{}, err
				}
				r.File, r.Offset = name, off
				return r, os.WriteFile(name, b, 0o600)
			}
			off += 12 + n
		}
	}
	return Record{}, fmt.Errorf("forge: no record #%d in %s", seq, dir)
}

// forgeFrame rewrites the event record frame in place (see Event).
func forgeFrame(frame []byte, from, to string, rng *rand.Rand) (Record, error) {
	p := frame[12:]
	entityLen, keyLen, eventLen := int(binary.BigEndian.Uint16(p[2:])), int(binary.BigEndian.Uint16(p[4:])), int(binary.BigEndian.Uint16(p[6:]))
	metaLen, dataLen := int(binary.BigEndian.Uint32(p[8:])), int(binary.BigEndian.Uint32(p[12:]))
	var id, prev eventid.ID
	copy(id[:], p[24:40])
	copy(prev[:], p[40:56])
	at := 56
	entity := string(p[at : at+entityLen])
	at += entityLen
	key := string(p[at : at+keyLen])
	at += keyLen
	event := string(p[at : at+eventLen])
	at += eventLen
	meta := p[at : at+metaLen]
	at += metaLen
	data := p[at : at+dataLen] // the record's bytes: changed in place
	old := bytes.Clone(data)

	i := bytes.Index(data, []byte(from))
	if i < 0 {
		return Record{}, fmt.Errorf("forge: %q is not in the data %s", from, data)
	}
	copy(data[i:], to)
	memo := bytes.Index(data, []byte(`"memo":"`))
	if memo < 0 {
		return Record{}, fmt.Errorf("forge: no memo in %s", data)
	}
	memo += len(`"memo":"`)
	memoLen := bytes.IndexByte(data[memo:], '"')

	ledger, micros := id.Ledger(), id.Micros()
	checksum := func() uint32 {
		c := eventid.Content{Entity: entity, Key: key, Event: event, Meta: meta, Data: data}
		return c.Checksum(ledger, micros, prev)
	}
	// Each chosen character is 0x60 | 4 free bits ('`' to 'o': printable,
	// never escaped in JSON), so 8 characters give 32 unknowns. When the
	// system has no solution for the positions drawn, draw others.
	for try := 0; try < 200; try++ {
		pos := rng.Perm(memoLen)[:8]
		for _, q := range pos {
			data[memo+q] = 0x60
		}
		base := checksum()
		var effect [32]uint32 // of unknown 4*k+bit
		for k, q := range pos {
			for bit := range 4 {
				data[memo+q] ^= 1 << bit
				effect[4*k+bit] = checksum() ^ base
				data[memo+q] ^= 1 << bit
			}
		}
		x, ok := solveGF2(effect[:], base^id.Checksum())
		if !ok {
			continue
		}
		for k, q := range pos {
			data[memo+q] = 0x60 | byte(x>>(4*k))&0xf
		}
		if got := checksum(); got != id.Checksum() {
			return Record{}, fmt.Errorf("forge: the solved checksum is %08x, want %08x", got, id.Checksum())
		}
		// The frame CRC: bytes 0-3, then 8 to the end.
		crc := crc32.Update(crc32.Checksum(frame[0:4], castagnoli), castagnoli, frame[8:])
		binary.BigEndian.PutUint32(frame[4:], crc)
		return Record{Seq: binary.BigEndian.Uint64(p[16:]), ID: id, Old: old, Data: bytes.Clone(data)}, nil
	}
	return Record{}, fmt.Errorf("forge: no solution in 200 draws of positions")
}

// solveGF2 returns x (bit j set: XOR column j in) such that the XOR of
// the columns chosen is s, by Gaussian elimination over GF(2).
func solveGF2(cols []uint32, s uint32) (uint64, bool) {
	var pivot [32]struct {
		vec   uint32
		combo uint64
		set   bool
	}
	for j, c := range cols {
		combo := uint64(1) << j
		for b := 31; b >= 0 && c != 0; b-- {
			if c&(1<<b) == 0 {
				continue
			}
			if !pivot[b].set {
				pivot[b].vec, pivot[b].combo, pivot[b].set = c, combo, true
				c = 0
				break
			}
			c ^= pivot[b].vec
			combo ^= pivot[b].combo
		}
	}
	var x uint64
	for b := 31; b >= 0; b-- {
		if s&(1<<b) == 0 {
			continue
		}
		if !pivot[b].set {
			return 0, false
		}
		s ^= pivot[b].vec
		x ^= pivot[b].combo
	}
	return x, s == 0
}
