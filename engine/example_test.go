package engine_test

import (
	"context"
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
