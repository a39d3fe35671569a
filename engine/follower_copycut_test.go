package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// TestFollowerCopyCutOrGrownBySegment: while a follower runs, its copy's
// last segment file is cut inside its last record, or a segment file
// is added after its last one. Reads through the follower's DB during
// each serve only the writer's events (no panic, nothing else), and the
// next poll stops the ledger with ErrDiverged naming the file and saying
// what it found.
func TestFollowerCopyCutOrGrownBySegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newReplStore()
	w, _, info := followerWriter(t, st)
	defer w.Close()
	ids := map[eventid.ID]bool{info.Genesis: true}
	for i := range 10 {
		res, err := appendOne(ctx, w, "cash", i)
		if err != nil {
			t.Fatal(err)
		}
		ids[res.IDs[0]] = true
	}
	checkpointStored(t, w, st, "cash", info.ID, 11)

	for _, tc := range []struct {
		name string
		edit func(t *testing.T, last string) (path, says string)
	}{
		{"cut", func(t *testing.T, last string) (string, string) {
			fi, err := os.Stat(last)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(last, fi.Size()-5); err != nil {
				t.Fatal(err)
			}
			return last, "shorter than"
		}},
		{"segment added", func(t *testing.T, last string) (string, string) {
			b, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			var n uint64
			for n = 1; segment.FileName(n) != filepath.Base(last); n++ {
			}
			next := filepath.Join(filepath.Dir(last), segment.FileName(n+1))
			if err := os.WriteFile(next, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return next, "did not lay"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fw := openTestFollower(t, dir, st, w.key.Verifier)
			defer fw.Close()
			waitFollowedSigned(t, fw, "cash", 11)
			segs := followerSegments(t, dir, info.ID)
			path, says := tc.edit(t, segs[len(segs)-1])
			for {
				s, err := fw.Status("cash")
				if err != nil {
					t.Fatal(err)
				}
				for ev, err := range fw.DB().Scan(ctx, "cash", ScanOptions{}) {
					if err != nil {
						break
					}
					if !ids[ev.ID] || ev.Seq > 11 {
						t.Fatalf("the follower's DB serves event %d %s %q, not the writer's", ev.Seq, ev.ID, ev.Event)
					}
				}
				if s.Stopped != nil {
					if !errors.Is(s.Stopped, replica.ErrDiverged) || !strings.Contains(s.Stopped.Error(), path) || !strings.Contains(s.Stopped.Error(), says) {
						t.Fatalf("the follower stopped with %v, want ErrDiverged naming %s and saying %q", s.Stopped, path, says)
					}
					t.Logf("stopped: %v", s.Stopped)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
