package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The lifecycle tests: cancel and Close at every point of every iterator.
// Each row of lifeRows is an iterator, or a loop of
// reads, run on a ledger "l" of lifeEvents events; each case stops it at
// some point and checks how it ends: at most checkEvery (64) events after
// the point, exactly one error (ctx's, or ErrClosed: the engine's, never
// os.ErrClosed), then nothing, and a Close that returns.

// lifeEvents is the size of the test ledger: every row goes through more
// than the last stop point (100) and checkEvery after it.
const lifeEvents = 2000

// lifeWatchdog is how long a step may wait (for a Close that should return
// at once) before the test says it deadlocked: long, for a loaded machine.
const lifeWatchdog = 2 * time.Minute

// lifeRow is one iterator of the table. run runs it on db with ctx,
// calling step with the number of events so far after each event it
// yields (writes, takes); step is the loop body, and returns false for a
// break. run returns the events it went through, the errors it ended with
// (in order), and whether an event came after an error.
//
// A row for Subscribe (or any other iter.Seq2[Event, error]) is one more
// seqRow: every case stops it by cancel or Close, after fewer events than
// the ledger holds, so one that never ends by itself fits as it is.
type lifeRow struct {
	name    string
	bounded bool // the checkEvery bound applies to run's event count
	run     func(ctx context.Context, db *DB, step func(n int) bool) (events int, errs []error, late bool)
}

// seqRow makes a row of an iterator.
func seqRow(name string, seq func(ctx context.Context, db *DB) iter.Seq2[Event, error]) lifeRow {
	return lifeRow{name: name, bounded: true, run: func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
		n, late := 0, false
		var errs []error
		for _, err := range seq(ctx, db) {
			if err != nil {
				errs = append(errs, err)
				continue // the iterator must stop by itself
			}
			if len(errs) > 0 {
				late = true
			}
			if n++; !step(n) {
				break
			}
		}
		return n, errs, late
	}}
}

// lifeRows returns the table; src is the NDJSON of another ledger, for
// Import.
// lifeConsumers numbers the consumers of the Consumer row.
var lifeConsumers atomic.Int64

func lifeRows(src [][]byte) []lifeRow {
	l := "l"
	return []lifeRow{
		seqRow("Scan", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Scan(ctx, l, ScanOptions{})
		}),
		seqRow("ScanReverse", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Scan(ctx, l, ScanOptions{Reverse: true})
		}),
		seqRow("ScanTimeRange", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Scan(ctx, l, ScanOptions{From: time.Unix(1, 0), To: time.Now().Add(time.Hour), AfterSeq: 1})
		}),
		seqRow("ReplayStreams", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Replay(ctx, l, ReplayOptions{Entity: "order", Keys: []string{"order-1", "order-4"}})
		}),
		seqRow("ReplayEntity", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Replay(ctx, l, ReplayOptions{Entity: "order"})
		}),
		seqRow("ReplayEventNames", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Replay(ctx, l, ReplayOptions{Events: []string{"order-paid", "order-shipped"}})
		}),
		seqRow("ReplayEntityEventNames", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Replay(ctx, l, ReplayOptions{Entity: "order", Events: []string{"order-placed"}})
		}),
		seqRow("ReplayReverse", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Replay(ctx, l, ReplayOptions{Entity: "order", Keys: []string{"order-2", "order-5"}, Reverse: true})
		}),
		seqRow("Subscribe", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Subscribe(ctx, l, SubscribeOptions{})
		}),
		seqRow("SubscribeSelector", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return db.Subscribe(ctx, l, SubscribeOptions{Entity: "order"})
		}),
		seqRow("Consumer", func(ctx context.Context, db *DB) iter.Seq2[Event, error] {
			return func(yield func(Event, error) bool) {
				// A name per use: the concurrent test runs rows at once.
				c, err := db.Consumer(l, fmt.Sprintf("life-%d", lifeConsumers.Add(1)), ConsumerOptions{})
				if err != nil {
					yield(Event{}, err)
					return
				}
				defer c.Close()
				for ev, err := range c.Events(ctx) {
					if !yield(ev, err) {
						return
					}
				}
			}
		}),
		{name: "GetSeqLoop", bounded: true, run: func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
			n := 0
			for seq := uint64(1); ; seq++ {
				ev, err := db.GetSeq(ctx, l, seq)
				if errors.Is(err, ErrNotFound) && seq > lifeEvents {
					return n, nil, false
				}
				if err != nil {
					return n, []error{err}, false
				}
				if ev.Seq != seq {
					return n, []error{fmt.Errorf("GetSeq(%d) returned #%d", seq, ev.Seq)}, false
				}
				if n++; !step(n) {
					return n, nil, false
				}
			}
		}},
		{name: "Export", bounded: true, run: func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
			w := &stepWriter{step: step}
			n, err := db.Export(ctx, l, w, ExportOptions{})
			if err != nil {
				return int(n), []error{err}, false
			}
			return int(n), nil, false
		}},
		{name: "Import", bounded: true, run: func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
			r := &lineReader{lines: src, step: step}
			// Progress is called after every batch written (see
			// lifeSmallImportBatches).
			_, err := db.Import(ctx, r, ImportOptions{Name: "copy", Progress: func(int64, int64) {}})
			if err != nil {
				return r.n, []error{err}, false
			}
			return r.n, nil, false
		}},
		{name: "Verify", run: func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
			calls := 0
			_, err := db.Verify(ctx, l, func(records, bytes int64) {
				calls++
				step(calls)
			})
			if err != nil {
				return calls, []error{err}, false
			}
			return calls, nil, false
		}},
	}
}

