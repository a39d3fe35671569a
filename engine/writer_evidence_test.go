package engine

// The writer's Open against a reader's: on every state an operator or an
// attacker leaves, both say the same of whether a ledger is whole, and a
// ledger the writer refuses keeps its files as they were. The writer
// reads again what changed since an earlier Open stamped it
// (docs/recovery.md, "Stamps").

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"golang.org/x/mod/sumdb/tlog"
)

// zeroRecordPayload zeroes, in place, the payload of the record of event
// seq in the segments of the ledger directory ldir (its frame CRC then
// fails).
func zeroRecordPayload(t *testing.T, ldir string, seq uint64) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(ldir, "*.seg"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no segment in %s (%v)", ldir, err)
	}
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
			p := b[off+12 : off+12+n]
			if p[0] == 1 && binary.BigEndian.Uint64(p[16:]) == seq {
				clear(p)
				if err := os.WriteFile(name, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return
			}
			off += 12 + n
		}
	}
	t.Fatalf("no record #%d in %s", seq, ldir)
}

// checkpointPutBackLedger returns a data directory (and the folder of its
// ledger acct) of 41 events whose checkpoint file and signer state were
// put back to those of 21 events (both agree, and the events give their
// root), with record #30 damaged in place (its payload zeroed) below the
// index's progress.
func checkpointPutBackLedger(t *testing.T) (dir, ldir string) {
	t.Helper()
	ctx := context.Background()
	dir, id := checkpointLedger(t)
	ldir = filepath.Join(dir, "ledgers", id)
	ck21 := readFile(t, filepath.Join(ldir, checkpointFileName))
	state21 := readFile(t, filepath.Join(dir, "signing.key.state"))
	db := openTest(t, dir)
	for i := range 20 {
		if _, err := db.Append(ctx, "acct", []EventInput{order(100 + i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ldir, checkpointFileName), ck21, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "signing.key.state"), state21, 0o600); err != nil {
		t.Fatal(err)
	}
	zeroRecordPayload(t, ldir, 30)
	return dir, ldir
}

// TestRefusedLedgerTreeFileNotCut: the writer's Open must not cut a tree
// file before it refuses the ledger (docs/badinput.md S10: "nothing is cut
// or replaced before the ledger is judged"). The state: a checkpoint file
// and signer state of 21 events put back (both agree, the events give
// their root), the tree file of 41 leaves, and record #30 damaged in
// place below the index's progress (the segments' recovery trusts it).
// Open passes the evidence, cuts the tree file to 21 leaves, then fails to
// extend it from the segments and refuses the ledger: the leaves of #22 to
// #41 (the hashes of the events as they were written) are gone. Seen with
// the command: a restore by `cp -a older/. DIR/` over a running writer,
// then `annal append` cut a 20 MB tree file to 9,536 bytes and refused the
// ledger.
func TestRefusedLedgerTreeFileNotCut(t *testing.T) {
	t.Parallel()
	dir, ldir := checkpointPutBackLedger(t)
	treeBefore := readFile(t, filepath.Join(ldir, treeFileName))
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	refusal, refused := db.Unavailable()["acct"]
	if !refused {
		t.Fatalf("ledger acct with record #30 zeroed is not refused")
	}
	if after := readFile(t, filepath.Join(ldir, treeFileName)); !bytes.Equal(after, treeBefore) {
		t.Errorf("the writer's Open changed the tree file of the ledger it refused (%v): %d bytes before, %d after", refusal, len(treeBefore), len(after))
	}
}

// TestReaderAndWriterAgreeOnDamageBehindTheIndex: a record in the middle of
// a ledger's segment damaged in place (its payload zeroed: frame CRC
// mismatch), behind the index's progress. Issue 25's acceptance: a
// read-only reader and the writer agree on whether a ledger is whole. The
// read-only open verifies every record and refuses the ledger (so annal
// ledgers, scan, export, tail, get and verify exit 3); the writer's Open
// verifies only after the index's progress, opens it and appends to it
// (annal append exits 0 and acknowledges events into a ledger that every
// reader refuses).
func TestReaderAndWriterAgreeOnDamageBehindTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, id := checkpointLedger(t)
	zeroRecordPayload(t, filepath.Join(dir, "ledgers", id), 10)

	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	readerErr := ro.Unavailable()["acct"]
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	writerErr := db.Unavailable()["acct"]
	var appendErr error
	if writerErr == nil {
		_, appendErr = db.Append(ctx, "acct", []EventInput{order(99)}, nil)
	}
	if (readerErr == nil) != (writerErr == nil) {
		t.Errorf("reader and writer disagree on ledger acct with record #10 damaged:\n reader: %v\n writer: %v (an append: %v)", readerErr, writerErr, appendErr)
	}
}

