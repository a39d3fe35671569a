package index

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Record is one event to index, as the segment log appended it.
type Record struct {
	ID  eventid.ID
	Seq uint64
	Loc segment.Location
	// Entity, Key and Event are the event's entity, key and event name;
	// any bytes, empty included.
	Entity, Key, Event []byte
	// IdempotencyKey is set only on the first record of a batch appended
	// with an idempotency key; nil otherwise. An empty, non-nil key is a
	// key.
	IdempotencyKey []byte
	// BatchLen is the number of records of that batch; read only with
	// IdempotencyKey, and then at least 1.
	BatchLen uint32
	// Digest is, with IdempotencyKey, the digest of the content of the
	// batch's events that the engine compares a retry's with (DigestSize
	// bytes; the index stores it and does not interpret it).
	Digest []byte
}

// DigestSize is the size of Record.Digest: a SHA-256.
const DigestSize = 32

// Batch is a group of index writes committed atomically. A Batch is not
// safe for concurrent use. Close it when done.
//
// Add keeps the events until Commit, which writes them as T blocks and S
// entries (runs of up to blockMax consecutive events) and as E, A and N
// postings (the sequence numbers of the batch's events of one stream,
// entity or event name, with their IDs and locations, up to postingMax an
// entry).
type Batch struct {
	x   *Index
	pb  *pebble.Batch
	key []byte // scratch; pebble copies keys and values on Set
	val []byte
	err error // the first invalid Add or SetProgress; Commit returns it
	n   int   // records added since the last Commit

	dels  []eventid.LedgerID // the ledgers of DeleteEvents: their tails are dropped on Commit
	recs  []blockRec         // the events added, in order, for T and S
	post  map[string]int     // posting prefix (family, ledger, name parts) -> index in posts
	posts []posting
	// last is, for each family of postings (E, A, N), the index in posts
	// plus 1 of the posting the last Add added to (0: none): consecutive
	// events often share an entity and an event name, whose postings are
	// then found without hashing their prefix (a check of the prefix
	// keeps it right once posts is emptied and refilled).
	last [3]int
}

// posting is the positions of a batch's events under one prefix of family
// E, A or N.
type posting struct {
	prefix string
	ents   []Position
}

// NewBatch returns an empty batch. After Close it returns a batch whose
// Commit fails with ErrClosed.
func (x *Index) NewBatch() *Batch {
	if x.usable() != nil {
		return &Batch{x: x}
	}
	return &Batch{x: x, pb: x.db.NewBatch()}
}

// Len returns the number of records added since the batch was created or
// last committed.
func (b *Batch) Len() int { return b.n }

// Add adds one event of ledger: its K entry, when r.IdempotencyKey is not
// nil (replacing any earlier entry of that key: the caller checks
// Idempotency before appending), with r.Digest, now; its T, S, E, A and N
// entries on Commit, grouped with the batch's other events. r is not
// retained. An invalid record (see ErrInvalid) is not added; Commit then
// fails.
func (b *Batch) Add(ledger eventid.LedgerID, r *Record) {
	if b.err != nil {
		return
	}
	switch {
	case b.pb == nil:
		b.err = errBatchClosed
		return
	case r.ID.Ledger() != ledger:
		b.err = fmt.Errorf("%w: record %v (seq %d) is of ledger %v, added under ledger %v", ErrInvalid, r.ID, r.Seq, r.ID.Ledger(), ledger)
		return
	case !checkLoc(r.Loc):
		b.err = fmt.Errorf("%w: record %v (seq %d) has location %+v", ErrInvalid, r.ID, r.Seq, r.Loc)
		return
	case r.IdempotencyKey != nil && r.BatchLen == 0:
		b.err = fmt.Errorf("%w: record %v (seq %d) has an idempotency key and a batch length of 0", ErrInvalid, r.ID, r.Seq)
		return
	case b.x.tailBusy(ledger) && !slices.Contains(b.dels, ledger):
		b.err = fmt.Errorf("%w: ledger %v has records in its tail: flush it before a batch adds records", ErrInvalid, ledger)
		return
	case r.IdempotencyKey != nil && len(r.Digest) != DigestSize:
		b.err = fmt.Errorf("%w: record %v (seq %d) has an idempotency key and a digest of %d bytes, want %d", ErrInvalid, r.ID, r.Seq, len(r.Digest), DigestSize)
		return
	}
	b.recs = append(b.recs, blockRec{id: r.ID, seq: r.Seq, loc: r.Loc})
	pos := Position{ID: r.ID, Seq: r.Seq, Loc: r.Loc}
	b.key = appendStreamPrefix(b.key[:0], ledger, r.Entity, r.Key)
	b.addPosting(0, &pos)
	b.key = appendEntitySeqPrefix(b.key[:0], ledger, r.Entity)
	b.addPosting(1, &pos)
	b.key = appendEventPrefix(b.key[:0], ledger, r.Event)
	b.addPosting(2, &pos)
	if r.IdempotencyKey != nil {
		b.key = appendIdemKey(b.key[:0], ledger, r.IdempotencyKey)
		b.val = appendIdem(b.val[:0], r)
		b.set(b.key, b.val)
	}
	b.n++
}