// stepWriter counts the lines written to it and calls step with the count
// after each Write.
type stepWriter struct {
	n    int
	step func(int) bool
}

func (w *stepWriter) Write(p []byte) (int, error) {
	w.n += bytes.Count(p, []byte("\n"))
	w.step(w.n)
	return len(p), nil
}

// lineReader serves one line a Read, calling step with the number of
// lines served.
type lineReader struct {
	lines [][]byte
	n     int
	step  func(int) bool
}

func (r *lineReader) Read(p []byte) (int, error) {
	if r.n == len(r.lines) {
		return 0, io.EOF
	}
	if len(p) < len(r.lines[r.n]) {
		return 0, fmt.Errorf("lineReader: a read of %d bytes for a line of %d", len(p), len(r.lines[r.n]))
	}
	n := copy(p, r.lines[r.n])
	r.n++
	r.step(r.n)
	return n, nil
}

// withSmallImportBatches returns rows with the Import row twice: as it is
// (the input is smaller than one batch), and with batches of a few dozen
// lines (ImportSmallBatches).
func withSmallImportBatches(rows []lifeRow) []lifeRow {
	for _, row := range rows {
		if row.name != "Import" {
			continue
		}
		small := row
		small.name = "ImportSmallBatches"
		small.run = func(ctx context.Context, db *DB, step func(int) bool) (int, []error, bool) {
			was := importBatchBytes
			importBatchBytes = 2048
			defer func() { importBatchBytes = was }()
			return row.run(ctx, db, step)
		}
		return append(rows, small)
	}
	return rows
}

// lifeSmallImportBatches makes imports write a batch every few dozen
// lines, so that Close and cancel meet an import between its writes, for
// the duration of the test.
func lifeSmallImportBatches(t *testing.T) {
	was := importBatchBytes
	importBatchBytes = 2048
	t.Cleanup(func() { importBatchBytes = was })
}

