package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// take reads up to n events from a consumer (until an error), acking those
// for which ack says so, and returns them with the error that ended it.
func take(ctx context.Context, t *testing.T, c *Consumer, n int, ack func(i int, e Event) bool) ([]Event, error) {
	t.Helper()
	if n == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []Event
	for e, err := range c.Events(ctx) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
		if ack != nil && ack(len(out)-1, e) {
			if err := c.Ack(ctx, e.ID); err != nil {
				t.Fatalf("ack %s #%d: %v", e.ID, e.Seq, err)
			}
		}
		if len(out) == n {
			break
		}
	}
	return out, nil
}

func seqs(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// TestConsumerResumesAfterAck: a consumer resumes after the last event it
// acknowledged, in the same process (a new Events), after Close, and
// after the DB is reopened; what it was given and did not acknowledge
// comes again.
func TestConsumerResumesAfterAck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 20, appendSpec{Event: func(i int) EventInput { return ev("order", fmt.Sprintf("k%d", i%2), "placed") }, Options: unsynced})
	c, err := db.Consumer("l", "billing", ConsumerOptions{Entity: "order", Keys: []string{"k0"}})
	if err != nil {
		t.Fatal(err)
	}
	// Events 2, 4, …; the consumer takes 5 and acknowledges the third.
	got, err := take(ctx, t, c, 5, func(i int, _ Event) bool { return i == 2 })
	if err != nil || fmt.Sprint(seqs(got)) != "[2 4 6 8 10]" {
		t.Fatalf("first: %v %v", seqs(got), err)
	}
	if p := c.Position(); p.Delivered.Seq != 10 || p.Acked.Seq != 6 || p.Stored.Seq != 6 || p.Acked.ID != got[2].ID {
		t.Fatalf("position %+v", p)
	}
	again, err := take(ctx, t, c, 2, nil)
	if err != nil || fmt.Sprint(seqs(again)) != "[8 10]" {
		t.Fatalf("a new Events: %v %v, want [8 10]", seqs(again), err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	c, err = db.Consumer("l", "billing", ConsumerOptions{Entity: "order", Keys: []string{"k0"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Position(); p.Acked.Seq != 6 || p.Stored.Seq != 6 || !p.Delivered.IsZero() {
		t.Fatalf("reopened position %+v", p)
	}
	got, err = take(ctx, t, c, 7, nil)
	if err != nil || fmt.Sprint(seqs(got)) != "[8 10 12 14 16 18 20]" {
		t.Fatalf("after reopen: %v %v", seqs(got), err)
	}
	infos, err := db.Consumers("l")
	if err != nil || len(infos) != 1 || infos[0].Name != "billing" || infos[0].Position.Seq != 6 || !infos[0].Live ||
		infos[0].Entity != "order" || fmt.Sprint(infos[0].Keys) != "[k0]" {
		t.Fatalf("Consumers: %+v %v", infos, err)
	}
}

// TestConsumerAckRules: Ack refuses what the consumer was not given (an
// event not yet delivered, one its selector does not match, another
// ledger's, the zero ID) and leaves the position; an older event is a
// no-op; a name is held by one live Consumer; bad options and names fail.
func TestConsumerAckRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	ids := appendEvents(t, db, "l", 10, appendSpec{Event: func(i int) EventInput { return ev("order", "k", []string{"placed", "paid"}[i%2]) }, Options: unsynced})
	c, err := db.Consumer("l", "c", ConsumerOptions{Events: []string{"paid"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Nothing delivered yet: no ack.
	if err := c.Ack(ctx, ids[1]); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not delivered") {
		t.Fatalf("ack before delivery: %v", err)
	}
	got, err := take(ctx, t, c, 2, nil) // ids[1], ids[3]
	if err != nil || got[1].ID != ids[3] {
		t.Fatalf("take: %v %v", seqs(got), err)
	}
	for _, tc := range []struct {
		id   eventid.ID
		why  string
		want error
	}{
		{ids[5], "not delivered", ErrInvalid},  // a later match
		{ids[2], "does not match", ErrInvalid}, // before the last delivered, not matched
		{other.Genesis, "ledger", ErrInvalid},  // another ledger
		{eventid.ID{}, "zero", ErrInvalid},     // zero
		{eventid.New(ids[9].Micros()+5, 1, info.ID), "no such event", ErrInvalid},
	} {
		if err := c.Ack(ctx, tc.id); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.why) {
			t.Fatalf("ack %s: %v, want %v saying %q", tc.id, err, tc.want, tc.why)
		}
	}
	if p := c.Position(); !p.Acked.IsZero() || !p.Stored.IsZero() {
		t.Fatalf("refused acks moved the position: %+v", p)
	}
	// An earlier delivered event, the last one, then backwards: a no-op.
	if err := c.Ack(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, ids[1]); err != nil {
		t.Fatalf("ack backwards: %v, want nil (no-op)", err)
	}
	if p := c.Position(); p.Acked.ID != ids[3] || p.Stored.ID != ids[3] {
		t.Fatalf("position %+v, want %s", p, ids[3])
	}
	// One live Consumer per name; one Events at a time.
	if _, err := db.Consumer("l", "c", ConsumerOptions{}); !errors.Is(err, ErrConsumerInUse) {
		t.Fatalf("second Consumer: %v", err)
	}
	if err := db.DeleteConsumer(ctx, "l", "c"); !errors.Is(err, ErrConsumerInUse) {
		t.Fatalf("DeleteConsumer of a live one: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	next := make(chan struct{})
	go func() {
		for range c.Events(sctx) {
			next <- struct{}{}
			<-sctx.Done()
		}
		close(next)
	}()
	<-next
	if _, err := take(ctx, t, c, 1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a second Events: %v", err)
	}
	cancel()
	for range next {
	}
	// Bad options, names and ledgers.
	for _, tc := range []struct {
		ledger, name string
		o            ConsumerOptions
		want         error
	}{
		{"l", "", ConsumerOptions{}, ErrInvalid},
		{"l", " x", ConsumerOptions{}, ErrInvalid},
		{"l", "a\u202eb", ConsumerOptions{}, ErrInvalid},
		{"l", "x", ConsumerOptions{Keys: []string{"k"}}, ErrInvalid},
		{"l", "x", ConsumerOptions{Durability: 9}, ErrInvalid},
		{"l", "x", ConsumerOptions{Durability: Interval, Interval: -time.Second}, ErrInvalid},
		{"nope", "x", ConsumerOptions{}, ErrLedgerNotFound},
	} {
		if _, err := db.Consumer(tc.ledger, tc.name, tc.o); !errors.Is(err, tc.want) {
			t.Fatalf("Consumer(%q, %q, %+v): %v, want %v", tc.ledger, tc.name, tc.o, err, tc.want)
		}
	}
	if err := db.DeleteConsumer(ctx, "l", "never"); !errors.Is(err, ErrConsumerNotFound) {
		t.Fatalf("DeleteConsumer of an unknown name: %v", err)
	}
	// Closed: the name is free, and its stored position can be deleted.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, ids[3]); !errors.Is(err, ErrClosed) {
		t.Fatalf("ack after Close: %v", err)
	}
	if err := db.DeleteConsumer(ctx, "l", "c"); err != nil {
		t.Fatal(err)
	}
	c2, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := c2.Position(); !p.Acked.IsZero() {
		t.Fatalf("after DeleteConsumer: %+v, want the start", p)
	}
	c2.Close()
}

// TestConsumerDurability: with Interval an acknowledgement is written
// within the interval; with None only by Flush, Close and DB.Close; and
// what DB.Close wrote is where the consumer resumes.
func TestConsumerDurability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 10, appendSpec{Options: unsynced})
	iv, err := db.Consumer("l", "interval", ConsumerOptions{Durability: Interval, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	none, err := db.Consumer("l", "none", ConsumerOptions{Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	ack := func(int, Event) bool { return true }
	if _, err := take(ctx, t, iv, 5, ack); err != nil {
		t.Fatal(err)
	}
	if _, err := take(ctx, t, none, 3, ack); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); iv.Position().Stored.Seq != 5; {
		if time.Now().After(deadline) {
			t.Fatalf("the Interval position was not written: %+v", iv.Position())
		}
		time.Sleep(time.Millisecond)
	}
	if p := none.Position(); p.Acked.Seq != 3 || !p.Stored.IsZero() {
		t.Fatalf("None: %+v, want acked #3, nothing stored", p)
	}
	if err := none.Flush(ctx); err != nil || none.Position().Stored.Seq != 3 {
		t.Fatalf("Flush: %v %+v", err, none.Position())
	}
	if _, err := take(ctx, t, none, 4, ack); err != nil {
		t.Fatal(err)
	}
	// DB.Close writes #7 of "none"; both consumers end.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := none.Ack(ctx, eventid.ID{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ack after DB.Close: %v", err)
	}
	if err := none.Close(); err != nil {
		t.Fatalf("Close after DB.Close: %v", err)
	}
	db = openTest(t, dir)
	defer db.Close()
	infos, err := db.Consumers("l")
	if err != nil || len(infos) != 2 || infos[0].Name != "interval" || infos[0].Position.Seq != 5 || infos[1].Position.Seq != 7 || infos[0].Live {
		t.Fatalf("Consumers after reopen: %+v %v", infos, err)
	}
}

// TestConsumerCloseDB: DB.Close with live consumers (one waiting for a
// commit, one in the catch-up suspended in its loop body) returns; each
// Events ends with one ErrClosed.
func TestConsumerCloseDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 1000, appendSpec{Options: unsynced})
	results := make(chan []error, 2)
	caughtUp, inBody, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	for i, o := range []ConsumerOptions{{}, {Entity: "order"}} {
		c, err := db.Consumer("l", fmt.Sprint("c", i), o)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			var errs []error
			n := 0
			for e, err := range c.Events(ctx) {
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if len(errs) > 0 {
					errs = append(errs, fmt.Errorf("event %d after the error", e.Seq))
				}
				n++
				if err := c.Ack(ctx, e.ID); err != nil && !errors.Is(err, ErrClosed) {
					errs = append(errs, err)
				}
				switch {
				case i == 0 && n == 1001:
					close(caughtUp)
				case i == 1 && n == 10:
					close(inBody)
					<-release
				}
			}
			results <- errs
		}()
	}
	<-caughtUp
	<-inBody
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	for range 2 {
		if errs := <-results; len(errs) != 1 || !errors.Is(errs[0], ErrClosed) {
			t.Fatalf("consumer ended with %v, want one ErrClosed", errs)
		}
	}
}

// TestConsumerMetaLost: a lost meta.db loses the positions; MetaRebuilt
// says so and, once the loss is accepted, the consumer starts again at
// the first event. A damaged
// position record fails DB.Consumer, saying so; DeleteConsumer removes it.
func TestConsumerMetaLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 5, appendSpec{Options: unsynced})
	c, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := take(ctx, t, c, 4, func(int, Event) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A damaged record: one byte of the name inside it changed.
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	saved := slices.Clone(b)
	i := strings.LastIndex(string(b), "\xa4name\xa1c")
	if i < 0 {
		t.Fatal("the consumer record is not in meta.db")
	}
	b[i+len("\xa4name\xa1")] = 'd'
	if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	if _, err := db.Consumer("l", "c", ConsumerOptions{}); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("damaged record: %v", err)
	}
	if err := db.DeleteConsumer(ctx, "l", "c"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// meta.db lost.
	if err := os.WriteFile(filepath.Join(dir, metaFile), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if err := db.MetaRebuilt(); err == nil || !strings.Contains(err.Error(), "consumers") {
		t.Fatalf("MetaRebuilt: %v, want it to mention the consumers", err)
	}
	// Accepted (TestLostPositionsLastUntilAccepted: until then, refused).
	if err := db.AcceptLostPositions(); err != nil {
		t.Fatal(err)
	}
	c, err = db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := take(ctx, t, c, 1, nil); err != nil || got[0].Seq != 1 {
		t.Fatalf("after meta.db was lost: %v %v, want the genesis", seqs(got), err)
	}
}

// TestConsumerRareSelectorConcurrentCommits rules out the two classic
// bugs under concurrency: writers append mostly events the consumer does
// not select, a few it does, while the consumer acknowledges each event
// it is given with a 1 ms Interval writer racing the commits, and is
// closed and opened again now and then (a restart). The stored position
// is always an event it was given (never the head, never an event read
// and not yielded), and across its lives it receives every matching
// event, in order, none skipped.
func TestConsumerRareSelectorConcurrentCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := order(i)
				if i%25 == w {
					e = ev("payment", fmt.Sprint("w", w), "rare")
				}
				if _, err := db.Append(ctx, "l", []EventInput{e}, &AppendOptions{Durability: None}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	want := 0
	for w := range writers {
		for i := range each {
			if i%25 == w {
				want++
			}
		}
	}
	o := ConsumerOptions{Events: []string{"rare"}, Durability: Interval, Interval: time.Millisecond}
	var got []Event
	delivered := map[eventid.ID]bool{}
	for life := 0; len(got) < want; life++ {
		c, err := db.Consumer("l", "rare", o)
		if err != nil {
			t.Fatal(err)
		}
		start := c.Position().Stored
		if len(got) > 0 && start.ID != got[len(got)-1].ID {
			// A position is only ever an event given and acknowledged:
			// each life's last one (all are acked before Close).
			t.Fatalf("life %d starts after %s #%d, want the last event given, #%d", life, start.ID, start.Seq, got[len(got)-1].Seq)
		}
		evs, err := take(ctx, t, c, min(3, want-len(got)), func(int, Event) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Event != "rare" || delivered[e.ID] || len(got) > 0 && e.Seq <= got[len(got)-1].Seq {
				t.Fatalf("life %d: %s #%d (%s): not a new matching event in order", life, e.ID, e.Seq, e.Event)
			}
			delivered[e.ID] = true
			got = append(got, e)
			if p := c.Position(); p.Stored.Seq > p.Delivered.Seq {
				t.Fatalf("stored #%d past delivered #%d", p.Stored.Seq, p.Delivered.Seq)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	// Every matching event of the ledger was received, none skipped.
	var all []uint64
	for e, err := range db.Replay(ctx, "l", ReplayOptions{Events: []string{"rare"}}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e.Seq)
	}
	if fmt.Sprint(all) != fmt.Sprint(seqs(got)) {
		t.Fatalf("received %v, the ledger has %v", seqs(got), all)
	}
}

// TestConsumersConcurrent: 16 goroutines, each with its own consumer
// (half of them filtered), take and acknowledge events while 4 writers
// append, and another goroutine per name tries to take it (refused while
// it is live); run with -race.
func TestConsumersConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	const writers, each, consumers = 4, 50, 16
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := db.Append(ctx, "l", []EventInput{order(w*each + i)}, &AppendOptions{Durability: Interval}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	total := writers*each + 1
	paid := 0
	for i := range writers * each {
		if i%3 == 1 {
			paid++
		}
	}
	for k := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("c", k)
			o, want := ConsumerOptions{Durability: []Durability{Sync, Interval, None}[k%3], Interval: time.Millisecond}, total
			if k%2 == 1 {
				o.Events, want = []string{"order-paid"}, paid
			}
			c, err := db.Consumer("l", name, o)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if _, err := db.Consumer("l", name, o); !errors.Is(err, ErrConsumerInUse) {
				t.Errorf("%s: second Consumer: %v", name, err)
			}
			var got []Event
			for len(got) < want {
				evs, err := take(ctx, t, c, min(7, want-len(got)), func(int, Event) bool { return true })
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				got = append(got, evs...)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Seq <= got[i-1].Seq {
					t.Errorf("%s: #%d after #%d", name, got[i].Seq, got[i-1].Seq)
					return
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if p := c.Position(); p.Stored != p.Acked || p.Acked.ID != got[len(got)-1].ID {
				t.Errorf("%s: %+v, want everything acked and stored", name, p)
			}
		}()
	}
	wg.Wait()
	infos, err := db.Consumers("l")
	if err != nil || len(infos) != consumers {
		t.Fatalf("Consumers: %d %v", len(infos), err)
	}
}

// TestConsumerPositionNeverPastDurableLedger: a machine crash (only what
// was synced survives: vfs.NewCrashableMem) right after a Sync Ack of an
// event appended with None durability. Ack synced the ledger up to the
// event before it stored the position, so after the crash the position
// is an event of the ledger and the consumer resumes after it.
func TestConsumerPositionNeverPastDurableLedger(t *testing.T) {
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
	appendEvents(t, db, "l", 10, appendSpec{Options: unsynced}) // None: not synced
	c, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := take(ctx, t, c, 8, func(i int, _ Event) bool { return i == 6 })
	if err != nil {
		t.Fatal(err)
	}
	var meta bytes.Buffer
	if err := db.meta.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&meta); return err }); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	db.Close()
	writeFile(t, metaPath, meta.Bytes())
	db, err = Open(crashDir, &Options{fs: crashed, metaPath: metaPath})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err = db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Position(); p.Stored.ID != got[6].ID {
		t.Fatalf("position after the crash: %+v, want %s", p, got[6].ID)
	}
	if evs, err := take(ctx, t, c, 1, nil); err != nil || evs[0].Seq != got[6].Seq+1 {
		t.Fatalf("after the crash: %v %v, want #%d", seqs(evs), err, got[6].Seq+1)
	}
}

// TestSetConsumerPosition: an explicit position (a new consumer at the
// head, a reset to the start) is where the next Consumer resumes; a live
// consumer, another ledger's event and an unknown event are refused.
func TestSetConsumerPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	other, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	ids := appendEvents(t, db, "l", 10, appendSpec{Options: unsynced})
	if err := db.SetConsumerPosition(ctx, "l", "new", ids[9]); err != nil {
		t.Fatal(err)
	}
	c, err := db.Consumer("l", "new", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetConsumerPosition(ctx, "l", "new", eventid.ID{}); !errors.Is(err, ErrConsumerInUse) {
		t.Fatalf("live: %v", err)
	}
	late := appendEvents(t, db, "l", 1, appendSpec{Options: unsynced})
	if got, err := take(ctx, t, c, 1, nil); err != nil || got[0].ID != late[0] {
		t.Fatalf("after the head: %v %v, want %s", idsOfEvents(got), err, late[0])
	}
	c.Close()
	if err := db.SetConsumerPosition(ctx, "l", "new", eventid.ID{}); err != nil {
		t.Fatal(err)
	}
	c, err = db.Consumer("l", "new", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := take(ctx, t, c, 1, nil); err != nil || got[0].Seq != 1 {
		t.Fatalf("after a reset: %v %v, want the genesis", seqs(got), err)
	}
	c.Close()
	for _, id := range []eventid.ID{other.Genesis, eventid.New(ids[9].Micros()+3, 1, ids[0].Ledger())} {
		if err := db.SetConsumerPosition(ctx, "l", "new", id); !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetConsumerPosition(%s): %v, want ErrInvalid", id, err)
		}
	}
}

// TestConsumerUnavailableLedger: a consumer of a ledger that Open refused
// (a flipped byte in its segment) fails with ErrLedgerUnavailable, and
// its stored position is kept for when the ledger is repaired.
func TestConsumerUnavailableLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 5, appendSpec{Options: unsynced})
	c, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := take(ctx, t, c, 3, func(int, Event) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, ledgersDir, info.ID.String(), "00000000000000000001.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	good := slices.Clone(b)
	b[len(b)/2] ^= 0xff
	writeFile(t, seg, b)
	db, err = Open(dir, &Options{FullVerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Consumer("l", "c", ConsumerOptions{}); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("Consumer of an unavailable ledger: %v", err)
	}
	if _, err := db.Consumers("l"); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("Consumers of an unavailable ledger: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, seg, good)
	db = openTest(t, dir)
	defer db.Close()
	if infos, err := db.Consumers("l"); err != nil || len(infos) != 1 || infos[0].Position.Seq != 3 {
		t.Fatalf("after the repair: %+v %v", infos, err)
	}
}

// TestConsumerCloseInLoop: Consumer.Close from the loop body ends Events
// with one ErrClosed, and no event after it; the name is free again.
func TestConsumerCloseInLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 200, appendSpec{Options: unsynced})
	c, err := db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var errs []error
	for e, err := range c.Events(ctx) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n++; n == 5 {
			if err := c.Ack(ctx, e.ID); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != 5 || len(errs) != 1 || !errors.Is(errs[0], ErrClosed) {
		t.Fatalf("%d events, then %v; want 5, then one ErrClosed", n, errs)
	}
	c, err = db.Consumer("l", "c", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.Position(); p.Stored.Seq != 5 {
		t.Fatalf("position %+v, want #5", p)
	}
}
