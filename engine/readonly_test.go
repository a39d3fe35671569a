package engine

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// dirHashes returns the SHA-256 of every file under dir, by path.
func dirHashes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[p+"/"] = [32]byte{}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameHashes(t *testing.T, before, after map[string][32]byte) {
	t.Helper()
	for p, h := range before {
		if a, ok := after[p]; !ok || a != h {
			t.Errorf("%s changed or removed", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s created", p)
		}
	}
}

// lastSegment returns the path of the last segment of ledger id in dir.
func lastSegment(t *testing.T, dir string, id eventid.LedgerID) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, ledgersDir, id.String(), "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	return segs[len(segs)-1]
}

// refusesWrites checks that every write of a read-only DB fails with
// ErrReadOnly.
func refusesWrites(t *testing.T, db *DB, ledger string) {
	t.Helper()
	ctx := context.Background()
	_, e1 := db.Append(ctx, ledger, []EventInput{order(0)}, nil)
	_, e2 := db.CreateLedger(ctx, LedgerSpec{Name: "other"})
	_, e3 := db.Import(ctx, strings.NewReader(""), ImportOptions{})
	_, e4 := db.Checkpoint(ctx, ledger)
	_, e5 := db.Consumer(ledger, "c", ConsumerOptions{})
	e6 := db.DeleteConsumer(ctx, ledger, "c")
	for i, err := range []error{e1, e2, e3, e4, e5, e6} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("write %d: %v, want ErrReadOnly", i+1, err)
		}
	}
}

