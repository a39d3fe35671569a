package index

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestDigest: the digest of the index equals the digest of the records it
// was given, in any order and ignoring later events and other ledgers; a
// deleted, added or altered entry of each family shows in that family.
func TestDigest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := openAt(t, t.TempDir(), Options{})
	var evs []event
	for i := uint64(1); i <= 300; i++ {
		e := event{seq: i, entity: fmt.Sprint("e", i%3), key: fmt.Sprint("k", i%7), event: fmt.Sprint("v", i%5)}
		if i%50 == 0 {
			e.idem, e.batchLen = fmt.Sprint("idem-", i), 1
		}
		evs = append(evs, e)
	}
	add(t, x, ledgerA, evs[:200]...)
	add(t, x, ledgerA, evs[200:]...)
	add(t, x, ledgerB, evs[:10]...)

	want := NewDigest(ledgerA)
	for _, e := range evs[:250] {
		want.Add(e.record(ledgerA))
	}
	got, err := x.Digest(ctx, ledgerA, 250)
	if err != nil {
		t.Fatal(err)
	}
	if diff := got.Diff(want); diff != "" {
		t.Fatalf("digest of a good index: %s", diff)
	}
	if want.Count[0] != 250 || want.Count[5] != 5 {
		t.Fatalf("counts %v", want.Count)
	}

	// Damage one entry of each family, in turn: the digest names it.
	for i, fam := range digestFamilies {
		lo := appendLedgerPrefix(nil, fam, ledgerA)
		it, err := x.db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !it.SeekGE(lo) || it.Key()[0] != fam {
			t.Fatalf("family %c is empty", fam)
		}
		key := append([]byte(nil), it.Key()...)
		val := append([]byte(nil), it.Value()...)
		it.Close()
		for _, change := range []string{"deleted", "altered"} {
			switch change {
			case "deleted":
				err = x.db.Delete(key, pebble.NoSync)
			case "altered":
				v := append([]byte(nil), val...)
				v[len(v)-1] ^= 1
				err = x.db.Set(key, v, pebble.NoSync)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := x.Digest(ctx, ledgerA, 250)
			if err != nil {
				t.Fatal(err)
			}
			diff := got.Diff(want)
			// An S entry names a T block: damage to either may show in
			// both. Every other family stands alone.
			families := 1
			if fam == famTime || fam == famSeq {
				families = strings.Count(diff, "family")
			}
			if !strings.Contains(diff, familyNames[fam]) || strings.Count(diff, "family") != families || families > 2 {
				t.Fatalf("family %c, entry %s: diff %q", fam, change, diff)
			}
			if change == "deleted" && got.Count[i] >= want.Count[i] {
				t.Fatalf("family %c: count %d after a delete, want less than %d", fam, got.Count[i], want.Count[i])
			}
		}
		if err := x.db.Set(key, val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := x.Digest(ctx, ledgerA, 250); got.Diff(want) != "" {
		t.Fatalf("restored index: %s", got.Diff(want))
	}
}

// TestDigestAddRepeatedNames: Add keeps the prefix hashes of the last
// entity and event name; in runs of events that share one, the other or
// both, changing one at a time, its digest is still the index's.
func TestDigestAddRepeatedNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := openAt(t, t.TempDir(), Options{})
	var evs []event
	for i := uint64(1); i <= 400; i++ {
		// The entity changes every 7 events, the event name every 3 or
		// every 11 (in turn): runs where only one of them changes.
		ev := fmt.Sprint("v", i/3%4)
		if i > 200 {
			ev = fmt.Sprint("v", i/11%4)
		}
		evs = append(evs, event{seq: i, entity: fmt.Sprint("e", i/7%3), key: fmt.Sprint("k", i%5), event: ev})
	}
	add(t, x, ledgerA, evs...)
	want := NewDigest(ledgerA)
	for _, e := range evs {
		want.Add(e.record(ledgerA))
	}
	got, err := x.Digest(ctx, ledgerA, uint64(len(evs)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := got.Diff(want); diff != "" {
		t.Fatalf("digest of events in runs of names: %s", diff)
	}
}
