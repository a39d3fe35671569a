package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// payment is an event of an idempotency test: amount in its data.
func payment(key string, amount int) EventInput {
	return EventInput{Entity: "account", Key: key, Event: "debited",
		Meta: []byte(`{"by":"test","corr":"c-1"}`), Data: []byte(fmt.Sprintf(`{"amount":%d}`, amount))}
}

// checkMismatch checks that err is an *IdempotencyMismatchError matching
// ErrIdempotencyMismatch and naming first and events.
func checkMismatch(t *testing.T, what string, err error, first AppendResult, events int) {
	t.Helper()
	var me *IdempotencyMismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("%s: %v, want an *IdempotencyMismatchError", what, err)
	}
	if !slices.Equal(me.First.IDs, first.IDs) || me.First.FirstSeq != first.FirstSeq || me.Events != events {
		t.Fatalf("%s: mismatch names %v at #%d (%d events), want %v at #%d (%d events)", what, me.First.IDs, me.First.FirstSeq, me.Events, first.IDs, first.FirstSeq, events)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("#%d", first.FirstSeq)) || !strings.Contains(err.Error(), me.Key) {
		t.Fatalf("%s: message %q names neither the first append nor the key", what, err)
	}
}

// TestIdempotencyComparesEvents: the same key with the same events (in
// any JSON formatting) returns the first result; with other events (an
// amount, one more or one fewer, another order, another meta, entity, key
// or event name) it appends nothing and fails with ErrIdempotencyMismatch
// carrying the first result; and so after a reopen, after the index is
// deleted and rebuilt from the segments, and after a rebuild asked for.
// Verify agrees with the digests the appends stored.
func TestIdempotencyComparesEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	defer func() { db.Close() }()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	batch := []EventInput{payment("acc-1", 100), payment("acc-2", 5)}
	first, err := db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed {
		t.Fatal("the first append with a key is Replayed")
	}
	single, err := db.Append(ctx, "l", []EventInput{payment("acc-3", 7)}, &AppendOptions{IdempotencyKey: "pay-2"})
	if err != nil {
		t.Fatal(err)
	}
	// Fillers after them, so that a retry that appended would show.
	if _, err := db.Append(ctx, "l", []EventInput{order(1), order(2)}, nil); err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		info, err := db.Ledger("l")
		if err != nil {
			t.Fatal(err)
		}
		return info.Count
	}
	reformatted := slices.Clone(batch)
	reformatted[0].Meta = []byte(" { \"corr\" : \"c-1\", \"by\" : \"test\" } ")
	reformatted[0].Data = []byte(`{"amount": 1e2}`)
	with := func(f func(e []EventInput) []EventInput) []EventInput { return f(slices.Clone(batch)) }
	mismatches := []struct {
		name   string
		events []EventInput
	}{
		{"another amount", with(func(e []EventInput) []EventInput { e[0] = payment("acc-1", 101); return e })},
		{"one more event", append(slices.Clone(batch), payment("acc-1", 1))},
		{"one fewer event", batch[:1]},
		{"reordered", []EventInput{batch[1], batch[0]}},
		{"another meta", with(func(e []EventInput) []EventInput { e[1].Meta = []byte(`{"by":"test","corr":"c-2"}`); return e })},
		{"nil meta instead of a field", with(func(e []EventInput) []EventInput { e[1].Meta = nil; return e })},
		{"another entity", with(func(e []EventInput) []EventInput { e[0].Entity = "acct"; return e })},
		{"another key", with(func(e []EventInput) []EventInput { e[0].Key = "acc-9"; return e })},
		{"another event name", with(func(e []EventInput) []EventInput { e[0].Event = "credited"; return e })},
		// The fields are length-prefixed: moving a byte from one field
		// to the next is another event.
		{"a byte moved between fields", with(func(e []EventInput) []EventInput { e[0].Entity, e[0].Key = "accoun", "tacc-1"; return e })},
	}
	check := func(when string) {
		t.Helper()
		before := count()
		for _, evs := range [][]EventInput{batch, reformatted} {
			again, err := db.Append(ctx, "l", evs, &AppendOptions{IdempotencyKey: "pay-1"})
			if err != nil || !slices.Equal(again.IDs, first.IDs) || again.FirstSeq != first.FirstSeq || !again.Replayed {
				t.Fatalf("%s: retry with the same events: %v at #%d (Replayed %v), %v; want %v at #%d, Replayed", when, again.IDs, again.FirstSeq, again.Replayed, err, first.IDs, first.FirstSeq)
			}
		}
		for _, c := range mismatches {
			res, err := db.Append(ctx, "l", c.events, &AppendOptions{IdempotencyKey: "pay-1"})
			checkMismatch(t, when+": "+c.name, err, first, len(c.events))
			if res.IDs != nil {
				t.Fatalf("%s: %s: a result %v with the error", when, c.name, res.IDs)
			}
		}
		_, err := db.Append(ctx, "l", []EventInput{payment("acc-3", 8)}, &AppendOptions{IdempotencyKey: "pay-2"})
		checkMismatch(t, when+": one event, another amount", err, single, 1)
		if again, err := db.Append(ctx, "l", []EventInput{payment("acc-3", 7)}, &AppendOptions{IdempotencyKey: "pay-2"}); err != nil || !slices.Equal(again.IDs, single.IDs) {
			t.Fatalf("%s: retry of the single event: %v, %v", when, again.IDs, err)
		}
		if after := count(); after != before {
			t.Fatalf("%s: %d events appended by retries", when, after-before)
		}
		if _, err := db.Verify(ctx, "l", nil); err != nil {
			t.Fatalf("%s: Verify: %v", when, err)
		}
	}
	check("live")

	// Reopen: the digests come from the index.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	check("after a reopen")

	// The index deleted: rebuilt from the segments, digests included.
	db.Close()
	if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	check("after the index was deleted")

	db.Close()
	db, err = Open(dir, &Options{RebuildIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	check("after RebuildIndex")
}

// TestIdempotencyKeyWinsOverStaleCondition: an append with a key and
// conditions (ExpectedHead, ExpectedStreams, IfNoneSince) that held, made
// again after the ledger moved on so that every condition would fail now,
// returns the first append's result with Replayed set and appends
// nothing; the same conditions with a new key fail, so they are stale
// indeed; the same key with other events is still a mismatch.
func TestIdempotencyKeyWinsOverStaleCondition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	batch := []EventInput{payment("acc-1", 100)}
	opts := func(key string) *AppendOptions {
		return &AppendOptions{
			IdempotencyKey:  key,
			ExpectedHead:    info.Genesis,
			ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1"}},
			IfNoneSince:     &Selector{Entity: "account", After: info.Genesis},
		}
	}
	first, err := db.Append(ctx, "l", batch, opts("pay-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed {
		t.Fatalf("the first append: %+v, Replayed", first)
	}
	// The ledger moves on: the head, the stream acc-1 and the selector
	// all have a newer event.
	if _, err := db.Append(ctx, "l", []EventInput{payment("acc-1", 5)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", batch, opts("pay-2")); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("the conditions with a new key: %v, want ErrConditionFailed (they are stale)", err)
	}
	before, err := db.Ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	again, err := db.Append(ctx, "l", batch, opts("pay-1"))
	if err != nil {
		t.Fatalf("the retry with the key and the stale conditions: %v, want the first result", err)
	}
	if !slices.Equal(again.IDs, first.IDs) || again.FirstSeq != first.FirstSeq || !again.Replayed {
		t.Fatalf("the retry: %+v, want %v at #%d with Replayed", again, first.IDs, first.FirstSeq)
	}
	_, err = db.Append(ctx, "l", []EventInput{payment("acc-1", 101)}, opts("pay-1"))
	checkMismatch(t, "the key with other events and the stale conditions", err, first, 1)
	if after, err := db.Ledger("l"); err != nil || after.Count != before.Count {
		t.Fatalf("the retries appended: %d events before, %d after (%v)", before.Count, after.Count, err)
	}
}

// TestIdempotencyConcurrentRetries: 16 goroutines append with one key,
// half with one payload and half with another, queued behind a large
// append so that many of them find the first in flight: exactly one
// batch is appended; every goroutine with its payload gets its result,
// every other one ErrIdempotencyMismatch naming it. Run with -race.
func TestIdempotencyConcurrentRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	big := make([]EventInput, 1000)
	for i := range big {
		big[i] = order(i)
	}
	payloads := [2][]EventInput{{payment("acc", 10)}, {payment("acc", 10), payment("acc", 20)}}
	const goroutines = 16
	for round := range 6 {
		key := fmt.Sprintf("round-%d", round)
		before, _ := db.Ledger("l")
		type outcome struct {
			res AppendResult
			err error
		}
		out := make([]outcome, goroutines)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := db.Append(ctx, "l", big, nil); err != nil {
				t.Error(err)
			}
		})
		for g := range goroutines {
			wg.Go(func() {
				res, err := db.Append(ctx, "l", payloads[g%2], &AppendOptions{IdempotencyKey: key})
				out[g] = outcome{res, err}
			})
		}
		wg.Wait()
		// The winner: a goroutine without error.
		win := -1
		for g, o := range out {
			if o.err == nil {
				win = g % 2
				break
			}
		}
		if win < 0 {
			t.Fatalf("round %d: no append succeeded: %v", round, out[0].err)
		}
		var first AppendResult
		appended := 0
		for g, o := range out {
			if g%2 == win && o.err == nil && !o.res.Replayed {
				appended++
			}
		}
		if appended != 1 {
			t.Fatalf("round %d: %d results with Replayed false, want 1 (the append that appended)", round, appended)
		}
		for g, o := range out {
			if g%2 == win {
				if o.err != nil {
					t.Fatalf("round %d: goroutine %d with the winning payload: %v", round, g, o.err)
				}
				if first.IDs == nil {
					first = o.res
				}
				if !slices.Equal(o.res.IDs, first.IDs) || o.res.FirstSeq != first.FirstSeq {
					t.Fatalf("round %d: goroutine %d got %v, another %v", round, g, o.res.IDs, first.IDs)
				}
			}
		}
		if len(first.IDs) != len(payloads[win]) {
			t.Fatalf("round %d: the first append has %d events, its payload %d", round, len(first.IDs), len(payloads[win]))
		}
		for g, o := range out {
			if g%2 != win {
				checkMismatch(t, fmt.Sprintf("round %d: goroutine %d", round, g), o.err, first, len(payloads[g%2]))
			}
		}
		if after, _ := db.Ledger("l"); after.Count != before.Count+uint64(len(big)+len(first.IDs)) {
			t.Fatalf("round %d: %d events appended, want %d", round, after.Count-before.Count, len(big)+len(first.IDs))
		}
	}
}

