package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// unreadableStore is a store that, while down is set, answers no read:
// every List, Folders, Get and Head fails as an unreachable store's do.
type unreadableStore struct{ getsDownStore }

func (s *unreadableStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	if s.down.Load() {
		return store.ObjectInfo{}, errStoreDown
	}
	return s.Store.Head(ctx, key)
}

func (s *unreadableStore) List(ctx context.Context, prefix, after string, limit int) (store.Page, error) {
	if s.down.Load() {
		return store.Page{}, errStoreDown
	}
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *unreadableStore) Folders(ctx context.Context, prefix, after string, limit int) (store.FolderPage, error) {
	if s.down.Load() {
		return store.FolderPage{}, errStoreDown
	}
	return s.Store.Folders(ctx, prefix, after, limit)
}

// unreadable returns a view of st that answers no read.
func unreadable(st store.Store) *unreadableStore {
	v := &unreadableStore{getsDownStore{Store: st}}
	v.down.Store(true)
	return v
}

// openFollowerOf opens a follower of st on dir, of the ledger named (""
// for every ledger), polling every 20 ms.
func openFollowerOf(dir string, st store.Store, vkey, ledger string, tempDir string) (*Follower, error) {
	return OpenFollower(dir, FollowerOptions{store: st, VerifierKey: vkey, Ledger: ledger, PollInterval: 20 * time.Millisecond,
		Options: &Options{FollowInterval: 5 * time.Millisecond, TempDir: tempDir}})
}

// twoLedgers is a writer of ledgers "cash" and "fees" replicating to a
// bucket, and a follower's directory that laid 16 events of each, of
// which the checkpoint it verified covers 11, then was closed; the
// writer then appended 5 more to each and stored a checkpoint of the 21.
type twoLedgers struct {
	st     *replStore
	w      *DB
	vkey   string
	ids    map[string]eventid.LedgerID
	events map[string][]eventid.ID // by ledger, the writer's 21 events
	dir    string                  // the follower's directory
}

