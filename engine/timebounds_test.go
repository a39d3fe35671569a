package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
)

// settableClock is an Options.Now that a test moves.
type settableClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *settableClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func timeEvent(i int) EventInput {
	return EventInput{Entity: "order", Key: fmt.Sprintf("order-%d", i%3), Event: "placed",
		Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
}

// TestScanCoversEveryTime: a ledger with events before and after
// 2116-02-20 (2^62 ns after 1970, where an unbounded scan used to stop):
// an unbounded Scan, forward and reverse, with and without a limit, sees
// the same events as Replay and Export.
func TestScanCoversEveryTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &settableClock{t: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	db, err := Open(t.TempDir(), &Options{Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "far"}); err != nil {
		t.Fatal(err)
	}
	var want []eventid.ID
	for i, when := range []time.Time{
		time.Date(2100, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2116, 2, 20, 0, 0, 0, 0, time.UTC),
		time.Date(2116, 2, 21, 0, 0, 0, 0, time.UTC),
		time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		clock.set(when)
		ids, err := idsOf(db.Append(ctx, "far", []EventInput{timeEvent(2 * i), timeEvent(2*i + 1)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	info, err := db.Ledger("far")
	if err != nil {
		t.Fatal(err)
	}
	want = append([]eventid.ID{info.Genesis}, want...)

	ids := func(evs []Event) []eventid.ID {
		out := make([]eventid.ID, len(evs))
		for i, ev := range evs {
			out[i] = ev.ID
		}
		return out
	}
	reversed := func(in []eventid.ID) []eventid.ID {
		out := make([]eventid.ID, len(in))
		for i, id := range in {
			out[len(in)-1-i] = id
		}
		return out
	}
	same := func(what string, got, want []eventid.ID) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %d events %v, want %d %v", what, len(got), got, len(want), want)
		}
	}
	same("Scan", ids(collect(t, db.Scan(ctx, "far", ScanOptions{}))), want)
	same("Scan reverse", ids(collect(t, db.Scan(ctx, "far", ScanOptions{Reverse: true}))), reversed(want))
	same("Scan reverse limit 1", ids(collect(t, db.Scan(ctx, "far", ScanOptions{Reverse: true, Limit: 1}))), want[len(want)-1:])
	same("Scan from 2116-02-20", ids(collect(t, db.Scan(ctx, "far", ScanOptions{From: time.Date(2116, 2, 20, 0, 0, 0, 0, time.UTC)}))), want[3:])
	same("Scan after an event before 2116", ids(collect(t, db.Scan(ctx, "far", ScanOptions{After: want[1]}))), want[2:])
	same("Scan reverse after the last", ids(collect(t, db.Scan(ctx, "far", ScanOptions{Reverse: true, After: want[len(want)-1], Limit: 2}))), reversed(want)[1:3])
	same("Replay", ids(collect(t, db.Replay(ctx, "far", ReplayOptions{Events: []string{"placed", "ledger-created"}}))), want)

	var buf bytes.Buffer
	if _, err := db.Export(ctx, "far", &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	var exported []eventid.ID
	r := ndjson.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		exported = append(exported, ev.ID)
	}
	same("Export", exported, want)
	buf.Reset()
	if _, err := db.Export(ctx, "far", &buf, ExportOptions{After: want[2]}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(want)-3 {
		t.Errorf("Export after event 2: %d lines, want %d", n, len(want)-3)
	}
}

// TestTimeLimit: no event gets a time after 9999-12-31T23:59:59.999999Z,
// the last the export format can write. An append, a CreateLedger with a
// clock past it is refused with eventid.ErrTimeLimit and stores nothing;
// an event at the limit itself is stored, exported, verified and imported;
// after it the ledger can take no more events, and the error says so.
func TestTimeLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limit := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	if !limit.Equal(eventid.MaxTime) || uint64(limit.UnixMicro()) != eventid.MaxMicros {
		t.Fatalf("eventid.MaxTime %v (%d µs), want %v", eventid.MaxTime, eventid.MaxMicros, limit)
	}
	clock := &settableClock{t: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	db, err := Open(dir, &Options{Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "edge"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "edge", []EventInput{timeEvent(0)}, nil); err != nil {
		t.Fatal(err)
	}
	headBefore := func() LedgerInfo {
		t.Helper()
		info, err := db.Ledger("edge")
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	refused := func(what string, err error, msg string) {
		t.Helper()
		switch {
		case err == nil:
			t.Fatalf("%s: stored, want eventid.ErrTimeLimit", what)
		case !errors.Is(err, eventid.ErrTimeLimit):
			t.Fatalf("%s: %v, want eventid.ErrTimeLimit", what, err)
		case !strings.Contains(err.Error(), msg):
			t.Fatalf("%s: %q does not say %q", what, err, msg)
		}
		t.Logf("%s: %v", what, err)
	}

	// A clock past the limit: refused, nothing stored; once the clock is
	// back, appends go on.
	before := headBefore()
	for _, when := range []time.Time{limit.Add(time.Microsecond), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(30000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		clock.set(when)
		_, err := db.Append(ctx, "edge", []EventInput{timeEvent(1), timeEvent(2)}, nil)
		refused(fmt.Sprintf("append at %v", when), err, "past the year 9999")
		if after := headBefore(); after.Head != before.Head || after.Count != before.Count {
			t.Fatalf("the refused append changed the ledger: %+v, before %+v", after, before)
		}
		_, err = db.CreateLedger(ctx, LedgerSpec{Name: "late"})
		refused(fmt.Sprintf("CreateLedger at %v", when), err, "past the year 9999")
		if _, err := db.Ledger("late"); !errors.Is(err, ErrLedgerNotFound) {
			t.Fatalf("the refused CreateLedger: Ledger(late): %v", err)
		}
	}
	if names, _ := os.ReadDir(filepath.Join(dir, ledgersDir)); len(names) != 1 {
		t.Fatalf("the refused CreateLedgers left %d entries in %s", len(names), ledgersDir)
	}

	// The limit itself: stored.
	clock.set(limit)
	ids, err := idsOf(db.Append(ctx, "edge", []EventInput{timeEvent(3)}, nil))
	if err != nil {
		t.Fatalf("append at the limit: %v", err)
	}
	if ids[0].Micros() != eventid.MaxMicros {
		t.Fatalf("the event at the limit has %d µs, want %d", ids[0].Micros(), eventid.MaxMicros)
	}
	// After it, nothing: max(now, last+1) is past the limit whatever the
	// clock says.
	before = headBefore()
	for _, when := range []time.Time{limit, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} {
		clock.set(when)
		_, err := db.Append(ctx, "edge", []EventInput{timeEvent(4)}, nil)
		refused(fmt.Sprintf("append after the event at the limit, clock %v", when), err, "this ledger can take no more events")
		if after := headBefore(); after.Head != before.Head || after.Count != before.Count {
			t.Fatalf("the refused append changed the ledger: %+v, before %+v", after, before)
		}
	}
	got := collect(t, db.Scan(ctx, "edge", ScanOptions{Reverse: true, Limit: 1}))
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("the last event by Scan: %v, want %s", got, ids[0])
	}

	// Export, verify, import into another directory: the same events.
	var buf bytes.Buffer
	if _, err := db.Export(ctx, "edge", &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"timestamp":"9999-12-31T23:59:59.999999Z"`) {
		t.Fatalf("the export has no event at the limit:\n%s", buf.String())
	}
	v, err := ndjson.VerifyAll(ndjson.NewReader(bytes.NewReader(buf.Bytes())))
	if err != nil {
		t.Fatalf("verify the export: %v", err)
	}
	if v.Head() != ids[0] {
		t.Fatalf("the export's verified head %s, want %s", v.Head(), ids[0])
	}
	other, err := Open(t.TempDir(), &Options{Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	info, err := other.Import(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{})
	if err != nil {
		t.Fatalf("import the export: %v", err)
	}
	if info.Head != ids[0] || info.Count != before.Count {
		t.Fatalf("imported %+v, want head %s and %d events", info, ids[0], before.Count)
	}
	if _, err := other.Verify(ctx, info.Name, nil); err != nil {
		t.Fatal(err)
	}

	// Reopened, the ledger still refuses (the clock starts at its head).
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, &Options{Now: clock.now}); err != nil {
		t.Fatal(err)
	}
	_, err = db.Append(ctx, "edge", []EventInput{timeEvent(5)}, nil)
	refused("append after a reopen", err, "this ledger can take no more events")
}
