package engine

import (
	"context"
	"fmt"
	"net/http"
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
type cosigners struct {
	witnesses []cosign.WitnessConfig
	quorum    int
	client    *http.Client

	mu    sync.Mutex
	sizes map[cosignedKey]uint64
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

// cosigners returns the DB's tlog witnesses, nil if it has none.
func (db *DB) tlogCosigners() *cosigners {
	db.cosignersOnce.Do(func() {
		if len(db.opts.TlogWitnesses) == 0 {
			return
		}
		q := db.opts.TlogWitnessQuorum
		if q == 0 {
			q = len(db.opts.TlogWitnesses)
		}
		db.cosigners = &cosigners{witnesses: db.opts.TlogWitnesses, quorum: q,
			client: &http.Client{Timeout: cosignTimeout}, sizes: map[cosignedKey]uint64{}}
	})
	return db.cosigners
}

// cosign has the DB's tlog witnesses cosign msg, the signed checkpoint
// body of the tree t, and returns msg with their cosignatures (msg as it
// is without witnesses). Fewer than the quorum is an error matching
// cosign.ErrQuorum naming each witness that did not cosign and why.
func (db *DB) cosign(t *tree.File, body tree.Checkpoint, msg []byte) ([]byte, error) {
	c := db.tlogCosigners()
	if c == nil {
		return msg, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cosignTimeout)
	defer cancel()
	lines := make([][]byte, len(c.witnesses))
	errs := make([]error, len(c.witnesses))
	var wg sync.WaitGroup
	for i, w := range c.witnesses {
		wg.Go(func() {
			key := cosignedKey{i, body.Origin}
			c.mu.Lock()
			old := c.sizes[key]
			c.mu.Unlock()
			line, from, err := w.Cosign(ctx, c.client, msg, old, func(m uint64) ([]tree.Hash, error) {
				return t.ConsistencyProof(m, body.Size)
			})
			c.mu.Lock()
			if err == nil {
				c.sizes[key] = body.Size
			} else {
				c.sizes[key] = from
			}
			c.mu.Unlock()
			lines[i], errs[i] = line, err
		})
	}
	wg.Wait()
	var got [][]byte
	var refusals []string
	for i, line := range lines {
		if errs[i] != nil {
			refusals = append(refusals, errs[i].Error())
			continue
		}
		got = append(got, line)
	}
	if len(got) < c.quorum {
		return nil, fmt.Errorf("%w: %d of the %d tlog witnesses cosigned the checkpoint of %s size %d, the quorum is %d; it is not stored or published: %s",
			cosign.ErrQuorum, len(got), len(c.witnesses), body.Origin, body.Size, c.quorum, strings.Join(refusals, "; "))
	}
	return cosign.AddCosignatures(msg, got...), nil
}
