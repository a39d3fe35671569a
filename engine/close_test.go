package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCloseMidWorkload: 16 goroutines (conditional and idempotent
// appenders, readers that page, subscribers, named consumers that Ack)
// while Close is called mid-way; then the DB reopens: every acknowledged
// append is there, no consumer's stored position is past an event it was
// given, no goroutine is left behind and nothing hangs.
func TestCloseMidWorkload(t *testing.T) {
	rounds := 6
	if raceEnabled {
		rounds = 3
	}
	dir := t.TempDir()
	before := runtime.NumGoroutine()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	delivered := map[string]map[uint64]bool{} // consumer → seqs given, over every round
	for round := range rounds {
		closeMidWorkloadRound(t, dir, round, delivered)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func closeMidWorkloadRound(t *testing.T, dir string, round int, delivered map[string]map[uint64]bool) {
	db := openTest(t, dir)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		acked   = map[eventid.ID]bool{}
		wg      sync.WaitGroup
		appends atomic.Int64
	)
	fail := func(format string, a ...any) { t.Errorf("round %d: "+format, append([]any{round}, a...)...) }
	expected := func(err error) bool {
		return err == nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrConditionFailed) || errors.Is(err, ErrIdempotencyMismatch)
	}
	// Appenders: conditional on a stream.
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("acc-%d", g%2)
			for i := 0; ; i++ {
				h, err := db.StreamHead(ctx, "h", "account", key)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						fail("stream head: %v", err)
					}
					return
				}
				res, err := db.Append(ctx, "h", []EventInput{{Entity: "account", Key: key, Event: "moved", Meta: nil, Data: []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))}},
					&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: key, Head: h.ID}}})
				var ce *ConditionError
				switch {
				case err == nil:
					mu.Lock()
					acked[res.IDs[0]] = true
					mu.Unlock()
					appends.Add(1)
				case errors.As(err, &ce):
					if _, gerr := db.Get(ctx, ce.Found); gerr != nil && !errors.Is(gerr, ErrClosed) {
						fail("conflict's Found %s not readable: %v", ce.Found, gerr)
					}
				case errors.Is(err, ErrClosed):
					return
				default:
					fail("append: %v", err)
					return
				}
			}
		}()
	}
	// Appenders: idempotent, same and different payloads.
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("r%d-k%d", round, i/2)
				data := fmt.Sprintf(`{"i":%d}`, i/2)
				if g == 2 && i%2 == 1 {
					data = fmt.Sprintf(`{"i":%d,"other":true}`, i/2)
				}
				res, err := db.Append(ctx, "h", []EventInput{{Entity: "pay", Key: k, Event: "paid", Data: []byte(data)}}, &AppendOptions{IdempotencyKey: k})
				var me *IdempotencyMismatchError
				switch {
				case err == nil:
					mu.Lock()
					acked[res.IDs[0]] = true
					mu.Unlock()
				case errors.As(err, &me):
					if len(me.First.IDs) != 1 || me.First.FirstSeq == 0 {
						fail("mismatch without its first result: %+v", me.First)
					} else if ev, gerr := db.Get(ctx, me.First.IDs[0]); gerr == nil && ev.Seq != me.First.FirstSeq {
						fail("mismatch First: %s is #%d, FirstSeq %d", me.First.IDs[0], ev.Seq, me.First.FirstSeq)
					}
				case errors.Is(err, ErrClosed):
					return
				default:
					fail("idempotent append: %v", err)
					return
				}
			}
		}()
	}
	// Readers: Replay paging forward, Scan reverse paging.
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var after eventid.ID
				var last uint64
				reverse := g == 1
				n := 0
				for {
					got := 0
					var seq func(func(Event, error) bool)
					if g == 2 {
						seq = db.Scan(ctx, "h", ScanOptions{After: after, Reverse: true, Limit: 7})
					} else {
						o := ReplayOptions{Entity: "account", After: after, Reverse: reverse, Limit: 13}
						if g == 1 {
							o = ReplayOptions{Events: []string{"moved", "paid", "ledger-created"}, After: after, Reverse: reverse, Limit: 13}
						}
						seq = db.Replay(ctx, "h", o)
					}
					for ev, err := range seq {
						if err != nil {
							if !errors.Is(err, ErrClosed) {
								fail("reader %d: %v", g, err)
							}
							return
						}
						if last != 0 && ((g == 0 && ev.Seq <= last) || (g == 1 && ev.Seq >= last) || (g == 2 && ev.Seq != last-1)) {
							fail("reader %d: #%d after #%d", g, ev.Seq, last)
						}
						last, after = ev.Seq, ev.ID
						got++
						n++
					}
					if got == 0 {
						break
					}
				}
				if g == 2 && last != 1 {
					fail("reverse reader %d ended at #%d, not the genesis", g, last)
				}
				_ = n
			}
		}()
	}
	// Export, Import of what was exported, Verify, GetSeq, Ledgers.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			var buf bytes.Buffer
			if _, err := db.Export(ctx, "h", &buf, ExportOptions{}); err != nil {
				if !errors.Is(err, ErrClosed) {
					fail("export: %v", err)
				}
				return
			}
			if i%4 == 0 {
				_, err := db.Import(ctx, &buf, ImportOptions{Name: fmt.Sprintf("imp-%d-%d", round, i)})
				if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrLedgerExists) {
					fail("import: %v", err)
					return
				}
			}
			if _, err := db.Verify(ctx, "h", nil); err != nil && !errors.Is(err, ErrClosed) {
				fail("verify: %v", err)
				return
			}
			for _, li := range db.Ledgers() {
				if li.Count == 0 {
					continue
				}
				if ev, err := db.GetSeq(ctx, li.Name, li.Count); err != nil {
					if !errors.Is(err, ErrClosed) {
						fail("GetSeq(%s, %d) of Ledgers' count: %v", li.Name, li.Count, err)
					}
					return
				} else if ev.ID != li.Head {
					fail("GetSeq(%s, %d) = %s, Ledgers' head %s", li.Name, li.Count, ev.ID, li.Head)
				}
			}
		}
	}()
	// Subscribers.
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var last uint64
			o := SubscribeOptions{}
			if g == 1 {
				o = SubscribeOptions{Entity: "account"}
			}
			for ev, err := range db.Subscribe(sctx, "h", o) {
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						fail("subscriber: %v", err)
					}
					return
				}
				if ev.Seq <= last || (g == 0 && ev.Seq != last+1) {
					fail("subscriber %d: #%d after #%d", g, ev.Seq, last)
				}
				last = ev.Seq
			}
			fail("subscriber %d ended without an error", g)
		}()
	}
	// Named consumers acking (one Sync, one Interval, one None).
	for g, d := range []Durability{Sync, Interval, None} {
		name := fmt.Sprintf("c%d", g)
		mu.Lock()
		if delivered[name] == nil {
			delivered[name] = map[uint64]bool{0: true}
		}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := db.Consumer("h", name, ConsumerOptions{Durability: d, Interval: time.Millisecond, Entity: map[bool]string{true: "pay"}[g == 1]})
			if err != nil {
				if !errors.Is(err, ErrClosed) {
					fail("consumer: %v", err)
				}
				return
			}
			defer c.Close()
			i := 0
			for ev, err := range c.Events(ctx) {
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						fail("consumer %s: %v", name, err)
					}
					return
				}
				mu.Lock()
				delivered[name][ev.Seq] = true
				mu.Unlock()
				i++
				if i%3 == 0 {
					if err := c.Ack(ctx, ev.ID); err != nil && !errors.Is(err, ErrClosed) {
						fail("ack: %v", err)
					}
				}
			}
		}()
	}
	// Close mid-way.
	time.Sleep(time.Duration(200+100*round) * time.Millisecond)
	for appends.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("round %d: hang after Close:\n%s", round, buf[:runtime.Stack(buf, true)])
	}
	if err := <-closed; err != nil {
		t.Fatalf("round %d: Close: %v", round, err)
	}
	_ = expected
	// Reopen: everything acknowledged is there; positions are delivered events.
	db = openTest(t, dir)
	defer db.Close()
	for id := range acked {
		if _, err := db.Get(ctx, id); err != nil {
			t.Errorf("round %d: acknowledged %s: %v", round, id, err)
		}
	}
	cs, err := db.Consumers("h")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !delivered[c.Name][c.Position.Seq] {
			t.Errorf("round %d: consumer %s stored at #%d, never delivered", round, c.Name, c.Position.Seq)
		}
		if !c.Position.ID.IsZero() {
			ev, err := db.Get(ctx, c.Position.ID)
			if err != nil || ev.Seq != c.Position.Seq {
				t.Errorf("round %d: consumer %s position %s #%d: %v, #%d", round, c.Name, c.Position.ID, c.Position.Seq, err, ev.Seq)
			}
		}
	}
	t.Logf("round %d: %d acknowledged appends, %d consumers", round, len(acked), len(cs))
}