// TestWriterRefusesForgedEventAsReaderDoes: an event changed in place with
// its CRC32C and ID kept (issue 25, finding 1; docs/badinput.md R5). The
// read-only open refuses the ledger (ErrRewritten), so every read command
// exits 3; the writer's default Open trusts its tree file up to the
// checkpoint and never compares it with the segments: it opens the ledger,
// Get returns the forged amount, and appends go on (annal append exit 0,
// signing checkpoints on top of the forged segments). Reader and writer
// must agree on whether the ledger is whole.
func TestWriterRefusesForgedEventAsReaderDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	forgeEvent(t, ledgerSegDir(t, dir, "pay"), seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 25)))
	if bad := readerVerdict(t, dir, "pay", ids[0].Ledger().String()); !errors.Is(bad, ErrRewritten) {
		t.Fatalf("the read-only open: ledger pay is %v, want ErrRewritten", bad)
	}
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable()["pay"]; !errors.Is(u, ErrRewritten) {
		t.Errorf("the writer's Open: ledger pay is %v, want ErrRewritten as the reader says", u)
	}
	if ev, err := db.Get(ctx, ids[seq-1]); err == nil {
		t.Errorf("the writer's Get of the forged event: %s, no error", ev.Data)
	}
}

// TestRefusedLedgerTornTailNotCut: the writer's Open must not cut a torn
// tail off the last segment of a ledger it then refuses (record #30
// damaged behind a checkpoint and signer state put back at 21 events):
// nothing under a refused ledger's directory changes.
func TestRefusedLedgerTornTailNotCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, ldir := checkpointPutBackLedger(t)
	segs, err := filepath.Glob(filepath.Join(ldir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	last := segs[len(segs)-1]
	// A torn write: the first half of a frame header claiming 200 bytes.
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0, 0, 0, 200, 1, 2}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before := readFile(t, last)
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	refusal, refused := db.Unavailable()["acct"]
	if !refused {
		_, aerr := db.Append(ctx, "acct", []EventInput{order(1)}, nil)
		t.Fatalf("ledger acct with record #30 zeroed is not refused (append: %v)", aerr)
	}
	if after := readFile(t, last); !bytes.Equal(after, before) {
		t.Errorf("the writer's Open changed the segment of the ledger it refused (%v): %d bytes before, %d after", refusal, len(before), len(after))
	}
}

// TestWriterChecksChangedSealedSegments: the writer's Open reads again,
// and checks against the tree, a sealed segment whose file changed since
// an earlier Open verified it (stamps.go), and only those: an event
// forged in place (CRC32C and ID kept) in a sealed segment that an earlier
// Open stamped is refused by the writer as by a reader, while an Open of
// the unchanged ledger reads the active segment only.
func TestWriterChecksChangedSealedSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	opts := &Options{SegmentSize: 4 << 10}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if _, err := db.Append(ctx, "pay", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ldir := filepath.Join(dir, ledgersDir, ids[0].Ledger().String())
	for range 2 { // the first Open verifies every segment and stamps the sealed ones
		db, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(ldir, stampsFileName))
	if err != nil {
		t.Fatalf("no stamps after two Opens: %v", err)
	}
	stamps, err := segment.UnmarshalStamps(b)
	if err != nil || len(stamps) < 2 || stamps[0].Last.Seq < seq {
		t.Fatalf("stamps %+v (%v): want sealed segment 1 with event #%d, and more", stamps, err, seq)
	}
	forgeEvent(t, ldir, seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 26)))
	if bad := readerVerdict(t, dir, "pay", ids[0].Ledger().String()); !errors.Is(bad, ErrRewritten) {
		t.Fatalf("the read-only open: ledger pay is %v, want ErrRewritten", bad)
	}
	db, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable()["pay"]; !errors.Is(u, ErrRewritten) {
		t.Errorf("the writer's Open of a ledger whose stamped sealed segment was forged: %v, want ErrRewritten", u)
	}
}

