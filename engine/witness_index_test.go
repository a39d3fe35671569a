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
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestEverySegmentLostWitnessFromIndex: meta.db removed and every segment
// of a ledger removed (its directory and NAME file left): the index's
// witness says events were durable, so the ledger is corruption, not an
// unfinished CreateLedger whose directory Open removes.
func TestEverySegmentLostWitnessFromIndex(t *testing.T) {
	lt := newLostTailLedger(t)
	dir := t.TempDir()
	copyTree(t, lt.dir, dir)
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= lt.segs; n++ {
		if err := os.Remove(lt.seg(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	before := hashTree(t, filepath.Join(dir, ledgersDir))
	db, err := Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var bad error
	for _, err := range db.Unavailable() {
		if strings.Contains(err.Error(), lt.id.String()) {
			bad = err
		}
	}
	db.Close()
	if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
		t.Fatalf("ledger l: %v, want corruption saying acknowledged events were lost", bad)
	}
	if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
		t.Fatalf("files under ledgers/ changed: %s", d)
	}
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

// TestLostTailRebuildIndexKeepsWitness: with meta.db gone, the index's
// progress marker is the only witness of a ledger's durable head.
// Rebuilding the index (Options.RebuildIndex, annal reindex) must not
// throw that witness away before recovery has used it: the six lost
// tails are still refused as corruption, and no byte under ledgers/
// changes (the zeroed tail was cut, destroying the evidence).
func TestLostTailRebuildIndexKeepsWitness(t *testing.T) {
	lt := newLostTailLedger(t)
	for _, c := range lostTailCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, lt.dir, dir)
			if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
				t.Fatal(err)
			}
			c.damage(t, lt, dir)
			before := hashTree(t, filepath.Join(dir, ledgersDir))
			// The rebuild, then an ordinary Open (annal reindex, then any
			// command): the witness must survive the rebuild's Close.
			for _, rebuild := range []bool{true, false} {
				db, err := Open(dir, &Options{SegmentSize: 4096, RebuildIndex: rebuild})
				if err != nil {
					t.Fatal(err)
				}
				var bad error
				for _, err := range db.Unavailable() {
					if strings.Contains(err.Error(), lt.id.String()) {
						bad = err
					}
				}
				if _, err := db.Ledger("other"); err != nil {
					t.Errorf("ledger other: %v", err)
				}
				db.Close()
				if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
					t.Fatalf("RebuildIndex %v: ledger l: %v, want corruption", rebuild, bad)
				}
				if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
					t.Fatalf("RebuildIndex %v: files under ledgers/ changed: %s", rebuild, d)
				}
			}
			// The segments restored (from a backup): the ledger opens whole,
			// and its index is complete.
			ld := filepath.Join(ledgersDir, lt.id.String())
			if err := os.RemoveAll(filepath.Join(dir, ld)); err != nil {
				t.Fatal(err)
			}
			copyTree(t, filepath.Join(lt.dir, ld), filepath.Join(dir, ld))
			db, err := Open(dir, &Options{SegmentSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			info, err := db.Ledger("l")
			if err != nil || info.Count != 300 {
				t.Fatalf("restored ledger l: %+v, %v", info, err)
			}
			if rep, err := db.Verify(context.Background(), "l", nil); err != nil {
				t.Fatalf("restored ledger l: verify: %v (%+v)", err, rep)
			}
			n := 0
			for _, err := range db.Scan(context.Background(), "l", ScanOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 300 {
				t.Fatalf("restored ledger l: scan gives %d events, want 300", n)
			}
		})
	}
}

// TestIndexWitnessExactAfterCleanClose: after a clean Close the index's
// witness is the exact head too, whatever the appends' durability: with
// meta.db gone, a lost tail of Interval and None appends (one batch each,
// indexed before their sync) is refused, not cut.
func TestIndexWitnessExactAfterCleanClose(t *testing.T) {
	for _, d := range []Durability{Interval, None} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			db, err := Open(dir, &Options{SyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
			if err != nil {
				t.Fatal(err)
			}
			evs := make([]EventInput, 50)
			for i := range evs {
				evs[i] = order(i)
			}
			if _, err := db.Append(ctx, "l", evs, &AppendOptions{Durability: d}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
				t.Fatal(err)
			}
			seg := filepath.Join(dir, ledgersDir, info.ID.String(), fmt.Sprintf("%020d.seg", 1))
			fi, err := os.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(make([]byte, 40), fi.Size()-40)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			before := hashTree(t, filepath.Join(dir, ledgersDir))
			db, err = Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Refused under its name (its NAME file's), though meta.db
			// is gone.
			lerr := db.Unavailable()["l"]
			db.Close()
			if !errors.Is(lerr, segment.ErrCorruption) || !strings.Contains(lerr.Error(), "acknowledged events lost") {
				t.Fatalf("ledger l: %v, want corruption", lerr)
			}
			if d := sameTree(before, hashTree(t, filepath.Join(dir, ledgersDir))); d != "" {
				t.Fatalf("files under ledgers/ changed: %s", d)
			}
		})
	}
}

// TestAppendCreateImportRaceClose: 14 goroutines append (Sync, None and
// Interval) to four ledgers while one creates ledgers and one imports
// them, with the witness writer and the Interval syncer running fast, and
// Close comes in the middle: no hang; after a reopen no ledger is
// unavailable, every acknowledged event and ledger is there, and every
// ledger verifies. Run it with -race.
func TestAppendCreateImportRaceClose(t *testing.T) {
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
