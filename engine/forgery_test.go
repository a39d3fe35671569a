package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/forge"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The in-place forgery (package segment/forge): an event's
// amount is changed from 100 to 999 in its segment file, with its CRC32C
// checksum kept.

const forgeryMemo = "refund approved by desk 7, ticket 4711" // the free-text field

// forgeEvent rewrites, in the segment files of the ledger in dir, the
// event with sequence number seq (forge.Event).
func forgeEvent(t *testing.T, dir string, seq uint64, from, to string, rng *rand.Rand) forge.Record {
	t.Helper()
	r, err := forge.Event(dir, seq, from, to, rng)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// forgeryLedger creates a ledger "pay" in dir with events before and
// after a payment of amount 100 with a memo, closes the DB and returns
// the payment's sequence number and every event's ID.
func forgeryLedger(t *testing.T, dir string) (seq uint64, ids []eventid.ID) {
	t.Helper()
	ctx := context.Background()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "pay"}); err != nil {
		t.Fatal(err)
	}
	var evs []EventInput
	for i := range 5 {
		evs = append(evs, EventInput{Entity: "account", Key: fmt.Sprintf("acct-%d", i), Event: "opened", Meta: []byte(`{"by":"teller"}`), Data: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if _, err := db.Append(ctx, "pay", evs, nil); err != nil {
		t.Fatal(err)
	}
	r, err := db.Append(ctx, "pay", []EventInput{{Entity: "payment", Key: "p-1", Event: "paid", Meta: []byte(`{"by":"teller"}`),
		Data: []byte(`{"amount":100,"memo":"` + forgeryMemo + `","to":"acct-3"}`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq = 7 // genesis, 5 accounts, the payment
	if ev, err := db.Get(ctx, r.IDs[0]); err != nil || ev.Seq != seq {
		t.Fatalf("the payment: %+v, %v", ev, err)
	}
	for i := range 3 {
		if _, err := db.Append(ctx, "pay", []EventInput{{Entity: "account", Key: "acct-3", Event: "credited", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for ev, err := range db.Scan(ctx, "pay", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return seq, ids
}

// assertForgeryUndetectedByCRC checks that the forgery is real: on db,
// open while the segments were forged under it (an Open after the forgery
// reads the changed segment again and refuses the ledger), every event
// has its old ID, Get returns the forged data, the segment log verifies
// on its own, and an export verifies with ndjson.VerifyAll: everything
// the CRC32C chain can check passes.
func assertForgeryUndetectedByCRC(t *testing.T, db *DB, f forge.Record, ids []eventid.ID) {
	t.Helper()
	ctx := context.Background()
	info, err := db.Ledger("pay")
	if err != nil {
		t.Fatal(err)
	}
	var got []eventid.ID
	for ev, err := range db.Scan(ctx, "pay", ScanOptions{}) {
		if err != nil {
			t.Fatalf("scan of the forged ledger: %v", err)
		}
		got = append(got, ev.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("the forgery changed the IDs:\n%v\n%v", got, ids)
	}
	ev, err := db.Get(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.Data, f.Data) || !strings.Contains(string(ev.Data), `"amount":999`) {
		t.Fatalf("Get returns %s, the forgery wrote %s", ev.Data, f.Data)
	}
	// The segment log alone, every record verified (frame CRCs, event
	// checksums, chain).
	log, _, err := segment.Open(filepath.Dir(f.File), segment.Options{Ledger: info.ID}, segment.Head{})
	if err != nil {
		t.Fatalf("segment.Open of the forged segments: %v", err)
	}
	head, err := log.Verify(ctx, nil)
	log.Close()
	if err != nil || head.ID != ids[len(ids)-1] {
		t.Fatalf("segment.Log.Verify of the forged segments: head %s, %v", head.ID, err)
	}
	// An export, verified as annal verify-file does.
	var buf bytes.Buffer
	if _, err := db.Export(ctx, "pay", &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ndjson.VerifyAll(ndjson.NewReader(&buf))
	if err != nil || v.Head() != ids[len(ids)-1] {
		t.Fatalf("ndjson.VerifyAll of the forged export: %v", err)
	}
}

// TestForgeryKeepsEventIDs checks the attack itself: the forgery keeps
// every Event ID and passes every CRC-based check (it must, or the tests
// below prove nothing).
func TestForgeryKeepsEventIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	segDir := ledgerSegDir(t, dir, "pay")
	db := openTest(t, dir)
	defer db.Close()
	f := forgeEvent(t, segDir, seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(testSeed(t), 14)))
	t.Logf("forged #%d %s: %s -> %s", f.Seq, f.ID, f.Old, f.Data)
	if f.ID != ids[seq-1] {
		t.Fatalf("forged %s, the payment is %s", f.ID, ids[seq-1])
	}
	assertForgeryUndetectedByCRC(t, db, f, ids)
}

// ledgerSegDir returns the directory of the ledger's segments (and of its
// tree and checkpoint files).
func ledgerSegDir(t *testing.T, dir, name string) string {
	t.Helper()
	db := openTest(t, dir)
	defer db.Close()
	info, err := db.Ledger(name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, ledgersDir, info.ID.String())
}

// savedCheckpoint returns the ledger's latest checkpoint, as an auditor
// would have kept it outside the directory.
func savedCheckpoint(t *testing.T, dir, ledger string) Checkpoint {
	t.Helper()
	db := openTest(t, dir)
	defer db.Close()
	cp, err := db.LatestCheckpoint(ledger)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestForgeryFailsVerify: the in-place forgery, which keeps every Event ID
// and passes every CRC check, fails Verify (annal verify --full) with
// ErrRewritten naming the event (#seq and ID), and fails VerifyCheckpoint
// of a checkpoint saved before it.
func TestForgeryFailsVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	before := savedCheckpoint(t, dir, "pay") // Close issued it
	if before.Size != uint64(len(ids)) {
		t.Fatalf("the checkpoint Close issued covers %d events, the ledger has %d", before.Size, len(ids))
	}
	segDir := ledgerSegDir(t, dir, "pay")
	db := openTest(t, dir)
	defer db.Close()
	f := forgeEvent(t, segDir, seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(testSeed(t), 14)))
	assertForgeryUndetectedByCRC(t, db, f, ids)

	_, err := db.Verify(ctx, "pay", nil)
	want := fmt.Sprintf("event #%d (%s) is not the event the tree committed to", seq, f.ID)
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CRC32C") {
		t.Fatalf("verify of the forged ledger: %v\nwant ErrRewritten saying %q", err, want)
	}
	t.Logf("verify: %v", err)
	err = db.VerifyCheckpoint(ctx, "pay", before.Note, "")
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), fmt.Sprintf("event #%d (%s)", seq, f.ID)) {
		t.Fatalf("verify-checkpoint of the forged ledger: %v", err)
	}
	t.Logf("verify checkpoint: %v", err)
	// Reopened, the writer reads the changed segment again and refuses
	// the ledger, naming the event.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if err := db.Unavailable()["pay"]; !errors.Is(err, ErrRewritten) {
		t.Fatalf("reopened after the forgery: ledger pay is %v, want ErrRewritten", err)
	}
}

// TestForgeryWithTreeRecomputed: the attacker also recomputes the tree
// file from the forged segments. On a running DB (the files changed in
// place under it), Verify fails on the signed checkpoint (ErrRewritten
// with its size and both roots) and VerifyCheckpoint of the checkpoint
// saved before fails too. Reopened, the ledger is refused: the tree file
// no longer gives the signed root, and the segments, from which Open
// rebuilds it, do not either. Then the attacker also removes the
// checkpoint file: nothing in the directory can tell any more (the threat
// model: someone with the files is caught only by checkpoints kept
// elsewhere), and the checkpoint saved before still catches the forgery.
func TestForgeryWithTreeRecomputed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	before := savedCheckpoint(t, dir, "pay")
	segDir := ledgerSegDir(t, dir, "pay")

	db := openTest(t, dir)
	f := forgeEvent(t, segDir, seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(testSeed(t), 15)))
	// The tree of the forged events, written over the tree file in place.
	info, err := db.Ledger("pay")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "tree")
	forgedTree, err := tree.Create(vfs.Default, tmp, uint32(info.ID))
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range db.Scan(ctx, "pay", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		line := ndjson.AppendLine(nil, ev.ID, ev.ID.Micros(), ev.Entity, ev.Key, ev.Event, ev.Meta, ev.Data)
		if err := forgedTree.Append([]tree.Hash{tree.LeafHash(line[:len(line)-1])}); err != nil {
			t.Fatal(err)
		}
	}
	if err := forgedTree.Sync(); err != nil {
		t.Fatal(err)
	}
	forgedTree.Close()
	b, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(segDir, "tree"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = db.Verify(ctx, "pay", nil)
	want := fmt.Sprintf("the checkpoint of size %d signed root %s, the events give", len(ids), b64(before.Root))
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify of the forged ledger with its tree recomputed: %v\nwant ErrRewritten saying %q", err, want)
	}
	t.Logf("verify: %v", err)
	if err := db.VerifyCheckpoint(ctx, "pay", before.Note, ""); !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify-checkpoint: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened: refused.
	db = openTest(t, dir)
	if err := db.Unavailable()["pay"]; !errors.Is(err, ErrRewritten) {
		t.Fatalf("reopened with the forged segments and tree: the ledger is not refused as rewritten: %v", err)
	}
	db.Close()

	// The checkpoint file removed too: Open refuses the ledger (a ledger
	// with events and no checkpoint) and signs nothing. The signer's
	// state inside the directory says a checkpoint was signed; removed
	// too (whoever can rewrite the directory can), only the operator's
	// act (AcceptLedger) signs the forged segments. Verify then passes;
	// the checkpoint kept outside does not.
	if err := os.Remove(filepath.Join(segDir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	if err := db.Unavailable()["pay"]; !errors.Is(err, ErrUnsigned) {
		t.Fatalf("reopened without the checkpoint file: %v, want ErrUnsigned", err)
	}
	db.Close()
	if err := os.Remove(filepath.Join(dir, "signing.key.state")); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	if _, err := db.AcceptLedger(ctx, "pay"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openTest(t, dir)
	defer db.Close()
	assertForgeryUndetectedByCRC(t, db, f, ids)
	if _, err := db.Verify(ctx, "pay", nil); err != nil {
		t.Fatalf("verify with the tree and the checkpoint recomputed by the attacker: %v (nothing in the directory can tell)", err)
	}
	if err := db.VerifyCheckpoint(ctx, "pay", before.Note, ""); !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify-checkpoint against the checkpoint kept outside: %v", err)
	}
}