// stampedLedger creates in dir a ledger "pay" of about 200 events (each
// with a memo that forge.Event can solve) in 4 KiB segments, then opens
// and closes the DB twice, so that every sealed segment is stamped. It
// returns the ledger's folder, its ID and the stamps.
func stampedLedger(t *testing.T, dir string) (ldir, id string, stamps []segment.Stamp) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	appendPayments(t, db, 0, 200)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	id = info.ID.String()
	ldir = filepath.Join(dir, ledgersDir, id)
	for range 2 {
		db, err := Open(dir, stampOpts())
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return ldir, id, readStampsFile(t, ldir)
}

// stampOpts are the options of stampedLedger's DB: small segments.
func stampOpts() *Options { return &Options{SegmentSize: 4 << 10} }

// appendPayments appends n payments of amount 100 to ledger pay, the
// first numbered from.
func appendPayments(t *testing.T, db *DB, from, n int) {
	t.Helper()
	for i := from; i < from+n; i += 10 {
		var evs []EventInput
		for j := i; j < i+10 && j < from+n; j++ {
			evs = append(evs, EventInput{Entity: "payment", Key: fmt.Sprintf("p-%d", j), Event: "paid",
				Data: []byte(`{"amount":100,"memo":"` + forgeryMemo + `"}`)})
		}
		if _, err := db.Append(context.Background(), "pay", evs, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// readStampsFile returns the stamps kept in the ledger folder ldir.
func readStampsFile(t *testing.T, ldir string) []segment.Stamp {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ldir, stampsFileName))
	if err != nil {
		t.Fatalf("no stamps: %v", err)
	}
	stamps, err := segment.UnmarshalStamps(b)
	if err != nil || len(stamps) < 3 {
		t.Fatalf("stamps %+v (%v): want 3 sealed segments or more", stamps, err)
	}
	return stamps
}

// TestStampedSegmentForgedWithModTimeSetBack: an event forged in place in
// a stamped sealed segment whose modification time is then set back (as
// touch -d does): its change time still differs from the stamp's, and the
// writer refuses the ledger as a reader does.
func TestStampedSegmentForgedWithModTimeSetBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ldir, id, stamps := stampedLedger(t, dir)
	seg := filepath.Join(ldir, segment.FileName(stamps[1].Segment))
	if _, err := os.Stat(seg); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(seg)
	forgeEvent(t, ldir, stamps[1].Last.Seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 31)))
	if err := os.Chtimes(seg, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	bothRefuseRewritten(t, dir, id)
}

// TestForgedEventAfterTheStampedSegments: events forged in place in the
// first segment sealed since the stamps were written (the one right after
// the last stamped segment) and in the active segment: the writer's Open
// reads them and refuses the ledger, as a reader does.
func TestForgedEventAfterTheStampedSegments(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"first segment after the stamped ones", "active segment"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			ldir, id, stamps := stampedLedger(t, dir)
			db, err := Open(dir, stampOpts())
			if err != nil {
				t.Fatal(err)
			}
			appendPayments(t, db, 200, 100)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			seq := stamps[len(stamps)-1].Last.Seq + 1
			if where == "active segment" {
				segs, _ := filepath.Glob(filepath.Join(ldir, "*.seg"))
				if len(segs) < len(stamps)+3 {
					t.Fatalf("%d segments, want %d or more", len(segs), len(stamps)+3)
				}
				seq = 1 + 200 // the last event
			}
			forgeEvent(t, ldir, seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 32)))
			bothRefuseRewritten(t, dir, id)
		})
	}
}

// TestSwappedSealedSegmentsRefusedUnchanged: two stamped sealed segments'
// files swapped (renamed over each other): reader and writer refuse the
// ledger, and the writer changes no file of it.
func TestSwappedSealedSegmentsRefusedUnchanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ldir, id, stamps := stampedLedger(t, dir)
	a, b := filepath.Join(ldir, segment.FileName(stamps[0].Segment)), filepath.Join(ldir, segment.FileName(stamps[1].Segment))
	for _, mv := range [][2]string{{a, a + ".x"}, {b, a}, {a + ".x", b}} {
		if err := os.Rename(mv[0], mv[1]); err != nil {
			t.Fatal(err)
		}
	}
	bad := readerVerdict(t, dir, "pay", id)
	before := hashTree(t, ldir)
	u := writerVerdict(t, dir, "pay", id)
	if bad == nil || u == nil {
		t.Fatalf("swapped segments: the reader says %v, the writer %v; want both to refuse", bad, u)
	}
	if d := sameTree(before, hashTree(t, ldir)); d != "" {
		t.Errorf("the writer changed files of the ledger it refused: %s", d)
	}
}

