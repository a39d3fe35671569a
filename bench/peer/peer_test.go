package peer

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testEvent returns the i-th event of the test workload: three entities,
// eleven keys each (so that "order-1" is a prefix of "order-10"), canonical
// JSON meta and data of varying sizes.
func testEvent(i int) Event {
	entity := [...]string{"order", "customer", "invoice"}[i%3]
	return Event{
		Entity: entity,
		Key:    fmt.Sprintf("%s-%d", entity, i%11),
		Name:   entity + "-updated",
		Meta:   fmt.Appendf(nil, `{"actor":"user-%d","cause":"req-%08d","source":"web"}`, i%5, i),
		Data: fmt.Appendf(nil, `{"currency":"EUR","items":[{"qty":%d,"sku":"sku-%d"}],"note":"%s","total":%d.5}`,
			i%7+1, i%1000, strings.Repeat("x", i%13), i),
	}
}

// stored is an event appended in a test, with the ID it got.
type stored struct {
	id ID
	e  Event
}

// appendBatch appends n events (numbered from len(*all)) as one batch and
// checks that their IDs follow every ID before them.
func appendBatch(t *testing.T, s Store, all *[]stored, n int) {
	t.Helper()
	events := make([]Event, n)
	for i := range events {
		events[i] = testEvent(len(*all) + i)
	}
	ids, err := s.Append(events)
	if err != nil {
		t.Fatalf("Append(%d events): %v", n, err)
	}
	if len(ids) != n {
		t.Fatalf("Append(%d events) returned %d IDs", n, len(ids))
	}
	for i, id := range ids {
		if k := len(*all); k > 0 && bytes.Compare((*all)[k-1].id[:], id[:]) >= 0 {
			t.Fatalf("ID %x of event %d is not after the previous one, %x", id, k, (*all)[k-1].id)
		}
		*all = append(*all, stored{id, events[i]})
	}
}

// checkContents checks that s holds exactly the events of all, and own
// events of its own (annal: its ledger's genesis) from before them,
// through each way it has of reading them.
func checkContents(t *testing.T, s Store, all []stored, own int) {
	t.Helper()
	for _, r := range all {
		n, err := s.Get(r.id)
		if err != nil {
			t.Fatalf("Get(%x): %v", r.id, err)
		}
		if n != r.e.Size() {
			t.Fatalf("Get(%x) = %d bytes, want %d", r.id, n, r.e.Size())
		}
	}
	if _, err := s.Get(PeerID(time.Unix(1, 0), 1<<60)); err == nil {
		t.Errorf("Get of an unknown ID did not fail")
	}

	// want is what a scan of [from, to] must return, by TimeOf: the
	// bounds are truncated to the microsecond, as annal's Scan does.
	want := func(from, to time.Time) (n int, size int64) {
		from, to = from.Truncate(time.Microsecond), to.Truncate(time.Microsecond)
		if to.IsZero() {
			to = time.Unix(1<<40, 0) // no bound
		}
		for _, r := range all {
			if tm := s.TimeOf(r.id); !tm.Before(from) && !tm.After(to) {
				n++
				size += int64(r.e.Size())
			}
		}
		return n, size
	}
	first, last := s.TimeOf(all[0].id), s.TimeOf(all[len(all)-1].id)
	q1, q3 := s.TimeOf(all[len(all)/4].id), s.TimeOf(all[len(all)*3/4].id)
	for _, c := range []struct {
		name     string
		from, to time.Time
	}{
		{"all", first, last},
		{"wide", first, last.Add(time.Hour)},
		{"middle", q1, q3},
		{"middle-inside", q1.Add(time.Nanosecond), q3.Add(-time.Nanosecond)},
		{"after", last.Add(time.Microsecond), last.Add(time.Hour)},
		{"reversed", last, first.Add(-time.Microsecond)},
		{"to-unbounded", q1, time.Time{}},
	} {
		n, size, err := s.Scan(c.from, c.to)
		if err != nil {
			t.Fatalf("Scan %s: %v", c.name, err)
		}
		if wn, wsize := want(c.from, c.to); n != wn || size != wsize {
			t.Errorf("Scan %s = %d events, %d bytes; want %d, %d", c.name, n, size, wn, wsize)
		}
	}
	// Zero bounds: everything, the store's own events too.
	if n, _, err := s.Scan(time.Time{}, time.Time{}); err != nil || n != own+len(all) {
		t.Errorf("Scan unbounded = %d events, %v; want %d", n, err, own+len(all))
	}

	for _, stream := range [][2]string{{"order", "order-1"}, {"order", "order-10"}, {"customer", "customer-2"}, {"order", "nobody"}} {
		n, size, err := s.Replay(stream[0], stream[1])
		if errors.Is(err, ErrUnsupported) {
			break
		}
		if err != nil {
			t.Fatalf("Replay(%q, %q): %v", stream[0], stream[1], err)
		}
		wn, wsize := 0, int64(0)
		for _, r := range all {
			if r.e.Entity == stream[0] && r.e.Key == stream[1] {
				wn++
				wsize += int64(r.e.Size())
			}
		}
		if n != wn || size != wsize {
			t.Errorf("Replay(%q, %q) = %d events, %d bytes; want %d, %d", stream[0], stream[1], n, size, wn, wsize)
		}
	}

	n, err := s.Verify()
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if n != own+len(all) {
		t.Errorf("Verify covered %d events, want %d", n, own+len(all))
	}
}

