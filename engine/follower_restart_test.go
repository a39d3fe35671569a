package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"golang.org/x/mod/sumdb/note"
)

// TestFollowerRestartRefusesRolledBackCheckpoint: a follower closed (or
// killed) and opened again on its directory refuses a bucket whose
// checkpoint was put back to an older one signed by the same key (a
// rollback): the ledger stops naming the checkpoint object, and the
// directory's checkpoint file, of more events, is kept.
func TestFollowerRestartRefusesRolledBackCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	for i := range 20 {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "cash", info.ID, 21)
	ck := replica.CheckpointKey(info.ID)
	old, err := st.Get(ctx, ck)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := appendOne(ctx, w, "cash", 20+i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "cash", info.ID, 41)
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, w.key.Verifier)
	waitFollowedSigned(t, fw, "cash", 41)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	ckFile := filepath.Join(dir, ledgersDir, info.ID.String(), checkpointFileName)
	want, err := os.ReadFile(ckFile)
	if err != nil {
		t.Fatal(err)
	}

	putOver(t, st, ck, old.Data)
	fw = openTestFollower(t, dir, st, w.key.Verifier)
	defer fw.Close()
	s := waitStopped(t, fw, "cash")
	if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(s.Stopped.Error(), ck) {
		t.Fatalf("the follower stopped with %v, want ErrCorruption naming %s", s.Stopped, ck)
	}
	t.Logf("stopped: %v", s.Stopped)
	if got, err := os.ReadFile(ckFile); err != nil || string(got) != string(want) {
		t.Fatalf("the directory's checkpoint file: %q (%v), want the one of 41 events kept: %q", got, err, want)
	}
}

// TestFollowerRefusesDirectoryWithoutFollowerFile: a follower's directory
// whose follower.json was removed is not taken for a new one: opening it
// with another key is refused, as with follower.json in place.
func TestFollowerRefusesDirectoryWithoutFollowerFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	if _, err := appendOne(ctx, w, "cash", 0); err != nil {
		t.Fatal(err)
	}
	checkpointStored(t, w, st, "cash", info.ID, 2)
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, w.key.Verifier)
	waitFollowedSigned(t, fw, "cash", 2)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, followerFile)); err != nil {
		t.Fatal(err)
	}
	_, other, err := note.GenerateKey(rand.Reader, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	fw, err = OpenFollower(dir, FollowerOptions{store: st, VerifierKey: other})
	if err == nil {
		fw.Close()
		t.Fatal("a follower's directory without follower.json opened with another key")
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), followerFile) {
		t.Fatalf("OpenFollower: %v, want ErrInvalid naming %s", err, followerFile)
	}
}

// TestFollowerCopyEditedIsNotServed: a byte of an event changed in the
// follower's segment file while it runs is not served, by the follower's
// DB nor by a read-only open beside it (their reads fail on that event,
// and no read returns the changed event); the follower opened again on
// the directory stops the ledger (its status found by its name).
func TestFollowerCopyEditedIsNotServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	ids := []eventid.ID{info.Genesis}
	for i := range 30 {
		res, err := appendOne(ctx, w, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
	}
	checkpointStored(t, w, st, "cash", info.ID, 31)
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, w.key.Verifier)
	waitFollowedSigned(t, fw, "cash", 31)

	// "credited" of the 10th event becomes "Credited".
	segs := followerSegments(t, dir, info.ID)
	edited := false
	for _, p := range segs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "credited"); n >= 10 {
			i := -1
			for range 10 {
				i += 1 + strings.Index(string(b[i+1:]), "credited")
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("C"), int64(i)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			edited = true
			break
		}
	}
	if !edited {
		t.Fatal("no segment file holds 10 events")
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Logf("a read-only open beside the follower: %v", err)
	}
	dbs := map[string]*DB{"the follower's DB": fw.DB()}
	if ro != nil {
		defer ro.Close()
		dbs["a read-only open beside it"] = ro
	}
	for name, db := range dbs {
		failed := 0
		for _, id := range ids {
			ev, err := db.Get(ctx, id)
			if err != nil {
				failed++
				continue
			}
			if ev.Event != "credited" && ev.Seq > 1 {
				t.Fatalf("%s served event %d as %q", name, ev.Seq, ev.Event)
			}
		}
		for ev, err := range db.Scan(ctx, "cash", ScanOptions{}) {
			if err != nil {
				break
			}
			if ev.Event != "credited" && ev.Seq > 1 {
				t.Fatalf("%s's Scan served event %d as %q", name, ev.Seq, ev.Event)
			}
		}
		if failed == 0 {
			t.Fatalf("%s: every Get succeeded on an edited copy", name)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	fw = openTestFollower(t, dir, st, w.key.Verifier)
	defer fw.Close()
	s := waitStopped(t, fw, "cash") // by its name, though it does not open
	if !errors.Is(s.Stopped, replica.ErrDiverged) && !errors.Is(s.Stopped, ErrCorruption) {
		t.Fatalf("the follower opened again on the edited copy: %v, want it stopped", s.Stopped)
	}
	t.Logf("opened again: %v", s.Stopped)
}

// TestFollowerRestartRefusesEventsNotInBucket: a well-formed event added
// at the end of a follower's copy while it was stopped (the writer's
// next record, taken from a copy of its directory that appended it: a
// valid frame, chained to the event before), which the bucket does not
// hold, is not served once the follower is opened again: the ledger stops
// (the directory holds events the bucket does not).
func TestFollowerRestartRefusesEventsNotInBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	vkey, info, forkDir, forged := forkedRecord(t, st)
	dir := followedCopy(t, st, vkey)
	extendCopy(t, dir, forkDir, info.ID)

	fw := openTestFollower(t, dir, st, vkey)
	defer fw.Close()
	if ev, err := fw.DB().Get(ctx, forged); err == nil {
		t.Fatalf("the follower serves event %d %q, which the bucket does not hold", ev.Seq, ev.Event)
	}
	s := waitStopped(t, fw, "cash")
	if !errors.Is(s.Stopped, replica.ErrDiverged) {
		t.Fatalf("the follower stopped with %v, want ErrDiverged", s.Stopped)
	}
	t.Logf("stopped: %v", s.Stopped)
}

