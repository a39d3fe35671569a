package engine

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/faultfs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var engineFaultEvery = flag.Int("engine-fault-every", 1, "TestEngineFaultAtEveryOperation: inject a fault at every K-th operation of the workload (under -race the default is raised so that the test stays near a minute)")

// The fault test runs a scripted engine workload on a memory file system
// that keeps track of what was synced (vfs.NewCrashableMem), wrapped by
// faultfs, with the metadata file (bbolt) on a real temporary file, as the
// crash tests do. It counts the workload's file-system operations, then
// reruns it from scratch once for each operation and each kind of fault,
// failing that operation alone. See TestEngineFaultAtEveryOperation.

const (
	faultDataDir     = "/data"
	faultSegmentSize = 2 << 10
)

// faultStep is one call of the workload and what it returned.
type faultStep struct {
	name string
	err  error
	hits []faultfs.Op // faults injected while it ran
	// reported: for an Open that returned nil, a ledger it refused or
	// why it rebuilt the index.
	reported error
}

// faultSnapshot is what a crash at some moment leaves, and what had been
// acknowledged by then.
type faultSnapshot struct {
	fs      *vfs.MemFS
	meta    []byte
	acked   []acked
	ledgers []string
	after   string
}

// faultWork is one run of the workload.
type faultWork struct {
	ffs      *faultfs.FS
	hfs      *handleFS // what the DB is given: ffs, telling read handles apart
	mem      *vfs.MemFS
	metaPath string
	vec      []byte
	vecIDs   []eventid.ID
	vecName  string

	db       *DB
	n        int                // events attempted so far: each one's data is unique
	attempts map[string]attempt // every event the workload tried to append, by data
	batches  int
	// unsynced: per ledger, appends that returned nil without being
	// durable yet (None, Interval): a later Sync append to the ledger, or
	// a Close that returns nil, makes them durable.
	unsynced map[string][]acked
	acked    []acked  // durable by contract: Sync appends, genesis events, imports
	ledgers  []string // ledgers acknowledged (created or imported)
	imported bool
	idem     []eventid.ID // the IDs of the acknowledged idempotent append
	idHex    map[string]string
	// fsyncFailed: ledgers whose segment fsync failed in this session.
	fsyncFailed map[string]bool
	steps       []faultStep
	attributed  int // faults injected so far that a step records
	problems    []string
	crash       *faultSnapshot // taken right after the step that hit the fault
	// closed is taken right after the first Close, if a fault hit before:
	// what a Close that returned nil acknowledged must be synced (the
	// reopen that follows syncs the last segments again).
	closed *faultSnapshot
}

func newFaultWork(metaPath string, vec []byte, vecIDs []eventid.ID, vecName string) *faultWork {
	mem := vfs.NewCrashableMem()
	ffs := faultfs.Wrap(mem)
	return &faultWork{ffs: ffs, hfs: &handleFS{FS: ffs}, mem: mem, metaPath: metaPath, vec: vec, vecIDs: vecIDs, vecName: vecName,
		attempts: map[string]attempt{}, unsynced: map[string][]acked{}, idHex: map[string]string{}, fsyncFailed: map[string]bool{}}
}

// handleFS wraps the faultfs.FS to tell, when a Close fails, whether the
// file was open for reading only: faultfs's operations do not say.
type handleFS struct {
	vfs.FS
	readClose atomic.Int32 // closes of read-only handles that failed by injection
}

type handleFile struct {
	vfs.File
	fs       *handleFS
	readOnly bool
}

func (f *handleFile) Close() error {
	err := f.File.Close()
	if f.readOnly && errors.Is(err, faultfs.ErrInjected) {
		f.fs.readClose.Add(1)
	}
	return err
}

func (fs *handleFS) wrap(f vfs.File, err error, readOnly bool) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &handleFile{File: f, fs: fs, readOnly: readOnly}, nil
}

func (fs *handleFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return fs.wrap(f, err, true)
}

func (fs *handleFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(f, err, true)
}

func (w *faultWork) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

func (w *faultWork) options() *Options {
	return &Options{fs: w.hfs, metaPath: w.metaPath, SegmentSize: faultSegmentSize, SyncInterval: time.Millisecond}
}

// step runs one call of the workload and records its outcome and the
// faults injected meanwhile. After the first step that hit a fault, it
// takes a crash snapshot.
func (w *faultWork) step(name string, f func() error) error {
	w.settle(name)
	err := f()
	st := faultStep{name: name, err: err, hits: w.unattributed()}
	if err == nil && (name == "open" || name == "reopen") {
		var errs []error
		for _, e := range w.db.Unavailable() {
			errs = append(errs, e)
		}
		st.reported = errors.Join(append(errs, w.db.IndexRebuilt())...)
	}
	w.record(st)
	return err
}

// unattributed returns the faults injected since the last recorded step,
// and counts them as attributed.
func (w *faultWork) unattributed() []faultfs.Op {
	hits := w.ffs.Injected()[w.attributed:]
	w.attributed += len(hits)
	return hits
}

