package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ledgerIDs returns the IDs of every event of every ledger of db, by
// ledger name, in ledger order.
func ledgerIDs(t *testing.T, db *DB) map[string][]eventid.ID {
	t.Helper()
	out := map[string][]eventid.ID{}
	for _, l := range db.Ledgers() {
		for _, ev := range collect(t, db.Scan(context.Background(), l.Name, ScanOptions{})) {
			out[l.Name] = append(out[l.Name], ev.ID)
		}
	}
	return out
}

// checkCopyOpensClean opens a backup and checks that it opens with no
// refusal and no note, and that every ledger passes Verify; it returns
// the IDs of its events, by ledger.
func checkCopyOpensClean(t *testing.T, dir string) map[string][]eventid.ID {
	t.Helper()
	db, err := Open(dir, &Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatalf("open the backup %s: %v", dir, err)
	}
	defer db.Close()
	if u := db.Unavailable(); len(u) > 0 {
		t.Fatalf("backup %s: ledgers refused: %v", dir, u)
	}
	for _, why := range []error{db.IndexRebuilt(), db.MetaRebuilt()} {
		if why != nil {
			t.Fatalf("backup %s: a note at Open: %v", dir, why)
		}
	}
	if r := db.TreeRebuilt(); len(r) > 0 {
		t.Fatalf("backup %s: trees rebuilt: %v", dir, r)
	}
	for _, l := range db.Ledgers() {
		if _, err := db.Verify(context.Background(), l.Name, nil); err != nil {
			t.Fatalf("backup %s: verify %s: %v", dir, l.Name, err)
		}
	}
	return ledgerIDs(t, db)
}

// TestBackupUnderRunningWriter takes 20 backups while 64 appenders append
// with Sync to three ledgers whose segments rotate every few kilobytes,
// and the witness writer and the checkpointer run: every copy opens with
// no note, verifies, is a prefix of each ledger, and holds every event
// acknowledged before its backup began. Ledgers are created meanwhile:
// each copy has them or not, whole.
func TestBackupUnderRunningWriter(t *testing.T) {
	t.Parallel()
	runBackupsUnderWriter(t, func(ctx context.Context, db *DB, _, target string) (BackupResult, error) {
		return db.Backup(ctx, target)
	})
}

// TestBackupReadOnlyUnderRunningWriter is TestBackupUnderRunningWriter
// with each backup made as another process makes it (annal backup beside
// a running writer): a DB of its own opened with OpenReadOnly on the same
// directory, which neither blocks the writer nor uses anything of it.
func TestBackupReadOnlyUnderRunningWriter(t *testing.T) {
	t.Parallel()
	runBackupsUnderWriter(t, func(ctx context.Context, _ *DB, dir, target string) (BackupResult, error) {
		ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
		if err != nil {
			return BackupResult{}, err
		}
		defer ro.Close()
		if u := ro.Unavailable(); len(u) > 0 {
			// What the reader hid, and the segments as they are now: a
			// rare refusal beside the writer is then diagnosable.
			return BackupResult{}, fmt.Errorf("the read-only open refused %v; hidden tails %+v; segments now: %s", u, ro.HiddenTails(), segmentSizes(dir))
		}
		res, err := ro.Backup(ctx, target)
		if err == nil && len(res.Unavailable) > 0 {
			err = fmt.Errorf("the backup refused %v", res.Unavailable)
		}
		return res, err
	})
}

