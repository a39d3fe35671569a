package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
)

// refusedDir returns a closed data directory with ledger acct (300 Sync
// events in 4 KiB segments) and ledger other, the ID of acct's event #5,
// and acct's segment files.
func refusedDir(t *testing.T) (dir string, id5 eventid.ID, segs []string) {
	t.Helper()
	ctx := context.Background()
	dir = newDir(t)
	db, err := engine.Open(dir, &engine.Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "acct"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 299 {
		ev := engine.EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(fmt.Sprintf(`{"i":%d,"pad":"%040d"}`, i, i))}
		if _, err := db.Append(ctx, "acct", []engine.EventInput{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := db.GetSeq(ctx, "acct", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err = filepath.Glob(filepath.Join(dir, "ledgers", info.ID.String(), "*.seg"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	return dir, ev.ID, segs
}

// TestReadCommandsNameRefusedLedger: the read commands on a ledger a
// read-only open refuses: with acct's last segment removed (a restore from
// an older copy), "annal verify" exits 3, but ledgers, stats, scan, export,
// tail and get (read-only opens) served the shorter ledger with exit 0 and
// nothing on standard error. Each now names acct on standard error with why
// ("acknowledged events lost") and exits 3, printing none of its events;
// ledgers and stats still show the other ledger. Then the same for a
// checkpoint file removed (nothing vouches for the events).
func TestReadCommandsNameRefusedLedger(t *testing.T) {
	t.Parallel()
	dir, id5, segs := refusedDir(t)
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, dir string, id5 eventid.ID, why string) {
		commands := [][]string{
			{"ledgers"}, {"stats"}, {"scan", "acct"}, {"export", "acct"}, {"tail", "acct", "--from-start"},
			{"get", "acct#5"}, {"get", id5.String()}, {"stats", "acct"},
		}
		for _, args := range commands {
			code, out, errOut := annal(t, "", append([]string{"--dir", dir}, args...)...)
			if code != exitVerification {
				t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, exitVerification, out, errOut)
				continue
			}
			for _, want := range []string{"acct", why} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%v: standard error does not say %q:\n%s", args, want, errOut)
				}
			}
			if strings.Contains(out, id5.String()) {
				t.Errorf("%v: printed an event of the refused ledger:\n%s", args, out)
			}
			if (args[0] == "ledgers" || args[0] == "stats" && len(args) == 1) && !strings.Contains(out, "other") {
				t.Errorf("%v: the other ledger is not shown:\n%s", args, out)
			}
		}
	}
	check(t, dir, id5, "acknowledged events lost")
	if code, out, errOut := annal(t, "", "--dir", dir, "verify"); code != exitVerification {
		t.Errorf("verify: exit %d, want %d\n%s%s", code, exitVerification, out, errOut)
	}

	t.Run("checkpoint removed", func(t *testing.T) {
		dir, id5, segs := refusedDir(t)
		if err := os.Remove(filepath.Join(filepath.Dir(segs[0]), "checkpoint")); err != nil {
			t.Fatal(err)
		}
		check(t, dir, id5, "annal checkpoint --accept acct")
	})
}

// TestRefusedLedgerFoundByNameWithoutMetaDB: acct's checkpoint file removed
// (refused: nothing vouches for its events) and meta.db lost. annal
// ledgers says "ledger <ID> is unavailable", and verify acct finds it by
// its name (exit 3), but every other command naming acct said `no ledger
// "acct"` with exit 1 (an environment error, and false: acct's NAME file
// and genesis event name it), and annal create acct made a second ledger
// named acct beside the refused one. Each must say why acct is refused,
// with exit 3, and create must refuse the name.
func TestRefusedLedgerFoundByNameWithoutMetaDB(t *testing.T) {
	t.Parallel()
	dir, _, segs := refusedDir(t)
	if err := os.Remove(filepath.Join(filepath.Dir(segs[0]), "checkpoint")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "meta.db")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"scan", "acct"}, {"export", "acct"}, {"tail", "acct", "--from-start"}, {"get", "acct#5"}, {"stats", "acct"},
		{"append", "acct", "--entity", "e", "--key", "k", "--event", "v"},
	} {
		code, out, errOut := annal(t, "", append([]string{"--dir", dir}, args...)...)
		if code != exitVerification || strings.Contains(errOut, "no ledger") || !strings.Contains(errOut, "acct") {
			t.Errorf("%v: exit %d, want %d naming why acct is refused\nstdout:\n%s\nstderr:\n%s", args, code, exitVerification, out, errOut)
		}
	}
	if code, out, errOut := annal(t, "", "--dir", dir, "create", "acct"); code == 0 {
		t.Errorf("create acct: exit 0 while the refused ledger is named acct\nstdout:\n%s\nstderr:\n%s", out, errOut)
	}
	if code, out, errOut := annal(t, "", "--dir", dir, "ledgers"); !strings.Contains(out+errOut, `"acct"`) && !strings.Contains(out+errOut, "acct ") {
		t.Errorf("ledgers: exit %d, does not name acct\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
