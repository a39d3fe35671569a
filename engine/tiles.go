package engine

import (
	"fmt"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
)

// The tiles a replicated ledger's Writer publishes beside its checkpoint
// (docs/replication.md, "Tiles") are made from the ledger's tree file and
// its events' export lines, through ledgerSource.

// Entries reads the segments tileReadBytes per event it still needs
// (a read parses every record it holds), at most tileReadMax at once.
const (
	tileReadBytes = 512
	tileReadMax   = 1 << 20
)

// ReadHashes reads stored hashes of the ledger's tree file (the leaves
// waiting to be written first): replica.TileSource.
func (s ledgerSource) ReadHashes(indexes []int64) ([]tree.Hash, error) {
	t, _, err := s.l.readTree()
	if err != nil {
		return nil, err
	}
	return t.ReadHashes(indexes)
}

// Entries returns the export lines, without their "\n", of events first
// to last: the leaves' bytes (format.md, section 9.1).
func (s ledgerSource) Entries(first, last uint64) ([][]byte, error) {
	l := s.l
	out := make([][]byte, 0, last-first+1)
	for seq := first; seq <= last; {
		id, err := l.idAt(seq)
		if err != nil {
			return nil, err
		}
		_, loc, found, err := l.db.idx.Lookup(id)
		if err == nil && !found {
			err = fmt.Errorf("event %s is not in the index", id)
		}
		if err != nil {
			return nil, fmt.Errorf("ledger %s: event #%d: %w", l.meta.Name, seq, err)
		}
		next := seq
		_, err = l.log.ReadSpan(loc, int(min(tileReadMax, (last-seq+1)*tileReadBytes)), func(r *segment.Record, _ segment.Location) {
			if r.Seq != next || r.Seq > last {
				return
			}
			line := ndjson.AppendLine(nil, r.ID, r.ID.Micros(), string(r.Entity), string(r.Key), string(r.Event), r.Meta, r.Data)
			out = append(out, line[:len(line)-1])
			next++
		})
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", l.meta.Name, err)
		}
		if next == seq {
			return nil, fmt.Errorf("ledger %s: reading event #%d gave no record", l.meta.Name, seq)
		}
		seq = next
	}
	return out, nil
}