// TestFollowerRefusesCheckpointOfAnotherKey: the bucket's checkpoint
// replaced, while the follower runs, by one of more events signed by
// another key (the same body, another signature) stops the ledger,
// naming the checkpoint; the events it covers that the follower had
// not verified are not served.
func TestFollowerRefusesCheckpointOfAnotherKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	ids := []eventid.ID{info.Genesis}
	for i := range 10 {
		res, err := appendOne(ctx, w, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
	}
	checkpointStored(t, w, st, "cash", info.ID, 11)
	view := &frozenStore{Store: st}
	fw := openTestFollower(t, t.TempDir(), view, w.key.Verifier)
	defer fw.Close()
	waitFollowedSigned(t, fw, "cash", 11)
	view.freeze(t, info.ID)
	for i := range 10 {
		res, err := appendOne(ctx, w, "cash", 10+i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.IDs[0])
	}
	checkpointStored(t, w, st, "cash", info.ID, 21)
	ck := replica.CheckpointKey(info.ID)
	obj, err := st.Get(ctx, ck)
	if err != nil {
		t.Fatal(err)
	}
	body := string(obj.Data[:bytes.Index(obj.Data, []byte("\n\n"))+1])
	skey, _, err := note.GenerateKey(rand.Reader, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := note.Sign(&note.Note{Text: body}, signer)
	if err != nil {
		t.Fatal(err)
	}
	putOver(t, st, ck, forged)
	view.thaw()
	s := waitStopped(t, fw, "cash")
	if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(s.Stopped.Error(), ck) {
		t.Fatalf("the follower stopped with %v, want ErrCorruption naming %s", s.Stopped, ck)
	}
	t.Logf("stopped: %v", s.Stopped)
	if s.Local != 11 {
		t.Fatalf("the follower's copy holds %d events, want the 11 it verified", s.Local)
	}
	assertReadsStopped(t, fw, ids[15], ck)
}

// followerSegments returns the paths of the segment files of ledger id in
// the follower's directory dir.
func followerSegments(t *testing.T, dir string, id eventid.LedgerID) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, ledgersDir, id.String(), "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("the follower's segments: %v %v", segs, err)
	}
	return segs
}