// TestIdempotencyAfterCrash: an idempotent append acknowledged, then a
// crash that keeps only what was synced: the segments hold the batch, the
// index (no write-ahead log, never flushed) does not. Reopening indexes
// the batch from the segments, its digest included: the same events get
// the first result, other events ErrIdempotencyMismatch.
func TestIdempotencyAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	metaPath := filepath.Join(t.TempDir(), metaFile)
	db, err := Open(crashDir, &Options{fs: mem, metaPath: metaPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	// A batch of three, the first of which opens it, and enough events
	// after it in later batches that the index's catch-up commits
	// (every 4096 records) fall around it.
	batch := []EventInput{payment("a", 1), payment("b", 2), payment("c", 3)}
	var fill []EventInput
	for i := range 4094 {
		fill = append(fill, order(i))
	}
	if _, err := db.Append(ctx, "l", fill, nil); err != nil {
		t.Fatal(err)
	}
	first, err := db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", fill[:100], nil); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	db.Close()

	db, err = Open(crashDir, &Options{fs: crashed, metaPath: metaPath})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	k, found, err := db.idx.Idempotency(l.meta.ID, []byte("k"))
	if err != nil || !found || k.FirstSeq != first.FirstSeq || k.Count != 3 || k.Digest != digestOfEntries(storedEntries(t, db, first.IDs)) {
		t.Fatalf("the key after the crash: %+v %v %v", k, found, err)
	}
	again, err := db.Append(ctx, "l", batch, &AppendOptions{IdempotencyKey: "k"})
	if err != nil || !slices.Equal(again.IDs, first.IDs) {
		t.Fatalf("retry after the crash: %v, %v; want %v", again.IDs, err, first.IDs)
	}
	_, err = db.Append(ctx, "l", batch[1:], &AppendOptions{IdempotencyKey: "k"})
	checkMismatch(t, "after the crash", err, first, 2)
	if _, err := db.Verify(ctx, "l", nil); err != nil {
		t.Fatalf("Verify after the crash: %v", err)
	}
}

// storedEntries returns the stored events ids as segment entries, their
// meta and data in canonical form.
func storedEntries(t *testing.T, db *DB, ids []eventid.ID) []segment.Entry {
	t.Helper()
	var out []segment.Entry
	for _, id := range ids {
		e, err := db.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, segment.Entry{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data})
	}
	return out
}

