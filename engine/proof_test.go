package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
)

// TestProofsRefuseBadArguments: the proof API refuses sizes beyond the
// head, an old size of 0 or above the new size, and an ID of a ledger that
// does not exist; bad proof JSON gives ErrInvalid, never a panic.
func TestProofsRefuseBadArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	info := mkLedger(t, db, "a", 10)
	if _, err := db.Checkpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ev, err := db.GetSeq(ctx, "a", 3)
	if err != nil {
		t.Fatal(err)
	}
	id := ev.ID
	other := eventid.New(id.Micros(), 3, info.ID+77)
	if _, err := db.ProveInclusion(ctx, other, 0); err == nil {
		t.Errorf("ID of another ledger accepted")
	}

	if _, err := db.ProveInclusion(ctx, id, 1000); !errors.Is(err, ErrInvalid) {
		t.Errorf("treeSize beyond head: %v", err)
	}
	if p, err := db.ProveInclusion(ctx, id, 0); err != nil || p.TreeSize != 11 && p.TreeSize != 10 {
		t.Errorf("treeSize 0: %+v %v", p.TreeSize, err)
	}
	for _, c := range [][2]uint64{{0, 5}, {6, 5}, {1, 1000}} {
		if _, err := db.ProveConsistency(ctx, "a", c[0], c[1]); err == nil {
			t.Errorf("ProveConsistency(%d,%d) accepted", c[0], c[1])
		}
	}
	if p, err := db.ProveConsistency(ctx, "a", 5, 5); err != nil || len(p.Hashes) != 0 || p.OldRoot != p.NewRoot {
		t.Errorf("ProveConsistency(5,5): %+v %v", p, err)
	}
	bad := []string{
		`{"ledger":"00000001","eventId":"x","seq":1,"leafIndex":0,"treeSize":1,"leafHash":"AAAA","inclusionPath":[]}`,
		`{"seq":1,"leafIndex":0,"treeSize":1,"leafHash":"AAAA","inclusionPath":[]}`,
		`{"seq":1,"leafIndex":0,"leafHash":"` + strings.Repeat("A", 44) + `","inclusionPath":["AA=="]}`,
		`{"seq":0,"leafIndex":0}`,
		`{"seq":1,"leafIndex":0,"inclusionPath":[` + strings.Repeat(`"AAAA",`, 100000) + `"AAAA"]}`,
		`[`, `null`, `{"seq":18446744073709551616}`,
	}
	for _, s := range bad {
		var p InclusionProof
		if err := json.Unmarshal([]byte(s), &p); err == nil {
			t.Errorf("inclusion JSON %.80q accepted", s)
		}
	}
	badC := []string{
		`{"oldSize":1,"newSize":2,"oldRoot":"AAAA"}`,
		`{"oldSize":1,"newSize":2,"newRoot":"` + strings.Repeat("A", 48) + `"}`,
		`{"oldSize":1,"newSize":2,"consistencyPath":[` + strings.Repeat(`"AAAA",`, 100000) + `"AAAA"]}`,
		`{"oldSize":1,"newSize":2,"consistencyPath":[1]}`,
		`{"ledger":"zz"}`,
	}
	for _, s := range badC {
		var c ConsistencyProof
		if err := json.Unmarshal([]byte(s), &c); !errors.Is(err, ErrInvalid) {
			t.Errorf("consistency JSON %.80q: %v", s, err)
		}
	}
}