// TestLedgerFolderMovedOrCopiedBackOpens: the ledger's folder moved away
// and back (stamps still match), or copied away with cp -a, removed and
// copied back (no stamp matches: every segment is read): the writer opens
// it, as a reader does, and its events are all there.
func TestLedgerFolderMovedOrCopiedBackOpens(t *testing.T) {
	for _, how := range []string{"mv", "cp -a"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			ldir, id, _ := stampedLedger(t, dir)
			away := filepath.Join(t.TempDir(), "away")
			if how == "mv" {
				if err := os.Rename(ldir, away); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(away, ldir); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, c := range [][]string{{"cp", "-a", ldir, away}, {"rm", "-rf", ldir}, {"cp", "-a", away, ldir}} {
					if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
						t.Fatalf("%v: %v %s", c, err, out)
					}
				}
			}
			if bad := readerVerdict(t, dir, "pay", id); bad != nil {
				t.Fatalf("the read-only open: %v", bad)
			}
			if u := writerVerdict(t, dir, "pay", id); u != nil {
				t.Fatalf("the writer's Open: %v", u)
			}
			db, err := Open(dir, stampOpts())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if info, err := db.Ledger("pay"); err != nil || info.Count != 201 {
				t.Errorf("ledger pay: %+v, %v; want 201 events", info, err)
			}
		})
	}
}

// TestStampsFileNotAStampsFile: a sealed file that is garbage, larger
// than its bound, a named pipe, a symbolic link to a device or to another
// ledger's stamps, a directory, stamps cut at a line, or stamps whose
// identities match but whose heads are wrong, or a sealed.tmp left by a
// crash: the writer opens the ledger (a stamp spares work, it is not
// evidence), as a reader does, without hanging.
func TestStampsFileNotAStampsFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		make func(t *testing.T, sealed string, stamps []segment.Stamp, other string)
	}{
		{"garbage", func(t *testing.T, sealed string, _ []segment.Stamp, _ string) {
			writeTestFile(t, sealed, []byte("annal sealed segments v1\n1 2 3\x00\xff\n"))
		}},
		{"huge", func(t *testing.T, sealed string, _ []segment.Stamp, _ string) {
			f, err := os.Create(sealed)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(maxStampsFile + 1); err != nil {
				t.Fatal(err)
			}
		}},
		{"named pipe", func(t *testing.T, sealed string, _ []segment.Stamp, _ string) {
			os.Remove(sealed)
			if err := syscall.Mkfifo(sealed, 0o600); err != nil {
				t.Skip(err)
			}
		}},
		{"symlink to /dev/zero", func(t *testing.T, sealed string, _ []segment.Stamp, _ string) {
			os.Remove(sealed)
			if err := os.Symlink("/dev/zero", sealed); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to another ledger's stamps", func(t *testing.T, sealed string, _ []segment.Stamp, other string) {
			os.Remove(sealed)
			if err := os.Symlink(other, sealed); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, sealed string, _ []segment.Stamp, _ string) {
			os.Remove(sealed)
			if err := os.Mkdir(sealed, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut at a line", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			writeTestFile(t, sealed, segment.MarshalStamps(stamps[:2]))
		}},
		{"cut inside a line", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			b := segment.MarshalStamps(stamps)
			writeTestFile(t, sealed, b[:len(b)-7])
		}},
		{"wrong last head", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			stamps[len(stamps)-1].Last.Seq--
			writeTestFile(t, sealed, segment.MarshalStamps(stamps))
		}},
		{"wrong last ID", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			stamps[len(stamps)-1].Last.ID = stamps[0].Last.ID
			writeTestFile(t, sealed, segment.MarshalStamps(stamps))
		}},
		{"wrong last location", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			stamps[len(stamps)-1].Last.Loc.Offset = 64
			writeTestFile(t, sealed, segment.MarshalStamps(stamps))
		}},
		{"wrong previous head", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			stamps[2].Prev = stamps[0].Last
			writeTestFile(t, sealed, segment.MarshalStamps(stamps))
		}},
		{"segments renumbered", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			for i := range stamps {
				stamps[i].Segment++
			}
			writeTestFile(t, sealed, segment.MarshalStamps(stamps))
		}},
		{"sealed.tmp left by a crash", func(t *testing.T, sealed string, stamps []segment.Stamp, _ string) {
			b := segment.MarshalStamps(stamps)
			writeTestFile(t, sealed+".tmp", b[:len(b)/2])
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ldir, id, stamps := stampedLedger(t, dir)
			other := filepath.Join(t.TempDir(), "sealed")
			writeTestFile(t, other, segment.MarshalStamps(stamps[:1]))
			c.make(t, filepath.Join(ldir, stampsFileName), stamps, other)
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Not readerVerdict: it reads every file (a pipe, a device).
				ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
				if err != nil {
					t.Errorf("the read-only open: %v", err)
					return
				}
				if bad := ro.Unavailable()["pay"]; bad != nil {
					t.Errorf("the read-only open: %v", bad)
				}
				ro.Close()
				if u := writerVerdict(t, dir, "pay", id); u != nil {
					t.Errorf("the writer's Open: %v", u)
				}
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("Open still running after a minute")
			}
		})
	}
}