// addPosting adds p to the posting of the prefix in b.key, of the
// family numbered fam (see Batch.last).
func (b *Batch) addPosting(fam int, p *Position) {
	if i := b.last[fam] - 1; i >= 0 && i < len(b.posts) && b.posts[i].prefix == string(b.key) {
		b.posts[i].ents = append(b.posts[i].ents, *p)
		return
	}
	i, ok := b.post[string(b.key)]
	if !ok {
		if b.post == nil {
			b.post = map[string]int{}
		}
		i = len(b.posts)
		if i < cap(b.posts) {
			b.posts = b.posts[:i+1]
			b.posts[i].prefix, b.posts[i].ents = string(b.key), b.posts[i].ents[:0]
		} else {
			b.posts = append(b.posts, posting{prefix: string(b.key)})
		}
		b.post[b.posts[i].prefix] = i
	}
	b.last[fam] = i + 1
	b.posts[i].ents = append(b.posts[i].ents, *p)
}

// writeEvents writes the T, S, E, A and N entries of the events added
// since the last Commit, and forgets them.
func (b *Batch) writeEvents() {
	// In ledger and sequence order: the engine adds the first record of
	// an idempotent batch after its last when it re-indexes (the digest
	// of the batch is known then), and blocks and postings are runs of
	// increasing sequence numbers. Already sorted, this is one pass.
	slices.SortStableFunc(b.recs, func(p, q blockRec) int {
		return cmp.Or(cmp.Compare(p.id.Ledger(), q.id.Ledger()), cmp.Compare(p.seq, q.seq))
	})
	for i := 0; i < len(b.recs); {
		j := i + 1
		for j < len(b.recs) && j-i < blockMax && b.recs[j].follows(&b.recs[j-1]) {
			j++
		}
		b.key, b.val = blockEntries(b.recs[i:j], b.key, b.val, b.set)
		i = j
	}
	for i := range b.posts {
		p := &b.posts[i]
		slices.SortFunc(p.ents, func(p, q Position) int { return cmp.Compare(p.Seq, q.Seq) })
		b.key, b.val = postingEntries(p.prefix, p.ents, b.key, b.val, b.set)
	}
	b.recs = b.recs[:0]
	b.posts = b.posts[:0]
	clear(b.post)
}

// blockEntries gives emit the T and S entries of recs, consecutive
// events of one ledger (see blockRec.follows), at most blockMax, building
// them in the scratch buffers key and val, which it returns (grown).
func blockEntries(recs []blockRec, key, val []byte, emit func(key, val []byte)) ([]byte, []byte) {
	last := &recs[len(recs)-1]
	ledger := last.id.Ledger()
	key = appendTimeKey(key[:0], ledger, last.id)
	val = appendBlock(val[:0], recs)
	emit(key, val)
	key = appendSeqKey(key[:0], ledger, last.seq)
	val = append(val[:0], last.id[:]...)
	emit(key, val)
	return key, val
}

// postingEntries gives emit the postings of ps (in sequence order) under
// prefix: runs in which each event follows the one before
// (postingFollows), at most postingMax each.
func postingEntries(prefix string, ps []Position, key, val []byte, emit func(key, val []byte)) ([]byte, []byte) {
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && j-i < postingMax && postingFollows(&ps[j], &ps[j-1]) {
			j++
		}
		key = binary.BigEndian.AppendUint64(append(key[:0], prefix...), ps[i].Seq)
		val = appendPosting(val[:0], ps[i:j])
		emit(key, val)
		i = j
	}
	return key, val
}

// appendIdem appends the K value of r: first seq | count | digest.
func appendIdem(dst []byte, r *Record) []byte {
	dst = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(dst, r.Seq), r.BatchLen)
	// A Digest of another size is refused by Add; Digest.Add (the
	// segments' side of a verification) writes what it is given.
	return append(dst, r.Digest...)
}

// DeleteEvents adds to the batch the deletion of every event entry of a
// ledger (T, S, E, A, N and K; not its progress marker, which the batch
// should set): a ledger indexed again from its first record must not keep
// the blocks and postings of the first time, which group its events
// otherwise. The deletion comes before the entries the batch writes.
//
// The ledger's in-memory tail is dropped when the batch commits, not
// before: a batch closed without Commit, or whose Commit fails, leaves
// what readers see of the ledger as it was. Add accepts records of the
// ledger even while its tail holds some (they replace them).
func (b *Batch) DeleteEvents(ledger eventid.LedgerID) {
	if b.err != nil {
		return
	}
	if b.pb == nil {
		b.err = errBatchClosed
		return
	}
	if !slices.Contains(b.dels, ledger) {
		b.dels = append(b.dels, ledger)
	}
	for _, fam := range ledgerFamilies {
		if fam == famProgress {
			continue
		}
		start := appendLedgerPrefix(nil, fam, ledger)
		// A DeleteRange on an un-applied batch cannot fail.
		_ = b.pb.DeleteRange(start, prefixSuccessor(start), nil)
	}
}

