package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// The tail (issue 15): the append path does not commit a Pebble batch per
// group of appends. A ledger's Tail keeps in memory the records indexed
// since its last flush, in sequence order; when it holds TailSize records
// it is frozen and written to Pebble in one batch (T blocks, S entries,
// one E, A and N posting per stream, entity and name over the whole
// frozen tail, K entries and the progress marker at its last record) by a
// goroutine of its own, while a new tail takes the appends. Every read of
// the index merges: it captures the ledger's tail (frozen and active
// parts, immutable prefixes) before it reads Pebble, and takes from Pebble
// only the records below the tail's first sequence number, so that a
// flush that commits between the two is not counted twice.

// DefaultTailSize is the number of records a ledger's tail holds before
// it is written to Pebble, when Options.TailSize is 0.
const DefaultTailSize = 4096

// tailIdle is how long a tail that takes no new records waits before it
// is written to Pebble, so that the progress marker does not lag for ever.
var tailIdle = time.Second

// tailRec is one record of a tail.
type tailRec struct {
	Position
	entity, key, event string
	idemKey            string
	idem               *Idem // nil unless the record carries an idempotency key
}

// tailBuf is one part of a tail (the active or the frozen one). Its
// records are written by the Tail's writer beyond what any snapshot
// covers, and never changed once published; post is guarded by mu.
type tailBuf struct {
	recs []tailRec
	mu   sync.RWMutex
	// post maps the prefixes of the E, A and N postings and the K keys
	// of the records to their indices in recs, ascending. A pointer, so
	// that adding to a prefix's list is a lookup (m[string(key)] with key
	// a []byte does not copy it), not an assignment, which would allocate
	// the key's string for every record.
	post map[string]*[]int32
	// head and durable are the progress marker of the last published
	// record.
	head, durable segment.Head
	// entities and events remember the A and N postings of the entities
	// and event names added last (written by the Tail's writer, under
	// mu): a ledger's appends use a few of each, and comparing a name
	// with those costs less than building its prefix and hashing it.
	entities, events postCache
}

// postCache holds the postings of a few names, the last ones looked up.
type postCache struct {
	names [8]string
	posts [8]*[]int32
	next  int
}

// get returns the posting of name, or nil if the cache does not hold it.
func (c *postCache) get(name string) *[]int32 {
	for i, p := range c.posts {
		if p != nil && c.names[i] == name {
			return p
		}
	}
	return nil
}

// put remembers the posting of name, in place of the oldest one held.
func (c *postCache) put(name string, p *[]int32) {
	c.names[c.next], c.posts[c.next] = name, p
	c.next = (c.next + 1) % len(c.posts)
}

// tailSnap is what a reader captures: the published prefixes of the
// frozen and active parts.
type tailSnap struct {
	frozen, active *tailBuf
	f, a           []tailRec // their published records
}

// Tail is the in-memory tail of a ledger's index. Its writing methods
// (Add, AddIdempotency, Publish) are called by one goroutine at a time;
// readers of the Index read it concurrently.
type Tail struct {
	x      *Index
	ledger eventid.LedgerID
	snap   atomic.Pointer[tailSnap]

	// stage is written by the writer only: the records added since the
	// last Publish, and the first invalid Add.
	stage    []tailRec
	stageErr error

	// mu guards the fields below and the swap of the parts.
	mu       sync.Mutex
	active   *tailBuf
	frozen   *tailBuf
	flushing chan struct{} // closed when the flush of frozen is done
	next     uint64        // the sequence number the next record must have; 0: any
	err      error         // a failed flush: the tail takes no more records
	armed    bool          // an idle flush is scheduled
	idleAt   uint64        // the next seq when the idle flush was scheduled
	key      []byte        // scratch of publish
}

func (x *Index) tailSize() int {
	if x.tailN > 0 {
		return x.tailN
	}
	return DefaultTailSize
}

// Tail returns the tail of a ledger, which the append path writes its
// records to instead of committing Pebble batches.
func (x *Index) Tail(ledger eventid.LedgerID) *Tail {
	if t, ok := x.tails.Load(ledger); ok {
		return t.(*Tail)
	}
	t, _ := x.tails.LoadOrStore(ledger, &Tail{x: x, ledger: ledger, active: &tailBuf{}})
	return t.(*Tail)
}