// writeTestFile writes b to name.
func writeTestFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTreeLeafDamagedUnderStampedSegments: the tree file's hash of event
// #3's leaf (in a stamped sealed segment) changed, its interior hashes
// kept, so that the root at the checkpoint's size is still the signed
// one. A reader recomputes every leaf from the events; the writer's Open
// checks the tree file's leaves only from the first event it read, and
// trusts those of the stamped segments. Then whatever the writer serves
// from the tree must still verify: an inclusion proof of event #3 against
// the signed root (or the tree is rebuilt at Open), or else the proof is
// refused as ErrTreeDamaged.
func TestTreeLeafDamagedUnderStampedSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ldir, id, _ := stampedLedger(t, dir)
	f, err := os.OpenFile(filepath.Join(ldir, treeFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 32), tree.HeaderSize+32*tlog.StoredHashIndex(0, 2)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if bad := readerVerdict(t, dir, "pay", id); bad != nil {
		t.Fatalf("the read-only open: %v", bad)
	}
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if u := db.Unavailable()["pay"]; u != nil {
		t.Fatalf("the writer's Open: %v", u)
	}
	var third eventid.ID
	for ev, err := range db.Scan(ctx, "pay", ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq == 3 {
			third = ev.ID
			break
		}
	}
	p, err := db.ProveInclusion(ctx, third, 0)
	if errors.Is(err, ErrTreeDamaged) && db.TreeRebuilt()["pay"] == nil {
		return // refused, naming the damage and annal reindex
	}
	if err != nil {
		t.Fatalf("the writer's proof of event #3: %v", err)
	}
	ck, err := db.LatestCheckpoint("pay")
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.VerifyInclusion(p.Seq-1, p.TreeSize, p.LeafHash, p.Hashes, ck.Root); err != nil {
		t.Errorf("the writer serves an inclusion proof of event #3 that does not verify against its signed root (tree rebuilt at Open: %v): %v", db.TreeRebuilt()["pay"], err)
	}
}