// TestIdempotencyOldIndexRebuilt: an index of format version 1 (K values
// without a digest) is rebuilt from the segments when the DB opens, and
// the keys work, digests included.
func TestIdempotencyOldIndexRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	first, err := db.Append(ctx, "l", []EventInput{payment("a", 1)}, &AppendOptions{IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	// What an older annal wrote: version 1 (its K values, 12 bytes, are
	// never read: the version says the index is to be rebuilt).
	pdb, err := pebble.Open(filepath.Join(dir, indexDir), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pdb.Set([]byte{'V'}, []byte{0, 0, 0, 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := pdb.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if why := db.IndexRebuilt(); !errors.Is(why, index.ErrOldFormat) {
		t.Fatalf("IndexRebuilt = %v, want index.ErrOldFormat", why)
	}
	_, err = db.Append(ctx, "l", []EventInput{payment("a", 2)}, &AppendOptions{IdempotencyKey: "k"})
	checkMismatch(t, "after the rebuild of a version 1 index", err, first, 1)
}

// TestNilMetaIsEmptyObject: a nil or empty Meta is stored as {}, the
// same event as one with Meta {} (same content, same checksum); only
// whitespace is ErrInvalid, and a nil Data too.
func TestNilMetaIsEmptyObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	for _, meta := range [][]byte{nil, {}, []byte(`{}`), []byte(" { } ")} {
		res, err := db.Append(ctx, "l", []EventInput{{Entity: "e", Key: "k", Event: "v", Meta: meta, Data: []byte(`1`)}}, nil)
		if err != nil {
			t.Fatalf("meta %q: %v", meta, err)
		}
		e, err := db.Get(ctx, res.IDs[0])
		if err != nil || string(e.Meta) != `{}` {
			t.Fatalf("meta %q stored as %q, %v; want {}", meta, e.Meta, err)
		}
	}
	// The same events with nil and {} meta are the same events for an
	// idempotency key.
	first, err := db.Append(ctx, "l", []EventInput{{Entity: "e", Key: "k", Event: "v", Data: []byte(`2`)}}, &AppendOptions{IdempotencyKey: "m"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := db.Append(ctx, "l", []EventInput{{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(`2`)}}, &AppendOptions{IdempotencyKey: "m"})
	if err != nil || !slices.Equal(again.IDs, first.IDs) {
		t.Fatalf("retry with {} for nil meta: %v, %v; want %v", again.IDs, err, first.IDs)
	}
	for _, bad := range []EventInput{
		{Entity: "e", Key: "k", Event: "v", Meta: []byte(" "), Data: []byte(`1`)},
		{Entity: "e", Key: "k", Event: "v"},
		{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte{}},
	} {
		if _, err := db.Append(ctx, "l", []EventInput{bad}, nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("meta %q data %q: %v, want ErrInvalid", bad.Meta, bad.Data, err)
		}
	}
}

// BenchmarkIdemDigest: the digest of a batch of 10 small events, what an
// idempotent append computes once more than an append without a key.
func BenchmarkIdemDigest(b *testing.B) {
	entries := make([]segment.Entry, 10)
	for i := range entries {
		entries[i] = segment.Entry{Entity: "account", Key: fmt.Sprintf("acc-%d", i), Event: "debited",
			Meta: []byte(`{"by":"bench","corr":"c-1"}`), Data: []byte(fmt.Sprintf(`{"amount":%d,"currency":"EUR"}`, i))}
	}
	for b.Loop() {
		digestOfEntries(entries)
	}
}