// TestAppendRacingCloseIsErrClosed: an Append that passed the DB's
// closed check when Close closed the ledger's log (the state forced here
// by closing the log first) fails with engine.ErrClosed, not the segment
// package's "log closed" as its only cause. Seen in
// TestCloseMidWorkload: "engine: append to h: segment: log closed".
func TestAppendRacingCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	l, err := db.ledger("h")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.log.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*AppendOptions{nil, {IdempotencyKey: "k"}, {ExpectedHead: l.meta.Genesis}} {
		_, err = db.Append(ctx, "h", []EventInput{order(1)}, o)
		if !errors.Is(err, ErrClosed) {
			t.Errorf("append (%+v) to a closed log: %v, want ErrClosed", o, err)
		}
	}
	db.Close()
}

// TestAppendMeetingClosedIndexIsErrClosed: an idempotent or conditional
// append that reads the index after Close closed it (a retry that waited
// for the first append's outcome while Close ran) fails with
// engine.ErrClosed, not the index package's "index: closed" alone. The
// state is forced here by closing the index first.
func TestAppendMeetingClosedIndexIsErrClosed(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "h", []EventInput{order(1)}, &AppendOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := db.idx.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*AppendOptions{{IdempotencyKey: "k"}, {ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "order-1"}}}} {
		_, err := db.Append(ctx, "h", []EventInput{order(1)}, o)
		if !errors.Is(err, ErrClosed) {
			t.Errorf("append (%+v) meeting a closed index: %v, want ErrClosed", o, err)
		}
	}
	db.Close()
}