// set writes a key and value to the batch (pebble copies both).
func (b *Batch) set(key, val []byte) {
	// A Set on an un-applied batch with a nil WriteOptions cannot fail.
	_ = b.pb.Set(key, val, nil)
}

// SetProgress records in the batch that ledger has been indexed up to and
// including head. Add the records it covers to the same batch (or an
// earlier one), so that the marker never runs ahead of the entries.
func (b *Batch) SetProgress(ledger eventid.LedgerID, head segment.Head) {
	b.SetProgressDurable(ledger, head, segment.Head{})
}

// SetProgressDurable is SetProgress that also records durable, the last
// record that the ledger's segment log knew to be on stable storage
// (segment.Log.Durable) when the batch was made: a witness of the head
// kept outside the segments, which Index.Durable returns. The zero Head
// records none.
func (b *Batch) SetProgressDurable(ledger eventid.LedgerID, head, durable segment.Head) {
	if b.err != nil {
		return
	}
	if b.pb == nil {
		b.err = errBatchClosed
		return
	}
	if !checkLoc(head.Loc) {
		b.err = fmt.Errorf("%w: progress of ledger %v: head %v (seq %d) has location %+v", ErrInvalid, ledger, head.ID, head.Seq, head.Loc)
		return
	}
	if durable.Seq != 0 && !checkLoc(durable.Loc) {
		b.err = fmt.Errorf("%w: progress of ledger %v: durable head %v (seq %d) has location %+v", ErrInvalid, ledger, durable.ID, durable.Seq, durable.Loc)
		return
	}
	v := appendHead(b.val[:0], head)
	if durable.Seq != 0 {
		v = appendHead(v, durable)
	}
	b.val = v
	b.set(appendProgressKey(b.key[:0], ledger), v)
}

// appendHead appends the encoding of a head: id | seq | location.
func appendHead(dst []byte, h segment.Head) []byte {
	return appendLoc(binary.BigEndian.AppendUint64(append(dst, h.ID[:]...), h.Seq), h.Loc)
}

// Commit applies the batch atomically: with sync, it returns once the
// batch is on stable storage; without, once it is visible to readers (the
// append path commits without sync; see Flush). If an Add or SetProgress
// was invalid, Commit returns that error, wrapping ErrInvalid, and writes
// nothing. Either way the batch is empty afterwards and can be reused.
func (b *Batch) Commit(sync bool) error {
	if b.err == nil && b.pb != nil {
		b.writeEvents()
	}
	err := b.commit(sync)
	b.err, b.n, b.dels = nil, 0, b.dels[:0]
	b.recs, b.posts = b.recs[:0], b.posts[:0]
	clear(b.post)
	if b.pb == nil {
		return err
	}
	if err == nil {
		// Pebble marks even an empty batch applied, and empties a large
		// one it keeps as a memtable: Reset makes either reusable.
		b.pb.Reset()
		return nil
	}
	// Not applied, or a failed Apply that may have left the batch marked
	// as committing: start afresh.
	_ = b.pb.Close()
	b.pb = nil
	if b.x.usable() == nil {
		b.pb = b.x.db.NewBatch()
	}
	return err
}

func (b *Batch) commit(sync bool) (err error) {
	// A closed or failed index first: a batch made after it has no
	// Pebble batch, which Add reports as a batch used after Close.
	if err := b.x.usable(); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	defer b.x.guard("commit", &err)
	if b.pb == nil {
		return errBatchClosed
	}
	pb := b.pb
	apply := func() error {
		return b.x.call("commit", func() error { return b.x.db.Apply(pb, pebble.NoSync) })
	}
	if len(b.dels) > 0 {
		// The tails of the ledgers deleted are dropped with the commit.
		inner := apply
		apply = func() error { return b.x.replaceTails(b.dels, inner) }
	}
	if err := apply(); err != nil {
		if errors.Is(err, ErrFailed) {
			// Pebble may still be applying it: the batch is Pebble's now.
			b.pb = nil
		}
		return fmt.Errorf("index: commit: %w", err)
	}
	if sync {
		// No write-ahead log: durable once the memtables are flushed.
		return b.x.flush()
	}
	return nil
}

// Close releases the batch. Records added and not committed are dropped.
func (b *Batch) Close() {
	b.dels = b.dels[:0]
	if b.pb != nil {
		_ = b.pb.Close()
		b.pb = nil
	}
}
