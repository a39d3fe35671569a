package main

import (
	"fmt"

	"github.com/annal-db/annal/bench/peer"
)

// The events of every workload: three kinds of entity with 100 keys each
// (300 streams), realistic canonical JSON meta and data of about 250 bytes
// together. Made once, before anything is timed, and cycled through.

const poolSize = 10_000

var entities = [...]string{"order", "customer", "shipment"}

const keysPerEntity = 100

var eventNames = map[string][]string{
	"order":    {"order-placed", "order-paid", "order-shipped"},
	"customer": {"customer-registered", "address-changed"},
	"shipment": {"shipment-created", "shipment-delivered"},
}

// makeEvent returns the i-th event. Meta and data keys are sorted and the
// JSON compact, so that every store is given the same bytes to keep.
func makeEvent(i int) peer.Event {
	entity := entities[i%len(entities)]
	k := (i / len(entities) * 7919) % keysPerEntity
	names := eventNames[entity]
	return peer.Event{
		Entity: entity,
		Key:    fmt.Sprintf("%s-%03d", entity, k),
		Name:   names[(i/len(entities))%len(names)],
		Meta:   []byte(fmt.Sprintf(`{"actor":"user-%04d","cause":"req-%08d","ip":"10.0.%d.%d","source":"web"}`, i%997, i, i%256, (i/256)%256)),
		Data: []byte(fmt.Sprintf(`{"currency":"EUR","items":[{"price":%d.25,"qty":%d,"sku":"sku-%05d"},{"price":%d.5,"qty":1,"sku":"sku-%05d"}],"note":"left at the door","total":%d.75}`,
			i%90+10, i%7+1, i%10007, i%40+5, (i*31)%10007, i%1000+100)),
	}
}

var pool = func() []peer.Event {
	p := make([]peer.Event, poolSize)
	for i := range p {
		p[i] = makeEvent(i)
	}
	return p
}()

// streams lists every (entity, key) of the pool.
func streams() [][2]string {
	var out [][2]string
	for _, e := range entities {
		for k := range keysPerEntity {
			out = append(out, [2]string{e, fmt.Sprintf("%s-%03d", e, k)})
		}
	}
	return out
}
