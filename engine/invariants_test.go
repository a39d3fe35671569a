//go:build invariants

package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// TestInvariantBrokenPanics: under the invariants build tag, the checks of
// the ledger's commit hook panic on a broken state, naming it: a group
// that does not follow the published head, a group whose leaves the
// written hook did not hash with a replica (the state the hook repairs
// without the tag), and a tree with a leaf more than the events published
// (checkInvariantsLocked). Neither state changes anything before
// the panic, and the ledger goes on once it is repaired.
func TestInvariantBrokenPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{order(1)}, nil); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, "invariant broken") || !strings.Contains(s, want) {
				t.Errorf("%s: recovered %v, want a panic naming %q", what, r, want)
			}
		}()
		f()
	}

	// A committed group that does not follow the published head: one
	// event is skipped.
	skip := l.log.Head().Seq + 2
	group := []*segment.Batch{{FirstSeq: skip, IDs: make([]eventid.ID, 1), Entries: make([]segment.Entry, 1), Locations: make([]segment.Location, 1)}}
	mustPanic("a group after a gap", "was published", func() { l.published(group) })

	// With a replica, whose Writer ships the leaves the written hook
	// hashed: a committed group the hook never saw, the next one after
	// the head, with its leaves not hashed (hookFirst is another's). The
	// check comes before the replica is used.
	next := l.log.Head().Seq + 1
	group = []*segment.Batch{{FirstSeq: next, IDs: make([]eventid.ID, 1), Entries: make([]segment.Entry, 1), Locations: make([]segment.Location, 1)}}
	l.repl = &ledgerRepl{}
	mustPanic("a group the written hook did not hash", "the written hook hashed", func() { l.published(group) })
	l.repl = nil

	// A leaf in the tree for an event that is not published.
	l.idxMu.Lock()
	pend := l.treePend
	l.treePend = append(slices.Clip(pend), pendLeaf{})
	mustPanic("a tree with a leaf too many", "the tree holds", l.checkInvariantsLocked)
	l.treePend = pend
	l.checkInvariantsLocked() // repaired: no panic
	l.idxMu.Unlock()

	if _, err := db.Append(ctx, "l", []EventInput{order(2)}, nil); err != nil {
		t.Fatal(err)
	}
}