// lifeDir returns a new data directory with ledger "l" of lifeEvents
// events, closed.
func lifeDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "d")
	db, err := Open(dir, &Options{Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	fillLedger(t, db, "l", lifeEvents)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fillLedger(t testing.TB, db *DB, name string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
		t.Fatal(err)
	}
	batch := make([]EventInput, 0, 500)
	for i := range n - 1 { // and the genesis
		batch = append(batch, order(i))
		if len(batch) == cap(batch) || i == n-2 {
			if _, err := db.Append(ctx, name, batch, nil); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// lifeImportSource returns the NDJSON lines of a ledger of lifeEvents
// events that no test directory holds.
func lifeImportSource(t testing.TB) [][]byte {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "src"), &Options{Durability: None})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fillLedger(t, db, "src", lifeEvents)
	var buf bytes.Buffer
	if _, err := db.Export(context.Background(), "src", &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
}

// checkLifeErr checks that errs is exactly one error matching want, and
// that no os.ErrClosed ("file already closed") shows through.
func checkLifeErr(t *testing.T, errs []error, want error) {
	t.Helper()
	if len(errs) != 1 {
		t.Fatalf("ended with %d errors %v, want exactly one (%v)", len(errs), errs, want)
	}
	err := errs[0]
	if !errors.Is(err, want) {
		t.Fatalf("ended with %v, want %v", err, want)
	}
	if errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "file already closed") {
		t.Fatalf("ended with %v: a closed file shows through", err)
	}
}

// checkNoImportLeft checks that the directory holds no trace of an
// interrupted import: no ledger "copy" and no temporary directory.
func checkNoImportLeft(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(dir, ledgersDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if strings.HasPrefix(e.Name(), importDirPrefix) {
			t.Errorf("an import's temporary directory is left: %s", e.Name())
		}
	}
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if info, err := db.Ledger("copy"); err == nil {
		t.Errorf("the interrupted import left ledger %+v", info)
	}
	if len(db.Ledgers()) != 1 {
		t.Errorf("ledgers after the interrupted import: %v, want only l", db.Ledgers())
	}
}

// watch fails the test if f does not return within lifeWatchdog.
func watch(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(lifeWatchdog):
		buf := make([]byte, 1<<22)
		t.Fatalf("%s did not return in %v: deadlock; every goroutine:\n%s", what, lifeWatchdog, buf[:runtime.Stack(buf, true)])
	}
}

// TestLifecycleCancel cancels every iterator's context at event k, from
// its loop body (k 0: before it starts): it yields at most checkEvery
// more events, then ctx's error once, and stops.
func TestLifecycleCancel(t *testing.T) {
	src := lifeImportSource(t)
	template := lifeDir(t)
	for _, row := range withSmallImportBatches(lifeRows(src)) {
		for _, k := range []int{0, 1, 10, 63, 64, 65, 100} {
			if !row.bounded && k > 1 {
				continue
			}
			t.Run(fmt.Sprintf("%s/k=%d", row.name, k), func(t *testing.T) {
				dir := copyDir(t, template)
				db := openTest(t, dir)
				defer db.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				at := -1
				if k == 0 {
					cancel()
					at = 0
				}
				var events int
				var errs []error
				var late bool
				watch(t, row.name, func() {
					events, errs, late = row.run(ctx, db, func(n int) bool {
						if at < 0 && n >= k {
							at = n
							cancel()
						}
						return true
					})
				})
				if late {
					t.Fatal("an event came after the error")
				}
				if at < 0 {
					t.Fatalf("ended after %d events without reaching event %d", events, k)
				}
				if row.bounded && events-at > checkEvery {
					t.Fatalf("%d events after the cancel at event %d, want at most %d", events-at, at, checkEvery)
				}
				checkLifeErr(t, errs, context.Canceled)
				if strings.HasPrefix(row.name, "Import") {
					db.Close()
					checkNoImportLeft(t, dir)
				}
			})
		}
	}
}

// TestLifecycleCloseInLoop calls Close from every iterator's loop body (on
// the iterator's goroutine), at event k: Close returns (no deadlock), and
// the iterator yields at most checkEvery more events, then ErrClosed once.
func TestLifecycleCloseInLoop(t *testing.T) {
	testLifecycleClose(t, false)
}

// TestLifecycleCloseWhileSuspended closes the DB from another goroutine
// while an iterator is suspended in its loop body, and waits there for
// Close to return: Close does not wait for the loop body, and the
// iterator's next step ends it with ErrClosed.
func TestLifecycleCloseWhileSuspended(t *testing.T) {
	testLifecycleClose(t, true)
}

func testLifecycleClose(t *testing.T, otherGoroutine bool) {
	src := lifeImportSource(t)
	template := lifeDir(t)
	for _, row := range withSmallImportBatches(lifeRows(src)) {
		for _, k := range []int{1, 64, 70} {
			if !row.bounded && k > 1 {
				continue
			}
			t.Run(fmt.Sprintf("%s/k=%d", row.name, k), func(t *testing.T) {
				dir := copyDir(t, template)
				db := openTest(t, dir)
				at := -1
				var closeErr error
				var events int
				var errs []error
				var late bool
				watch(t, row.name, func() {
					events, errs, late = row.run(context.Background(), db, func(n int) bool {
						if at >= 0 || n < k {
							return true
						}
						at = n
						if !otherGoroutine {
							closeErr = db.Close()
							return true
						}
						done := make(chan error)
						go func() { done <- db.Close() }()
						select {
						case closeErr = <-done:
						case <-time.After(lifeWatchdog):
							closeErr = errors.New("Close did not return while the iterator was suspended in its loop body")
						}
						return true
					})
				})
				if closeErr != nil {
					t.Fatalf("Close: %v", closeErr)
				}
				if late {
					t.Fatal("an event came after the error")
				}
				if at < 0 {
					t.Fatalf("ended after %d events without reaching event %d", events, k)
				}
				if row.bounded && events-at > checkEvery {
					t.Fatalf("%d events after Close at event %d, want at most %d", events-at, at, checkEvery)
				}
				checkLifeErr(t, errs, ErrClosed)
				if strings.HasPrefix(row.name, "Import") {
					checkNoImportLeft(t, dir)
				}
			})
		}
	}
}

// TestLifecycleCloseConcurrent runs 16 goroutines, each running the rows
// one after the other, while the DB closes: Close returns, and every
// iterator ends (or had ended) without error or with ErrClosed, once,
// never with a closed file or Pebble's error, never with a panic. An
// import that Close interrupts leaves nothing.
func TestLifecycleCloseConcurrent(t *testing.T) {
	lifeSmallImportBatches(t)
	src := lifeImportSource(t)
	template := lifeDir(t)
	rows := lifeRows(src)
	for round := range 3 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			dir := copyDir(t, template)
			db := openTest(t, dir)
			var started sync.WaitGroup
			var wg sync.WaitGroup
			var yielded atomic.Int64
			errc := make(chan error, 1000)
			const goroutines = 16
			started.Add(goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first := true
					for i := g; ; i++ {
						row := rows[i%len(rows)]
						_, errs, late := row.run(context.Background(), db, func(int) bool {
							if first {
								first = false
								started.Done()
							}
							yielded.Add(1)
							return true
						})
						if late {
							errc <- fmt.Errorf("%s: an event came after the error", row.name)
						}
						if len(errs) > 1 {
							errc <- fmt.Errorf("%s: %d errors: %v", row.name, len(errs), errs)
						}
						if len(errs) == 0 {
							continue
						}
						err := errs[0]
						if row.name == "Import" && errors.Is(err, ErrLedgerExists) {
							continue // another goroutine imported it
						}
						if !errors.Is(err, ErrClosed) || strings.Contains(err.Error(), "file already closed") {
							errc <- fmt.Errorf("%s: %v, want ErrClosed", row.name, err)
						}
						if first {
							first = false
							started.Done()
						}
						return
					}
				}()
			}
			started.Wait()
			// Close while the goroutines are in the middle of their reads.
			time.Sleep(time.Duration(round) * 5 * time.Millisecond)
			watch(t, "Close", func() {
				if err := db.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			watch(t, "the iterators", wg.Wait)
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			t.Logf("%d events yielded before and after Close", yielded.Load())
			// An import is whole or absent.
			names, err := os.ReadDir(filepath.Join(dir, ledgersDir))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range names {
				if strings.HasPrefix(e.Name(), importDirPrefix) {
					t.Errorf("an import's temporary directory is left: %s", e.Name())
				}
			}
			db2 := openTest(t, dir)
			defer db2.Close()
			if _, err := db2.Ledger("copy"); err == nil {
				if _, err := db2.Verify(context.Background(), "copy", nil); err != nil {
					t.Errorf("the imported ledger: %v", err)
				}
			}
		})
	}
}

// copyDir copies a closed data directory to a new one.
func copyDir(t testing.TB, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "d")
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	// CopyFS makes files readable by others: the signing key must not be
	// (Open refuses it).
	if err := os.Chmod(filepath.Join(to, signingKeyFile), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return to
}
