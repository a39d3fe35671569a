package engine

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// readerVerdict opens dir read-only and returns why ledger name (or the
// ledger with ID id, when the reader knows it by ID) is unavailable (nil:
// it is readable, every event of it read), checking that the reader
// changed no byte of dir and that every other ledger is readable.
func readerVerdict(t *testing.T, dir, name, id string, alsoRefused ...string) error {
	t.Helper()
	return readerVerdictWith(t, Options{}, dir, name, id, alsoRefused...)
}

// readerVerdictWith is readerVerdict with the read-only DB opened with o
// (and a TempDir of the test's).
func readerVerdictWith(t *testing.T, o Options, dir, name, id string, alsoRefused ...string) error {
	t.Helper()
	ctx := context.Background()
	before := hashTree(t, dir)
	o.TempDir = t.TempDir()
	db, err := OpenReadOnly(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if d := sameTree(before, hashTree(t, dir)); d != "" {
			t.Fatalf("the read-only open changed files: %s", d)
		}
	}()
	var bad error
	var badKey string
	for key, err := range db.Unavailable() {
		if key == name || key == id {
			bad, badKey = err, key
			continue
		}
		if !slices.Contains(alsoRefused, key) {
			t.Errorf("ledger %s is unavailable too: %v", key, err)
		}
	}
	for _, info := range db.Ledgers() {
		if info.Name == name && bad != nil {
			t.Errorf("ledger %s is both unavailable and listed", name)
		}
		n := uint64(0)
		for _, err := range db.Scan(ctx, info.Name, ScanOptions{}) {
			if err != nil {
				t.Fatalf("scan %s: %v", info.Name, err)
			}
			n++
		}
		if n != info.Count {
			t.Errorf("scan %s: %d events, the ledger counts %d", info.Name, n, info.Count)
		}
	}
	if bad != nil {
		if _, err := db.Ledger(badKey); !errors.Is(err, ErrLedgerUnavailable) {
			t.Errorf("Ledger(%s): %v, want ErrLedgerUnavailable", badKey, err)
		}
		if id != "" {
			if _, err := db.Ledger(id); !errors.Is(err, ErrLedgerUnavailable) {
				t.Errorf("Ledger(%s) by ID: %v, want ErrLedgerUnavailable", id, err)
			}
		}
		for _, err := range db.Scan(ctx, badKey, ScanOptions{}) {
			if !errors.Is(err, ErrLedgerUnavailable) {
				t.Errorf("Scan of the refused ledger: %v, want ErrLedgerUnavailable", err)
			}
			break
		}
	}
	return bad
}

// writerVerdict opens dir with Open and returns why ledger name (or id) is
// unavailable, nil if it opened.
func writerVerdict(t *testing.T, dir, name, id string) error {
	t.Helper()
	db, err := Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u := db.Unavailable()
	if err := u[name]; err != nil {
		return err
	}
	return u[id]
}