// settle records the faults injected since the last step returned as a
// step of their own, before the call named next runs: the interval
// syncer's fsync runs in the background, between the workload's calls too.
func (w *faultWork) settle(next string) {
	if hits := w.unattributed(); len(hits) > 0 {
		w.record(faultStep{name: "between steps, before " + next, hits: hits})
	}
}

// record appends st to the steps and notes what its faults imply: a
// ledger whose segment fsync failed, a crash snapshot after the first.
func (w *faultWork) record(st faultStep) {
	w.steps = append(w.steps, st)
	for _, op := range st.hits {
		// A failed fsync of a segment that holds records (one whose
		// creation failed is removed again): the ledger must refuse
		// every later append of this session.
		if op.Kind != faultfs.Sync || !strings.HasSuffix(op.Path, ".seg") {
			continue
		}
		if _, err := w.mem.Stat(op.Path); err != nil {
			continue
		}
		if name, ok := w.idHex[filepath.Base(filepath.Dir(op.Path))]; ok {
			w.fsyncFailed[name] = true
		}
	}
	if len(st.hits) > 0 && w.crash == nil {
		w.crash = w.snapshot(st.name)
	}
}

// snapshot simulates a crash now: only what was synced survives, and the
// metadata file as its last commit left it (bbolt syncs each commit).
func (w *faultWork) snapshot(after string) *faultSnapshot {
	meta, _ := os.ReadFile(w.metaPath)
	return &faultSnapshot{fs: w.mem.CrashClone(vfs.CrashCloneCfg{}), meta: meta,
		acked: slices.Clone(w.acked), ledgers: slices.Clone(w.ledgers), after: after}
}

// events makes n events for ledger, records them as attempts (one batch),
// and returns them.
func (w *faultWork) events(ledger string, n int, entity, key string) ([]EventInput, []attempt) {
	w.batches++
	evs := make([]EventInput, n)
	atts := make([]attempt, n)
	for i := range evs {
		w.n++
		// Some events are larger, so that the 2 KiB segments rotate.
		pad := strings.Repeat("x", (w.n%4)*90)
		a := attempt{ledger: ledger, entity: entity, key: key, event: []string{"placed", "paid", "shipped"}[w.n%3],
			data: fmt.Sprintf(`{"n":%d,"pad":"%s"}`, w.n, pad), batch: w.batches, batchLen: n, n: w.n}
		if a.key == "" {
			a.key = fmt.Sprintf("order-%d", w.n%5)
		}
		atts[i] = a
		w.attempts[a.data] = a
		evs[i] = EventInput{Entity: a.entity, Key: a.key, Event: a.event, Meta: []byte(`{"by":"fault-test"}`), Data: []byte(a.data)}
	}
	return evs, atts
}

// appendTo appends n new events and records what the call acknowledged.
func (w *faultWork) appendTo(ctx context.Context, name, ledger string, n int, o *AppendOptions, entity, key string) ([]eventid.ID, error) {
	if entity == "" {
		entity = "order"
	}
	evs, atts := w.events(ledger, n, entity, key)
	w.settle(name)
	mustFail := w.fsyncFailed[ledger]
	var ids []eventid.ID
	err := w.step(name, func() (err error) {
		ids, err = idsOf(w.db.Append(ctx, ledger, evs, o))
		return err
	})
	w.acknowledge(name, ledger, mustFail, o, atts, ids, err)
	return ids, err
}

// faultRefused reports whether err is how a ledger whose segment failed an fsync
// refuses an append: the Log's ErrFailed, or, if the failed fsync was the
// one Open makes of the last segment, the ledger is unavailable.
func faultRefused(err error) bool {
	return errors.Is(err, segment.ErrFailed) || errors.Is(err, ErrLedgerUnavailable) && errors.Is(err, faultfs.ErrInjected)
}

// acknowledge records what an append that returned err acknowledged.
func (w *faultWork) acknowledge(name, ledger string, mustFail bool, o *AppendOptions, atts []attempt, ids []eventid.ID, err error) {
	if mustFail && !faultRefused(err) {
		w.problem("%s: append to %s after a failed fsync of its segment returned %v, want an error matching segment.ErrFailed", name, ledger, err)
	}
	if err != nil {
		return
	}
	if len(ids) != len(atts) {
		w.problem("%s: %d IDs for %d events", name, len(ids), len(atts))
		return
	}
	d := Sync
	if o != nil && o.Durability != 0 {
		d = o.Durability
	}
	for i, id := range ids {
		a := acked{atts[i], id}
		if d == Sync {
			w.acked = append(w.acked, a)
		} else {
			w.unsynced[ledger] = append(w.unsynced[ledger], a)
		}
	}
	if d == Sync {
		// The fsync that made this append durable made every earlier
		// append to the ledger durable too.
		w.acked = append(w.acked, w.unsynced[ledger]...)
		w.unsynced[ledger] = nil
	}
}

