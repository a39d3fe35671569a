package engine

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// TestFollowerWrongKeySaysFollowKey: a follower given the verifier key
// of another key than the one that signs the bucket's checkpoints stops
// the ledger with an error that says what a follower's user gives (annal
// follow --key, FollowerOptions.VerifierKey), not a restore's flags.
func TestFollowerWrongKeySaysFollowKey(t *testing.T) {
	t.Parallel()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	checkpointStored(t, w, st, "cash", info.ID, 1)
	_, other, err := note.GenerateKey(rand.Reader, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	fw := openTestFollower(t, t.TempDir(), st, other)
	defer fw.Close()
	s := waitStopped(t, fw, info.ID.String())
	msg := s.Stopped.Error()
	if !errors.Is(s.Stopped, ErrCorruption) || !strings.Contains(msg, "annal follow --key") || !strings.Contains(msg, "FollowerOptions.VerifierKey") {
		t.Fatalf("stopped with %v, want ErrCorruption saying to follow with annal follow --key (FollowerOptions.VerifierKey)", s.Stopped)
	}
	if strings.Contains(msg, "--signing-key") || strings.Contains(msg, "annal restore") {
		t.Fatalf("stopped with %v: a restore's flags, not a follower's", s.Stopped)
	}
	t.Logf("stopped: %v", s.Stopped)
}
