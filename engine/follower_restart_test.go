package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica"
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