// runBackupsUnderWriter is TestBackupUnderRunningWriter, each backup made
// by backup (db: the writer; dir: its directory).
func runBackupsUnderWriter(t *testing.T, backup func(ctx context.Context, db *DB, dir, target string) (BackupResult, error)) {
	dir := t.TempDir()
	db, err := Open(dir, &Options{SegmentSize: 32 << 10, WitnessInterval: 2 * time.Millisecond, CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := []string{"orders", "payments", "audit"}
	for _, n := range names {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		acked []eventid.ID // in the order their appends returned
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		fails = make(chan error, 64)
	)
	for a := 0; a < 64; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := db.Append(ctx, names[(a+i)%len(names)], []EventInput{order(a*100000 + i)}, &AppendOptions{Durability: Sync})
				if err != nil {
					fails <- err
					return
				}
				mu.Lock()
				acked = append(acked, r.IDs...)
				mu.Unlock()
				// A pause: fewer events for the copies' checks to read
				// (the race detector slows them about tenfold).
				if raceEnabled {
					time.Sleep(40 * time.Millisecond)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	// Ledgers created while the backups run.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 4; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			n := fmt.Sprintf("created-%d", i)
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
				fails <- err
				return
			}
			if _, err := db.Append(ctx, n, []EventInput{order(i)}, nil); err != nil {
				fails <- err
				return
			}
		}
	}()
	type taken struct {
		dir    string
		before int // acked[:before] returned before the backup began
	}
	var backups []taken
	linked := 0
	parent := t.TempDir()
	began := time.Now()
	// Until a segment has rotated, so that every backup has sealed
	// segments to link (on a fast machine the backups could otherwise all
	// be taken before the first rotation).
	for rotated := false; !rotated; {
		if time.Since(began) > time.Minute {
			close(stop)
			wg.Wait()
			t.Fatal("no segment rotated in a minute of appends")
		}
		time.Sleep(5 * time.Millisecond)
		for _, n := range names {
			l, err := db.ledger(n)
			if err != nil {
				t.Fatal(err)
			}
			segs, _ := filepath.Glob(filepath.Join(l.log.Dir(), "*.seg"))
			rotated = rotated || len(segs) > 1
		}
	}
	for i := 0; i < 20; i++ {
		time.Sleep(5 * time.Millisecond) // appends between backups
		mu.Lock()
		before := len(acked)
		mu.Unlock()
		target := filepath.Join(parent, fmt.Sprintf("copy-%02d", i))
		res, err := backup(ctx, db, dir, target)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("backup %d: %v", i, err)
		}
		if len(res.Ledgers) < len(names) {
			t.Fatalf("backup %d copied %d ledgers, want %d or more", i, len(res.Ledgers), len(names))
		}
		linked += res.Linked
		backups = append(backups, taken{target, before})
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-fails:
		t.Fatalf("append: %v", err)
	default:
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if linked == 0 {
		t.Error("no sealed segment was hard-linked: the segments did not rotate")
	}
	t.Logf("%d events acknowledged, %d sealed segments linked, in %v", len(acked), linked, time.Since(began))
	db = openTest(t, dir)
	want := ledgerIDs(t, db)
	db.Close()
	ledgerOf := map[eventid.LedgerID]string{}
	for n, ids := range want {
		ledgerOf[ids[0].Ledger()] = n
	}
	for i, b := range backups {
		got := checkCopyOpensClean(t, b.dir)
		have := map[eventid.ID]bool{}
		for n, ids := range got {
			if len(ids) > len(want[n]) {
				t.Fatalf("backup %d: ledger %s holds %d events, the DB %d", i, n, len(ids), len(want[n]))
			}
			for j, id := range ids {
				if id != want[n][j] {
					t.Fatalf("backup %d: ledger %s: event #%d is %s, the DB's is %s: not a prefix", i, n, j+1, id, want[n][j])
				}
				have[id] = true
			}
		}
		for _, id := range acked[:b.before] {
			if !have[id] {
				t.Fatalf("backup %d: event %s of ledger %s, acknowledged before the backup began, is missing", i, id, ledgerOf[id.Ledger()])
			}
		}
	}
}

// TestBackupKeepsConsumerPosition: a named consumer's stored position is
// in the backup, and resumes there.
func TestBackupKeepsConsumerPosition(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Consumer("orders", "mailer", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var fifth Event
	n := 0
	for ev, err := range c.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 5 {
			fifth = ev
			break
		}
	}
	if err := c.Ack(ctx, fifth.ID); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "copy")
	if _, err := db.Backup(ctx, target); err != nil {
		t.Fatal(err)
	}
	checkCopyOpensClean(t, target)
	cp := openTest(t, target)
	defer cp.Close()
	infos, err := cp.Consumers("orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != "mailer" || infos[0].Position.ID != fifth.ID || infos[0].Position.Seq != 5 {
		t.Fatalf("the backup's consumers: %+v, want mailer at #5 %s", infos, fifth.ID)
	}
	cc, err := cp.Consumer("orders", "mailer", ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for ev, err := range cc.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != 6 {
			t.Fatalf("the backup's consumer resumes at #%d, want #6", ev.Seq)
		}
		break
	}
}