// snapshot returns the ledger's tail as of now, or nil if it holds
// nothing.
func (x *Index) snapshot(ledger eventid.LedgerID) *tailSnap {
	t, ok := x.tails.Load(ledger)
	if !ok {
		return nil
	}
	s := t.(*Tail).snap.Load()
	if s == nil || len(s.f)+len(s.a) == 0 {
		return nil
	}
	return s
}

// Add adds a record to the tail; readers see it after Publish. A record
// out of sequence order is refused (Publish returns the error).
func (t *Tail) Add(id eventid.ID, seq uint64, loc segment.Location, entity, key, event string) {
	if t.stageErr != nil {
		return
	}
	if id.Ledger() != t.ledger || !checkLoc(loc) {
		t.stageErr = fmt.Errorf("%w: record %v (seq %d, location %+v) added to the tail of ledger %v", ErrInvalid, id, seq, loc, t.ledger)
		return
	}
	t.stage = append(t.stage, tailRec{Position: Position{ID: id, Seq: seq, Loc: loc}, entity: entity, key: key, event: event})
}

// AddIdempotency records that the last record added is the first of a
// batch of count records appended with an idempotency key, whose content
// has the digest d (see Record).
func (t *Tail) AddIdempotency(key string, count uint32, d [DigestSize]byte) {
	if t.stageErr != nil || len(t.stage) == 0 {
		return
	}
	r := &t.stage[len(t.stage)-1]
	r.idemKey = key
	r.idem = &Idem{FirstSeq: r.Seq, Count: count, Digest: d}
}

// Publish makes the records added since the last Publish visible to
// readers, with head (their last) and durable as the progress marker to
// write with them. When the tail is full, it is frozen and written to
// Pebble in the background; if the previous frozen tail is still being
// written, Publish waits for it.
func (t *Tail) Publish(head, durable segment.Head) error {
	stage := t.stage
	t.stage = t.stage[:0]
	if err := t.stageErr; err != nil {
		t.stageErr = nil
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if len(stage) == 0 {
		return nil
	}
	// Checked before anything changes: a refused Publish publishes none
	// of its records, and the tail wants the same record next.
	next := t.next
	for i := range stage {
		if next != 0 && stage[i].Seq != next {
			return fmt.Errorf("%w: record %v has sequence number %d, the tail of ledger %v wants %d", ErrInvalid, stage[i].ID, stage[i].Seq, t.ledger, next)
		}
		next = stage[i].Seq + 1
	}
	t.next = next
	a := t.active
	base := len(a.recs)
	a.recs = append(a.recs, stage...)
	clear(stage) // the strings are the tail's now
	a.mu.Lock()
	if a.post == nil {
		a.post = make(map[string]*[]int32)
	}
	for i := base; i < len(a.recs); i++ {
		r := &a.recs[i]
		t.key = appendStreamPrefix(t.key[:0], t.ledger, []byte(r.entity), []byte(r.key))
		a.addPost(t.key, i)
		if p := a.entities.get(r.entity); p != nil {
			*p = append(*p, int32(i))
		} else {
			t.key = appendEntitySeqPrefix(t.key[:0], t.ledger, []byte(r.entity))
			a.entities.put(r.entity, a.addPost(t.key, i))
		}
		if p := a.events.get(r.event); p != nil {
			*p = append(*p, int32(i))
		} else {
			t.key = appendEventPrefix(t.key[:0], t.ledger, []byte(r.event))
			a.events.put(r.event, a.addPost(t.key, i))
		}
		if r.idem != nil {
			t.key = appendIdemKey(t.key[:0], t.ledger, []byte(r.idemKey))
			a.addPost(t.key, i)
		}
	}
	a.head, a.durable = head, durable
	a.mu.Unlock()
	t.publishLocked()
	if len(a.recs) >= t.x.tailSize() {
		return t.freezeLocked(true)
	}
	if !t.armed {
		t.armed, t.idleAt = true, t.next
		time.AfterFunc(tailIdle, t.idle)
	}
	return nil
}

// addPost adds record i under the prefix in key, and returns the prefix's
// posting. Called with b.mu held.
func (b *tailBuf) addPost(key []byte, i int) *[]int32 {
	if s, ok := b.post[string(key)]; ok {
		*s = append(*s, int32(i))
		return s
	}
	s := &[]int32{int32(i)}
	b.post[string(key)] = s
	return s
}

// publishLocked stores the snapshot of the parts as they are.
func (t *Tail) publishLocked() {
	s := &tailSnap{active: t.active, a: t.active.recs}
	if t.frozen != nil {
		s.frozen, s.f = t.frozen, t.frozen.recs
	}
	t.snap.Store(s)
}

// freezeLocked makes the active part the frozen one, waiting for the
// previous frozen part's flush, and starts writing it to Pebble. full
// says the part is frozen because it is full: the next one is then made
// as large at once, rather than grown by copies.
func (t *Tail) freezeLocked(full bool) error {
	for t.flushing != nil {
		done := t.flushing
		t.mu.Unlock()
		<-done
		t.mu.Lock()
	}
	if t.err != nil {
		return t.err
	}
	if len(t.active.recs) == 0 {
		return nil
	}
	next := &tailBuf{}
	if full {
		next.recs = make([]tailRec, 0, cap(t.active.recs))
	}
	t.frozen, t.active = t.active, next
	t.publishLocked()
	done := make(chan struct{})
	t.flushing = done
	go t.flush(t.frozen, done)
	return nil
}

// flush writes a frozen part to Pebble, then drops it from the tail.
func (t *Tail) flush(b *tailBuf, done chan struct{}) {
	if h := t.x.flushHook.Load(); h != nil {
		(*h)(false)
	}
	err := t.write(b)
	if h := t.x.flushHook.Load(); err == nil && h != nil {
		(*h)(true)
	}
	t.mu.Lock()
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("index: write the tail of ledger %v: %w", t.ledger, err)
	}
	if err == nil && t.frozen == b {
		t.frozen = nil
		t.publishLocked()
	}
	t.flushing = nil
	close(done)
	t.mu.Unlock()
}

