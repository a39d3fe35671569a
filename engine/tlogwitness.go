package engine

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annal-db/annal/engine/cosign"
	"github.com/annal-db/annal/engine/tree"
)

// The writer's side of C2SP tlog witnesses (Options.TlogWitnesses; see
// package cosign): each checkpoint, once signed, is sent to every witness
// with the consistency proof from the size that witness cosigned last,
// and is stored and published only with the cosignatures of a quorum.
// Not to be confused with the durable witness (witness.go), the head
// recorded in meta.db.

// cosignTimeout bounds the requests to the witnesses for one checkpoint.
const cosignTimeout = 10 * time.Second

// cosigners are the tlog witnesses of a DB, and the size each cosigned
// last for each origin, as their answers told it (a 409 says it): the
// next request starts there, and needs no second try.
//
// A checkpoint is stored once a quorum cosigned it: the requests to the
// other witnesses go on in the background (each bounded by
// cosignTimeout), and their answers, late, move sizes on for the next
// checkpoint. Each witness gets one request at a time (slots), so that
// each starts from the size the one before it left.
type cosigners struct {
	witnesses []cosign.WitnessConfig
	quorum    int
	client    *http.Client
	slots     []chan struct{} // one per witness, capacity 1
	// ctx ends at Close: the requests still in flight are abandoned;
	// wg counts them.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	sizes  map[cosignedKey]uint64
	status []TlogWitnessStatus // by witness, as in witnesses
}

// TlogWitnessStatus is what a DB's requests to one of its tlog witnesses
// (Options.TlogWitnesses) gave, as DB.TlogWitnessStatus reports it.
type TlogWitnessStatus struct {
	// URL and Key name the witness (its WitnessConfig).
	URL, Key string
	// Origin and Size are the checkpoint it cosigned last for this DB,
	// and CosignedAt when its answer came (zero: none yet). An answer
	// that came after its checkpoint was stored with the cosignatures of
	// the others counts too: the next checkpoint is asked of it from
	// there.
	Origin     string
	Size       uint64
	CosignedAt time.Time
	// LastError is its last request's error (nil after a cosignature),
	// and LastErrorAt when it came.
	LastError   error
	LastErrorAt time.Time
	// Conflict is the last 409 it answered with another size than the
	// one this DB knew it had cosigned (a witness behind: it lost what
	// it cosigned, or was restored from an old copy of its directory;
	// ahead: it cosigned a checkpoint of the origin that this DB did not
	// ask for, another writer's), and ConflictAt when. It stays after
	// later cosignatures. The first 409 of each witness and origin after
	// Open, which tells this DB the witness's size, is not one.
	Conflict   error
	ConflictAt time.Time
}

// TlogWitnessStatus returns the state of each of the DB's tlog witnesses
// (Options.TlogWitnesses, in their order); nil if it has none.
func (db *DB) TlogWitnessStatus() []TlogWitnessStatus {
	c := db.tlogCosigners()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.status)
}

type cosignedKey struct {
	witness int
	origin  string
}

// checkTlogWitnesses says what is wrong with Options.TlogWitnesses and
// TlogWitnessQuorum (ErrInvalid).
func (o *Options) checkTlogWitnesses() error {
	var vkeys []string
	for i, w := range o.TlogWitnesses {
		if err := w.Check(); err != nil {
			return fmt.Errorf("%w: options: TlogWitnesses[%d]: %w", ErrInvalid, i, err)
		}
		vkeys = append(vkeys, w.VKey)
	}
	if q := o.TlogWitnessQuorum; q < 0 || q > len(o.TlogWitnesses) {
		return fmt.Errorf("%w: options: TlogWitnessQuorum %d is out of range: 0 (all of TlogWitnesses) to %d", ErrInvalid, q, len(o.TlogWitnesses))
	}
	if len(vkeys) > 0 {
		// A key given twice, or one public key under two names, would
		// count one witness twice toward the quorum.
		if _, err := cosign.NewPolicy(vkeys, o.TlogWitnessQuorum); err != nil {
			return fmt.Errorf("%w: options: TlogWitnesses: %w", ErrInvalid, err)
		}
	}
	return nil
}

// tlogCosigners returns the DB's tlog witnesses, nil if it has none.
func (db *DB) tlogCosigners() *cosigners {
	db.cosignersOnce.Do(func() {
		if len(db.opts.TlogWitnesses) == 0 {
			return
		}
		q := db.opts.TlogWitnessQuorum
		if q == 0 {
			q = len(db.opts.TlogWitnesses)
		}
		c := &cosigners{witnesses: db.opts.TlogWitnesses, quorum: q,
			client: &http.Client{Timeout: cosignTimeout}, sizes: map[cosignedKey]uint64{}}
		c.ctx, c.stop = context.WithCancel(context.Background())
		for _, w := range c.witnesses {
			c.slots = append(c.slots, make(chan struct{}, 1))
			c.status = append(c.status, TlogWitnessStatus{URL: w.URL, Key: w.VKey})
		}
		db.cosigners = c
	})
	return db.cosigners
}

// stopCosigners abandons the requests to the tlog witnesses still in
// flight (answers after a quorum) and waits for them to end (Close).
func (db *DB) stopCosigners() {
	db.cosignersOnce.Do(func() {}) // none made after this
	if c := db.cosigners; c != nil {
		c.stop()
		c.wg.Wait()
	}
}