// listNames returns the names in dir.
func listNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestBackupRefusesNonEmptyTarget: a backup is never written over a
// directory that holds something, nor over a file.
func TestBackupRefusesNonEmptyTarget(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	full := filepath.Join(parent, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "precious"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, []byte("keep me too"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{full, file} {
		_, err := db.Backup(ctx, target)
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("backup to %s: %v, want ErrInvalid", target, err)
		}
		t.Log(err)
	}
	if b, err := os.ReadFile(filepath.Join(full, "precious")); err != nil || string(b) != "keep me" {
		t.Fatalf("the target's file: %q, %v", b, err)
	}
	if got := listNames(t, parent); strings.Join(got, " ") != "file full" {
		t.Fatalf("the target's parent holds %v, want only file and full", got)
	}
	// An empty directory is a target.
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ctx, empty); err != nil {
		t.Fatalf("backup to an empty directory: %v", err)
	}
	checkCopyOpensClean(t, empty)
}

// TestBackupRefusesTargetInsideDataDir: the data directory itself, or any
// directory inside it (by any path), is no target.
func TestBackupRefusesTargetInsideDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	before := listNames(t, dir)
	for _, target := range []string{
		dir,
		filepath.Join(dir, "backup"),
		filepath.Join(dir, ledgersDir, "copy"),
		filepath.Join(dir, "a", "b"),
		filepath.Join(link, "backup"),
		filepath.Join(dir, ledgersDir, "..", "x"),
	} {
		_, err := db.Backup(ctx, target)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "data directory") {
			t.Fatalf("backup to %s: %v, want ErrInvalid naming the data directory", target, err)
		}
	}
	if got := listNames(t, dir); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("the data directory holds %v after the refused backups, %v before", got, before)
	}
}

// TestBackupInterruptedLeavesNoDirectory: a backup that fails midway (a
// write fails) or whose context ends leaves no directory under the
// target's name, nor its temporary one; the DB goes on.
func TestBackupInterruptedLeavesNoDirectory(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), &Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, n := range []string{"orders", "payments"} {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 200; i++ {
			if _, err := db.Append(ctx, n, []EventInput{order(i)}, &AppendOptions{Durability: None}); err != nil {
				t.Fatal(err)
			}
		}
	}
	errDisk := errors.New("injected write failure")
	parent := t.TempDir()
	for _, tc := range []struct {
		name  string
		after int // files written before the interruption
		want  error
	}{
		{"write fails", 3, errDisk},
		{"cancelled", 7, context.Canceled},
		{"write fails late", 20, errDisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			n := 0
			db.test.backup = func(string) error {
				if n++; n < tc.after {
					return nil
				}
				if tc.want == errDisk {
					return errDisk
				}
				cancel()
				return nil
			}
			target := filepath.Join(parent, "copy")
			_, err := db.Backup(cctx, target)
			if !errors.Is(err, tc.want) {
				t.Fatalf("backup: %v, want %v", err, tc.want)
			}
			if n < tc.after {
				t.Fatalf("the backup ended after %d files, before the interruption", n)
			}
			if got := listNames(t, parent); len(got) != 0 {
				t.Fatalf("an interrupted backup left %v", got)
			}
		})
	}
	db.test.backup = nil
	if _, err := db.Append(ctx, "orders", []EventInput{order(1000)}, nil); err != nil {
		t.Fatalf("append after the interrupted backups: %v", err)
	}
	target := filepath.Join(parent, "copy")
	if _, err := db.Backup(ctx, target); err != nil {
		t.Fatal(err)
	}
	got := checkCopyOpensClean(t, target)
	if len(got["orders"]) != 202 || len(got["payments"]) != 201 {
		t.Fatalf("the backup holds %d and %d events, want 202 and 201", len(got["orders"]), len(got["payments"]))
	}
}

