package eventid_test

import (
	"fmt"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

// Example builds the first two events of a new ledger: the genesis event,
// whose content names the ledger, and one event chained to it.
func Example() {
	meta, _ := canon.AppendObject(nil, []byte(`{"actor":"matt"}`))
	data, _ := canon.Append(nil, []byte(`{"name":"orders", "description":"Orders of the shop."}`))
	genesis := eventid.Content{Entity: "ledger", Key: "orders", Event: "ledger-created", Meta: meta, Data: data}
	ledger := genesis.LedgerID()

	// A fixed time source, so that the output below is always the same.
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	clock := eventid.NewClock(0, func() time.Time { return start })

	first := genesis.ID(ledger, clock.Next(), eventid.Genesis(ledger))
	data, _ = canon.Append(nil, []byte(`{"total": 12.50, "currency": "EUR"}`))
	placed := eventid.Content{Entity: "order", Key: "order-1", Event: "order-placed", Meta: meta, Data: data}
	second := placed.ID(ledger, clock.Next(), first)

	fmt.Println(ledger, string(data))
	fmt.Println(first, first.Time().Format(time.RFC3339Nano))
	fmt.Println(second, second.Time().Format(time.RFC3339Nano))
	fmt.Println(first.Less(second), second.Base64())
	// Output:
	// 927b865c {"currency":"EUR","total":12.5}
	// 000660c819a17000a4dae2cf927b865c 2026-11-21T12:00:00Z
	// 000660c819a17001928f16b7927b865c 2026-11-21T12:00:00.000001Z
	// true --0a275P4k-O9E4fTHTsOR
}

// ExampleMinForTime shows the ID bounds of a time range scan.
func ExampleMinForTime() {
	from := time.Date(2022, 1, 14, 2, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	lo, hi := eventid.MinForTime(from), eventid.MaxForTime(to)
	id := eventid.MustParse("0005d5813bf9c44943545b8f9e961c04") // 02:05:17.275209
	fmt.Println(lo)
	fmt.Println(hi)
	fmt.Println(lo.Compare(id) <= 0 && id.Compare(hi) <= 0)
	// Output:
	// 0005d581291088000000000000000000
	// 0005d581ffa42c00ffffffffffffffff
	// true
}

// ExampleParse reads one ID written in each of its four text forms.
func ExampleParse() {
	for _, s := range []string{
		"0005d5813bf9c44943545b8f9e961c04",
		"0005d581-3bf9-c449-4354-5b8f9e961c04",
		"--0SL0Dzb3HJCJLsyT_Wk3",
		"000QAR2EZSRH4M6N2VHYF9C704",
	} {
		id, err := eventid.Parse(s)
		fmt.Println(id, id.Ledger(), err)
	}
	// Output:
	// 0005d5813bf9c44943545b8f9e961c04 9e961c04 <nil>
	// 0005d5813bf9c44943545b8f9e961c04 9e961c04 <nil>
	// 0005d5813bf9c44943545b8f9e961c04 9e961c04 <nil>
	// 0005d5813bf9c44943545b8f9e961c04 9e961c04 <nil>
}