// TestReadOnlyRefusesLostTail: the read-only open refuses the lost tails of
// the operator catalogue (O16-O22, O58-O60: a segment removed, cut at a
// record boundary, zeroed, with meta.db removed or older, every segment
// removed), which the writer's Open refuses as "acknowledged events lost",
// were served by a read-only open (annal ledgers, scan, export, tail) as a
// shorter ledger, without a word. The reader now refuses each, as the
// writer does, and changes no byte; a torn tail after the witness is
// still hidden, not refused.
func TestReadOnlyRefusesLostTail(t *testing.T) {
	t.Parallel()
	lt := newLostTailLedger(t)
	type damage = func(t *testing.T, lt *lostTailLedger, dir string)
	cases := map[string]damage{}
	for _, c := range lostTailCases() {
		cases[c.name] = c.damage
	}
	metaRemoved := func(t *testing.T, dir string) {
		if err := os.Remove(filepath.Join(dir, metaFile)); err != nil {
			t.Fatal(err)
		}
	}
	cases["last segment removed, meta.db removed"] = func(t *testing.T, lt *lostTailLedger, dir string) {
		cases["last segment removed"](t, lt, dir)
		metaRemoved(t, dir)
	}
	cases["last segment cut at a record boundary, meta.db older"] = func(t *testing.T, lt *lostTailLedger, dir string) {
		cases["last segment cut at a record boundary"](t, lt, dir)
		writeFile(t, filepath.Join(dir, metaFile), lt.earlyMeta)
	}
	cases["every segment removed, meta.db removed"] = func(t *testing.T, lt *lostTailLedger, dir string) {
		for n := 1; n <= lt.segs; n++ {
			if err := os.Remove(lt.seg(dir, n)); err != nil {
				t.Fatal(err)
			}
		}
		metaRemoved(t, dir)
	}
	cases["the ledger's directory removed"] = func(t *testing.T, lt *lostTailLedger, dir string) {
		if err := os.RemoveAll(filepath.Join(dir, ledgersDir, lt.id.String())); err != nil {
			t.Fatal(err)
		}
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, lt.dir, dir)
			damage(t, lt, dir)
			bad := readerVerdict(t, dir, "l", lt.id.String())
			if bad == nil {
				t.Fatal("the read-only open served ledger l: the lost tail was accepted")
			}
			want := "acknowledged events lost"
			if strings.Contains(name, "directory removed") {
				want = "its segment directory is missing" // as Open says it
			} else if !errors.Is(bad, segment.ErrCorruption) {
				t.Errorf("error %v does not match %v", bad, segment.ErrCorruption)
			}
			if !errors.Is(bad, ErrLedgerUnavailable) {
				t.Errorf("error %v does not match %v", bad, ErrLedgerUnavailable)
			}
			if !strings.Contains(bad.Error(), want) {
				t.Errorf("error %q does not say %q", bad, want)
			}
			if w := writerVerdict(t, dir, "l", lt.id.String()); !errors.Is(w, segment.ErrCorruption) && !strings.Contains(fmt.Sprint(w), want) {
				t.Errorf("the writer's Open: %v; the reader refused: %v", w, bad)
			}
		})
	}
	t.Run("torn tail after the witness", func(t *testing.T) {
		dir := t.TempDir()
		copyTree(t, lt.dir, dir)
		f, err := os.OpenFile(lt.seg(dir, lt.segs), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte{0, 0, 0, 200, 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if bad := readerVerdict(t, dir, "l", lt.id.String()); bad != nil {
			t.Fatalf("the reader refused a torn tail after the witness: %v", bad)
		}
		if w := writerVerdict(t, dir, "l", lt.id.String()); w != nil {
			t.Fatalf("the writer refused a torn tail after the witness: %v", w)
		}
	})
}

// TestReadOnlyRefusesRestoredOlderFolder is the backup case: a
// ledger folder restored from an older copy (1,000 of 1,500 events): the
// writer refuses it, and a read-only open (annal export) served the 1,000
// as the whole ledger.
func TestReadOnlyRefusesRestoredOlderFolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "acct"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	synced := appendSpec{Batch: batchesOf(100), Options: &AppendOptions{Durability: Sync}}
	appendEvents(t, db, "acct", 900, synced)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, ledgersDir, info.ID.String())
	saved := t.TempDir()
	copyTree(t, folder, saved)
	db = openTest(t, dir)
	appendEvents(t, db, "acct", 500, synced)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(folder); err != nil {
		t.Fatal(err)
	}
	copyTree(t, saved, folder)
	bad := readerVerdict(t, dir, "acct", info.ID.String())
	if !errors.Is(bad, segment.ErrCorruption) || !strings.Contains(bad.Error(), "acknowledged events lost") {
		t.Fatalf("the read-only open: ledger acct is %v, want refused (acknowledged events lost)", bad)
	}
	if w := writerVerdict(t, dir, "acct", info.ID.String()); !errors.Is(w, segment.ErrCorruption) {
		t.Fatalf("the writer's Open: %v", w)
	}
}

// TestReadOnlyRefusesForgedEvent: an event changed in place with its CRC
// and Event ID kept (trust catalogue T1): Get and Export of a read-only
// open served the forged amount. The signed checkpoint covers it: the
// reader refuses the ledger (ErrRewritten), as the writer's Open does
// once the tree is recomputed (T2), and Get of the event says why.
func TestReadOnlyRefusesForgedEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seq, ids := forgeryLedger(t, dir)
	forgeEvent(t, ledgerSegDir(t, dir, "pay"), seq, `"amount":100`, `"amount":999`, mrand.New(mrand.NewPCG(testSeed(t), 25)))
	bad := readerVerdict(t, dir, "pay", ids[0].Ledger().String())
	if !errors.Is(bad, ErrRewritten) {
		t.Fatalf("the read-only open: ledger pay is %v, want ErrRewritten", bad)
	}
	db, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ev, err := db.Get(context.Background(), ids[seq-1]); !errors.Is(err, ErrLedgerUnavailable) || !errors.Is(err, ErrRewritten) {
		t.Fatalf("Get of the forged event: %s, %v; want ErrLedgerUnavailable, ErrRewritten", ev.Data, err)
	}
}