// checkCosigned says whether the signed checkpoint msg carries the
// cosignatures of the DB's tlog witnesses' quorum (nil without
// witnesses): an error matching cosign.ErrQuorum if not.
func (db *DB) checkCosigned(msg []byte) error {
	ws := db.opts.TlogWitnesses
	if len(ws) == 0 {
		return nil
	}
	vkeys := make([]string, len(ws))
	for i, w := range ws {
		vkeys[i] = w.VKey
	}
	p, err := cosign.NewPolicy(vkeys, db.opts.TlogWitnessQuorum)
	if err == nil {
		_, err = p.Check(msg)
	}
	if err != nil {
		return fmt.Errorf("not cosigned by the quorum of this DB's tlog witnesses: %w", err)
	}
	return nil
}

// cosignAnswer is one witness's answer to one checkpoint.
type cosignAnswer struct {
	witness int
	line    []byte
	err     error
}

// cosign has the DB's tlog witnesses cosign msg, the signed checkpoint
// body of the tree t, and returns msg with their cosignatures (msg as it
// is without witnesses) as soon as a quorum of them cosigned it: the
// others' answers are not waited for. Fewer than the quorum is an error
// matching cosign.ErrQuorum naming each witness that did not cosign and
// why, returned as soon as the quorum cannot be reached.
func (db *DB) cosign(t *tree.File, body tree.Checkpoint, msg []byte) ([]byte, error) {
	c := db.tlogCosigners()
	if c == nil {
		return msg, nil
	}
	if c.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the DB is closing: the tlog witnesses are not asked", cosign.ErrQuorum)
	}
	// The consistency proofs, made when a request needs one and kept
	// by size: the requests to the witnesses ask for the same ones. A
	// late request (after this call returned) may ask for one after t
	// was closed (an import's tree): that witness's answer is then an
	// error, as any other failed request.
	var proofMu sync.Mutex
	proofs := map[uint64][]tree.Hash{}
	proofErrs := map[uint64]error{}
	proof := func(m uint64) ([]tree.Hash, error) {
		proofMu.Lock()
		defer proofMu.Unlock()
		if p, ok := proofs[m]; ok {
			return p, proofErrs[m]
		}
		p, err := t.ConsistencyProof(m, body.Size)
		proofs[m], proofErrs[m] = p, err
		return p, err
	}
	n := len(c.witnesses)
	answers := make(chan cosignAnswer, n) // a late answer never blocks
	for i := range c.witnesses {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			line, err := c.ask(i, body, msg, proof)
			answers <- cosignAnswer{witness: i, line: line, err: err}
		}()
	}
	lines := make([][]byte, n)
	errs := make([]error, n)
	got, failed := 0, 0
	for got < c.quorum && failed <= n-c.quorum {
		a := <-answers
		if a.err != nil {
			errs[a.witness] = a.err
			failed++
		} else {
			lines[a.witness] = a.line
			got++
		}
	}
	if got < c.quorum {
		var refusals []string
		for i, err := range errs {
			switch {
			case err != nil:
				refusals = append(refusals, err.Error())
			case lines[i] == nil:
				refusals = append(refusals, fmt.Sprintf("tlog witness %s: no answer yet", c.witnesses[i].URL))
			}
		}
		return nil, fmt.Errorf("%w: %d of the %d tlog witnesses cosigned the checkpoint of %s size %d, the quorum is %d; it is not stored or published: %s",
			cosign.ErrQuorum, got, n, body.Origin, body.Size, c.quorum, strings.Join(refusals, "; "))
	}
	var cosigned [][]byte
	for _, l := range lines {
		if l != nil {
			cosigned = append(cosigned, l)
		}
	}
	return cosign.AddCosignatures(msg, cosigned...), nil
}

// ask sends the checkpoint msg to witness i, once the witness's request
// before it ended, within cosignTimeout of the call, and records its
// answer (sizes, status).
func (c *cosigners) ask(i int, body tree.Checkpoint, msg []byte, proof func(uint64) ([]tree.Hash, error)) ([]byte, error) {
	w := c.witnesses[i]
	ctx, cancel := context.WithTimeout(c.ctx, cosignTimeout)
	defer cancel()
	select {
	case c.slots[i] <- struct{}{}:
		defer func() { <-c.slots[i] }()
	case <-ctx.Done():
		return nil, fmt.Errorf("cosign: tlog witness %s: still answering an earlier checkpoint: %w", w.URL, ctx.Err())
	}
	key := cosignedKey{i, body.Origin}
	c.mu.Lock()
	old := c.sizes[key]
	c.mu.Unlock()
	line, from, err := w.Cosign(ctx, c.client, msg, old, proof)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.status[i]
	if from != old && old != 0 {
		// A 409 with another size than the one it cosigned for this DB.
		st.Conflict = fmt.Errorf("cosign: tlog witness %s answered 409 for %s: it had cosigned size %d, this DB's last cosignature from it was of size %d (%s)",
			w.URL, body.Origin, from, old, conflictWhy(from, old))
		st.ConflictAt = now
	}
	if err != nil {
		c.sizes[key] = from
		st.LastError, st.LastErrorAt = err, now
		return nil, err
	}
	c.sizes[key] = body.Size
	st.Origin, st.Size, st.CosignedAt = body.Origin, body.Size, now
	st.LastError, st.LastErrorAt = nil, time.Time{}
	return line, nil
}

// conflictWhy says what a witness's size other than the one expected
// means.
func conflictWhy(theirs, ours uint64) string {
	if theirs < ours {
		return "behind: it lost what it cosigned, or its directory was restored from an old copy"
	}
	return "ahead: it cosigned a checkpoint of this origin that this DB did not send, another writer's"
}