// create creates a ledger, trying a second time if the first fails (a
// failed CreateLedger must leave nothing that stops a retry).
func (w *faultWork) create(ctx context.Context, name string) bool {
	for _, try := range []string{"", " (retry)"} {
		var info LedgerInfo
		if w.step("create "+name+try, func() (err error) {
			info, err = w.db.CreateLedger(ctx, LedgerSpec{Name: name, Description: "fault test"})
			return err
		}) == nil {
			w.ledgers = append(w.ledgers, name)
			w.idHex[info.ID.String()] = name
			w.acked = append(w.acked, acked{attempt{ledger: name, entity: "ledger", key: name, event: "ledger-created"}, info.Genesis})
			return true
		}
	}
	return false
}

// importVector imports the NDJSON vector, a second time if the first
// fails (a failed Import must leave nothing behind).
func (w *faultWork) importVector(ctx context.Context) {
	for _, try := range []string{"", " (retry)"} {
		var info LedgerInfo
		if w.step("import"+try, func() (err error) {
			info, err = w.db.Import(ctx, bytes.NewReader(w.vec), ImportOptions{})
			return err
		}) == nil {
			w.ledgers = append(w.ledgers, info.Name)
			w.idHex[info.ID.String()] = info.Name
			w.imported = true
			for _, id := range w.vecIDs {
				w.acked = append(w.acked, acked{attempt{ledger: info.Name}, id})
			}
			return
		}
	}
}

// awaitIntervalSync waits until the Interval append ids reached stable
// storage without any call asking for it: the background fsync, due within
// Options.SyncInterval (1 ms). Stable storage is what a crash would keep
// (a clone of the memory file system with only the synced data). A fault
// injected into that fsync ends the wait: the next append reports it.
func (w *faultWork) awaitIntervalSync(ledger string, ids []eventid.ID) {
	w.step("await the interval sync of "+ledger, func() error {
		l, err := w.db.ledger(ledger)
		if err != nil {
			return err
		}
		head := l.log.Head()
		if head.ID != ids[len(ids)-1] {
			return fmt.Errorf("the head of %s is %s, not the Interval append %s", ledger, head.ID, ids[len(ids)-1])
		}
		path := filepath.Join(l.log.Dir(), fmt.Sprintf("%020d.seg", head.Loc.Segment))
		before := len(w.ffs.Injected())
		for deadline := time.Now().Add(5 * time.Second); ; {
			if fi, err := w.mem.CrashClone(vfs.CrashCloneCfg{}).Stat(path); err == nil && fi.Size() >= head.Loc.End() {
				return nil
			}
			if len(w.ffs.Injected()) > before {
				return nil // the fault hit: the next append to the ledger must fail
			}
			if time.Now().After(deadline) {
				w.problem("an Interval append to %s was not synced in the background within 5 s (SyncInterval 1 ms)", ledger)
				return nil
			}
			time.Sleep(500 * time.Microsecond)
		}
	})
}

// closeDB closes the DB; if Close returns nil, everything appended before
// is durable (Close syncs every ledger).
func (w *faultWork) closeDB(name string) error {
	err := w.step(name, w.db.Close)
	if err == nil {
		for _, l := range slices.Sorted(maps.Keys(w.unsynced)) {
			w.acked = append(w.acked, w.unsynced[l]...)
		}
	}
	if w.closed == nil && w.crash != nil {
		w.closed = w.snapshot(name)
	}
	clear(w.unsynced)
	clear(w.fsyncFailed)
	w.db = nil
	return err
}

