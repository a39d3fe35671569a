package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The in-place forgery of issue 14, done as an attacker with write access
// to the data directory (and no signing key) would do it: an event's
// amount is changed from 100 to 999 in its segment file, and 8 characters
// of a free-text field of the same event are chosen so that the event's
// CRC32C checksum (docs/format.md, section 3) is unchanged. The checksum
// is affine over GF(2) in the bits of the message: flipping a set of bits
// XORs the CRC with the XOR of each bit's own effect, so the bits to flip
// are the solution of a 32 x K linear system. The record's frame CRC is
// then recomputed. The Event ID, every later ID, the chain, the index and
// every segment-level check stay as they were.

const forgeryMemo = "refund approved by desk 7, ticket 4711" // the free-text field

// forgedRecord says what forgeEvent changed.
type forgedRecord struct {
	file      string // the segment file
	offset    int64  // of the record's frame
	seq       uint64
	id        eventid.ID
	old, data []byte // the event's data before and after
}

// forgeEvent rewrites, in the segment files of the ledger in dir, the
// event with sequence number seq: from in its data becomes to (same
// length), and characters of the value of its "memo" member are chosen so
// that the event checksum is unchanged. The frame CRC is recomputed.
func forgeEvent(t *testing.T, dir string, seq uint64, from, to string, rng *rand.Rand) forgedRecord {
	t.Helper()
	if len(from) != len(to) {
		t.Fatal("forgeEvent: from and to must have the same length")
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(names) == 0 {
		t.Fatalf("forgeEvent: no segment in %s (%v)", dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(64); off+12 <= int64(len(b)); {
			n := int64(binary.BigEndian.Uint32(b[off:]))
			if n == 0 || off+12+n > int64(len(b)) {
				break
			}
			frame := b[off : off+12+n]
			p := frame[12:]
			if p[0] == 1 && binary.BigEndian.Uint64(p[16:]) == seq {
				f := forgeFrame(t, frame, from, to, rng)
				f.file, f.offset = name, off
				if err := os.WriteFile(name, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return f
			}
			off += 12 + n
		}
	}
	t.Fatalf("forgeEvent: no record #%d in %s", seq, dir)
	return forgedRecord{}
}

// forgeFrame rewrites the event record frame in place (see forgeEvent).
func forgeFrame(t *testing.T, frame []byte, from, to string, rng *rand.Rand) forgedRecord {
	t.Helper()
	p := frame[12:]
	entityLen, keyLen, eventLen := int(binary.BigEndian.Uint16(p[2:])), int(binary.BigEndian.Uint16(p[4:])), int(binary.BigEndian.Uint16(p[6:]))
	metaLen, dataLen := int(binary.BigEndian.Uint32(p[8:])), int(binary.BigEndian.Uint32(p[12:]))
	var id, prev eventid.ID
	copy(id[:], p[24:40])
	copy(prev[:], p[40:56])
	at := 56
	entity := string(p[at : at+entityLen])
	at += entityLen
	key := string(p[at : at+keyLen])
	at += keyLen
	event := string(p[at : at+eventLen])
	at += eventLen
	meta := p[at : at+metaLen]
	at += metaLen
	data := p[at : at+dataLen] // the record's bytes: changed in place
	old := bytes.Clone(data)

	i := bytes.Index(data, []byte(from))
	if i < 0 {
		t.Fatalf("forgeEvent: %q is not in the data %s", from, data)
	}
	copy(data[i:], to)
	memo := bytes.Index(data, []byte(`"memo":"`))
	if memo < 0 {
		t.Fatalf("forgeEvent: no memo in %s", data)
	}
	memo += len(`"memo":"`)
	memoLen := bytes.IndexByte(data[memo:], '"')

	ledger, micros := id.Ledger(), id.Micros()
	checksum := func() uint32 {
		c := eventid.Content{Entity: entity, Key: key, Event: event, Meta: meta, Data: data}
		return c.Checksum(ledger, micros, prev)
	}
	// Each chosen character is 0x60 | 4 free bits ('`' to 'o': printable,
	// never escaped in JSON), so 8 characters give 32 unknowns. When the
	// system has no solution for the positions drawn, draw others.
	for try := 0; try < 200; try++ {
		pos := rng.Perm(memoLen)[:8]
		for _, q := range pos {
			data[memo+q] = 0x60
		}
		base := checksum()
		var effect [32]uint32 // of unknown 4*k+bit
		for k, q := range pos {
			for bit := range 4 {
				data[memo+q] ^= 1 << bit
				effect[4*k+bit] = checksum() ^ base
				data[memo+q] ^= 1 << bit
			}
		}
		x, ok := solveGF2(effect[:], base^id.Checksum())
		if !ok {
			continue
		}
		for k, q := range pos {
			data[memo+q] = 0x60 | byte(x>>(4*k))&0xf
		}
		if got := checksum(); got != id.Checksum() {
			t.Fatalf("forgeEvent: the solved checksum is %08x, want %08x", got, id.Checksum())
		}
		// The frame CRC: bytes 0-3, then 8 to the end.
		crc := crc32.Update(crc32.Checksum(frame[0:4], castagnoli), castagnoli, frame[8:])
		binary.BigEndian.PutUint32(frame[4:], crc)
		return forgedRecord{seq: binary.BigEndian.Uint64(p[16:]), id: id, old: old, data: bytes.Clone(data)}
	}
	t.Fatal("forgeEvent: no solution in 200 draws of positions")
	return forgedRecord{}
}

// solveGF2 returns x (bit j set: XOR column j in) such that the XOR of
// the columns chosen is s, by Gaussian elimination over GF(2).
func solveGF2(cols []uint32, s uint32) (uint64, bool) {
	var pivot [32]struct {
		vec   uint32
		combo uint64
		set   bool
	}
	for j, c := range cols {
		combo := uint64(1) << j
		for b := 31; b >= 0 && c != 0; b-- {
			if c&(1<<b) == 0 {
				continue
			}
			if !pivot[b].set {
				pivot[b].vec, pivot[b].combo, pivot[b].set = c, combo, true
				c = 0
				break
			}
			c ^= pivot[b].vec
			combo ^= pivot[b].combo
		}
	}
	var x uint64
	for b := 31; b >= 0; b-- {
		if s&(1<<b) == 0 {
			continue
		}
		if !pivot[b].set {
			return 0, false
		}
		s ^= pivot[b].vec
		x ^= pivot[b].combo
	}
	return x, s == 0
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

// assertForgeryUndetectedByCRC checks that the forgery is real: the
// directory opens, every event has its old ID, Get returns the forged
// data, the segment log verifies on its own, and an export verifies with
// ndjson.VerifyAll: everything the CRC32C chain can check passes.
func assertForgeryUndetectedByCRC(t *testing.T, dir string, f forgedRecord, ids []eventid.ID) {
	t.Helper()
	ctx := context.Background()
	db := openTest(t, dir)
	defer db.Close()
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
	ev, err := db.Get(ctx, f.id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.Data, f.data) || !strings.Contains(string(ev.Data), `"amount":999`) {
		t.Fatalf("Get returns %s, the forgery wrote %s", ev.Data, f.data)
	}
	// The segment log alone, every record verified (frame CRCs, event
	// checksums, chain).
	log, _, err := segment.Open(filepath.Dir(f.file), segment.Options{Ledger: info.ID}, segment.Head{})
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
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	f := forgeEvent(t, ledgerSegDir(t, dir, "pay"), seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(rand.Uint64(), 14)))
	t.Logf("forged #%d %s: %s -> %s", f.seq, f.id, f.old, f.data)
	if f.id != ids[seq-1] {
		t.Fatalf("forged %s, the payment is %s", f.id, ids[seq-1])
	}
	assertForgeryUndetectedByCRC(t, dir, f, ids)
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
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	before := savedCheckpoint(t, dir, "pay") // Close issued it
	if before.Size != uint64(len(ids)) {
		t.Fatalf("the checkpoint Close issued covers %d events, the ledger has %d", before.Size, len(ids))
	}
	f := forgeEvent(t, ledgerSegDir(t, dir, "pay"), seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(rand.Uint64(), 14)))
	assertForgeryUndetectedByCRC(t, dir, f, ids)

	db := openTest(t, dir)
	defer db.Close()
	_, err := db.Verify(ctx, "pay", nil)
	want := fmt.Sprintf("event #%d (%s) is not the event the tree committed to", seq, f.id)
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CRC32C") {
		t.Fatalf("verify of the forged ledger: %v\nwant ErrRewritten saying %q", err, want)
	}
	t.Logf("verify: %v", err)
	err = db.VerifyCheckpoint(ctx, "pay", before.Note, "")
	if !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), fmt.Sprintf("event #%d (%s)", seq, f.id)) {
		t.Fatalf("verify-checkpoint of the forged ledger: %v", err)
	}
	t.Logf("verify checkpoint: %v", err)
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
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	before := savedCheckpoint(t, dir, "pay")
	segDir := ledgerSegDir(t, dir, "pay")

	db := openTest(t, dir)
	f := forgeEvent(t, segDir, seq, `"amount":100`, `"amount":999`, rand.New(rand.NewPCG(rand.Uint64(), 15)))
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
	assertForgeryUndetectedByCRC(t, dir, f, ids)
	db = openTest(t, dir)
	defer db.Close()
	if _, err := db.Verify(ctx, "pay", nil); err != nil {
		t.Fatalf("verify with the tree and the checkpoint recomputed by the attacker: %v (nothing in the directory can tell)", err)
	}
	if err := db.VerifyCheckpoint(ctx, "pay", before.Note, ""); !errors.Is(err, ErrRewritten) || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify-checkpoint against the checkpoint kept outside: %v", err)
	}
}