// TestFollowerServesOnlyWhatItLaid: a well-formed event (the writer's
// next record, from a copy of its directory that appended it: a valid
// frame, chained to the event before) written at the end of the
// follower's active segment file while the follower runs is never
// served by the follower's DB (Get and Subscribe read while it is
// there), and the next poll stops the ledger naming the segment file:
// the DB shows what the follower laid and verified, not what the files
// come to hold.
func TestFollowerServesOnlyWhatItLaid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	vkey, info, forkDir, forged := forkedRecord(t, st)

	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, vkey)
	defer fw.Close()
	waitFollowedSigned(t, fw, "cash", 11)
	// A subscriber from the start: it must get the 11 events and no
	// other.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan Event, 100)
	go func() {
		defer close(got)
		for ev, err := range fw.DB().Subscribe(sctx, "cash", SubscribeOptions{}) {
			if err != nil {
				return
			}
			got <- ev
		}
	}()

	last := extendCopy(t, dir, forkDir, info.ID)

	// Read while the record is there, until the ledger stops and a
	// while after (the DB looks at the files every 5 ms).
	var stoppedAt time.Time
	deadline := time.Now().Add(20 * time.Second)
	for stoppedAt.IsZero() || time.Since(stoppedAt) < 100*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the ledger did not stop in 20 s")
		}
		if ev, err := fw.DB().Get(ctx, forged); err == nil {
			t.Fatalf("the follower's DB serves event %d %q, written into its segment file, not laid by it", ev.Seq, ev.Event)
		}
		if s, err := fw.Status("cash"); err == nil && s.Stopped != nil && stoppedAt.IsZero() {
			stoppedAt = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	s, err := fw.Status("cash")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Stopped, replica.ErrDiverged) || !strings.Contains(s.Stopped.Error(), last) {
		t.Fatalf("the follower stopped with %v, want ErrDiverged naming %s", s.Stopped, last)
	}
	if s.Local != 11 {
		t.Fatalf("the follower's copy: %d events, want the 11 it laid", s.Local)
	}
	t.Logf("stopped: %v", s.Stopped)
	cancel()
	n := 0
	for ev := range got {
		n++
		if ev.Seq > 11 || ev.ID == forged {
			t.Fatalf("a subscriber of the follower's DB got event %d %q", ev.Seq, ev.Event)
		}
	}
	if n != 11 {
		t.Fatalf("a subscriber of the follower's DB got %d events, want 11", n)
	}
}

// forkedRecord makes a writer of ledger "cash" replicating to st, with
// 10 events and a checkpoint of 11 stored, closed; and a copy of its
// directory (and key), forkDir, that appended one more event, forged,
// which the bucket does not hold: the writer's next record, a valid
// frame chained to event 11. vkey is the writer's verifier key.
func forkedRecord(t *testing.T, st store.Store) (vkey string, info LedgerInfo, forkDir string, forged eventid.ID) {
	t.Helper()
	ctx := context.Background()
	w, _, wdir, keyDir, info := keyedWriter(t, st)
	for i := range 10 {
		if _, err := appendOne(ctx, w, "cash", i); err != nil {
			t.Fatal(err)
		}
	}
	checkpointStored(t, w, st, "cash", info.ID, 11)
	vkey = w.key.Verifier
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	forkDir, forkKeys := copyDir(t, wdir), copyDir(t, keyDir)
	fork := openFork(t, forkDir, forkKeys, store.NewMemory())
	res, err := fork.Append(ctx, "cash", []EventInput{{Entity: "acct", Key: "x", Event: "forged", Data: []byte("1")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fork.Close(); err != nil {
		t.Fatal(err)
	}
	return vkey, info, forkDir, res.IDs[0]
}

// extendCopy writes at the end of the last segment file of ledger id in
// the follower's directory dir what the fork's (forkedRecord) holds
// after it: the forged record. It returns the file's path.
func extendCopy(t *testing.T, dir, forkDir string, id eventid.LedgerID) string {
	t.Helper()
	segs := followerSegments(t, dir, id)
	last := segs[len(segs)-1]
	have, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile(filepath.Join(forkDir, ledgersDir, id.String(), filepath.Base(last)))
	if err != nil {
		t.Fatal(err)
	}
	end := len(bytes.TrimRight(have, "\x00"))
	forgedEnd := len(bytes.TrimRight(theirs, "\x00"))
	if forgedEnd <= end || !bytes.Equal(theirs[segment.HeaderSize:end], have[segment.HeaderSize:end]) {
		t.Fatalf("the fork's %s: %d bytes, the follower's %d: not an extension (differ at %d)", last, forgedEnd, end, mismatch(have[:end], theirs[:min(end, forgedEnd)]))
	}
	f, err := os.OpenFile(last, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(theirs[end:forgedEnd], int64(end)); err != nil {
		t.Fatal(err)
	}
	return last
}

// followedCopy returns a follower's directory that followed forkedRecord's
// bucket st to its 11 events and was closed.
func followedCopy(t *testing.T, st store.Store, vkey string) string {
	t.Helper()
	dir := t.TempDir()
	fw := openTestFollower(t, dir, st, vkey)
	waitFollowedSigned(t, fw, "cash", 11)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
