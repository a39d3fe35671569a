package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// TestAccountsUnderConflicts is an account service as an adopter writes
// one: 16 goroutines, 4 accounts (streams), 40 withdrawals or
// deposits each, every one an append conditional on the account's stream
// head (ExpectedStreams), read from StreamHead and Replay; a withdrawal
// that would overdraw the account is a deposit instead. On a
// *ConditionError the goroutine re-reads and retries. Under -race (CI)
// it must report no race. It checks that every ConditionError.Found is
// readable by Get when the error is returned, that the re-read after a
// conflict always sees something new (the stream head moved), and that
// the balances are right and never negative. It logs the conflicts per
// successful append.
func TestAccountsUnderConflicts(t *testing.T) {
	t.Parallel()
	const goroutines, accounts, perGoroutine = 16, 4, 40
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "bank"}); err != nil {
		t.Fatal(err)
	}
	type movement struct {
		Kind   string `json:"kind"`
		Amount int    `json:"amount"`
		By     int    `json:"by"`
		N      int    `json:"n"`
	}
	// balance reads an account's stream head, then replays the account:
	// it returns the balance and the head of the replay (which may have
	// moved on since StreamHead), and checks that the replay holds the
	// head StreamHead returned.
	balance := func(acc string) (int, eventid.ID, error) {
		h, err := db.StreamHead(ctx, "bank", "account", acc)
		if err != nil {
			return 0, eventid.ID{}, err
		}
		bal := 0
		var last eventid.ID
		sawHead := h.IsZero()
		for ev, err := range db.Replay(ctx, "bank", ReplayOptions{Entity: "account", Keys: []string{acc}}) {
			if err != nil {
				return 0, last, err
			}
			if ev.ID == h.ID {
				sawHead = ev.Seq == h.Seq
			}
			var m movement
			if err := json.Unmarshal(ev.Data, &m); err != nil {
				return 0, last, err
			}
			if m.Kind == "deposit" {
				bal += m.Amount
			} else {
				bal -= m.Amount
			}
			last = ev.ID
		}
		if !sawHead {
			return 0, last, fmt.Errorf("%s: the replay after StreamHead lacks its head %s #%d", acc, h.ID, h.Seq)
		}
		return bal, last, nil
	}

	var conflicts, stale, unreadable, appended atomic.Int64
	var mu sync.Mutex
	want := make(map[string]int) // balances from the acknowledged appends
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 13))
			for n := range perGoroutine {
				acc := fmt.Sprintf("acc-%d", rng.IntN(accounts))
				amount := 1 + rng.IntN(20)
				withdraw := rng.IntN(2) == 0
				bal, h, err := balance(acc)
				if err != nil {
					errs <- err
					return
				}
				for {
					m := movement{Kind: "deposit", Amount: amount, By: g, N: n}
					if withdraw && bal >= amount {
						m.Kind = "withdraw"
					}
					data, _ := json.Marshal(m)
					_, err := db.Append(ctx, "bank", []EventInput{{Entity: "account", Key: acc, Event: m.Kind, Meta: []byte(`{}`), Data: data}},
						&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: acc, Head: h}}})
					var ce *ConditionError
					if errors.As(err, &ce) {
						conflicts.Add(1)
						// Read-your-conflicts: what the condition found is
						// readable now.
						if _, err := db.Get(ctx, ce.Found); err != nil {
							unreadable.Add(1)
						}
						prev := h
						if bal, h, err = balance(acc); err != nil {
							errs <- err
							return
						}
						if h == prev {
							stale.Add(1) // the re-read saw nothing new
						}
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					appended.Add(1)
					mu.Lock()
					if m.Kind == "deposit" {
						want[acc] += amount
					} else {
						want[acc] -= amount
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, a := conflicts.Load(), appended.Load()
	t.Logf("%d appends, %d conflicts (%.2f per successful append), %d re-reads after a conflict saw nothing new, %d ConditionError.Found not readable by Get",
		a, c, float64(c)/float64(a), stale.Load(), unreadable.Load())
	if a != goroutines*perGoroutine {
		t.Errorf("%d appends acknowledged, want %d", a, goroutines*perGoroutine)
	}
	if n := unreadable.Load(); n > 0 {
		t.Errorf("%d of %d ConditionError.Found were not readable by Get when the error was returned", n, c)
	}
	if n := stale.Load(); n > 0 {
		t.Errorf("%d of %d re-reads after a conflict saw nothing new", n, c)
	}
	// No overdraft: replayed in ledger order, no balance goes below zero,
	// and each ends where the acknowledged appends say.
	for i := range accounts {
		acc := fmt.Sprintf("acc-%d", i)
		bal := 0
		for ev, err := range db.Replay(ctx, "bank", ReplayOptions{Entity: "account", Keys: []string{acc}}) {
			if err != nil {
				t.Fatal(err)
			}
			var m movement
			if err := json.Unmarshal(ev.Data, &m); err != nil {
				t.Fatal(err)
			}
			if m.Kind == "deposit" {
				bal += m.Amount
			} else if bal -= m.Amount; bal < 0 {
				t.Fatalf("%s overdrawn at #%d: %d", acc, ev.Seq, bal)
			}
		}
		if bal != want[acc] {
			t.Errorf("%s: balance %d, the acknowledged appends make it %d", acc, bal, want[acc])
		}
	}
}