// TestLedgersAfterClose: after Close no ledger is open: Ledgers returns
// none (it has no error to return ErrClosed with), as Ledger fails with
// ErrClosed.
func TestLedgersAfterClose(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if n := len(db.Ledgers()); n != 1 {
		t.Fatalf("%d ledgers", n)
	}
	db.Close()
	if ls := db.Ledgers(); len(ls) != 0 {
		t.Errorf("Ledgers after Close: %d ledgers (%s)", len(ls), ls[0].Name)
	}
	if _, err := db.Ledger("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Ledger after Close: %v", err)
	}
}

// TestConsumersRacingCloseIsErrClosed: DB.Consumers that passed the DB's
// closed check when Close closed the consumers and meta.db (forced here
// by running those steps of Close) fails with ErrClosed, not bbolt's
// "database not open".
func TestConsumersRacingCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	db.closeConsumers()
	if err := db.meta.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Consumers("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Consumers: %v, want ErrClosed", err)
	}
	db.Close()
}

// blockNameFS blocks the creation of a NAME.tmp file until release is
// closed, once armed.
type blockNameFS struct {
	vfs.FS
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

// Unwrap makes the OS file system its root (vfs.Root), so that the
// signing key's mode can be set (package tree).
func (f *blockNameFS) Unwrap() vfs.FS { return f.FS }

func (f *blockNameFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, nameFile+".tmp") && f.armed.CompareAndSwap(true, false) {
		close(f.blocked)
		<-f.release
	}
	return f.FS.Create(name, c)
}