// checkpointLedger returns a closed directory with ledger "acct" (21
// events, a checkpoint of all of them) and ledger "other".
func checkpointLedger(t *testing.T) (dir, id string) {
	t.Helper()
	ctx := context.Background()
	dir = t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "acct"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.Append(ctx, "acct", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, info.ID.String()
}

// readerID returns the ID of ledger name in dir.
func readerID(t *testing.T, dir, name string) string {
	t.Helper()
	return readerLedger(t, dir, name).ID.String()
}

// readerLedger returns ledger name of the data directory dir, opened
// read-only.
func readerLedger(t *testing.T, dir, name string) LedgerInfo {
	t.Helper()
	db, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.Ledger(name)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestReadOnlyChecksCheckpoint: the checkpoint evidence a reader
// checks: a checkpoint file of another key, garbage, of more events
// than the segments hold, missing on a ledger of more than its genesis
// event, older than the signer's state, and the key file lost: each is a
// refusal by the read-only open (the same refusal as the writer's Open
// where it makes one); a ledger of its genesis event alone without a
// checkpoint, and a state file that agrees, are not.
func TestReadOnlyChecksCheckpoint(t *testing.T) {
	t.Parallel()
	base, id := checkpointLedger(t)
	ckOf := func(dir string) string { return filepath.Join(dir, ledgersDir, id, checkpointFileName) }
	readCk := func(t *testing.T, dir string) tree.Checkpoint {
		b, err := os.ReadFile(ckOf(dir))
		if err != nil {
			t.Fatal(err)
		}
		c, err := tree.ParseCheckpoint(b[:strings.Index(string(b), "\n\n")+1])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	stateLine := func(c tree.Checkpoint, size uint64) []byte {
		return []byte(fmt.Sprintf("%s %d %s\n", c.Origin, size, base64.StdEncoding.EncodeToString(c.Root[:])))
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   error  // nil: accepted
		says   string // in the refusal
		writer bool   // the writer's Open refuses it too, for the same reason
		all    bool   // every ledger with a checkpoint is refused
	}{
		{"checkpoint signed by another key", func(t *testing.T, dir string) {
			c := readCk(t, dir)
			s, err := tree.SignerKey(priv, "annal-other")
			if err != nil {
				t.Fatal(err)
			}
			msg, err := tree.Sign(c, s.Signer)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, ckOf(dir), msg)
		}, tree.ErrCheckpoint, "accept the ledger", true, false},
		{"checkpoint garbage", func(t *testing.T, dir string) {
			writeFile(t, ckOf(dir), []byte("not a checkpoint\n"))
		}, tree.ErrCheckpoint, "not a checkpoint", true, false},
		{"checkpoint removed", func(t *testing.T, dir string) {
			if err := os.Remove(ckOf(dir)); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsigned, "annal checkpoint --accept acct", true, false},
		{"signing.key removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, signingKeyFile)); err != nil {
				t.Fatal(err)
			}
			// (The writer's Open refuses the whole directory, creating
			// no key: TestSigningKeyLostCreatesNoKey; the reader refuses
			// each ledger with a checkpoint for the same reason, not as
			// a data failure: TestReaderKeyMissingIsNotDataFailure.)
		}, ErrSigningKeyMissing, "restore that key", false, true},
		{"signer state ahead of the checkpoint", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, signingKeyFile+".state"), stateLine(readCk(t, dir), 30))
		}, ErrRewritten, "rolled back", true, false},
		{"signer state ahead, checkpoint removed", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, signingKeyFile+".state"), stateLine(readCk(t, dir), 30))
			if err := os.Remove(ckOf(dir)); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsigned, "", true, false},
		{"signer state at the checkpoint", func(t *testing.T, dir string) {
			c := readCk(t, dir)
			writeFile(t, filepath.Join(dir, signingKeyFile+".state"), stateLine(c, c.Size))
		}, nil, "", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, base, dir)
			c.damage(t, dir)
			var also []string
			if c.all {
				also = []string{"other", readerID(t, base, "other")}
			}
			bad := readerVerdict(t, dir, "acct", id, also...)
			switch {
			case c.want == nil && bad != nil:
				t.Fatalf("refused: %v", bad)
			case c.want == nil:
				return
			case !errors.Is(bad, c.want) || !errors.Is(bad, ErrLedgerUnavailable):
				t.Fatalf("ledger acct: %v, want %v", bad, c.want)
			case !strings.Contains(bad.Error(), c.says):
				t.Errorf("the refusal %q does not say %q", bad, c.says)
			}
			if c.writer {
				if w := writerVerdict(t, dir, "acct", id); !errors.Is(w, c.want) {
					t.Errorf("the writer's Open: %v, want %v", w, c.want)
				}
			}
		})
	}
	t.Run("signer state malformed", func(t *testing.T) {
		// The writer's Open fails on it (it cannot know what its key
		// signed): so does the read-only open, naming the file and line.
		dir := t.TempDir()
		copyTree(t, base, dir)
		writeFile(t, filepath.Join(dir, signingKeyFile+".state"), []byte("garbage\n"))
		for what, open := range map[string]func() (*DB, error){
			"OpenReadOnly": func() (*DB, error) { return OpenReadOnly(dir, &Options{TempDir: t.TempDir()}) },
			"Open":         func() (*DB, error) { return Open(dir, nil) },
		} {
			db, err := open()
			if err == nil {
				db.Close()
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "signing.key.state, line 1") {
				t.Errorf("%s with a malformed signer state: %v, want ErrInvalid naming the file and line", what, err)
			}
		}
	})
	t.Run("genesis alone without a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		copyTree(t, base, dir)
		other := readerID(t, dir, "other")
		if err := os.Remove(filepath.Join(dir, ledgersDir, other, checkpointFileName)); err != nil {
			t.Fatal(err)
		}
		if bad := readerVerdict(t, dir, "other", other); bad != nil {
			t.Fatalf("refused: %v", bad)
		}
	})
}