// run is the workload: open a new directory, create a ledger, append to it
// in every mode (single and batched, rotating its small segments), with a
// condition and with an idempotency key (and retry it), import a ledger,
// create a second ledger, close, reopen, append, close.
func (w *faultWork) run() {
	ctx := context.Background()
	if w.step("open", func() (err error) { w.db, err = Open(faultDataDir, w.options()); return err }) != nil {
		return
	}
	w.create(ctx, "a")
	for i := range 3 {
		w.appendTo(ctx, fmt.Sprintf("sync append %d", i), "a", 1, nil, "", "")
	}
	w.appendTo(ctx, "sync batch", "a", 4, nil, "", "")
	if ids, err := w.appendTo(ctx, "interval append", "a", 1, &AppendOptions{Durability: Interval}, "", ""); err == nil {
		w.awaitIntervalSync("a", ids)
	}
	w.appendTo(ctx, "none batch", "a", 3, &AppendOptions{Durability: None}, "", "")
	w.appendTo(ctx, "interval batch", "a", 2, &AppendOptions{Durability: Interval}, "", "")
	// Idle between calls, so that the interval syncer's fsync of that
	// batch runs outside every call in each run (see faultWork.settle).
	time.Sleep(5 * w.options().SyncInterval)
	// Conditional appends: the stream is empty, then has the first one.
	if ids, err := w.appendTo(ctx, "conditional append", "a", 1, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1"}}}, "account", "acc-1"); err == nil {
		w.appendTo(ctx, "second conditional append", "a", 1, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "account", Key: "acc-1", Head: ids[0]}}}, "account", "acc-1")
	}
	// An idempotent append, and its retry with other events: the retry
	// appends nothing and fails with ErrIdempotencyMismatch carrying the
	// first IDs; if the first failed, the retry appends its own events.
	first, ferr := w.appendTo(ctx, "idempotent append", "a", 2, &AppendOptions{IdempotencyKey: "idem-1"}, "", "")
	if ferr == nil {
		w.idem = first
	}
	retryEvs, retryAtts := w.events("a", 1, "retry", "r")
	if ferr == nil {
		// Not an attempt: it must never be stored.
		delete(w.attempts, retryAtts[0].data)
	}
	w.settle("idempotent retry")
	mustFail := w.fsyncFailed["a"]
	var retryIDs []eventid.ID
	var mismatch *IdempotencyMismatchError
	rerr := w.step("idempotent retry", func() (err error) {
		retryIDs, err = idsOf(w.db.Append(ctx, "a", retryEvs, &AppendOptions{IdempotencyKey: "idem-1"}))
		if errors.As(err, &mismatch) {
			return nil // the outcome wanted when the first was stored; checked below
		}
		return err
	})
	switch {
	case mismatch != nil:
		if ferr != nil || !slices.Equal(mismatch.First.IDs, first) {
			w.problem("the idempotent retry's mismatch names %v, the first append %v (%v)", mismatch.First.IDs, first, ferr)
		}
	case rerr != nil:
		if mustFail && !faultRefused(rerr) {
			w.problem("idempotent retry after a failed fsync: %v, want segment.ErrFailed", rerr)
		}
	case ferr == nil:
		w.problem("the idempotent retry with other events returned %v, want ErrIdempotencyMismatch naming the first append %v", retryIDs, first)
	default:
		w.acknowledge("idempotent retry", "a", mustFail, nil, retryAtts, retryIDs, rerr)
		w.idem = retryIDs
	}
	// Rotation: enough to fill a few more segments.
	for i := range 6 {
		w.appendTo(ctx, fmt.Sprintf("rotation append %d", i), "a", 2, nil, "", "")
	}
	w.importVector(ctx)
	if w.create(ctx, "b") {
		w.appendTo(ctx, "append to b", "b", 2, nil, "", "")
	}
	w.closeDB("close")

	if w.step("reopen", func() (err error) { w.db, err = Open(faultDataDir, w.options()); return err }) != nil {
		return
	}
	if slices.Contains(w.ledgers, "a") {
		w.appendTo(ctx, "append after reopen", "a", 1, nil, "", "")
	}
	w.closeDB("close after reopen")
}