// ownEvents returns how many events a freshly opened store holds of its
// own (annal: the genesis of its ledger), and waits a millisecond so that
// they are before the events the test appends.
func ownEvents(t *testing.T, s Store) int {
	t.Helper()
	n, err := s.Verify()
	if err != nil {
		t.Fatalf("Verify of a new store: %v", err)
	}
	time.Sleep(time.Millisecond)
	return n
}

// TestConformance runs every registered store, in every mode it offers,
// through the same appends and reads, across a reopen.
func TestConformance(t *testing.T) {
	for _, info := range All() {
		for _, mode := range []Mode{Sync, Interval, None} {
			t.Run(info.Name+"/"+mode.String(), func(t *testing.T) {
				dir := t.TempDir()
				s, err := info.Open(dir, mode)
				if errors.Is(err, ErrUnsupported) {
					t.Skipf("%s does not offer %s", info.Name, mode)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if s != nil {
						_ = s.Close()
					}
				}()
				own := ownEvents(t, s)
				var all []stored
				for _, n := range []int{1, 10, 100} {
					appendBatch(t, s, &all, n)
					time.Sleep(time.Millisecond) // the batches get different times
				}
				checkContents(t, s, all, own)

				if err := s.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				s = nil
				if s, err = info.Open(dir, mode); err != nil {
					t.Fatalf("reopen: %v", err)
				}
				checkContents(t, s, all, own)
				appendBatch(t, s, &all, 5) // IDs after the old ones
				appendBatch(t, s, &all, 1)
				checkContents(t, s, all, own)
				err = s.Close()
				s = nil
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			})
		}
	}
}