// TestReadOnlyBesideLiveWriterRefusesNothing: a live writer's evidence is
// always behind what it has written (its witness every millisecond, its
// checkpoints every 100 ms, ledgers created meanwhile), so
// readers opened again and again beside it refuse no ledger.
func TestReadOnlyBesideLiveWriterRefusesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: 8192, WitnessInterval: time.Millisecond, CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "acct"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := None
			if i%3 == 0 {
				d = Sync
			}
			if _, err := db.Append(ctx, "acct", []EventInput{order(i)}, &AppendOptions{Durability: d}); err != nil {
				done <- err
				return
			}
			if i%200 == 0 {
				name := fmt.Sprintf("new-%d", i)
				if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
					done <- err
					return
				}
				if _, err := db.Append(ctx, name, []EventInput{order(i)}, nil); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	for range 25 {
		r, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		u := r.Unavailable()
		r.Close()
		for name, why := range u {
			t.Errorf("ledger %s refused beside a live writer: %v", name, why)
		}
		if len(u) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyVerify: Verify on a DB opened read-only (annal verify, which
// writes nothing): with Options.VerifyIndex and no writer, the tree file
// and the writer's index are compared with the events, and a writer that
// tries to open meanwhile is refused (ErrLocked) until Close; beside a
// live writer the index is not checked, and the report says why.
func TestReadOnlyVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, _ := checkpointLedger(t)
	r, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), VerifyIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Verify(ctx, "acct", nil)
	if err != nil || rep.Events != 21 || rep.TreeSize != 21 || rep.CheckpointSize != 21 || rep.TreeNotChecked != "" || rep.IndexNotChecked != "" {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while a verifier holds the directory: %v, want ErrLocked", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	w := openTest(t, dir)
	defer w.Close()
	if _, err := w.Append(ctx, "acct", []EventInput{order(99)}, &AppendOptions{Durability: Sync}); err != nil {
		t.Fatal(err)
	}
	r, err = OpenReadOnly(dir, &Options{TempDir: t.TempDir(), VerifyIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err = r.Verify(ctx, "acct", nil)
	if err != nil || rep.Events != 22 || !strings.Contains(rep.IndexNotChecked, "a writer holds the data directory") {
		t.Fatalf("Verify beside a writer: %+v, %v", rep, err)
	}
	if err := r.VerifyCheckpoint(ctx, "acct", mustLatest(t, r, "acct").Note, ""); err != nil {
		t.Fatalf("VerifyCheckpoint: %v", err)
	}
}

func mustLatest(t *testing.T, db *DB, name string) Checkpoint {
	t.Helper()
	c, err := db.LatestCheckpoint(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// denyKeyFS is the file system as a reader running as another user sees
// a data directory whose files it may read: every file but the private
// signing key (0600, the writer's), whose open is "permission denied".
type denyKeyFS struct{ vfs.FS }

func (f denyKeyFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if filepath.Base(name) == signingKeyFile {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrPermission}
	}
	return f.FS.Open(name, opts...)
}

// TestReaderNeedsNoPrivateKey: a read-only open checks checkpoints with
// the verifier (public) key, yet it reads it from the private key file
// (DIR/signing.key, or --signing-key FILE). A reader that may read every
// file of the directory but, rightly, not the private key (annal tail or
// annal ledgers run by another user than the writer's) refuses every
// ledger with a checkpoint, exit 3 ("ledger not covered by a checkpoint
// its signer stands by ... the key file cannot be read"): an intact
// directory reported as failed data. Verifying must need only the public
// key; a reader must not need the power to sign.
func TestReaderNeedsNoPrivateKey(t *testing.T) {
	t.Parallel()
	dir, _ := checkpointLedger(t)
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir(), fs: denyKeyFS{vfs.Default}})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if u := ro.Unavailable(); len(u) > 0 {
		t.Errorf("a reader that may not read the private key refuses intact ledgers: %v", u)
	}
}