// TestForgedSealedFileTrustedOnlyByDefaultOpen: an attacker who forges an
// event in a stamped segment and rewrites the sealed file with the
// segment's new identity gets the forged segment trusted by the writer's
// default Open (docs/decisions/stamps.md says so), and by a default
// read-only open, which is spared what the writer's is
// (docs/decisions/reads-cost-what-they-read.md); FullVerifyOnOpen (a
// writer's, or a reader's: annal verify), RebuildIndex and DB.Verify
// still refuse it.
func TestForgedSealedFileTrustedOnlyByDefaultOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ldir, id, stamps := stampedLedger(t, dir)
	seg := filepath.Join(ldir, segment.FileName(stamps[1].Segment))
	forgeEvent(t, ldir, stamps[1].Last.Seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 33)))
	var st syscall.Stat_t
	if err := syscall.Stat(seg, &st); err != nil {
		t.Fatal(err)
	}
	stamps[1].File = segment.FileIdentity{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, Ctime: st.Ctim.Nano(), Mtime: st.Mtim.Nano()}
	writeTestFile(t, filepath.Join(ldir, stampsFileName), segment.MarshalStamps(stamps))
	if bad := readerVerdictWith(t, Options{FullVerifyOnOpen: true}, dir, "pay", id); !errors.Is(bad, ErrRewritten) {
		t.Fatalf("the read-only open with FullVerifyOnOpen: ledger pay is %v, want ErrRewritten", bad)
	}
	defaultReader := readerVerdict(t, dir, "pay", id)
	keep := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, keep).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	if u := db.Unavailable()["pay"]; (u == nil) != (defaultReader == nil) {
		t.Errorf("the writer's default Open and a default reader disagree: %v, %v", u, defaultReader)
	}
	if u := db.Unavailable()["pay"]; u != nil {
		t.Logf("the writer's default Open refuses it too: %v", u)
	} else if _, err := db.Verify(ctx, "pay", nil); !errors.Is(err, ErrRewritten) {
		t.Errorf("DB.Verify of the forged ledger: %v, want ErrRewritten", err)
	}
	db.Close()
	for _, o := range []*Options{{SegmentSize: 4 << 10, FullVerifyOnOpen: true}, {SegmentSize: 4 << 10, RebuildIndex: true}} {
		dir := filepath.Join(t.TempDir(), "d")
		if out, err := exec.Command("cp", "-a", keep, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v %s", err, out)
		}
		// cp -a gave new identities: put the forged stamps' back.
		sealedCopy := filepath.Join(dir, ledgersDir, id, stampsFileName)
		if err := syscall.Stat(filepath.Join(dir, ledgersDir, id, segment.FileName(stamps[1].Segment)), &st); err != nil {
			t.Fatal(err)
		}
		for i := range stamps {
			var s syscall.Stat_t
			if err := syscall.Stat(filepath.Join(dir, ledgersDir, id, segment.FileName(stamps[i].Segment)), &s); err != nil {
				t.Fatal(err)
			}
			stamps[i].File = segment.FileIdentity{Dev: uint64(s.Dev), Ino: s.Ino, Size: s.Size, Ctime: s.Ctim.Nano(), Mtime: s.Mtim.Nano()}
		}
		writeTestFile(t, sealedCopy, segment.MarshalStamps(stamps))
		db, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		if u := db.Unavailable()["pay"]; !errors.Is(u, ErrRewritten) {
			t.Errorf("Open with FullVerifyOnOpen %v, RebuildIndex %v: ledger pay is %v, want ErrRewritten", o.FullVerifyOnOpen, o.RebuildIndex, u)
		}
		db.Close()
	}
}

// TestSignerAheadOfCheckpointWithStamps: the signer's state ahead of the
// checkpoint file (a crash between their writes, or the checkpoint file
// put back from before the last run) on a stamped ledger: the tree is
// checked beyond the checkpoint from the segments, and the writer opens
// the ledger, as a reader does; with an event forged in a stamped segment
// covered only by the signer's state, both refuse it.
func TestSignerAheadOfCheckpointWithStamps(t *testing.T) {
	t.Parallel()
	for _, forged := range []bool{false, true} {
		t.Run(fmt.Sprintf("forged=%v", forged), func(t *testing.T) {
			dir := t.TempDir()
			ldir, id, _ := stampedLedger(t, dir)
			ck, err := os.ReadFile(filepath.Join(ldir, checkpointFileName))
			if err != nil {
				t.Fatal(err)
			}
			db, err := Open(dir, stampOpts())
			if err != nil {
				t.Fatal(err)
			}
			appendPayments(t, db, 200, 100)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // stamp the segments sealed since
				if u := writerVerdict(t, dir, "pay", id); u != nil {
					t.Fatal(u)
				}
			}
			writeTestFile(t, filepath.Join(ldir, checkpointFileName), ck)
			if forged {
				forgeEvent(t, ldir, 250, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 34)))
			}
			bad := readerVerdict(t, dir, "pay", id)
			u := writerVerdict(t, dir, "pay", id)
			if (bad == nil) != !forged || (u == nil) != !forged {
				t.Errorf("forged %v: the reader says %v, the writer %v", forged, bad, u)
			}
		})
	}
}