// write writes the records of b to Pebble in one batch, with the progress
// marker of its last record.
func (t *Tail) write(b *tailBuf) error {
	if t.x.readOnly {
		return fmt.Errorf("%w: read-only index", ErrInvalid)
	}
	pb := t.x.NewBatch()
	defer pb.Close()
	if pb.pb == nil {
		if err := t.x.usable(); err != nil {
			return err
		}
		return errBatchClosed
	}
	blk := make([]blockRec, 0, min(len(b.recs), blockMax))
	var key, val []byte
	for i := 0; i < len(b.recs); {
		blk = blk[:0]
		for j := i; j < len(b.recs) && len(blk) < blockMax; j++ {
			r := blockRec{id: b.recs[j].ID, seq: b.recs[j].Seq, loc: b.recs[j].Loc}
			if len(blk) > 0 && !r.follows(&blk[len(blk)-1]) {
				break
			}
			blk = append(blk, r)
		}
		key, val = blockEntries(blk, key, val, pb.set)
		i += len(blk)
	}
	// As large as the longest posting at once: grown posting by posting
	// (the map's order is random), it was most of the bytes the append
	// path allocated.
	longest := 0
	for _, p := range b.post {
		longest = max(longest, len(*p))
	}
	ps := make([]Position, 0, longest)
	for prefix, p := range b.post {
		idx := *p
		if prefix[0] == famIdem {
			for _, i := range idx { // in order: the last one of a key wins
				r := &b.recs[i]
				rec := Record{Seq: r.Seq, BatchLen: r.idem.Count, Digest: r.idem.Digest[:]}
				val = appendIdem(val[:0], &rec)
				pb.set([]byte(prefix), val)
			}
			continue
		}
		ps = ps[:0]
		for _, i := range idx {
			r := &b.recs[i]
			ps = append(ps, Position{ID: r.ID, Seq: r.Seq, Loc: r.Loc})
		}
		key, val = postingEntries(prefix, ps, key, val, pb.set)
	}
	pb.SetProgressDurable(t.ledger, b.head, b.durable)
	return pb.Commit(false)
}

// idle writes the tail to Pebble if no record was published since the
// idle flush was scheduled.
func (t *Tail) idle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = false
	if t.x.closed.Load() {
		return
	}
	if t.err != nil {
		return
	}
	if t.next != t.idleAt || t.flushing != nil {
		// Records came since, or a write runs: wait again.
		t.armed, t.idleAt = true, t.next
		time.AfterFunc(tailIdle, t.idle)
		return
	}
	_ = t.freezeLocked(false)
}

