package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/annal-db/annal/engine"
)

// Example creates a ledger, appends two events, and reads them back.
func Example() {
	dir, err := os.MkdirTemp("", "annal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := engine.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "orders", Description: "the shop's orders"}); err != nil {
		log.Fatal(err)
	}
	res, err := db.Append(ctx, "orders", []engine.EventInput{
		{Entity: "order", Key: "order-42", Event: "order-placed", Meta: []byte(`{"actor": "web"}`), Data: []byte(`{"total": 12.50, "currency": "EUR"}`)},
		{Entity: "order", Key: "order-42", Event: "order-paid", Meta: []byte(`{"actor": "psp"}`), Data: []byte(`{"amount": 12.5}`)},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	ev, err := db.Get(ctx, res.IDs[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Seq, ev.Event, string(ev.Data))
	for ev, err := range db.Replay(ctx, "orders", engine.ReplayOptions{Entity: "order", Keys: []string{"order-42"}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Seq, ev.Key, ev.Event)
	}
	// Output:
	// 2 order-placed {"currency":"EUR","total":12.5}
	// 2 order-42 order-placed
	// 3 order-42 order-paid
}

// ExampleConsumer handles each selected event at least once, and stops
// when its context is cancelled (on SIGTERM, say). The Ack of the event
// in hand runs after that cancel: it takes context.WithoutCancel(ctx),
// since an Ack with the cancelled ctx fails and does not move the
// position (the event would be given again at the next start).
func ExampleConsumer() {
	dir, err := os.MkdirTemp("", "annal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := engine.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(context.Background(), engine.LedgerSpec{Name: "payments"}); err != nil {
		log.Fatal(err)
	}
	for _, key := range []string{"p-1", "p-2", "p-3"} {
		if _, err := db.Append(context.Background(), "payments", []engine.EventInput{
			{Entity: "payment", Key: key, Event: "payment-received", Data: []byte(`{"amount":10}`)},
		}, nil); err != nil {
			log.Fatal(err)
		}
	}

	c, err := db.Consumer("payments", "mailer", engine.ConsumerOptions{Events: []string{"payment-received"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for ev, err := range c.Events(ctx) {
		if errors.Is(err, context.Canceled) {
			break // stopped: the events not acknowledged come again next time
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("mail for", ev.Key)
		if ev.Key == "p-3" {
			stop() // as a signal handler would, while the event is handled
		}
		// ctx may be cancelled by now: Ack with it fails, and the
		// position does not move.
		if err := c.Ack(ctx, ev.ID); err != nil {
			fmt.Println("Ack(ctx):", err)
		}
		// The Ack that records the event handled: not cancelled with ctx.
		if err := c.Ack(context.WithoutCancel(ctx), ev.ID); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("acknowledged up to", c.Position().Acked.Seq)
	// Output:
	// mail for p-1
	// mail for p-2
	// mail for p-3
	// Ack(ctx): context canceled
	// acknowledged up to 4
}

// Example_router routes appends to the node that writes each ledger of a
// bucket shared by nodes: it creates a ledger on the node Place gives,
// and retries an append on the ledger's owner after Forget when the node
// it reached no longer owns the ledger. send stands for the
// application's own call to a node (its RPC at the node's Address). It
// needs a bucket, so it is not run.
func Example_router() {
	ctx := context.Background()
	r, err := engine.NewRouter(ctx, "s3://bucket/annal?region=eu-west-1")
	if err != nil {
		log.Fatal(err)
	}
	send := func(address, ledger, key string) error {
		// POST address/append?ledger=...: the node calls DB.Append with
		// IdempotencyKey key and answers with its error.
		return nil
	}
	n, err := r.Place("orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("create orders on", n.Name, n.Address)
	for try := 0; try < 10; try++ {
		o, err := r.Owner(ctx, "orders")
		if err != nil {
			log.Fatal(err)
		}
		err = send(o.Address, "orders", "order-42-placed")
		if err == nil {
			break
		}
		if errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrNotOwner) {
			r.Forget("orders") // moved: read the owner again
			continue
		}
		log.Fatal(err)
	}
}
