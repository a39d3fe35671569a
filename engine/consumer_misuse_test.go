package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// TestConsumerMisuse: a named consumer used as a careless adopter
// would.
func TestConsumerMisuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	var ids []eventid.ID
	for i := range 10 {
		r, err := db.Append(ctx, "a", []EventInput{order(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.IDs[0])
	}
	rb, err := db.Append(ctx, "b", []EventInput{order(0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.Consumer("a", "c", ConsumerOptions{Entity: "order"})
	if err != nil {
		t.Fatal(err)
	}
	// Two Events loops at once: the second fails with ErrInvalid.
	sctx, cancel := context.WithCancel(ctx)
	got := make(chan eventid.ID, 100)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev, err := range c.Events(sctx) {
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("first Events: %v", err)
				}
				return
			}
			got <- ev.ID
		}
	}()
	first := <-got
	if first != ids[0] {
		t.Fatalf("first event %s, want %s", first, ids[0])
	}
	for _, err := range c.Events(ctx) {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("second Events at once: %v", err)
		}
		break
	}
	// Ack from another goroutine while Events runs; of another ledger;
	// of an event not delivered yet.
	for range 9 {
		<-got
	}
	if err := c.Ack(ctx, ids[4]); err != nil {
		t.Errorf("ack from another goroutine: %v", err)
	}
	if err := c.Ack(ctx, rb.IDs[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("ack of another ledger's event: %v", err)
	}
	r, err := db.Append(ctx, "a", []EventInput{{Entity: "other", Key: "k", Event: "e", Data: []byte("1")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, r.IDs[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("ack of an event not delivered (not selected): %v", err)
	}
	if err := c.Ack(ctx, ids[2]); err != nil {
		t.Errorf("ack behind the position: %v", err)
	}
	if p := c.Position(); p.Acked.ID != ids[4] || p.Stored.ID != ids[4] || p.Delivered.ID != ids[9] {
		t.Errorf("position %+v", p)
	}
	// DeleteConsumer and SetConsumerPosition of a live consumer.
	if err := db.DeleteConsumer(ctx, "a", "c"); !errors.Is(err, ErrConsumerInUse) {
		t.Errorf("delete a live consumer: %v", err)
	}
	if err := db.SetConsumerPosition(ctx, "a", "c", ids[1]); !errors.Is(err, ErrConsumerInUse) {
		t.Errorf("set the position of a live consumer: %v", err)
	}
	if _, err := db.Consumer("a", "c", ConsumerOptions{}); !errors.Is(err, ErrConsumerInUse) {
		t.Errorf("a second Consumer of the name: %v", err)
	}
	cancel()
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}
	if err := c.Ack(ctx, ids[5]); !errors.Is(err, ErrClosed) {
		t.Errorf("ack after Close: %v", err)
	}
	for _, err := range c.Events(ctx) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Events after Close: %v", err)
		}
		break
	}
	// SetConsumerPosition: another ledger's ID, an ID the ledger lacks.
	if err := db.SetConsumerPosition(ctx, "a", "c", rb.IDs[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("position in another ledger: %v", err)
	}
	future := eventid.New(ids[9].Micros()+1_000_000, 7, ids[9].Ledger())
	if err := db.SetConsumerPosition(ctx, "a", "c", future); !errors.Is(err, ErrInvalid) {
		t.Errorf("position at an ID the ledger lacks: %v", err)
	}
	if err := db.DeleteConsumer(ctx, "a", "nobody"); !errors.Is(err, ErrConsumerNotFound) {
		t.Errorf("delete an unknown consumer: %v", err)
	}
	// Events after DB.Close; Consumer.Close after DB.Close.
	c2, err := db.Consumer("a", "c2", ConsumerOptions{Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range c2.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if err := c2.Ack(ctx, ev.ID); err != nil {
			t.Fatal(err)
		}
		if ev.Seq == 3 {
			break
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range c2.Events(ctx) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Events after DB.Close: %v", err)
		}
		break
	}
	if err := c2.Close(); err != nil {
		t.Errorf("Consumer.Close after DB.Close: %v", err)
	}
	if _, err := db.Consumers("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Consumers after Close: %v", err)
	}
	if err := db.DeleteConsumer(ctx, "a", "c"); !errors.Is(err, ErrClosed) {
		t.Errorf("DeleteConsumer after Close: %v", err)
	}
	if err := db.SetConsumerPosition(ctx, "a", "c", eventid.ID{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetConsumerPosition after Close: %v", err)
	}
	// Reopen: c resumes after ids[4], c2 (None) after #3, written by DB.Close.
	db = openTest(t, dir)
	cs, err := db.Consumers("a")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Position.ID != ids[4] || cs[1].Position.Seq != 3 {
		t.Errorf("consumers after reopen: %+v", cs)
	}
	db.Close()
	// meta.db deleted: positions lost, consumers start at the first event.
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if db.MetaRebuilt() == nil {
		t.Errorf("MetaRebuilt nil after meta.db was removed")
	}
	if err := db.AcceptLostPositions(); err != nil { // until then ErrPositionsLost
		t.Fatal(err)
	}
	c, err = db.Consumer("a", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	for ev, err := range c.Events(tctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != 1 {
			t.Errorf("after meta.db lost, first event #%d", ev.Seq)
		}
		break
	}
}