// TestConcurrentAppend has 16 goroutines append single events (Sync) while
// two others read, then checks that every event is there, once.
func TestConcurrentAppend(t *testing.T) {
	const writers, perWriter = 16, 50
	for _, info := range All() {
		t.Run(info.Name, func(t *testing.T) {
			s, err := info.Open(t.TempDir(), Sync)
			if errors.Is(err, ErrUnsupported) {
				t.Skipf("%s does not offer sync", info.Name)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			own := ownEvents(t, s)

			var (
				mu   sync.Mutex
				all  []stored // in no particular order
				errc = make(chan error, writers+2)
				stop = make(chan struct{})
				wg   sync.WaitGroup
				rwg  sync.WaitGroup
			)
			start := time.Now().Add(-time.Second)
			for w := range writers {
				wg.Go(func() {
					for i := range perWriter {
						e := testEvent(w*perWriter + i)
						ids, err := s.Append([]Event{e})
						if err == nil && len(ids) != 1 {
							err = fmt.Errorf("Append of one event returned %d IDs", len(ids))
						}
						if err != nil {
							errc <- err
							return
						}
						mu.Lock()
						all = append(all, stored{ids[0], e})
						mu.Unlock()
					}
				})
			}
			for range 2 {
				rwg.Go(func() {
					for k := 0; ; k++ {
						select {
						case <-stop:
							return
						default:
						}
						mu.Lock()
						n := len(all)
						var id ID
						if n > 0 {
							id = all[k%n].id
						}
						mu.Unlock()
						if n == 0 {
							continue
						}
						if _, err := s.Get(id); err != nil {
							errc <- fmt.Errorf("Get(%x) while appending: %w", id, err)
							return
						}
						if _, _, err := s.Scan(start, time.Now().Add(time.Second)); err != nil {
							errc <- fmt.Errorf("Scan while appending: %w", err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			rwg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}

			if len(all) != writers*perWriter {
				t.Fatalf("%d events appended, want %d", len(all), writers*perWriter)
			}
			slices.SortFunc(all, func(a, b stored) int { return bytes.Compare(a.id[:], b.id[:]) })
			for i := 1; i < len(all); i++ {
				if all[i].id == all[i-1].id {
					t.Fatalf("ID %x returned twice", all[i].id)
				}
			}
			checkContents(t, s, all, own)
		})
	}
}

// TestVersions checks each peer's Version against the version of its
// module that bench/go.mod requires (test binaries carry no module
// versions in their build information, so go.mod is read instead).
func TestVersions(t *testing.T) {
	modules := map[string]string{
		"wal":    "github.com/tidwall/wal",
		"pebble": "github.com/cockroachdb/pebble/v2",
		"bbolt":  "go.etcd.io/bbolt",
		"sqlite": "modernc.org/sqlite",
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Skipf("cannot read bench/go.mod: %v", err)
	}
	required := map[string]string{} // module path → version
	for line := range strings.Lines(string(gomod)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && strings.HasPrefix(f[1], "v") {
			required[f[0]] = f[1]
		}
	}
	for _, info := range All() {
		path, ok := modules[info.Name]
		if !ok {
			continue // annal itself, or a store this test does not know
		}
		v, ok := required[path]
		if !ok {
			t.Errorf("%s: bench/go.mod does not require %s", info.Name, path)
			continue
		}
		if info.Version != v {
			t.Errorf("%s: Version %q, but bench/go.mod requires %s %s", info.Name, info.Version, path, v)
		}
		if !strings.Contains(info.What, info.Version) {
			t.Errorf("%s: What %q does not name version %s", info.Name, info.What, info.Version)
		}
	}
}

// TestRecord checks the peers' record encoding: a round trip, and a
// refusal of every truncation and of trailing bytes.
func TestRecord(t *testing.T) {
	e := testEvent(7)
	b := encodeRecord(nil, &e)
	got, err := decodeRecord(bytes.Clone(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.Entity != e.Entity || got.Key != e.Key || got.Name != e.Name || !bytes.Equal(got.Meta, e.Meta) || !bytes.Equal(got.Data, e.Data) {
		t.Fatalf("decodeRecord(encodeRecord(%+v)) = %+v", e, got)
	}
	for n := range len(b) {
		if _, err := decodeRecord(b[:n]); err == nil {
			t.Fatalf("decodeRecord of the first %d of %d bytes did not fail", n, len(b))
		}
	}
	if _, err := decodeRecord(append(bytes.Clone(b), 0)); err == nil {
		t.Fatal("decodeRecord with a trailing byte did not fail")
	}
}

// TestIDBounds checks the bounds of a scan: truncated to the
// microsecond, as annal's, and zero meaning no bound.
func TestIDBounds(t *testing.T) {
	base := time.UnixMicro(1_700_000_000_000_000)
	at := func(us int64) ID { return PeerID(base.Add(time.Duration(us)*time.Microsecond), 0) }
	for _, c := range []struct {
		name     string
		from, to time.Time
		lo, hi   ID // [lo, hi)
		ok       bool
	}{
		{"one microsecond", base, base, at(0), at(1), true},
		{"ten", base, base.Add(10 * time.Microsecond), at(0), at(11), true},
		{"truncated", base.Add(999), base.Add(10*time.Microsecond + 999), at(0), at(11), true},
		{"within a microsecond", base.Add(500), base.Add(999), at(0), at(1), true},
		{"reversed", base.Add(time.Microsecond), base, ID{}, ID{}, false},
		{"from zero", time.Time{}, base, PeerID(time.UnixMicro(0), 0), at(1), true},
		{"before 1970", time.Unix(-5, 0), base, PeerID(time.UnixMicro(0), 0), at(1), true},
		{"to zero", base, time.Time{}, at(0), PeerID(time.UnixMicro(math.MaxInt64), 0), true},
	} {
		lo, hi, ok := idBounds(c.from, c.to)
		if ok != c.ok || ok && (lo != c.lo || hi != c.hi) {
			t.Errorf("idBounds %s = %x, %x, %v; want %x, %x, %v", c.name, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