// TestBackupToAnotherFileSystemCopies: where no hard link can be made
// (the target on another file system), sealed segments are copied.
func TestBackupToAnotherFileSystemCopies(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, &AppendOptions{Durability: None}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { linkFile = os.Link }()
	linkFile = func(src, dst string) error { return &os.LinkError{Op: "link", Old: src, New: dst, Err: syscall.EXDEV} }
	target := filepath.Join(t.TempDir(), "copy")
	res, err := db.Backup(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if res.Linked != 0 || res.Copied < 10 {
		t.Fatalf("backup across file systems: %d linked, %d copied; want 0 linked and every segment copied", res.Linked, res.Copied)
	}
	if got := checkCopyOpensClean(t, target); len(got["orders"]) != 201 {
		t.Fatalf("the copy holds %d events, want 201", len(got["orders"]))
	}
}

// TestBackupInterruptedByClose: Close during a backup stops it (ErrClosed)
// and leaves nothing under the target's name.
func TestBackupInterruptedByClose(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	ctx := context.Background()
	for _, n := range []string{"orders", "payments"} {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	n := 0
	db.test.backup = func(string) error {
		if n++; n == 3 {
			go func() { closed <- db.Close() }()
			<-db.readers.closingCh() // Close has begun: it waits for the backup
		}
		return nil
	}
	parent := t.TempDir()
	_, err := db.Backup(ctx, filepath.Join(parent, "copy"))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("backup interrupted by Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, parent); len(got) != 0 {
		t.Fatalf("a backup interrupted by Close left %v", got)
	}
}

// TestLiveCopyRefusalNamesBackup: a directory copied file by file while a
// writer had it open (its segments copied before they rotated, meta.db
// after) is refused, and the refusal names annal backup.
func TestLiveCopyRefusalNamesBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	db, err := Open(dir, &Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	info, _ := db.Ledger("orders")
	ldir := filepath.Join(dir, ledgersDir, info.ID.String())
	for i := 0; i < 40; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// cp -a copied the ledger's folder here...
	early := t.TempDir()
	for _, n := range listNames(t, ldir) {
		b, err := os.ReadFile(filepath.Join(ldir, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(early, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// ...while the writer went on, rotated, and wrote its witness to
	// meta.db, which cp copied later.
	for i := 40; i < 200; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ldir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(early, ldir); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	why := db.Unavailable()["orders"]
	if !errors.Is(why, segment.ErrCorruption) || !strings.Contains(why.Error(), "acknowledged events lost") {
		t.Fatalf("the copy's ledger: %v, want acknowledged events lost", why)
	}
	if !strings.Contains(why.Error(), "annal backup") || !strings.Contains(why.Error(), "DB.Backup") {
		t.Fatalf("the refusal of a live copy names no cure: %v", why)
	}
}

// TestBackupReadOnlyCopiesRefusedLedgerAsItIs: a read-only backup never
// launders a refused ledger into a whole one. A ledger the read-only open
// refuses (its checkpoint file removed: ErrUnsigned), and one that fails
// its evidence only by the time the backup reaches it (another ledger's
// checkpoint put over its own after the open), are copied as they are
// and reported; the copy's Open refuses both for the same reason, and
// the whole ledger opens and verifies. Before the read-only backup, this
// failed with ErrReadOnly.
func TestBackupReadOnlyCopiesRefusedLedgerAsItIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	ctx := context.Background()
	ids := map[string]eventid.LedgerID{}
	for _, n := range []string{"audit", "orders", "payments"} {
		info, err := db.CreateLedger(ctx, LedgerSpec{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		ids[n] = info.ID
		for i := 0; i < 5; i++ {
			if _, err := db.Append(ctx, n, []EventInput{order(i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ck := func(n string) string { return filepath.Join(dir, ledgersDir, ids[n].String(), checkpointFileName) }
	if err := os.Remove(ck("payments")); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if u := ro.Unavailable(); len(u) != 1 || !errors.Is(u["payments"], ErrUnsigned) {
		t.Fatalf("the read-only open refused %v, want payments (ErrUnsigned)", u)
	}
	// After the open: orders' checkpoint is audit's.
	other, err := os.ReadFile(ck("audit"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ck("orders"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "copy")
	res, err := ro.Backup(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Unavailable, ","); got != "orders,payments" {
		t.Fatalf("the backup reports %q refused, want orders,payments", got)
	}
	if len(res.Ledgers) != 1 || res.Ledgers[0].Name != "audit" || res.Ledgers[0].Count != 6 || res.Ledgers[0].Checkpoint == 0 {
		t.Fatalf("the backup copied %+v, want audit whole (6 events, signed)", res.Ledgers)
	}
	cp := openTest(t, target)
	defer cp.Close()
	u := cp.Unavailable()
	for _, n := range []string{"orders", "payments"} {
		if !errors.Is(u[n], ErrUnsigned) {
			t.Errorf("the copy's ledger %s: %v, want refused (ErrUnsigned)", n, u[n])
		}
	}
	if len(u) != 2 {
		t.Errorf("the copy refuses %v, want orders and payments", u)
	}
	if _, err := cp.Verify(ctx, "audit", nil); err != nil {
		t.Errorf("the copy's audit: %v", err)
	}
}

// TestBackupReadOnlyWaitsForCheckpointAfterState: the signer writes its
// state, then the checkpoint file. A read-only backup that copies the
// state between the two writes reads the checkpoint file again until it
// is at or after the state: the copy then opens with no note. (Kept as
// read first, the older checkpoint would pass the copy's Open as the
// crash between the two writes, with its tree rebuilt beyond it and a
// note: that is how this test fails without the second read.)
func TestBackupReadOnlyWaitsForCheckpointAfterState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	ctx := context.Background()
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Checkpoint(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	ckPath := filepath.Join(dir, ledgersDir, info.ID.String(), checkpointFileName)
	older, err := os.ReadFile(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		if _, err := db.Append(ctx, "orders", []EventInput{order(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Checkpoint(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	newer, err := os.ReadFile(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	// The state holds size 7, the checkpoint file size 4: the signer
	// between its two writes.
	if err := os.WriteFile(ckPath, older, 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if u := ro.Unavailable(); len(u) > 0 {
		t.Fatalf("the read-only open refused %v", u)
	}
	// The signer's second write, a few milliseconds after the backup
	// copied the state and the metadata: a new file renamed over the
	// checkpoint, as the writer writes it (a write in place would be
	// read torn, empty, by a read between its cut and its write).
	staged := filepath.Join(t.TempDir(), checkpointFileName)
	if err := os.WriteFile(staged, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	ro.test.backup = func(path string) error {
		if filepath.Base(path) == metaFile {
			go func() {
				time.Sleep(20 * time.Millisecond)
				wrote <- os.Rename(staged, ckPath)
			}()
		}
		return nil
	}
	target := filepath.Join(t.TempDir(), "copy")
	res, err := ro.Backup(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if len(res.Ledgers) != 1 || res.Ledgers[0].Checkpoint != 7 || res.Ledgers[0].Count != 7 {
		t.Fatalf("the backup copied %+v, want orders with 7 events and the checkpoint at 7", res.Ledgers)
	}
	checkCopyOpensClean(t, target)
}

// TestBackupReadOnlyMetaCopyUnderCommits: the metadata file of a writer
// that commits about every millisecond (the witness writer, 8 appenders
// on 4 ledgers) is copied by reads 300 times: every copy passes bbolt's
// check and Open's and knows every ledger. How many single reads of it
// fail the check is logged (none, so far: a read of a small file takes
// microseconds; the second read closes that window).
func TestBackupReadOnlyMetaCopyUnderCommits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, &Options{WitnessInterval: time.Millisecond, CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for a := 0; a < 8; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := db.Append(ctx, names[(a+i)%len(names)], []EventInput{order(i)}, &AppendOptions{Durability: Sync}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	src := filepath.Join(dir, metaFile)
	torn, rounds := 0, 300
	if raceEnabled {
		rounds = 60
	}
	for i := 0; i < rounds; i++ {
		tmp := t.TempDir()
		// One read, as a plain copy takes it.
		one, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		check := filepath.Join(tmp, "single")
		if err := os.WriteFile(check, one, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := checkMetaCopy(check, src, int64(len(one))); err != nil {
			torn++
		}
		b := &backup{db: ro, ctx: ctx, dst: privateFS{vfs.Default}, tmp: tmp}
		known, err := b.copyLiveMeta()
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
		if len(known) != len(names) {
			t.Fatalf("copy %d knows %d ledgers, want %d", i, len(known), len(names))
		}
	}
	t.Logf("single reads failing the check: %d of %d", torn, rounds)
}

// segmentSizes lists every ledger's segment files under the data
// directory dir with their sizes, for a failure's message.
func segmentSizes(dir string) string {
	var b strings.Builder
	paths, _ := filepath.Glob(filepath.Join(dir, ledgersDir, "*", "*.seg"))
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s/%s %d; ", filepath.Base(filepath.Dir(p)), filepath.Base(p), fi.Size())
		}
	}
	return b.String()
}