// Flush writes the ledger's tail to Pebble and waits until it is written.
func (t *Tail) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.freezeLocked(false); err != nil {
		return err
	}
	for t.flushing != nil {
		done := t.flushing
		t.mu.Unlock()
		<-done
		t.mu.Lock()
	}
	return t.err
}

// holdLocked waits, with t.mu held, until no flush of the tail is in
// progress; while t.mu stays held none starts.
func (t *Tail) holdLocked() {
	for t.flushing != nil {
		done := t.flushing
		t.mu.Unlock()
		<-done
		t.mu.Lock()
	}
}

// dropLocked forgets the tail's records (called with t.mu held and no
// flush in progress): the ledger's keys are deleted or written again.
func (t *Tail) dropLocked() {
	t.frozen, t.active, t.next, t.err = nil, &tailBuf{}, 0, nil
	t.publishLocked()
}

// busy reports whether the tail holds records.
func (t *Tail) busy() bool {
	s := t.snap.Load()
	return s != nil && len(s.f)+len(s.a) > 0
}

// FlushTails writes every ledger's tail to Pebble (without flushing
// Pebble's memtables; see Flush) and waits until they are written.
func (x *Index) FlushTails() error {
	var errs []error
	x.tails.Range(func(_, v any) bool {
		if err := v.(*Tail).Flush(); err != nil {
			errs = append(errs, err)
		}
		return true
	})
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// DropTail forgets the records of a ledger's tail (they are not written),
// after any flush of it in progress.
func (x *Index) DropTail(ledger eventid.LedgerID) {
	_ = x.replaceTails([]eventid.LedgerID{ledger}, func() error { return nil })
}

// replaceTails runs apply, a Pebble write that deletes (or writes again)
// every event key of ledgers, with their tails held: no flush of theirs is
// in progress or starts, and no Publish adds to them, until it returns. If
// apply succeeds, the tails' records are dropped (Pebble holds what
// replaces them; until the drop, readers still take them from the tail);
// if it fails, the tails are left as they were, and so is what readers
// see. ledgers is sorted in place (two replacements lock tails in one
// order).
func (x *Index) replaceTails(ledgers []eventid.LedgerID, apply func() error) error {
	slices.Sort(ledgers)
	ledgers = slices.Compact(ledgers)
	held := make([]*Tail, 0, len(ledgers))
	defer func() {
		for _, t := range held {
			t.mu.Unlock()
		}
	}()
	for _, id := range ledgers {
		if v, ok := x.tails.Load(id); ok {
			t := v.(*Tail)
			t.mu.Lock()
			held = append(held, t)
			t.holdLocked()
		}
	}
	if err := apply(); err != nil {
		return err
	}
	for _, t := range held {
		t.dropLocked()
	}
	return nil
}

// tailBusy reports whether a ledger's tail holds records.
func (x *Index) tailBusy(ledger eventid.LedgerID) bool {
	t, ok := x.tails.Load(ledger)
	return ok && t.(*Tail).busy()
}

// parts returns the published records of the snapshot, the frozen
// part's then the active part's.
func (s *tailSnap) parts() [2][]tailRec { return [2][]tailRec{s.f, s.a} }

// first returns the first record of the snapshot (not empty).
func (s *tailSnap) first() *tailRec {
	if len(s.f) > 0 {
		return &s.f[0]
	}
	return &s.a[0]
}

// bySeq returns the record with sequence number seq, if the snapshot
// holds it.
func (s *tailSnap) bySeq(seq uint64) (*tailRec, bool) {
	for _, p := range s.parts() {
		if len(p) > 0 && seq >= p[0].Seq && seq-p[0].Seq < uint64(len(p)) {
			return &p[seq-p[0].Seq], true
		}
	}
	return nil, false
}

// byID returns the record of an ID, if the snapshot holds it (IDs rise
// with sequence numbers within a ledger).
func (s *tailSnap) byID(id eventid.ID) (*tailRec, bool) {
	for _, p := range s.parts() {
		i := sort.Search(len(p), func(i int) bool { return p[i].ID.Compare(id) >= 0 })
		if i < len(p) && p[i].ID == id {
			return &p[i], true
		}
	}
	return nil, false
}

// indices returns the indices, in each part, of the records under a
// posting prefix or K key.
func (s *tailSnap) indices(prefix string) [2][]int32 {
	var out [2][]int32
	for k, b := range [2]*tailBuf{s.frozen, s.active} {
		if b == nil {
			continue
		}
		n := len(s.f)
		if k == 1 {
			n = len(s.a)
		}
		var idx []int32
		b.mu.RLock()
		if p := b.post[prefix]; p != nil {
			idx = *p
		}
		b.mu.RUnlock()
		// Indices at or past n were published after the snapshot.
		out[k] = idx[:sort.Search(len(idx), func(i int) bool { return int(idx[i]) >= n })]
	}
	return out
}

// positions returns the positions in r of the records under a posting
// prefix, in the order r asks for.
func (s *tailSnap) positions(prefix string, r SeqRange) []Position {
	var out []Position
	parts := s.parts()
	for k, idx := range s.indices(prefix) {
		for _, i := range idx {
			p := parts[k][i].Position
			if p.Seq > r.After && (r.Before == 0 || p.Seq < r.Before) {
				out = append(out, p)
			}
		}
	}
	if r.Reverse {
		slices.Reverse(out)
	}
	return out
}

// pebbleBound returns the bound of the Pebble part of a read of r below
// the tail's first sequence number.
func pebbleBound(r SeqRange, first uint64) SeqRange {
	if r.Before == 0 || r.Before > first {
		r.Before = first
	}
	return r
}

// merge yields, in the order of reverse, the Pebble part pb (records
// below first only) and the tail part tp of a read. The Pebble part comes
// first forward, last in reverse.
func merge(yield func(Position, error) bool, pb iter.Seq2[Position, error], first uint64, tp []Position, reverse bool) {
	emitTail := func() bool {
		for _, p := range tp {
			if !yield(p, nil) {
				return false
			}
		}
		return true
	}
	if reverse && !emitTail() {
		return
	}
	for p, err := range pb {
		if err != nil {
			yield(Position{}, err)
			return
		}
		if p.Seq >= first {
			continue // written by a flush after the snapshot: it is in tp
		}
		if !yield(p, nil) {
			return
		}
	}
	if !reverse {
		emitTail()
	}
}

// seqScan reads the E, A or N postings of prefix, the sequence numbers in
// r, from the tail and Pebble.
func (x *Index) seqScan(ctx context.Context, prefix []byte, r SeqRange) iter.Seq2[Position, error] {
	ledger := eventid.LedgerID(binary.BigEndian.Uint32(prefix[1:ledgerPrefixLen]))
	s := x.snapshot(ledger)
	if s == nil {
		return x.seqScanPebble(ctx, prefix, r)
	}
	return func(yield func(Position, error) bool) {
		if err := x.scanErr(ctx); err != nil {
			yield(Position{}, err)
			return
		}
		if r.After == math.MaxUint64 || r.Before != 0 && r.Before <= r.After+1 {
			return
		}
		first := s.first().Seq
		merge(yield, x.seqScanPebble(ctx, prefix, pebbleBound(r, first)), first, s.positions(string(prefix), r), r.Reverse)
	}
}

// Entity returns the events of every key of an entity of a ledger whose
// sequence numbers are above afterSeq: one key's events after another, each
// key's in sequence order. Keys come in the order of their encoding (see
// the package documentation, "Order"), which for keys shorter than 128
// bytes is by length, then bytewise; it is not sequence order across keys.
func (x *Index) Entity(ctx context.Context, ledger eventid.LedgerID, entity []byte, afterSeq uint64) iter.Seq2[Position, error] {
	if afterSeq == math.MaxUint64 {
		return x.postingScan(ctx, nil, nil, SeqRange{}, nil)
	}
	prefix := appendEntityPrefix(nil, ledger, entity)
	var cur []byte // the (entity, key) prefix of the posting being read
	group := func(k []byte) (int, error) {
		rest := k[len(prefix):]
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) != n+8 {
			return 0, corruptf(k, "key does not hold a length-prefixed key and a sequence number after the entity (%d bytes)", len(rest))
		}
		end := len(prefix) + w + int(n) // the end of the (entity, key) prefix
		cur = append(cur[:0], k[:end]...)
		return end, nil
	}
	pb := x.postingScan(ctx, prefix, prefixSuccessor(prefix), SeqRange{After: afterSeq}, group)
	s := x.snapshot(ledger)
	if s == nil {
		return pb
	}
	return func(yield func(Position, error) bool) {
		if err := x.scanErr(ctx); err != nil {
			yield(Position{}, err)
			return
		}
		// The tail's streams of the entity, in key order.
		var streams []string
		for _, b := range [2]*tailBuf{s.frozen, s.active} {
			if b == nil {
				continue
			}
			b.mu.RLock()
			for k := range b.post {
				if strings.HasPrefix(k, string(prefix)) && !slices.Contains(streams, k) {
					streams = append(streams, k)
				}
			}
			b.mu.RUnlock()
		}
		slices.Sort(streams)
		first := s.first().Seq
		i := 0
		// emitTail yields the tail's streams before the prefix upto (all
		// with nil): Pebble's events of a stream come before the tail's.
		emitTail := func(upto []byte) bool {
			for ; i < len(streams) && (upto == nil || streams[i] < string(upto)); i++ {
				for _, p := range s.positions(streams[i], SeqRange{After: afterSeq}) {
					if !yield(p, nil) {
						return false
					}
				}
			}
			return true
		}
		for p, err := range pb {
			if err != nil {
				yield(Position{}, err)
				return
			}
			if p.Seq >= first {
				continue
			}
			if !emitTail(cur) || !yield(p, nil) {
				return
			}
		}
		emitTail(nil)
	}
}