// TestVerifyCheckpointRefusesOddCheckpoints: checkpoints signed with the
// DB's own key but of a huge size, of size 0, of another ledger, or with a
// wrong root, are refused by VerifyCheckpoint (an error, no panic).
func TestVerifyCheckpointRefusesOddCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	a := mkLedger(t, db, "a", 10)
	b := mkLedger(t, db, "b", 10)
	ca, err := db.Checkpoint(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	cb, err := db.Checkpoint(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.VerifyCheckpoint(ctx, "a", ca.Note, db.VerifierKey()); err != nil {
		t.Fatalf("good checkpoint: %v", err)
	}
	if err := db.VerifyCheckpoint(ctx, "a", cb.Note, db.VerifierKey()); err == nil {
		t.Errorf("ledger b's checkpoint accepted for ledger a")
	}
	name := strings.SplitN(db.VerifierKey(), "+", 2)[0]
	sign := func(c tree.Checkpoint) []byte {
		msg, err := tree.Sign(c, db.key.Signer)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	cases := map[string]tree.Checkpoint{
		"huge size":  {Origin: tree.Origin(name, uint32(a.ID)), Size: 1 << 62, Root: ca.Root},
		"max size":   {Origin: tree.Origin(name, uint32(a.ID)), Size: ^uint64(0), Root: ca.Root},
		"size 0":     {Origin: tree.Origin(name, uint32(a.ID)), Size: 0, Root: ca.Root},
		"wrong root": {Origin: tree.Origin(name, uint32(a.ID)), Size: ca.Size, Root: cb.Root},
		"b's origin": {Origin: tree.Origin(name, uint32(b.ID)), Size: ca.Size, Root: ca.Root},
		"size-1":     {Origin: tree.Origin(name, uint32(a.ID)), Size: ca.Size - 1, Root: ca.Root},
	}
	for what, c := range cases {
		if err := db.VerifyCheckpoint(ctx, "a", sign(c), db.VerifierKey()); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	if err := db.VerifyCheckpoint(ctx, "a", append([]byte("x"), ca.Note...), db.VerifierKey()); err == nil {
		t.Errorf("edited note accepted")
	}
	if err := db.VerifyCheckpoint(ctx, "a", ca.Note, "bad"); err == nil {
		t.Errorf("bad verifier key accepted")
	}
}

// TestProofsRacingClose: appenders, checkpoints, proofs and
// VerifyCheckpoint race with each other and with Close; every call either
// succeeds with a proof that verifies or fails with an error (no panic, no
// race), and after Close calls fail with ErrClosed.
func TestProofsRacingClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	mkLedger(t, db, "a", 5)
	if _, err := db.Checkpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := db.Append(ctx, "a", []EventInput{order(g*100000 + i)}, nil); err != nil {
					return
				}
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (g + i) % 4 {
				case 0:
					if _, err := db.Checkpoint(ctx, "a"); err != nil {
						return
					}
				case 1:
					ev, err := db.GetSeq(ctx, "a", 3)
					if err != nil {
						return
					}
					p, err := db.ProveInclusion(ctx, ev.ID, 0)
					if err != nil {
						return
					}
					ck, err := db.LatestCheckpoint("a")
					if err != nil {
						return
					}
					if p.TreeSize == ck.Size {
						if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, p.LeafHash, p.Hashes, ck.Root); err != nil {
							t.Errorf("inclusion proof does not verify: %v", err)
						}
					}
				case 2:
					p, err := db.ProveConsistency(ctx, "a", 3, 0)
					if err != nil {
						return
					}
					if err := tree.VerifyConsistency(p.OldSize, p.NewSize, p.OldRoot, p.NewRoot, p.Hashes); err != nil {
						t.Errorf("consistency proof does not verify: %v", err)
					}
				case 3:
					ck, err := db.LatestCheckpoint("a")
					if err != nil {
						return
					}
					if err := db.VerifyCheckpoint(ctx, "a", ck.Note, db.VerifierKey()); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("VerifyCheckpoint of its own checkpoint: %v", err)
					}
				}
			}
		}(g)
	}
	time.Sleep(300 * time.Millisecond)
	if err := db.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	close(stop)
	wg.Wait()
	if _, err := db.Checkpoint(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Checkpoint after Close: %v", err)
	}
}

// TestProofJSONRefusesImpossibleSizes: proof JSON that no proof can have is
// refused on reading, for both kinds alike: a consistency proof with an
// old size of 0 or above the new one, and an inclusion proof whose eventId
// is of another ledger than its "ledger".
func TestProofJSONRefusesImpossibleSizes(t *testing.T) {
	t.Parallel()
	const id = "0005d5814ce488843dc5de3ee95bff80"
	for _, c := range []struct{ name, json string }{
		{"inclusion, another ledger's event", `{"ledger":"9e961c04","eventId":"` + id + `","seq":2,"leafIndex":1,"treeSize":2,"leafHash":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","inclusionPath":[]}`},
		{"inclusion, seq beyond the tree", `{"ledger":"e95bff80","eventId":"` + id + `","seq":3,"leafIndex":2,"treeSize":2,"leafHash":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","inclusionPath":[]}`},
		{"consistency, old size 0", `{"ledger":"e95bff80","oldSize":0,"newSize":2,"oldRoot":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","newRoot":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","consistencyPath":[]}`},
		{"consistency, old above new", `{"ledger":"e95bff80","oldSize":3,"newSize":2,"oldRoot":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","newRoot":"5XmICHN0kdEtuk89uZwmqOFx4mAg61SrOS6YlLfJXzY=","consistencyPath":[]}`},
	} {
		var err error
		if strings.HasPrefix(c.name, "inclusion") {
			var p InclusionProof
			err = json.Unmarshal([]byte(c.json), &p)
		} else {
			var p ConsistencyProof
			err = json.Unmarshal([]byte(c.json), &p)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
}