// TestCreateLedgerRacesClose: a CreateLedger under way when Close is
// called is not cut off by it: Close waits for it (nothing of the DB
// writes in the directory once Close has returned, as with Import), and
// a ledger it reports created is there, whole, after a reopen.
func TestCreateLedgerRacesClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	metaPath := filepath.Join(dir, "meta.db")
	fs := &blockNameFS{FS: vfs.Default, blocked: make(chan struct{}), release: make(chan struct{})}
	opts := &Options{fs: fs, metaPath: metaPath}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	fs.armed.Store(true)
	type result struct {
		info LedgerInfo
		err  error
	}
	created := make(chan result, 1)
	go func() {
		info, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "late"})
		created <- result{info, err}
	}()
	<-fs.blocked
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		close(fs.release)
		r := <-created
		t.Fatalf("Close returned (%v) while CreateLedger was still writing in the directory (it then returned %v, %v)", err, r.info.ID, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(fs.release)
	r := <-created
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r.err != nil {
		t.Fatalf("CreateLedger: %v", r.err)
	}
	db, err = Open(dir, &Options{fs: vfs.Default, metaPath: metaPath})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.Ledger("late")
	if err != nil || info.ID != r.info.ID || info.Count != 1 {
		t.Fatalf("after reopen: %+v, %v; CreateLedger said %v", info, err, r.info.ID)
	}
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("unavailable: %v", u)
	}
}

// TestAppendCreateImportRaceClose: 14 goroutines append (Sync, None and
// Interval) to four ledgers while one creates ledgers and one imports
// them, with the witness writer and the Interval syncer running fast, and
// Close comes in the middle: no hang; after a reopen no ledger is
// unavailable, every acknowledged event and ledger is there, and every
// ledger verifies. Run it with -race.
func TestAppendCreateImportRaceClose(t *testing.T) {
	t.Parallel()
	for round := 0; round < 2; round++ {
		dir := t.TempDir()
		ctx := context.Background()
		// What the importer imports: a ledger of another directory (the
		// first import of it succeeds, the others find its ID taken).
		src, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.CreateLedger(ctx, LedgerSpec{Name: "src"}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			if _, err := src.Append(ctx, "src", []EventInput{{Entity: "e", Key: "k", Event: "x", Meta: []byte(`{}`), Data: []byte(`1`)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		var exp bytes.Buffer
		if _, err := src.Export(ctx, "src", &exp, ExportOptions{}); err != nil {
			t.Fatal(err)
		}
		src.Close()
		db, err := Open(dir, &Options{WitnessInterval: 5 * time.Millisecond, SyncInterval: 3 * time.Millisecond, SegmentSize: 8192})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: fmt.Sprint("l", i)}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		acked := map[eventid.ID]bool{}
		created := map[string]bool{}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					switch {
					case g == 14:
						name := fmt.Sprintf("c%d-%d", g, n)
						if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err == nil {
							mu.Lock()
							created[name] = true
							mu.Unlock()
						}
						continue
					case g == 15:
						name := fmt.Sprintf("imp%d", n)
						if _, err := db.Import(ctx, bytes.NewReader(exp.Bytes()), ImportOptions{Name: name}); err == nil {
							mu.Lock()
							created[name] = true
							mu.Unlock()
						}
						continue
					}
					d := []Durability{Sync, None, Interval}[g%3]
					ids, err := idsOf(db.Append(ctx, fmt.Sprint("l", g%4), []EventInput{{Entity: "e", Key: fmt.Sprint(g), Event: "x", Meta: []byte(`{}`), Data: []byte(`{"n":1}`)}}, &AppendOptions{Durability: d}))
					if err == nil {
						mu.Lock()
						for _, id := range ids {
							acked[id] = true
						}
						mu.Unlock()
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(50+round*40) * time.Millisecond)
		done := make(chan error)
		go func() { done <- db.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("close: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Close hangs")
		}
		close(stop)
		wg.Wait()
		db, err = Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if u := db.Unavailable(); len(u) > 0 {
			t.Fatalf("unavailable: %v", u)
		}
		for id := range acked {
			if _, err := db.Get(ctx, id); err != nil {
				t.Errorf("acked %v: %v", id, err)
			}
		}
		for name := range created {
			if _, err := db.Ledger(name); err != nil {
				t.Errorf("created %s: %v", name, err)
			}
		}
		for _, li := range db.Ledgers() {
			if _, err := db.Verify(ctx, li.ID.String(), nil); err != nil {
				t.Errorf("verify %s: %v", li.Name, err)
			}
		}
		t.Logf("round %d: %d acked, %d created, %d ledgers", round, len(acked), len(created), len(db.Ledgers()))
		db.Close()
	}
}