// Lookup returns the sequence number and location of the event id, in the
// ledger that the ID names, from the tail or the T blocks.
func (x *Index) Lookup(id eventid.ID) (seq uint64, loc segment.Location, found bool, err error) {
	s := x.snapshot(id.Ledger())
	if s == nil {
		return x.lookupPebble(id)
	}
	if err := x.usable(); err != nil {
		return 0, segment.Location{}, false, err
	}
	if r, ok := s.byID(id); ok {
		return r.Seq, r.Loc, true, nil
	}
	seq, loc, found, err = x.lookupPebble(id)
	if err != nil || !found || seq >= s.first().Seq {
		return 0, segment.Location{}, false, err
	}
	return seq, loc, true, nil
}

// BySeq returns the ID of a ledger's event with sequence number seq.
func (x *Index) BySeq(ledger eventid.LedgerID, seq uint64) (id eventid.ID, found bool, err error) {
	s := x.snapshot(ledger)
	if s == nil || seq < s.first().Seq {
		return x.bySeqPebble(ledger, seq)
	}
	if err := x.usable(); err != nil {
		return eventid.ID{}, false, err
	}
	if r, ok := s.bySeq(seq); ok {
		return r.ID, true, nil
	}
	return eventid.ID{}, false, nil
}

// Idempotency returns the batch that an idempotency key appended in a
// ledger.
func (x *Index) Idempotency(ledger eventid.LedgerID, key []byte) (Idem, bool, error) {
	s := x.snapshot(ledger)
	if s == nil {
		return x.idempotencyPebble(ledger, key)
	}
	if err := x.usable(); err != nil {
		return Idem{}, false, err
	}
	parts := s.parts()
	idx := s.indices(string(appendIdemKey(nil, ledger, key)))
	for k := 1; k >= 0; k-- { // the last one wins
		if n := len(idx[k]); n > 0 {
			return *parts[k][idx[k][n-1]].idem, true, nil
		}
	}
	d, found, err := x.idempotencyPebble(ledger, key)
	if err != nil || !found || d.FirstSeq >= s.first().Seq {
		return Idem{}, false, err
	}
	return d, true, nil
}