// TestOpenOfThousandsOfSmallSegments: a ledger of about 3,000 small
// sealed segments opens, whole, three times in a row: the first Open
// without stamps reads every segment and writes their stamps, the next
// ones read only the active segment (each still opens every segment's
// file). The times are logged, not asserted (BenchmarkOpen measures).
func TestOpenOfThousandsOfSmallSegments(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds 3,000 segments")
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4 << 10, Durability: None}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "many"}); err != nil {
		t.Fatal(err)
	}
	batch := make([]EventInput, 20)
	for i := range 3000 {
		for j := range batch {
			batch[j] = order(i*20 + j)
		}
		if _, err := db.Append(ctx, "many", batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.Ledger("many")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, ledgersDir, info.ID.String(), "*.seg"))
	for i, what := range []string{"first (no stamps: every segment read)", "second (stamps of every sealed segment)", "third"} {
		start := time.Now()
		db, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if u := db.Unavailable()["many"]; u != nil {
			t.Fatalf("Open %d: %v", i+1, u)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d segments, %d events: %s Open took %v", len(segs), info.Count, what, took)
	}
}

// TestBackupOfStampedLedgerOpens: DB.Backup of a running writer's stamped
// ledger (sealed segments hard-linked: the link changes their change
// time, and the live directory's stamps no longer match): the backup and
// the live directory both open, in the writer as in a reader, with every
// event; an event then forged in a sealed segment of the backup is
// refused by both in the backup.
func TestBackupOfStampedLedgerOpens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	_, id, stamps := stampedLedger(t, dir)
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	appendPayments(t, db, 200, 20)
	bdir := filepath.Join(t.TempDir(), "backup")
	res, err := db.Backup(ctx, bdir)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup: %+v", res)
	for _, d := range []string{dir, bdir} {
		if bad := readerVerdict(t, d, "pay", id); bad != nil {
			t.Errorf("the read-only open of %s: %v", d, bad)
		}
		if u := writerVerdict(t, d, "pay", id); u != nil {
			t.Errorf("the writer's Open of %s: %v", d, u)
		}
	}
	// The backup's segments are hard links of the live ones: forge a copy.
	bldir := filepath.Join(bdir, ledgersDir, id)
	seg := filepath.Join(bldir, segment.FileName(stamps[1].Segment))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(seg)
	writeTestFile(t, seg, b)
	forgeEvent(t, bldir, stamps[1].Last.Seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(7, 35)))
	if bad := readerVerdict(t, bdir, "pay", id); !errors.Is(bad, ErrRewritten) {
		t.Errorf("the read-only open of the forged backup: %v, want ErrRewritten", bad)
	}
	if u := writerVerdict(t, bdir, "pay", id); !errors.Is(u, ErrRewritten) {
		t.Errorf("the writer's Open of the forged backup: %v, want ErrRewritten", u)
	}
	if u := writerVerdict(t, dir, "pay", id); u != nil {
		t.Errorf("the live directory after the backup's forgery: %v", u)
	}
}

// stampsChildEnv makes TestStampsKillChild the child of
// TestStampsWriteKilled: it opens the DB in the directory it names,
// appends 30 payments (a segment sealed) and closes it, again and again,
// so that each Open writes the stamps again.
const stampsChildEnv = "ANNAL_STAMPS_CHILD"

func TestStampsKillChild(t *testing.T) {
	dir := os.Getenv(stampsChildEnv)
	if dir == "" {
		return
	}
	for i := 0; ; i++ {
		db, err := Open(dir, stampOpts())
		if err != nil {
			fmt.Println("fatal", err)
			os.Exit(3)
		}
		if u := db.Unavailable()["pay"]; u != nil {
			fmt.Println("fatal", u)
			os.Exit(3)
		}
		appendPayments(t, db, 1000+30*i, 30)
		if err := db.Close(); err != nil {
			fmt.Println("fatal", err)
			os.Exit(3)
		}
	}
}