// TestReadOnlyClosedTornTail: a directory whose writer crashed mid-append
// (the last record cut in half). OpenReadOnly shows the events before it,
// lists the torn tail in HiddenTails, refuses writes, and changes no byte;
// the writer's Open then keeps exactly what the reader showed.
func TestReadOnlyClosedTornTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []eventid.ID
	for i := range 20 {
		got, err := idsOf(db.Append(ctx, "shop", []EventInput{order(i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn write after the last record: a frame header that promises
	// 200 bytes, and 20 of them.
	seg := lastSegment(t, dir, info.ID)
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := append([]byte{0, 0, 0, 200, 1, 2, 3, 4, 0, 0, 0, 0}, []byte(strings.Repeat("\xab", 20))...)
	if _, err := f.Write(torn); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before := dirHashes(t, dir)

	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !ro.ReadOnly() || db.ReadOnly() {
		t.Fatal("ReadOnly")
	}
	h := ro.HiddenTails()
	if len(h) != 1 || h[0].Ledger != "shop" || h[0].Bytes != int64(len(torn)) {
		t.Fatalf("hidden tails %+v, want the torn record of shop", h)
	}
	li, err := ro.Ledger("shop")
	if err != nil || li.Count != 21 || li.Head != ids[19] {
		t.Fatalf("ledger %+v, %v; want 21 events up to %s", li, err, ids[19])
	}
	for i, id := range ids {
		ev, err := ro.Get(ctx, id)
		if err != nil || ev.Seq != uint64(i+2) {
			t.Fatalf("Get %s: #%d, %v", id, ev.Seq, err)
		}
	}
	if evs := collect(t, ro.Scan(ctx, "shop", ScanOptions{})); len(evs) != 21 {
		t.Fatalf("scan: %d events, want 21", len(evs))
	}
	if ev, err := ro.GetPrefix(ctx, ids[5].String()[:28]); err != nil || ev.ID != ids[5] {
		t.Fatalf("GetPrefix: %v", err)
	}
	refusesWrites(t, ro, "shop")
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	sameHashes(t, before, dirHashes(t, dir))

	db = openTest(t, dir)
	defer db.Close()
	if li, err := db.Ledger("shop"); err != nil || li.Head != ids[19] || li.Count != 21 {
		t.Fatalf("the writer keeps %+v, %v; the reader showed up to %s", li, err, ids[19])
	}
}

// TestReadOnlyCorruptSealedSegment: a changed byte in a sealed segment
// makes the ledger unavailable to a reader, as to a writer.
func TestReadOnlyCorruptSealedSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := db.Append(ctx, "shop", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, ledgersDir, info.ID.String(), fmt.Sprintf("%020d.seg", 1))
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-30] ^= 0x01
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	u := ro.Unavailable()
	if err := u["shop"]; !errors.Is(err, segment.ErrCorruption) || !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("unavailable %v", u)
	}
	if _, err := ro.Ledger("other"); err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyFollowsWriter: a reader beside an in-process writer sees
// its events as they commit (Subscribe), finds them by Get, and changes
// no byte of the directory.
func TestReadOnlyFollowsWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open(dir, &Options{SegmentSize: 8 << 10, CheckpointInterval: -1, WitnessInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.CreateLedger(ctx, LedgerSpec{Name: "shop"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the witness writer's write, done
	before := dirHashes(t, dir)
	ro, err := OpenReadOnly(dir, &Options{FollowInterval: time.Millisecond, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if li, err := ro.Ledger("shop"); err != nil || li.Count != 1 {
		t.Fatalf("%+v %v", li, err)
	}
	refusesWrites(t, ro, "shop")
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	sameHashes(t, before, dirHashes(t, dir))

	ro, err = OpenReadOnly(dir, &Options{FollowInterval: time.Millisecond, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var want []eventid.ID
	got := make(chan Event, 1000)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for ev, err := range ro.Subscribe(sctx, "shop", SubscribeOptions{AfterSeq: 1}) {
			if err != nil {
				close(got)
				return
			}
			got <- ev
		}
	}()
	for b := range 60 {
		var evs []EventInput
		for i := range b%5 + 1 {
			evs = append(evs, order(b*10+i))
		}
		ids, err := idsOf(w.Append(ctx, "shop", evs, nil))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	deadline := time.After(10 * time.Second)
	for i, id := range want {
		select {
		case ev, ok := <-got:
			if !ok {
				t.Fatalf("subscription ended after %d events", i)
			}
			if ev.ID != id || ev.Seq != uint64(i+2) {
				t.Fatalf("event %d: %s #%d, want %s #%d", i, ev.ID, ev.Seq, id, i+2)
			}
		case <-deadline:
			t.Fatalf("only %d of %d events followed", i, len(want))
		}
	}
	if ev, err := ro.Get(ctx, want[len(want)-1]); err != nil || ev.Seq != uint64(len(want)+1) {
		t.Fatalf("Get of the last event: #%d, %v", ev.Seq, err)
	}
	if evs := collect(t, ro.Scan(ctx, "shop", ScanOptions{})); len(evs) != len(want)+1 {
		t.Fatalf("scan: %d events, want %d", len(evs), len(want)+1)
	}
}

// The read-only kill test: a child process (TestEngineKillChild) appends
// to ledgers a and b while a reader in this process follows them; the
// child is killed with SIGKILL, the writer's Open recovers the directory
// while the reader still follows, and every event the reader showed must
// be in the recovered ledger at the same sequence number, with no error
// (ErrDiverged) on the reader's side.
//
//	ANNAL_RO_KILLS=<n>  kills of TestReadOnlyKillLoop: default 5, 2 with
//	                    -short or -race
const roKillsEnv = "ANNAL_RO_KILLS"

func TestReadOnlyKillLoop(t *testing.T) {
	kills := killCount(t, roKillsEnv, 5, 2)
	seed := testSeed(t)
	t.Logf("%d kills", kills)
	rng := rand.New(rand.NewPCG(seed, 2))
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	for _, name := range []string{"a", "b"} {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for k := range kills {
		ro, err := OpenReadOnly(dir, &Options{FollowInterval: time.Millisecond, TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		var mu sync.Mutex
		shown := map[eventid.ID]Event{}
		var subErr error
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, name := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ev, err := range ro.Subscribe(sctx, name, SubscribeOptions{}) {
					mu.Lock()
					if err != nil {
						if !errors.Is(err, context.Canceled) {
							subErr = err
						}
						mu.Unlock()
						return
					}
					shown[ev.ID] = ev
					mu.Unlock()
				}
			}()
		}
		cmd, out, stderr, timer := startEngineKillChild(t, dir, rng.Uint64(), time.Duration(200+rng.IntN(800))*time.Millisecond)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
		err = cmd.Wait()
		timer.Stop()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: the child ended by itself: %v\n%s", k, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // the reader looks at the killed writer's tail
		// The writer's recovery, while the reader follows.
		w, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("kill %d: open: %v", k, err)
		}
		time.Sleep(20 * time.Millisecond)
		cancel()
		wg.Wait()
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
		if subErr != nil {
			t.Fatalf("kill %d: the reader: %v", k, subErr)
		}
		for id, ev := range shown {
			got, err := w.Get(ctx, id)
			if err != nil || got.Seq != ev.Seq || got.Ledger != ev.Ledger || string(got.Data) != string(ev.Data) {
				t.Fatalf("kill %d: the reader showed %s #%d of %s, the writer's recovery has #%d of %q (%v)", k, id, ev.Seq, ev.Ledger, got.Seq, got.Ledger, err)
			}
		}
		seen += len(shown)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if seen == 0 {
		t.Fatal("the reader showed no event")
	}
	t.Logf("%d kills, %d events shown by the reader, all kept by recovery", kills, seen)
}

// TestReadOnlyRemovesStalePrivateDirs: a reader killed (SIGKILL) before
// its Close leaves its private directory in TempDir; the next read-only
// open with the same TempDir removes it, and leaves alone the directory
// of a reader still running and whatever annal did not make.
func TestReadOnlyRemovesStalePrivateDirs(t *testing.T) {
	if _, err := dirlock.Hold(t.TempDir()); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no flock on this system: private directories are not held, so none is ever taken for stale")
	}
	dir := filepath.Join(t.TempDir(), "d")
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	temp := t.TempDir()
	killed := startLockChild(t, "ro", dir+"|"+temp)
	live := startLockChild(t, "ro", dir+"|"+temp)
	killedDir, liveDir := killed.do("dir"), live.do("dir")
	// Not annal's: a directory of the same name without the marker, and
	// a file.
	foreign := filepath.Join(temp, privatePrefix+"foreign")
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(temp, privatePrefix+"file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.cmd.Wait()
	if _, err := os.Stat(filepath.Join(killedDir, privateMarker)); err != nil {
		t.Fatalf("the killed reader's directory: %v (want it left behind)", err)
	}

	ro, err := OpenReadOnly(dir, &Options{TempDir: temp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killedDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed reader's directory %s after the next open: %v, want it removed", killedDir, err)
	}
	for _, p := range []string{liveDir, ro.ro.temp, foreign, filepath.Join(temp, privatePrefix+"file")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after the open: %v, want it kept", p, err)
		}
	}
	// A reader opened while another runs does not take its directory.
	ro2, err := OpenReadOnly(dir, &Options{TempDir: temp})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{liveDir, ro.ro.temp} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after a second open: %v, want it kept", p, err)
		}
	}
	for _, d := range []*DB{ro, ro2} {
		p := d.ro.temp
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close: %v, want it removed", p, err)
		}
	}
	live.stdin.Close()
	if err := live.cmd.Wait(); err != nil {
		t.Fatalf("live reader: %v", err)
	}
	if _, err := os.Stat(liveDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the live reader's directory after its Close: %v, want it removed", err)
	}
}

// TestStalePrivateDirUnderFirstName: a private directory still under its
// first name (a reader killed between its mkdir and its rename) is
// removed only once older than privateInitStale, since a younger one may
// be a reader about to take it.
func TestStalePrivateDirUnderFirstName(t *testing.T) {
	t.Parallel()
	if _, err := dirlock.Hold(t.TempDir()); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no flock on this system: private directories are not held, so none is ever taken for stale")
	}
	temp := t.TempDir()
	p := filepath.Join(temp, privateInitPrefix+"123")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, privateMarker), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := removeStalePrivateDirs(temp, time.Now()); len(got) != 0 {
		t.Fatalf("removed %v at once, want nothing removed before %v", got, privateInitStale)
	}
	held, err := dirlock.Hold(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := removeStalePrivateDirs(temp, time.Now().Add(privateInitStale+time.Minute)); len(got) != 0 {
		t.Fatalf("removed %v while held, want nothing removed", got)
	}
	held.Close()
	if got := removeStalePrivateDirs(temp, time.Now().Add(privateInitStale+time.Minute)); len(got) != 1 || got[0] != p {
		t.Fatalf("removed %v once old and not held, want [%s]", got, p)
	}
}

// TestReadOnlySeesLedgersCreatedAfterOpen: a ledger that the writer
// creates while a reader has the directory open is shown by the reader
// once its genesis event is complete, under the name in its NAME file,
// with every read; a ledger directory that is not (yet) a ledger is
// passed over and nothing fails.
func TestReadOnlySeesLedgersCreatedAfterOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.CreateLedger(ctx, LedgerSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{FollowInterval: time.Millisecond, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	// Not a ledger: an empty directory with a ledger ID's name (a
	// creation before its first segment).
	if err := os.Mkdir(filepath.Join(dir, ledgersDir, "0badcafe"), 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := w.CreateLedger(ctx, LedgerSpec{Name: "b", Description: "made after the reader's open"})
	if err != nil {
		t.Fatal(err)
	}
	var want []eventid.ID
	for i := range 3 {
		ids, err := idsOf(w.Append(ctx, "b", []EventInput{order(i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	var li LedgerInfo
	for deadline := time.Now().Add(10 * time.Second); ; {
		if li, err = ro.Ledger("b"); err == nil && li.Count == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reader: ledger b: %+v, %v; want it with 4 events", li, err)
		}
		time.Sleep(time.Millisecond)
	}
	if li.ID != info.ID || li.Genesis != info.Genesis || li.Description != info.Description {
		t.Errorf("reader's b: %+v, writer's: %+v", li, info)
	}
	if got := ro.Ledgers(); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("Ledgers: %+v, want a and b", got)
	}
	var got []eventid.ID
	for ev, err := range ro.Scan(ctx, "b", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.ID)
	}
	if len(got) != 4 || !slices.Equal(got[1:], want) {
		t.Errorf("Scan of b: %v, want genesis then %v", got, want)
	}
	if ev, err := ro.Get(ctx, want[1]); err != nil || ev.ID != want[1] {
		t.Errorf("Get: %v %v", ev.ID, err)
	}
	if err := ro.Unavailable(); len(err) != 0 {
		t.Errorf("Unavailable: %v", err)
	}
}

// TestReadOnlyDiverged: when the record a reader last showed is no
// longer where it was (here the file is cut back to before it, as an
// operator restoring an older copy would), the reader's reads of that
// ledger and its subscription fail with segment.ErrDiverged from then
// on: what it showed is not silently taken back, and it changes no byte.
func TestReadOnlyDiverged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := w.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []eventid.ID
	for i := range 5 {
		got, err := idsOf(w.Append(ctx, "l", []EventInput{order(i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir, info.ID)
	before, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}

	ro, err := OpenReadOnly(dir, &Options{FollowInterval: time.Millisecond, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if li, err := ro.Ledger("l"); err != nil || li.Head != ids[4] {
		t.Fatalf("reader: %+v %v; want head %s", li, err, ids[4])
	}
	// A subscriber that has caught up (a read racing the look that finds
	// the cut may report it as corruption of the segment instead: an
	// error too, but not this test's).
	subErr, caughtUp := make(chan error, 1), make(chan struct{})
	go func() {
		n := 0
		for _, err := range ro.Subscribe(ctx, "l", SubscribeOptions{}) {
			if err != nil {
				subErr <- err
				return
			}
			if n++; n == len(ids)+1 {
				close(caughtUp)
			}
		}
		subErr <- nil
	}()
	select {
	case <-caughtUp:
	case err := <-subErr:
		t.Fatalf("Subscribe before the cut: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe did not catch up")
	}
	// The file cut to before the last record the reader showed.
	var last Event
	for ev, err := range ro.Scan(ctx, "l", ScanOptions{Reverse: true, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if last.ID != ids[4] {
		t.Fatalf("last event %s, want %s", last.ID, ids[4])
	}
	rl, err := ro.ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	loc := rl.log.Head().Loc
	if err := os.Truncate(seg, loc.Offset); err != nil {
		t.Fatal(err)
	}
	cut := dirHashes(t, dir)

	var scanErr error
	for deadline := time.Now().Add(10 * time.Second); !errors.Is(scanErr, segment.ErrDiverged); {
		if time.Now().After(deadline) {
			t.Fatalf("scan after the cut: %v, want segment.ErrDiverged", scanErr)
		}
		time.Sleep(time.Millisecond)
		scanErr = nil
		for _, err := range ro.Scan(ctx, "l", ScanOptions{}) {
			if err != nil {
				scanErr = err
				break
			}
		}
	}
	if _, err := ro.Get(ctx, ids[0]); !errors.Is(err, segment.ErrDiverged) {
		t.Errorf("Get after the cut: %v, want segment.ErrDiverged", err)
	}
	select {
	case err := <-subErr:
		if !errors.Is(err, segment.ErrDiverged) {
			t.Errorf("Subscribe after the cut ended with %v, want segment.ErrDiverged", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Subscribe did not end after the cut")
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	sameHashes(t, cut, dirHashes(t, dir))
	if after, err := os.Stat(seg); err != nil || after.Size() != loc.Offset || before.Size() <= loc.Offset {
		t.Errorf("segment %d bytes before, %v after (cut to %d)", before.Size(), after, loc.Offset)
	}
}

// TestReadOnlyTempDirNotInsideDataDir: OpenReadOnly "changes no byte in
// dir: no file created", but with Options.TempDir inside the data
// directory (TMPDIR=DIR/ledgers or TMPDIR=DIR/ledgers/ID for annal tail,
// verify) it would make its private directory (an index, a copy of
// meta.db) there, in the writer's ledgers/ or in a ledger's own
// directory, and a reader killed meanwhile would leave it there. The
// read-only open refuses such a TempDir (ErrInvalid, naming it and the
// data directory), also when reached through a symbolic link, and
// creates nothing.
func TestReadOnlyTempDirNotInsideDataDir(t *testing.T) {
	t.Parallel()
	dir, id := checkpointLedger(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(dir, "ledgers", id), link); err != nil {
		t.Fatal(err)
	}
	for _, tmp := range []string{dir, filepath.Join(dir, "ledgers"), filepath.Join(dir, "ledgers", id), link} {
		before := hashTree(t, dir)
		ro, err := OpenReadOnly(dir, &Options{TempDir: tmp})
		if err == nil {
			ro.Close()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tmp) || !strings.Contains(err.Error(), dir) {
			t.Errorf("OpenReadOnly with TempDir %s (inside the data directory): %v, want ErrInvalid naming both", tmp, err)
		}
		if created := sameTree(before, hashTree(t, dir)); created != "" {
			t.Errorf("OpenReadOnly with TempDir %s (inside the data directory) created files in it: %s", tmp, created)
		}
	}
	// A TempDir beside the data directory, whose name begins with its
	// name, is not inside it.
	beside := dir + "-tmp"
	if err := os.Mkdir(beside, 0o700); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: beside})
	if err != nil {
		t.Fatalf("OpenReadOnly with TempDir %s, beside the data directory: %v", beside, err)
	}
	ro.Close()
}
