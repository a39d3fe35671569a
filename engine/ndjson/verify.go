package ndjson

import (
	"fmt"
	"io"

	"github.com/annal-db/annal/eventid"
)

// Verifier checks a sequence of events as one ledger: the first is the
// genesis event, whose content gives the ledger ID, and every event's ID
// must be the one computed from its content, the ledger ID, its timestamp
// and the previous event's ID; timestamps must strictly increase.
//
// Invariant: after n successful calls to Verify, Count() == n and Head() is
// the ID of the n-th event (the genesis ID of the ledger while n == 0 and
// the ledger is known).
type Verifier struct {
	ledger eventid.LedgerID
	head   eventid.ID
	count  int64
}

// NewVerifier returns a Verifier that expects the genesis event first.
func NewVerifier() *Verifier { return &Verifier{} }

// ResumeVerifier returns a Verifier that continues a ledger after head,
// trusting everything up to and including head, of which there are count
// events. Use it to verify a section of a ledger.
func ResumeVerifier(ledger eventid.LedgerID, head eventid.ID, count int64) *Verifier {
	return &Verifier{ledger: ledger, head: head, count: count}
}

// Verify checks the next event. On error the Verifier is unchanged.
func (v *Verifier) Verify(e *Event) error {
	c := e.Content()
	ledger, prev := v.ledger, v.head
	if v.count == 0 {
		ledger = c.LedgerID()
		prev = eventid.Genesis(ledger)
	}
	want := c.ID(ledger, e.Micros, prev)
	if want != e.ID {
		return &MismatchError{Expected: want, Found: e.ID, Micros: e.Micros, First: v.count == 0}
	}
	if e.Micros <= prev.Micros() {
		return fmt.Errorf("%w: %d µs, previous %d µs", ErrTimeOrder, e.Micros, prev.Micros())
	}
	v.ledger, v.head = ledger, e.ID
	v.count++
	return nil
}

// Count returns the number of events verified, plus the count a resumed
// Verifier started with.
func (v *Verifier) Count() int64 { return v.count }

// Ledger returns the ledger ID, known once the genesis event is verified.
func (v *Verifier) Ledger() eventid.LedgerID { return v.ledger }

// Head returns the ID of the last event verified.
func (v *Verifier) Head() eventid.ID { return v.head }

// VerifyAll reads every line of r and verifies it as one whole ledger. It
// stops at the first bad line with a *LineError, and returns [ErrNoEvents]
// for input without a single event. On success the returned Verifier tells
// the count, ledger and head.
func VerifyAll(r *Reader) (*Verifier, error) {
	v := NewVerifier()
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return v, err
		}
		if err := v.Verify(ev); err != nil {
			return v, &LineError{Line: r.Line(), Err: err}
		}
	}
	if v.Count() == 0 {
		return v, ErrNoEvents
	}
	return v, nil
}