func newTwoLedgers(t *testing.T) *twoLedgers {
	t.Helper()
	ctx := context.Background()
	tl := &twoLedgers{st: newReplStore(), ids: map[string]eventid.LedgerID{}, events: map[string][]eventid.ID{}}
	w, _, _, _, cash := keyedWriter(t, tl.st)
	t.Cleanup(func() { w.Close() })
	fees, err := w.CreateLedger(ctx, LedgerSpec{Name: "fees"})
	if err != nil {
		t.Fatal(err)
	}
	tl.w, tl.vkey = w, w.key.Verifier
	tl.ids["cash"], tl.ids["fees"] = cash.ID, fees.ID
	appendTo := func(from, to int) {
		for _, name := range []string{"cash", "fees"} {
			for i := from; i < to; i++ {
				if _, err := appendOne(ctx, w, name, i); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	appendTo(0, 10)
	for _, name := range []string{"cash", "fees"} {
		checkpointStored(t, w, tl.st, name, tl.ids[name], 11)
	}
	tl.dir = t.TempDir()
	fw := openTestFollower(t, tl.dir, tl.st, tl.vkey)
	for _, name := range []string{"cash", "fees"} {
		waitFollowedSigned(t, fw, name, 11)
	}
	appendTo(10, 15)
	for _, name := range []string{"cash", "fees"} {
		if s := waitFollowed(t, fw, name, 16); s.Stopped != nil || s.Signed != 11 {
			t.Fatalf("the follower of %s: %+v, want 16 events laid, 11 signed", name, s)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	appendTo(15, 20)
	for _, name := range []string{"cash", "fees"} {
		checkpointStored(t, w, tl.st, name, tl.ids[name], 21)
		for ev, err := range w.Scan(ctx, name, ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			tl.events[name] = append(tl.events[name], ev.ID)
		}
		if len(tl.events[name]) != 21 {
			t.Fatalf("the writer's %s holds %d events, want 21", name, len(tl.events[name]))
		}
	}
	return tl
}

// cashFollowed returns the directory of a follower of ledger cash alone
// that caught up with the writer (21 events, signed), closed.
func (tl *twoLedgers) cashFollowed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	fw, err := openFollowerOf(dir, tl.st, tl.vkey, "cash", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	waitFollowedSigned(t, fw, "cash", 21)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// scanIDs returns the IDs a scan of ledger name on db gives, and its
// error.
func scanIDs(db *DB, name string) ([]eventid.ID, error) {
	var ids []eventid.ID
	for ev, err := range db.Scan(context.Background(), name, ScanOptions{}) {
		if err != nil {
			return ids, err
		}
		ids = append(ids, ev.ID)
	}
	return ids, nil
}

// servesExactly fails t unless db serves of ledger name exactly want,
// in order, and not the event after them (next, if not zero).
func servesExactly(t *testing.T, db *DB, name string, want []eventid.ID, next eventid.ID) {
	t.Helper()
	got, err := scanIDs(db, name)
	if err != nil {
		t.Fatalf("a scan of %s on the follower's DB: %v, want its %d signed events", name, err, len(want))
	}
	if len(got) != len(want) {
		t.Fatalf("a scan of %s on the follower's DB gives %d events, want the %d signed", name, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d of %s on the follower's DB is %s, want %s", i+1, name, got[i], want[i])
		}
	}
	if ev, err := db.Get(context.Background(), want[len(want)-1]); err != nil || ev.Seq != uint64(len(want)) {
		t.Fatalf("Get of the last signed event of %s: %+v, %v", name, ev, err)
	}
	if next != (eventid.ID{}) {
		if ev, err := db.Get(context.Background(), next); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of event %d of %s, after the signed ones: %+v, %v; want ErrNotFound", len(want)+1, name, ev, err)
		}
	}
}

// storeDownStatus fails t unless the status of ledger name says its
// last poll failed on the unreadable store, and that the copy served is
// its n signed events.
func storeDownStatus(t *testing.T, fw *Follower, name string, n uint64) {
	t.Helper()
	s, err := fw.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stopped != nil || !errors.Is(s.LastError, store.ErrUnavailable) || s.Local != n || s.Signed != n {
		t.Fatalf("the status of %s with the store down: %+v; want its poll failed on the store (LastError), %d events served and signed", name, s, n)
	}
}

// waitServes waits until db serves exactly want of ledger name.
func waitServes(t *testing.T, db *DB, name string, want []eventid.ID) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := scanIDs(db, name)
		if err == nil && len(got) == len(want) && got[len(got)-1] == want[len(want)-1] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a scan of %s on the follower's DB gives %d events, %v; want the writer's %d", name, len(got), err, len(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFollowerOpenedWithStoreDownServesSignedPrefixes: a follower of
// every ledger, opened again on its directory while its bucket answers
// no request (List, Get and Head fail), opens all the same: it serves
// each ledger's copy up to the checkpoint it verified before (11 events
// of the 16 it laid), says in each ledger's status that the store could
// not be read, and, once the store answers, catches up to the writer
// (21 events, a checkpoint of 21) and finds the ledger created
// meanwhile at its next round (its listing of the bucket is tried again
// at every round until it answers, not at the minute's discovery).
func TestFollowerOpenedWithStoreDownServesSignedPrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tl := newTwoLedgers(t)
	tax, err := tl.w.CreateLedger(ctx, LedgerSpec{Name: "tax"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(ctx, tl.w, "tax", 0); err != nil {
		t.Fatal(err)
	}
	checkpointStored(t, tl.w, tl.st, "tax", tax.ID, 2)

	view := unreadable(tl.st)
	fw, err := openFollowerOf(tl.dir, view, tl.vkey, "", t.TempDir())
	if err != nil {
		t.Fatalf("OpenFollower on a directory with copies, the store down: %v", err)
	}
	defer fw.Close()
	if s, err := fw.Status("cash"); err == nil {
		t.Logf("cash, the store down: %v", s.LastError)
	}
	for range 10 {
		for _, name := range []string{"cash", "fees"} {
			storeDownStatus(t, fw, name, 11)
			servesExactly(t, fw.DB(), name, tl.events[name][:11], tl.events[name][11])
		}
		time.Sleep(20 * time.Millisecond) // a poll interval: the rounds go on failing
	}
	if s, err := fw.Status("tax"); err == nil {
		t.Fatalf("with the store down, the follower follows tax, which its directory does not hold: %+v", s)
	}

	view.down.Store(false)
	for _, name := range []string{"cash", "fees"} {
		if s := waitFollowedSigned(t, fw, name, 21); s.Stopped != nil || s.Local != 21 {
			t.Fatalf("the store back, %s: %+v; want 21 events, signed", name, s)
		}
		waitServes(t, fw.DB(), name, tl.events[name])
	}
	if s := waitFollowedSigned(t, fw, "tax", 2); s.Stopped != nil {
		t.Fatalf("the store back, tax: %+v", s)
	}
	for _, s := range fw.Statuses() {
		if s.Stopped != nil {
			t.Fatalf("the store back: %+v", s)
		}
	}
}

// TestFollowerOfOneLedgerOpenedWithStoreDown: a follower of one ledger
// (FollowerOptions.Ledger), opened again while its bucket answers no
// request, serves that ledger's signed prefix whether the ledger is
// given by its ID or by its name (found in the directory's copy: the
// bucket that would resolve it cannot be read), follows no other, and
// catches up once the store answers.
func TestFollowerOfOneLedgerOpenedWithStoreDown(t *testing.T) {
	t.Parallel()
	tl := newTwoLedgers(t)
	for _, by := range []string{"ID", "name"} {
		t.Run(by, func(t *testing.T) {
			ledger := "fees"
			if by == "ID" {
				ledger = tl.ids["fees"].String()
			}
			dir := copyDir(t, tl.dir)
			view := unreadable(tl.st)
			fw, err := openFollowerOf(dir, view, tl.vkey, ledger, t.TempDir())
			if err != nil {
				t.Fatalf("OpenFollower of %s on a directory holding its copy, the store down: %v", ledger, err)
			}
			defer fw.Close()
			storeDownStatus(t, fw, "fees", 11)
			servesExactly(t, fw.DB(), "fees", tl.events["fees"][:11], tl.events["fees"][11])
			if s, err := fw.Status("cash"); err == nil {
				t.Fatalf("a follower of %s follows cash: %+v", ledger, s)
			}
			if _, err := scanIDs(fw.DB(), "cash"); err == nil {
				t.Fatalf("a follower of %s serves cash", ledger)
			}
			view.down.Store(false)
			if s := waitFollowedSigned(t, fw, "fees", 21); s.Stopped != nil || s.Local != 21 {
				t.Fatalf("the store back: %+v; want 21 events, signed", s)
			}
			waitServes(t, fw.DB(), "fees", tl.events["fees"])
			if len(fw.Statuses()) != 1 {
				t.Fatalf("a follower of %s: %+v, want that ledger alone", ledger, fw.Statuses())
			}
		})
	}
}

// TestFollowerOpenWithStoreDownAndNothingToServeFails: with the bucket
// answering no request, a follower of every ledger on an empty
// directory, and one of a ledger by a name its directory holds no copy
// of, have nothing to serve: OpenFollower fails with the store's error
// (store.ErrUnavailable), saying that the bucket could not be read and
// the directory holds no copy to serve meanwhile.
func TestFollowerOpenWithStoreDownAndNothingToServeFails(t *testing.T) {
	t.Parallel()
	tl := newTwoLedgers(t)
	onlyCash := tl.cashFollowed(t)
	for _, c := range []struct{ what, dir, ledger, says string }{
		{"every ledger, an empty directory", t.TempDir(), "", "holds no ledger copy that this follower laid"},
		{"cash, an empty directory", t.TempDir(), "cash", `holds no copy of a ledger named "cash"`},
		{"fees, a directory holding cash alone", onlyCash, "fees", `holds no copy of a ledger named "fees"`},
	} {
		fw, err := openFollowerOf(c.dir, unreadable(tl.st), tl.vkey, c.ledger, t.TempDir())
		if err == nil {
			fw.Close()
			t.Fatalf("%s, the store down: OpenFollower succeeded", c.what)
		}
		t.Logf("%s: %v", c.what, err)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "the bucket could not be read") || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s, the store down: OpenFollower: %v; want the store's error (ErrUnavailable), saying the bucket could not be read and the directory %s", c.what, err, c.says)
		}
	}
}

// TestFollowerOpenedWithStoreDownServesNoFolderItDidNotLay: a ledger
// folder copied by hand into a follower's directory (another follower's
// copy of a ledger of the same bucket, with its checkpoint file signed
// by the same key) is not served while the bucket cannot be read: the
// follower did not lay it (follower.json does not record it), whether it
// follows every ledger (the folder is not opened, DB.Unavailable says
// so) or that ledger by its ID (its reads fail until a poll checks it).
// The ledger it laid is served meanwhile (up to its signed checkpoint).
// Once the store answers, the follower of that ledger checks the folder
// against the bucket and serves it; the follower of every ledger,
// whose DB did not open it, says so in its status without stopping it,
// and the next open follows it.
func TestFollowerOpenedWithStoreDownServesNoFolderItDidNotLay(t *testing.T) {
	t.Parallel()
	tl := newTwoLedgers(t)
	feesID := tl.ids["fees"]
	onlyCash := tl.cashFollowed(t)
	withFees := func(t *testing.T) string {
		dir := copyDir(t, onlyCash)
		to := filepath.Join(dir, ledgersDir, feesID.String())
		if err := os.CopyFS(to, os.DirFS(filepath.Join(tl.dir, ledgersDir, feesID.String()))); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	notServed := func(t *testing.T, fw *Follower) {
		t.Helper()
		for range 10 {
			for _, id := range tl.events["fees"] {
				if ev, err := fw.DB().Get(context.Background(), id); err == nil {
					t.Fatalf("with the store down, the follower serves event %d of fees, a copy it did not lay", ev.Seq)
				}
			}
			if ids, err := scanIDs(fw.DB(), "fees"); err == nil || len(ids) > 0 {
				t.Fatalf("with the store down, a scan of fees gives %d events, %v: a copy the follower did not lay", len(ids), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("every ledger", func(t *testing.T) {
		dir := withFees(t)
		view := unreadable(tl.st)
		fw, err := openFollowerOf(dir, view, tl.vkey, "", t.TempDir())
		if err != nil {
			t.Fatalf("OpenFollower, the store down: %v", err)
		}
		defer fw.Close()
		if why := fw.DB().Unavailable()["fees"]; why == nil || !strings.Contains(why.Error(), "does not follow") {
			t.Fatalf("the follower's DB's unavailable ledgers: %v; want fees, saying the follower does not follow it", fw.DB().Unavailable())
		}
		storeDownStatus(t, fw, "cash", 21)
		servesExactly(t, fw.DB(), "cash", tl.events["cash"], eventid.ID{})
		notServed(t, fw)

		view.down.Store(false)
		waitServes(t, fw.DB(), "cash", tl.events["cash"])
		s := waitStatus(t, fw, "fees", "a poll saying the copy is followed from the next open", func(s FollowerStatus) bool {
			return s.LastError != nil && strings.Contains(s.LastError.Error(), "followed from the next open") || s.Stopped != nil
		})
		if s.Stopped != nil || s.Local != 0 {
			t.Fatalf("fees, the store back: %+v; want it followed, not stopped, nothing served", s)
		}
		t.Logf("fees, the store back: %v", s.LastError)
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
		fw, err = openFollowerOf(dir, tl.st, tl.vkey, "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer fw.Close()
		if s := waitFollowedSigned(t, fw, "fees", 21); s.Stopped != nil {
			t.Fatalf("fees, opened again with the store up: %+v", s)
		}
		waitServes(t, fw.DB(), "fees", tl.events["fees"])
	})

	t.Run("that ledger by its ID", func(t *testing.T) {
		dir := withFees(t)
		view := unreadable(tl.st)
		fw, err := openFollowerOf(dir, view, tl.vkey, feesID.String(), t.TempDir())
		if err != nil {
			t.Fatalf("OpenFollower, the store down: %v", err)
		}
		defer fw.Close()
		notServed(t, fw)
		if _, err := scanIDs(fw.DB(), "fees"); !errors.Is(err, ErrLedgerUnavailable) || !strings.Contains(err.Error(), "not checked against the bucket") {
			t.Fatalf("a scan of fees with the store down: %v; want ErrLedgerUnavailable saying the copy is not checked", err)
		}
		view.down.Store(false)
		if s := waitFollowedSigned(t, fw, "fees", 21); s.Stopped != nil {
			t.Fatalf("fees, the store back: %+v", s)
		}
		waitServes(t, fw.DB(), "fees", tl.events["fees"])
	})
}

// TestFollowerStopsRecordedCopyTheBucketDoesNotHold: a follower opened
// while its bucket cannot be read serves the copies its directory
// recorded; once the bucket answers and its listing does not hold a
// ledger (here another bucket, empty, given to a test follower whose
// follower.json cannot tell them apart), that ledger stops, and is no
// longer served: as had the bucket answered at the open, when it would
// not have been followed.
func TestFollowerStopsRecordedCopyTheBucketDoesNotHold(t *testing.T) {
	t.Parallel()
	tl := newTwoLedgers(t)
	view := unreadable(newReplStore())
	fw, err := openFollowerOf(tl.dir, view, tl.vkey, "", t.TempDir())
	if err != nil {
		t.Fatalf("OpenFollower, the store down: %v", err)
	}
	defer fw.Close()
	servesExactly(t, fw.DB(), "cash", tl.events["cash"][:11], tl.events["cash"][11])
	view.down.Store(false)
	for _, name := range []string{"cash", "fees"} {
		s := waitStopped(t, fw, name)
		t.Logf("%s stopped: %v", name, s.Stopped)
		if !errors.Is(s.Stopped, ErrLedgerUnavailable) || !strings.Contains(s.Stopped.Error(), "does not hold it") {
			t.Fatalf("%s, the bucket not holding it: stopped with %v; want ErrLedgerUnavailable saying the bucket does not hold it", name, s.Stopped)
		}
		if _, err := scanIDs(fw.DB(), name); !errors.Is(err, ErrLedgerUnavailable) {
			t.Fatalf("a scan of %s, stopped: %v; want its stop", name, err)
		}
	}
}