// TimeRange returns the events of a ledger whose IDs are in [lo, hi], both
// inclusive, in ID order (time order), ascending or, with reverse,
// descending. It is empty if lo > hi.
func (x *Index) TimeRange(ctx context.Context, ledger eventid.LedgerID, lo, hi eventid.ID, reverse bool) iter.Seq2[Position, error] {
	s := x.snapshot(ledger)
	if s == nil {
		return x.timeRangePebble(ctx, ledger, lo, hi, reverse)
	}
	return func(yield func(Position, error) bool) {
		if err := x.scanErr(ctx); err != nil {
			yield(Position{}, err)
			return
		}
		if lo.Compare(hi) > 0 {
			return
		}
		f := s.first()
		var tp []Position
		for _, p := range s.parts() {
			for i := range p {
				if p[i].ID.Compare(lo) >= 0 && p[i].ID.Compare(hi) <= 0 {
					tp = append(tp, p[i].Position)
				}
			}
		}
		if reverse {
			slices.Reverse(tp)
		}
		// Pebble below the tail's first ID (IDs rise with sequence
		// numbers), and below its first sequence number.
		phi := hi
		if f.ID.Compare(phi) <= 0 {
			phi = idPred(f.ID)
		}
		merge(yield, x.timeRangePebble(ctx, ledger, lo, phi, reverse), f.Seq, tp, reverse)
	}
}

