package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2"
)

// digestFamilies are the families a Digest covers, in its order.
var digestFamilies = [...]byte{famTime, famSeq, famStream, famEntity, famEvent, famIdem}

// familyNames name the families in messages.
var familyNames = map[byte]string{famTime: "T (ID to location)", famSeq: "S (sequence to ID)", famStream: "E (streams)",
	famEntity: "A (entities)", famEvent: "N (event names)", famIdem: "K (idempotency keys)"}

// digestSeed is the hash seed of this process: digests are compared
// within a process, never stored.
var digestSeed = maphash.MakeSeed()

// A Digest summarizes the entries of one ledger in each family: their
// number and the sum of a 64-bit hash of each entry's key and value. The
// sum does not depend on order, so the digest of what the segments say the
// index should hold ([Digest.Add], in ledger order) can be compared with
// the digest of what it holds ([Index.Digest], in key order) in one pass
// over each and constant memory. Any missing, extra or altered entry
// changes its family's count or sum (the chance that a change leaves a
// 64-bit sum as it was is 2^-64).
type Digest struct {
	Count [len(digestFamilies)]uint64
	Sum   [len(digestFamilies)]uint64

	ledger   eventid.LedgerID
	key, val []byte
}

// NewDigest returns the empty digest of a ledger's entries.
func NewDigest(ledger eventid.LedgerID) *Digest { return &Digest{ledger: ledger} }

// Add adds the entries that Batch.Add writes for r.
func (d *Digest) Add(r *Record) {
	d.key, d.val = entries(d.ledger, r, d.key, d.val, d.add)
}

func (d *Digest) add(key, val []byte) {
	i := familyIndex(key[0])
	d.Count[i]++
	d.Sum[i] += entryHash(key, val)
}

// familySlot maps a family tag to its place in a Digest, -1 for none: a
// lookup per entry rather than a search.
var familySlot = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, f := range digestFamilies {
		t[f] = int8(i)
	}
	return t
}()

func familyIndex(fam byte) int {
	i := familySlot[fam]
	if i < 0 {
		panic(fmt.Sprintf("index: no digest of family %q", fam))
	}
	return int(i)
}

func entryHash(key, val []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(key)))
	h.Write(n[:])
	h.Write(key)
	h.Write(val)
	return h.Sum64()
}

// Diff says in which families two digests differ, or "" if they agree.
func (d *Digest) Diff(o *Digest) string {
	var out []string
	for i, f := range digestFamilies {
		if d.Count[i] != o.Count[i] || d.Sum[i] != o.Sum[i] {
			out = append(out, fmt.Sprintf("family %s: %d entries (sum %016x) against %d (sum %016x)", familyNames[f], d.Count[i], d.Sum[i], o.Count[i], o.Sum[i]))
		}
	}
	return strings.Join(out, "; ")
}

// Digest returns the digest of what the index holds for ledger, counting
// only the entries of events up to sequence number maxSeq (those of later
// events may be committed meanwhile). A malformed entry is ErrCorruption.
func (x *Index) Digest(ctx context.Context, ledger eventid.LedgerID, maxSeq uint64) (*Digest, error) {
	if err := x.usable(); err != nil {
		return nil, err
	}
	d := NewDigest(ledger)
	for _, fam := range digestFamilies {
		lo := appendLedgerPrefix(nil, fam, ledger)
		it, err := x.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: prefixSuccessor(lo)})
		if err != nil {
			return nil, readErr(err)
		}
		err = d.addFamily(ctx, it, fam, maxSeq)
		if err = errors.Join(err, it.Error(), it.Close()); err != nil {
			if pebble.IsCorruptionError(err) {
				return nil, readErr(err)
			}
			return nil, err
		}
	}
	return d, nil
}

func (d *Digest) addFamily(ctx context.Context, it *pebble.Iterator, fam byte, maxSeq uint64) error {
	for n, ok := 1, it.First(); ok; n, ok = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return readErr(err)
		}
		var seq uint64
		switch fam {
		case famTime, famIdem:
			// The sequence number leads the value.
			if len(v) < 8 {
				return fmt.Errorf("%w: key %x: value of %d bytes", ErrCorruption, k, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
		default:
			// It ends the key.
			if len(k) < ledgerPrefixLen+8 {
				return fmt.Errorf("%w: key %x is too short", ErrCorruption, k)
			}
			seq = binary.BigEndian.Uint64(k[len(k)-8:])
		}
		if seq > maxSeq {
			continue
		}
		d.add(k, v)
	}
	return nil
}
