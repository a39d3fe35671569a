package engine

import (
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// The durable witness of a ledger is a head that was on stable storage
// (segment.Log.Durable): the sequence number and ID of a record and where
// its frame ends. It is kept in the ledger's metadata record, outside the
// segments, so that a tail lost after it was acknowledged (a segment
// removed, cut or zeroed by an operator, a file replaced by an older copy)
// is found at Open: recovery is given the witness (segment.Options.Witness)
// and refuses, as corruption and before changing any file, segments that
// do not hold it. A torn write after the witness is cut as before.
//
// The witness is written, each time in a bbolt transaction of its own and
// never on an append's path:
//   - by CreateLedger and Import, once their events are synced;
//   - by Open, after recovery (which syncs the last segment);
//   - by the witness writer below, every Options.WitnessInterval, for the
//     ledgers whose durable head advanced;
//   - by Close, after the last sync of every segment: after a clean close
//     the witness is the exact head.
//
// So the events that a crash, followed by the loss of the segments' tail,
// can take without Open noticing are those that became durable in the
// last WitnessInterval plus one bbolt commit before the crash. See
// docs/recovery.md, "The durable witness".

// startWitnessWriter starts the witness writer, once Open has recovered
// the ledgers and written their metadata (db.witnessed).
func (db *DB) startWitnessWriter() {
	db.witnessStop = make(chan struct{})
	db.witnessDone = make(chan struct{})
	written := db.witnessed
	db.witnessed = nil
	go db.witnessLoop(written)
}

// stopWitnessWriter stops the witness writer and waits until it has
// stopped, so that no write of its own follows. Called once, by Close.
func (db *DB) stopWitnessWriter() {
	if db.witnessStop == nil {
		return
	}
	close(db.witnessStop)
	<-db.witnessDone
}

// witnessLoop writes, every WitnessInterval, the metadata records of the
// open ledgers whose durable head advanced since the record was last
// written, all in one bbolt transaction. A failed write (a full disk) is
// tried again at the next tick; Close's own write reports its error.
func (db *DB) witnessLoop(written map[*ledger]uint64) {
	defer close(db.witnessDone)
	t := time.NewTicker(db.opts.WitnessInterval)
	defer t.Stop()
	var ls, due []*ledger
	var metas []ledgerMeta
	for {
		select {
		case <-db.witnessStop:
			return
		case <-t.C:
		}
		ls = db.openLedgers(ls[:0])
		due, metas = due[:0], metas[:0]
		for _, l := range ls {
			if l.log.Durable().Seq > written[l] {
				due = append(due, l)
				metas = append(metas, l.currentMeta())
			}
		}
		if len(metas) == 0 {
			continue
		}
		if meta.Put(db.meta, metas...) != nil {
			continue
		}
		db.witnessWrites.Add(1)
		for i, l := range due {
			written[l] = metas[i].Witness.Seq
		}
	}
}

// witness returns the durable witness of ledger id for recovery: the later
// of the one in its metadata record m (if haveMeta) and the one in the
// index's progress marker (or in the index Open rebuilt, read before it
// was moved aside). The index's is not synced, so a crash may have
// taken it back (never forward); it still covers a ledger whose metadata
// file was lost or replaced by an older copy. An index that cannot be read
// gives none: Open has read the same marker to start recovery from, and
// rebuilds an index whose marker is damaged.
func (db *DB) witness(id eventid.LedgerID, m ledgerMeta, haveMeta bool) segment.Head {
	var w segment.Head
	if haveMeta {
		w = m.Witness
	}
	if d, ok, err := db.idx.Durable(id); err == nil && ok && d.Seq > w.Seq {
		w = d
	}
	if d := db.oldWitness[id]; d.Seq > w.Seq {
		w = d // from the index Open rebuilt
	}
	return w
}