// TestStampsWriteKilled: a writer killed (SIGKILL) at random times while
// it opens (writing the stamps), appends and closes, 10 times: after each
// kill, the writer's Open and a reader agree that the ledger is whole.
func TestStampsWriteKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	rng := mrand.New(mrand.NewPCG(testSeed(t), 36))
	dir := t.TempDir()
	_, id, _ := stampedLedger(t, dir)
	for round := range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStampsKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), stampsChildEnv+"="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		if bytes.Contains(out.Bytes(), []byte("fatal")) {
			t.Fatalf("round %d: the child failed: %s", round, out.Bytes())
		}
		bad := readerVerdict(t, dir, "pay", id)
		u := writerVerdict(t, dir, "pay", id)
		if bad != nil || u != nil {
			t.Fatalf("round %d, after a kill: the reader says %v, the writer %v", round, bad, u)
		}
	}
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.Ledger("pay")
	if err != nil || info.Count <= 201 {
		t.Fatalf("the children appended nothing: %+v, %v", info, err)
	}
	t.Logf("%d events after 10 kills", info.Count)
}

// TestSegmentsRemovedOrAddedAfterStamps: after the sealed segments were
// stamped, the active segment removed (the last stamped one becomes the
// last), the last two removed, or a copy of a sealed segment added after
// the active one: the writer refuses the ledger as a reader does, and
// changes none of its files.
func TestSegmentsRemovedOrAddedAfterStamps(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T, segs []string){
		"active removed": func(t *testing.T, segs []string) {
			os.Remove(segs[len(segs)-1])
		},
		"last two removed": func(t *testing.T, segs []string) {
			os.Remove(segs[len(segs)-1])
			os.Remove(segs[len(segs)-2])
		},
		"sealed copy added": func(t *testing.T, segs []string) {
			b, err := os.ReadFile(segs[1])
			if err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, filepath.Join(filepath.Dir(segs[0]), segment.FileName(uint64(len(segs)+1))), b)
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ldir, id, _ := stampedLedger(t, dir)
			segs, _ := filepath.Glob(filepath.Join(ldir, "*.seg"))
			change(t, segs)
			bad := readerVerdict(t, dir, "pay", id)
			before := hashTree(t, ldir)
			u := writerVerdict(t, dir, "pay", id)
			if bad == nil || u == nil {
				t.Fatalf("the reader says %v, the writer %v; want both to refuse", bad, u)
			}
			if d := sameTree(before, hashTree(t, ldir)); d != "" {
				t.Errorf("the writer changed files of the ledger it refused (%v): %s", u, d)
			}
		})
	}
}

// TestAcceptLedgerWithStamps: a stamped ledger whose checkpoint file was
// removed is refused (ErrUnsigned) by the writer as by a reader;
// AcceptLedger signs it, and the next Opens (stamps matching) open it
// with every event.
func TestAcceptLedgerWithStamps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ldir, id, _ := stampedLedger(t, dir)
	if err := os.Remove(filepath.Join(ldir, checkpointFileName)); err != nil {
		t.Fatal(err)
	}
	bad := readerVerdict(t, dir, "pay", id)
	u := writerVerdict(t, dir, "pay", id)
	if !errors.Is(bad, ErrUnsigned) || !errors.Is(u, ErrUnsigned) {
		t.Fatalf("checkpoint removed: the reader says %v, the writer %v; want ErrUnsigned", bad, u)
	}
	db, err := Open(dir, stampOpts())
	if err != nil {
		t.Fatal(err)
	}
	ck, err := db.AcceptLedger(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if ck.Size != 201 {
		t.Errorf("accepted at size %d, want 201", ck.Size)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if bad, u := readerVerdict(t, dir, "pay", id), writerVerdict(t, dir, "pay", id); bad != nil || u != nil {
			t.Fatalf("after AcceptLedger: the reader says %v, the writer %v", bad, u)
		}
	}
}

// bothRefuseRewritten checks that a reader and the writer's Open both
// refuse ledger pay (ID id) in dir as rewritten (ErrRewritten).
func bothRefuseRewritten(t *testing.T, dir, id string) {
	t.Helper()
	if bad := readerVerdict(t, dir, "pay", id); !errors.Is(bad, ErrRewritten) {
		t.Fatalf("the read-only open: ledger pay is %v, want ErrRewritten", bad)
	}
	if u := writerVerdict(t, dir, "pay", id); !errors.Is(u, ErrRewritten) {
		t.Errorf("the writer's Open: ledger pay is %v, want ErrRewritten", u)
	}
}