// idPred returns the ID just before id in byte order (id is not zero).
func idPred(id eventid.ID) eventid.ID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]--
		if id[i] != 0xff {
			break
		}
	}
	return id
}

// tailPrefixMatches adds to ids, the lowest matches of a ledger's T
// blocks in [lo, hi) (hi nil: no bound), those of the tail, and drops
// those the tail has since written to Pebble.
func (x *Index) tailPrefixMatches(ledger eventid.LedgerID, lo, hi []byte, ids []eventid.ID) []eventid.ID {
	s := x.snapshot(ledger)
	if s == nil {
		return ids
	}
	f := s.first().ID
	ids = slices.DeleteFunc(ids, func(id eventid.ID) bool { return id.Compare(f) >= 0 })
	var key []byte
	for _, p := range s.parts() {
		for i := range p {
			key = appendTimeKey(key[:0], ledger, p[i].ID)
			if string(key) >= string(lo) && (hi == nil || string(key) < string(hi)) {
				ids = append(ids, p[i].ID)
			}
		}
	}
	return ids
}

// digest adds to d the entries of the snapshot's records up to maxSeq.
// An idempotency key holds one K entry, its last, as once the tail is
// written: one used again in the tail replaces the entry of its earlier
// use, in the tail or in Pebble (pebbleMax: the last sequence number d
// counted of Pebble), which d then no longer counts.
func (x *Index) tailDigest(s *tailSnap, d *Digest, maxSeq, pebbleMax uint64) error {
	last := map[string]uint64{} // idempotency key -> its last use
	for _, p := range s.parts() {
		for i := range p {
			if r := &p[i]; r.idem != nil {
				last[r.idemKey] = r.Seq
			}
		}
	}
	for k := range last {
		old, found, err := x.idempotencyPebble(d.ledger, []byte(k))
		if err != nil {
			return err
		}
		if found && old.FirstSeq <= pebbleMax {
			key := appendIdemKey(nil, d.ledger, []byte(k))
			val := appendIdem(nil, &Record{Seq: old.FirstSeq, BatchLen: old.Count, Digest: old.Digest[:]})
			d.Count[slotIdem]--
			d.Sum[slotIdem] -= entryHash(key, val)
		}
	}
	for _, p := range s.parts() {
		for i := range p {
			r := &p[i]
			if r.Seq > maxSeq {
				return nil
			}
			rec := Record{ID: r.ID, Seq: r.Seq, Loc: r.Loc, Entity: []byte(r.entity), Key: []byte(r.key), Event: []byte(r.event)}
			if r.idem != nil && last[r.idemKey] == r.Seq {
				rec.IdempotencyKey, rec.BatchLen, rec.Digest = []byte(r.idemKey), r.idem.Count, r.idem.Digest[:]
			}
			d.Add(&rec)
		}
	}
	return nil
}

// Digest returns the digest of what the index holds for ledger, its tail
// included, counting only the entries of events up to sequence number
// maxSeq (those of later events may be committed meanwhile). See
// digestPebble.
func (x *Index) Digest(ctx context.Context, ledger eventid.LedgerID, maxSeq uint64) (*Digest, error) {
	s := x.snapshot(ledger)
	if s == nil {
		return x.digestPebble(ctx, ledger, maxSeq)
	}
	pebbleMax := min(maxSeq, s.first().Seq-1)
	d, err := x.digestPebble(ctx, ledger, pebbleMax)
	if err != nil {
		return nil, err
	}
	if err := x.tailDigest(s, d, maxSeq, pebbleMax); err != nil {
		return nil, err
	}
	return d, nil
}