// copyMem copies the tree under dir of src into dst.
func copyMem(src, dst vfs.FS, dir string) error {
	names, err := src.List(dir)
	if err != nil {
		return err
	}
	if err := dst.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range names {
		p := src.PathJoin(dir, name)
		fi, err := src.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			err = copyMem(src, dst, p)
		} else {
			err = vfs.CopyAcrossFS(src, p, dst, p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func scanAll(ctx context.Context, db *DB, ledger string) ([]Event, error) {
	var out []Event
	for ev, err := range db.Scan(ctx, ledger, ScanOptions{}) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// check opens fs (a crash clone, or a copy of the file system as the
// workload left it) with the metadata file meta and no faults, and checks
// it against what was acknowledged: every ledger available, every
// acknowledged ledger and event there, nothing stored that was never
// appended, batches and the import whole, every ledger verified, appends
// (and the creation or import of what is absent) go on.
func (w *faultWork) check(fs vfs.FS, meta []byte, metaPath string, ackd []acked, ledgers []string) error {
	ctx := context.Background()
	if meta != nil {
		if err := os.WriteFile(metaPath, meta, 0o600); err != nil {
			return err
		}
	}
	db, err := Open(faultDataDir, &Options{fs: fs, metaPath: metaPath, SegmentSize: faultSegmentSize})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	open := true
	defer func() {
		if open {
			db.Close()
		}
	}()
	if u := db.Unavailable(); len(u) > 0 {
		return fmt.Errorf("ledgers unavailable: %v", u)
	}
	have := map[string]LedgerInfo{}
	for _, info := range db.Ledgers() {
		if info.Name != "a" && info.Name != "b" && info.Name != w.vecName {
			return fmt.Errorf("ledger %q (%s) was never created", info.Name, info.ID)
		}
		have[info.Name] = info
	}
	for _, name := range ledgers {
		if _, ok := have[name]; !ok {
			return fmt.Errorf("acknowledged ledger %s is missing", name)
		}
	}
	for name, info := range have {
		evs, err := scanAll(ctx, db, name)
		if err != nil {
			return fmt.Errorf("scan %s: %w", name, err)
		}
		if len(evs) == 0 || evs[0].ID != info.Genesis {
			return fmt.Errorf("ledger %s: the scan does not begin with its genesis %s", name, info.Genesis)
		}
		if uint64(len(evs)) != info.Count || evs[len(evs)-1].ID != info.Head {
			return fmt.Errorf("ledger %s: info says %d events, head %s; the scan finds %d, last %s", name, info.Count, info.Head, len(evs), evs[len(evs)-1].ID)
		}
		if name == w.vecName {
			ids := make([]eventid.ID, len(evs))
			for i, e := range evs {
				ids[i] = e.ID
			}
			if !slices.Equal(ids, w.vecIDs) {
				return fmt.Errorf("imported ledger %s holds %v, the input %v: an import is all or nothing", name, ids, w.vecIDs)
			}
		} else {
			if evs[0].Entity != "ledger" || evs[0].Key != name {
				return fmt.Errorf("ledger %s: genesis %s/%s", name, evs[0].Entity, evs[0].Key)
			}
			seen := map[int]int{}
			lens := map[int]int{}
			stored := map[string]bool{}
			for i, e := range evs {
				if e.Seq != uint64(i+1) {
					return fmt.Errorf("ledger %s: event %d has sequence number %d", name, i, e.Seq)
				}
				if i == 0 {
					continue
				}
				a, ok := w.attempts[string(e.Data)]
				if !ok || a.ledger != name || a.entity != e.Entity || a.key != e.Key || a.event != e.Event {
					return fmt.Errorf("ledger %s #%d: %s/%s/%s %s was never appended there", name, e.Seq, e.Entity, e.Key, e.Event, e.Data)
				}
				if stored[a.data] {
					return fmt.Errorf("ledger %s #%d: %s is stored twice", name, e.Seq, e.Data)
				}
				stored[a.data] = true
				seen[a.batch]++
				lens[a.batch] = a.batchLen
			}
			for b, n := range seen {
				if n != lens[b] {
					return fmt.Errorf("ledger %s: a batch is there with %d of its %d events", name, n, lens[b])
				}
			}
		}
		if _, err := db.Verify(ctx, name, nil); err != nil {
			return fmt.Errorf("verify %s: %w", name, err)
		}
	}
	durable := map[eventid.ID]bool{}
	for _, a := range ackd {
		durable[a.id] = true
		e, err := db.Get(ctx, a.id)
		if err != nil {
			return fmt.Errorf("acknowledged event %s (%s in %s) lost: %w", a.id, a.data, a.ledger, err)
		}
		if e.Ledger != a.ledger || a.data != "" && string(e.Data) != a.data {
			return fmt.Errorf("acknowledged event %s: %s in %s, want %s in %s", a.id, e.Data, e.Ledger, a.data, a.ledger)
		}
	}
	if len(w.idem) > 0 && durable[w.idem[0]] {
		_, err := db.Append(ctx, "a", []EventInput{ev("retry", "r", "after-reopen")}, &AppendOptions{IdempotencyKey: "idem-1"})
		var mismatch *IdempotencyMismatchError
		if !errors.As(err, &mismatch) || !slices.Equal(mismatch.First.IDs, w.idem) {
			return fmt.Errorf("idempotent retry with other events after reopen: %v; want ErrIdempotencyMismatch naming %v", err, w.idem)
		}
	}
	// What is absent can be created again; every ledger takes appends.
	for _, name := range []string{"a", "b"} {
		if _, ok := have[name]; !ok {
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
				return fmt.Errorf("create the absent ledger %s: %w", name, err)
			}
		}
	}
	if _, ok := have[w.vecName]; !ok {
		if _, err := db.Import(ctx, bytes.NewReader(w.vec), ImportOptions{}); err != nil {
			return fmt.Errorf("import the absent ledger %s: %w", w.vecName, err)
		}
	}
	for _, info := range db.Ledgers() {
		ids, err := idsOf(db.Append(ctx, info.Name, []EventInput{ev("order", "after-reopen", "placed")}, nil))
		if err != nil {
			return fmt.Errorf("append to %s after reopen: %w", info.Name, err)
		}
		if _, err := db.Get(ctx, ids[0]); err != nil {
			return fmt.Errorf("get the append to %s after reopen: %w", info.Name, err)
		}
		if _, err := db.Verify(ctx, info.Name, nil); err != nil {
			return fmt.Errorf("verify %s after a new append: %w", info.Name, err)
		}
	}
	open = false
	if err := db.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// opClass names where an operation acts, for the test's report.
func opClass(op faultfs.Op) string {
	p := op.Path
	switch {
	case strings.HasPrefix(p, filepath.Join(faultDataDir, indexDir)):
		return "index"
	case strings.Contains(p, importDirPrefix):
		return "import"
	case strings.HasSuffix(p, ".seg.tmp"):
		return "segment copy"
	case strings.HasSuffix(p, ".seg"):
		return "segment"
	case strings.HasSuffix(p, lockFile):
		return "lock"
	}
	return "directory"
}

// absorbedBy says why a fault at op, on a goroutine with that stack, can
// leave the call that was running without an error, or "" if nothing
// does. reported is what an Open that returned nil reported otherwise
// (Unavailable, IndexRebuilt); readClose, that op closed a read-only
// handle.
func absorbedBy(op faultfs.Op, stack string, reported error, readClose bool) string {
	in := func(fn string) bool { return strings.Contains(stack, fn) }
	switch {
	case errors.Is(reported, faultfs.ErrInjected):
		return "Open: reported by Unavailable or IndexRebuilt"
	case op.Kind == faultfs.Close && readClose:
		return "close of a read-only handle: nothing to lose"
	case op.Kind == faultfs.Close && (in("segment.(*Log).createSegment") || in("segment.truncate") || in("tree.(*File).cut")):
		// The previous segment, fsynced when it was sealed; the
		// handle of a file that a synced copy replaced.
		return "close of a synced handle being replaced"
	case op.Kind == faultfs.Preallocate && in("segment.(*Log).preallocate"):
		// An optimization: the write that follows allocates the blocks.
		return "the preallocation of a segment's blocks"
	case op.Kind == faultfs.WriteAt && in("segment.(*Log).zeroFill"):
		// An optimization too: the records' write grows the file as
		// it would without the zeros.
		return "a write of zeros ahead of a segment's records"
	case in("segment.(*Log).stampWritten") || in("engine.writeWrittenStamps"):
		// A cache for readers: a stamp left out, or a written file not
		// kept, means readers read those segments.
		return "the stamps of what a writer's session wrote"
	case in("segment.(*Log).syncLoop"):
		// No caller to tell: the next append to the ledger reports
		// it (checked, see faultWork.fsyncFailed).
		return "the interval syncer's fsync"
	case in("engine.(*ledger).startTreeWriteLocked"):
		// The tree's write that appends start, on a goroutine of its
		// own. The events are stored; the tree's failure is kept
		// (treeErr), reported by proofs, checkpoints and Close, and the
		// next Open recovers the tree from the segments.
		return "the tree's write started by the append path"
	case in("engine.(*ledger).info"):
		return "LedgerInfo.Bytes leaves out a segment file it cannot list or stat"
	case op.Kind == faultfs.Stat && in("engine.(*DB).open("):
		// Open stats each entry of DIR/ledgers to skip files; on an
		// error it recovers the entry as a ledger, which reports
		// whatever is wrong.
		return "Open's Stat of a ledger directory"
	case in("engine.(*DB).ledgerIDTaken") || in("engine.(*DB).makeImportDir"):
		// A Stat error reads as "absent"; creating the ledger or the
		// directory then fails if it was not.
		return "an existence probe"
	case opClass(op) == "index" || in("cockroachdb/pebble"):
		// Pebble's own work, which it retries or does without: a
		// flush retried (and Close reports the failure), obsolete
		// files and markers left to remove later, table statistics
		// not collected, a file Open scans and ignores.
		return "index (Pebble)"
	}
	return ""
}

// faultTrial is one run of the workload with one fault.
type faultTrial struct {
	index int64
	fault faultfs.Fault
}

// faultOutcome is what a trial found.
type faultOutcome struct {
	hit      *faultfs.Op
	step     string // the step that was running when the fault hit
	stepErr  error
	absorbed string // why the step could return nil despite the fault
	failure  string
	skipped  bool // the operation was one that Pebble cannot survive failing
}

// faultInjector fails operation index with fault, unless it is one whose
// failure Pebble cannot survive (see pebbleFatal): the process would end.
// Those operations are counted, not failed.
type faultInjector struct {
	index   int64
	fault   faultfs.Fault
	skipped bool
	stack   string // of the goroutine that ran the failed operation
}

func (in *faultInjector) Inject(op faultfs.Op) faultfs.Fault {
	if op.Index != in.index {
		return faultfs.NoFault
	}
	buf := make([]byte, 64<<10)
	in.stack = string(buf[:runtime.Stack(buf, false)])
	if pebbleFatal(in.stack) {
		in.skipped = true
		return faultfs.NoFault
	}
	return in.fault
}

// pebbleFatal reports whether Pebble cannot survive the failure of an
// operation that runs on a goroutine with this stack: a MANIFEST update
// (versionSet.UpdateVersionLocked) on one of Pebble's background
// goroutines (a flush or a compaction), where Pebble calls Logger.Fatalf.
// On the caller's goroutine (Pebble's Open) the index recovers it.
func pebbleFatal(self string) bool {
	return strings.Contains(self, "(*versionSet).") && !strings.Contains(self, "annal/index.")
}

// runFaultTrial runs the workload with the fault of tr and checks what a
// crash right after the faulted step, and a restart after the workload,
// find.
func runFaultTrial(tr faultTrial, dir string, vec []byte, vecIDs []eventid.ID, vecName string) (out faultOutcome) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return faultOutcome{failure: err.Error()}
	}
	defer os.RemoveAll(dir)
	w := newFaultWork(filepath.Join(dir, "meta.db"), vec, vecIDs, vecName)
	w.ffs.SetRecording(false)
	inj := &faultInjector{index: tr.index, fault: tr.fault}
	w.ffs.SetInjector(inj)
	defer func() {
		if r := recover(); r != nil {
			out.failure = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	w.run()
	if w.db != nil {
		w.db.Close()
	}
	if os.Getenv("ANNAL_FAULT_ONLY") != "" {
		for _, s := range w.steps {
			fmt.Fprintf(os.Stderr, "step %-32q err=%v hits=%v reported=%v\n", s.name, s.err, s.hits, s.reported)
		}
		fmt.Fprintf(os.Stderr, "problems: %q\n", w.problems)
	}
	hits := w.ffs.Injected()
	out.skipped = inj.skipped
	if len(hits) == 0 {
		return out // the run took another path and ended earlier, or skipped
	}
	out.hit = &hits[0]
	var hitAt int
	var reported error
	for i, s := range w.steps {
		if len(s.hits) > 0 {
			out.step, out.stepErr, hitAt, reported = s.name, s.err, i, s.reported
		}
	}
	fail := func(format string, args ...any) faultOutcome {
		out.failure = fmt.Sprintf(format, args...)
		return out
	}
	if out.step == "" {
		return fail("%s: the fault hit outside every call of the workload", out.hit)
	}
	if len(w.problems) > 0 {
		return fail("%s", strings.Join(w.problems, "; "))
	}
	if out.stepErr == nil {
		if out.absorbed = absorbedBy(*out.hit, inj.stack, reported, w.hfs.readClose.Load() > 0); out.absorbed == "" {
			return fail("%s: the fault hit no caller: step %q returned nil; the operation ran in\n%s", out.hit, out.step, inj.stack)
		}
	}
	// Every error a step returned is the fault, or follows from it.
	for _, s := range w.steps[hitAt:] {
		if s.err == nil || errors.Is(s.err, faultfs.ErrInjected) || errors.Is(s.err, segment.ErrFailed) {
			continue
		}
		return fail("step %q returned an error that is not the fault (%s): %v", s.name, out.hit, s.err)
	}
	for i, c := range []*faultSnapshot{w.crash, w.closed} {
		if c == nil {
			continue
		}
		if err := w.check(c.fs, c.meta, filepath.Join(dir, fmt.Sprintf("crash%d.db", i)), c.acked, c.ledgers); err != nil {
			return fail("crash right after step %q: %v", c.after, err)
		}
	}
	live := vfs.NewMem()
	if err := copyMem(w.mem, live, faultDataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail("copy: %v", err)
	}
	meta, _ := os.ReadFile(w.metaPath)
	if err := w.check(live, meta, filepath.Join(dir, "live.db"), w.acked, w.ledgers); err != nil {
		return fail("restart after the workload: %v", err)
	}
	// A crash after the workload: what a Close that returned nil, or a
	// later Sync append, acknowledged must have been synced.
	if err := w.check(w.mem.CrashClone(vfs.CrashCloneCfg{}), meta, filepath.Join(dir, "end.db"), w.acked, w.ledgers); err != nil {
		return fail("crash after the workload: %v", err)
	}
	return out
}

// TestEngineFaultAtEveryOperation runs the workload of faultWork.run once
// to count its file-system operations (N, logged), then again from scratch
// for each operation and each kind of fault, with that fault alone: ENOSPC
// and EIO (on a Sync operation that is a failed fsync, on a Rename a failed
// rename), and a short write on Write and WriteAt (on any other operation
// faultfs makes it an EIO). Each run:
//
//   - must not panic (the index turns Pebble's panics and fatal errors on
//     the caller's goroutine into errors; see pebbleFatal for the
//     operations Pebble cannot survive failing on its own goroutines,
//     which are counted and not failed);
//   - the call that hit the fault must return an error matching it
//     (faultfs.ErrInjected, or segment.ErrFailed after a failed fsync),
//     unless absorbedBy says why it need not: a background operation (the
//     interval syncer's fsync, reported by the next append; Pebble's own
//     work), a read-only or already synced handle closed, a probe whose
//     error reads as "absent", or an Open that reported it through
//     Unavailable or IndexRebuilt. Every later error must be the fault or
//     follow from it;
//   - after a failed fsync of a segment, every later append to its ledger
//     fails (segment.ErrFailed) until the DB is reopened;
//   - a crash right after the faulted call, a crash right after the first
//     Close, a restart after the workload and a crash after the workload
//     must each open with every ledger available and hold every
//     acknowledged ledger and event (Sync appends; None and Interval
//     appends once a later Sync append to the ledger or a Close returned
//     nil; the import if it returned nil), and nothing that was never
//     appended, batches and the import whole; every ledger verifies, takes
//     an append, and what is absent can be created or imported again.
//
// -engine-fault-every=K injects at every K-th operation only (from a
// random one of the first K); under the race detector K is 3 by default,
// and with -short at least 5.
// For debugging: ANNAL_FAULT_TRACE=1 lists the operations and each trial
// as it starts; ANNAL_FAULT_ONLY=132:EIO runs that one trial and prints
// what each call returned.
func TestEngineFaultAtEveryOperation(t *testing.T) {
	t.Parallel()
	start := time.Now()
	vec := vector(t, twoEventFile)
	_, vecIDs := rewrite(t, vec)
	const vecName = "first-event-key"
	base := t.TempDir()
	// The metadata files are real files that bbolt fsyncs on every
	// commit: on a memory file system if there is one, the trials do not
	// wait for a disk.
	if shm, err := os.MkdirTemp("/dev/shm", "annal-fault-"); err == nil {
		base = shm
		t.Cleanup(func() { os.RemoveAll(shm) })
	}

	w := newFaultWork(filepath.Join(base, "count.db"), vec, vecIDs, vecName)
	w.run()
	for _, s := range w.steps {
		if s.err != nil {
			t.Fatalf("without faults, step %q: %v", s.name, s.err)
		}
	}
	if len(w.problems) > 0 {
		t.Fatalf("without faults: %s", strings.Join(w.problems, "; "))
	}
	ops := w.ffs.Ops()
	n := int64(len(ops))
	if os.Getenv("ANNAL_FAULT_TRACE") != "" {
		for _, op := range ops {
			fmt.Fprintln(os.Stderr, op)
		}
	}
	kinds := map[faultfs.OpKind]int{}
	for _, op := range ops {
		kinds[op.Kind]++
	}
	t.Logf("%d operations in the workload (%d steps, %d events acknowledged): %v", n, len(w.steps), len(w.acked), kinds)
	if err := w.check(w.mem, mustRead(t, w.metaPath), filepath.Join(base, "count-check.db"), w.acked, w.ledgers); err != nil {
		t.Fatalf("without faults, the check fails: %v", err)
	}

	every := int64(*engineFaultEvery)
	if every < 1 {
		every = 1
	}
	if raceEnabled && every == 1 {
		every = 3 // the race detector slows each trial about tenfold
	}
	if testing.Short() && every < 5 {
		every = 5 // long campaign: every operation without -short
	}
	// Sampled, from a random operation among the first ones, so that
	// runs cover different operations.
	first := rand.New(rand.NewPCG(testSeed(t), 1)).Int64N(every)
	var trials []faultTrial
	if only := os.Getenv("ANNAL_FAULT_ONLY"); only != "" {
		// Debugging: one trial, "index:fault", e.g. "132:ENOSPC".
		is, fs, _ := strings.Cut(only, ":")
		var i int64
		fmt.Sscan(is, &i)
		for _, f := range []faultfs.Fault{faultfs.ENOSPC, faultfs.EIO, faultfs.ShortWrite} {
			if f.String() == fs {
				trials = append(trials, faultTrial{i, f})
			}
		}
		n = 0
	}
	for i := first; i < n; i += every {
		for _, f := range []faultfs.Fault{faultfs.ENOSPC, faultfs.EIO, faultfs.ShortWrite} {
			if f == faultfs.ShortWrite && ops[i].Kind != faultfs.Write && ops[i].Kind != faultfs.WriteAt {
				continue // on any other operation, a ShortWrite is an EIO
			}
			trials = append(trials, faultTrial{i, f})
		}
	}

	var (
		mu       sync.Mutex
		next     atomic.Int64
		failures []string
		byFault  = map[faultfs.Fault]int{}
		byKind   = map[string]int{}
		absorbed = map[string]int{}
		injected int
		skipped  int
	)
	workers := 2 * runtime.GOMAXPROCS(0) // the trials wait for the interval syncer too
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1) - 1
				if k >= int64(len(trials)) {
					return
				}
				mu.Lock()
				stop := len(failures) >= maxFaultFailures()
				mu.Unlock()
				if stop {
					return
				}
				tr := trials[k]
				if os.Getenv("ANNAL_FAULT_TRACE") != "" {
					fmt.Fprintf(os.Stderr, "trial %v at op %d\n", tr.fault, tr.index)
				}
				watchdog := time.AfterFunc(time.Minute, func() {
					buf := make([]byte, 8<<20)
					fmt.Fprintf(os.Stderr, "%v at op %d: the workload hangs\n%s", tr.fault, tr.index, buf[:runtime.Stack(buf, true)])
					os.Exit(2)
				})
				out := runFaultTrial(tr, filepath.Join(base, fmt.Sprint(k)), vec, vecIDs, vecName)
				watchdog.Stop()
				mu.Lock()
				if out.skipped {
					skipped++
				}
				if out.hit != nil {
					injected++
					byFault[tr.fault]++
					kind := out.hit.Kind.String()
					switch out.hit.Kind {
					case faultfs.Sync:
						kind = "Sync (failed fsync)"
					case faultfs.Rename:
						kind = "Rename (failed rename)"
					}
					byKind[kind]++
					if out.absorbed != "" {
						absorbed[out.absorbed]++
					}
				}
				if out.failure != "" {
					failures = append(failures, fmt.Sprintf("%v at op %d (%v, during %q): %s", tr.fault, tr.index, out.hit, out.step, out.failure))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("faults injected: %d (%v; by operation: %v); reported by no call, by design: %v; not injected (a MANIFEST update of a Pebble flush or compaction, fatal in Pebble): %d; every %d op from op %d, %d trials, %v",
		injected, byFault, byKind, absorbed, skipped, every, first, len(trials), time.Since(start).Round(time.Millisecond))
	if injected < len(trials)/2 {
		t.Fatalf("only %d of %d trials injected their fault", injected, len(trials))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func maxFaultFailures() int {
	if os.Getenv("ANNAL_FAULT_TRACE") != "" {
		return 1000
	}
	return 10
}
