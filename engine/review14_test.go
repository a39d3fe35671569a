package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// TestReview14ProofEdges: the proof API refuses sizes beyond the head, an
// old size of 0 or above the new size, and an ID of a ledger that does not
// exist; bad proof JSON gives ErrInvalid, never a panic.
func TestReview14ProofEdges(t *testing.T) {
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
