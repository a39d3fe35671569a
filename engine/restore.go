package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// RestoreOptions say what Restore restores, from where, and how the
// restored directory opens.
type RestoreOptions struct {
	// Replica is the bucket, in the URL form of docs/replication.md
	// ("s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true").
	Replica string
	// Ledger is the name (or the ID in hex) of the ledger to restore;
	// "" restores every ledger the bucket holds.
	Ledger string
	// At and Seq restore a point in time: the events up to At (those of
	// a time not after it), or up to sequence number Seq. At most one is
	// set; neither restores every event the bucket holds. The events
	// after the point are read and verified all the same, up to the
	// bucket's signed checkpoint and beyond: an object changed after the
	// point fails the restore as one before it does.
	At  time.Time
	Seq uint64
	// Options are those the restored directory is opened with (its
	// signing key: Signer, SigningKeyFile, or none: the directory's own
	// signing.key, made by the restore). nil: the defaults. Its Replica
	// (and Replication) are not used: the restore writes nothing to any
	// bucket (opened with one, the restored directory would take its
	// ledgers from their writer and store its checkpoints).
	Options *Options
	// VerifierKey is the verifier (public) key, in the sumdb/note
	// verifier format (what `annal checkpoint key` prints), that signed
	// the bucket's checkpoints. "": the key of Options, which then
	// must be the key that signed them.
	VerifierKey string
	// Progress, if not nil, is called after each object restored with
	// the ledger and what was restored of it so far.
	Progress func(RestoreProgress)
	// Unsigned is what a restore does with a ledger whose bucket holds
	// its events but no signed checkpoint (ErrNoCheckpoint): refuse the
	// restore (the default), skip the ledger, or restore it.
	Unsigned Unsigned

	// store, if set, is the bucket instead of Replica's (tests).
	store store.Store
}

// RestoreProgress is what a restore did so far, for a progress display.
type RestoreProgress struct {
	Ledger  eventid.LedgerID
	Name    string
	Records int64 // events written
	Bytes   int64 // bytes of their frames
}

// Unsigned is what Restore does with a ledger whose bucket holds no
// signed checkpoint. A Shipped ledger whose disk was lost before its
// first checkpoint was stored looks so (its events were acknowledged
// once durable locally), and so does a bucket whose checkpoint object
// was deleted, by mistake or to pass off other events: nothing that
// anyone with write access to the bucket cannot recompute vouches for
// them.
type Unsigned int

const (
	// RefuseUnsigned fails the restore, naming the ledger (ErrNoCheckpoint).
	RefuseUnsigned Unsigned = iota
	// SkipUnsigned restores the other ledgers; the result lists the
	// ledger with Skipped saying why, and nothing of it is restored.
	SkipUnsigned
	// RestoreUnsigned restores the ledger too, verified as any other
	// (frames, chains, the chunks' hash chain and roots) and signed anew
	// by the restored directory's key (Resigned, Signed 0): the operator
	// vouches for it.
	RestoreUnsigned
)

// RestoredLedger is a ledger as Restore restored it.
type RestoredLedger struct {
	ID   eventid.LedgerID
	Name string
	// Events is the number of events restored; Verified the number the
	// bucket held and that were verified (more than Events for a point in
	// time).
	Events, Verified uint64
	// Signed is the number of events the bucket's signed checkpoint
	// vouches for (its size). The events after it were checked only for
	// what anyone with write access to the bucket can recompute (frames,
	// CRC32C chains, the chunks' hash chain and Merkle roots): a writer
	// acknowledges events before it stores their checkpoint, so they are
	// restored, but no signature stands for them.
	Signed uint64
	// Ignored, if not "", names the chunk that ends the ledger's history
	// before the last chunk in the bucket, and why: a gap (a chunk not
	// stored, and later ones that were), or a fenced writer's late
	// upload. Neither it nor what follows is part of the history, and none
	// of it was acknowledged.
	Ignored string
	// Head is the last event restored.
	Head eventid.ID
	// Skipped, if not "", says why the ledger was not restored: the
	// bucket holds its events but no signed checkpoint of it, and
	// RestoreOptions.Unsigned is SkipUnsigned; or, in a restore of every
	// ledger, the bucket holds its manifest only (a CreateLedger that
	// failed before its first event was stored, or a ledger whose objects
	// were deleted). Nothing of it is in the directory and the other
	// fields but ID and Name are zero.
	Skipped string
	// Resigned says that the restored ledger was signed anew by the
	// directory's key (as DB.AcceptLedger does): for a point in time
	// before the bucket's checkpoint, or a checkpoint signed by another
	// key than the directory's (VerifierKey). Else the bucket's
	// checkpoint was restored as the ledger's checkpoint file.
	Resigned bool
}

// restoreTmpMark is in the name of the temporary directory a restore
// writes beside its target; restoreHold is the subdirectory of it that
// the restore holds while it runs (see makeRestoreTmp).
const (
	restoreTmpMark = ".restore-"
	restoreHold    = ".restoring"
	// restoreInitStale: a temporary directory without restoreHold that
	// did not change for this long was left by a killed restore.
	restoreInitStale = time.Minute
)

// Restore makes dir, a new or empty directory, a data directory holding
// the ledgers of a replica (docs/replication.md, "Restore"): for each,
// the sealed segments stored under seg/ written as they are, byte for
// byte, and the records of the WAL chunks after them laid out at the
// segment and offset where the writer had them (a segment begun from
// chunks gets a header made for it, created at its first record's time:
// docs/format.md §6), its NAME from the manifest, and the bucket's signed
// checkpoint. Every object is verified before it is used (replica.Reader:
// frames, chains, the chunks' hash chain and epochs, every chunk's Merkle
// root and the signed checkpoint's root); a gap, a changed object or a
// stale writer's chunk is an error naming the object, never a shorter
// ledger. Objects written while the restore runs are not read: it
// restores what the bucket held when it read the ledger's checkpoint and
// newest manifest.
//
// The restore is written to a temporary directory beside dir (".DIR" +
// restoreTmpMark + random), opened there with Options (which builds the
// index, the Merkle tree file and meta.db from the segments), closed, and
// renamed to dir: a restore that fails leaves nothing in dir. The
// restore holds its temporary directory (a flock) while it runs; one that
// a killed restore left beside dir is removed by the next restore to dir.
//
// The bucket's checkpoint is checked with VerifierKey, or the key of
// Options. It becomes the ledger's checkpoint file when the directory's
// key signed it and every event it covers is restored; otherwise (a point
// in time before it, or another key) the directory's key signs the
// restored ledger anew, as DB.AcceptLedger does, and RestoredLedger says
// so. A key that signs the live ledger too remembers that signature: a
// point in time is a new branch of the ledger's history, best signed with
// another key (the default: the restored directory's own).
func Restore(ctx context.Context, dir string, o RestoreOptions) ([]RestoredLedger, error) {
	if o.Seq != 0 && !o.At.IsZero() {
		return nil, invalid("restore: a point in time is a time or a sequence number, not both")
	}
	target, err := restoreTarget(dir)
	if err != nil {
		return nil, err
	}
	st := o.store
	where := "the bucket"
	if st == nil {
		loc, err := store.ParseLocation(o.Replica)
		if err != nil {
			return nil, fmt.Errorf("%w: restore: %w", ErrInvalid, err)
		}
		where = loc.String()
		s3, err := store.OpenS3(ctx, loc, store.S3Options{})
		if err != nil {
			return nil, fmt.Errorf("engine: restore from %s: %w", where, err)
		}
		st = s3
	}
	ids, unborn, err := restoreLedgers(ctx, st, o.Ledger)
	if err != nil {
		return nil, fmt.Errorf("engine: restore from %s: %w", where, err)
	}
	tmp, err := makeRestoreTmp(target, time.Now())
	if err != nil {
		return nil, fmt.Errorf("engine: restore to %s: create its temporary directory: %w", dir, err)
	}
	o.Options = withoutReplica(o.Options)
	res, err := restoreInto(ctx, tmp, st, ids, o)
	if err == nil {
		err = moveInPlace(tmp, target)
	}
	res = append(res, unborn...)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("engine: restore from %s to %s (nothing was left there): %w", where, dir, err)
	}
	return res, nil
}

// withoutReplica returns a copy of o without a replica: the options a
// restore opens its temporary directory with.
func withoutReplica(o *Options) *Options {
	if o == nil {
		return nil
	}
	c := *o
	c.Replica, c.Replication, c.replicaStore, c.replicaEndpoint = "", 0, nil, ""
	c.Node, c.NodeLease, c.TakeOverDeadNodes = Node{}, 0, false
	return &c
}

// makeRestoreTmp makes the temporary directory of a restore to target,
// beside it, after it removed those that restores to target left when
// they were killed (see removeStaleRestores). The restore holds it with
// holdRestore once it is a data directory.
func makeRestoreTmp(target string, now time.Time) (string, error) {
	parent, base := filepath.Dir(target), filepath.Base(target)
	removeStaleRestores(parent, base, now)
	return os.MkdirTemp(parent, "."+base+restoreTmpMark)
}

// holdRestore holds tmp, a restore's temporary directory, until the
// restore ends: a flock on its subdirectory restoreHold (the data
// directory's own lock is taken by each Open of it), released by Close
// or by the process's death. Nil where directories cannot be locked.
// The subdirectory is made under another name, held, then renamed
// restoreHold: a restore to the same target that scans for killed
// restores' directories meanwhile never finds it there unheld (and
// takes it for a killed restore's).
func holdRestore(tmp string) (io.Closer, error) {
	d, err := os.MkdirTemp(tmp, restoreHold+"-")
	if err != nil {
		return nil, err
	}
	f, err := dirlock.Hold(d)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		return nil, err
	}
	if err := os.Rename(d, filepath.Join(tmp, restoreHold)); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	if f == nil {
		return nil, nil
	}
	return f, nil
}

// removeStaleRestores removes from parent the temporary directories of
// restores to parent/base that no process holds (a restore killed before
// it finished), and returns their paths. One whose restoreHold is held
// (a running restore's), or that has none (a restore that has just made
// it, or is renaming it into place) and changed within
// restoreInitStale, is left alone.
func removeStaleRestores(parent, base string, now time.Time) (removed []string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if !e.IsDir() || !isRestoreTmp(e.Name(), base) {
			continue
		}
		name := e.Name()
		p := filepath.Join(parent, name)
		f, err := dirlock.Hold(filepath.Join(p, restoreHold))
		switch {
		case err == nil:
		case errors.Is(err, os.ErrNotExist):
			if fi, err := e.Info(); err != nil || now.Sub(fi.ModTime()) < restoreInitStale {
				continue
			}
		default:
			continue // a running restore's, or not ours to open
		}
		if os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
		if f != nil {
			f.Close()
		}
	}
	return removed
}

// isRestoreTmp says whether name is that of a temporary directory of a
// restore to base: "." + base + restoreTmpMark and the decimal digits
// that os.MkdirTemp adds, no more. The target "a.restore-1" beside "a"
// has temporary directories ".a.restore-1.restore-N", and the
// operator's ".a.restore-keep" is no restore's: neither is a's.
func isRestoreTmp(name, base string) bool {
	rest, ok := strings.CutPrefix(name, "."+base+restoreTmpMark)
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// restoreTarget checks the target of a restore, a new or empty
// directory, and returns its absolute path, its parent made if missing.
// A symbolic link to a directory gives the directory's path (the
// restore is renamed onto it, not onto the link); a link to nothing is
// refused.
func restoreTarget(dir string) (string, error) {
	if dir == "" {
		return "", invalid("restore: no target directory given")
	}
	target, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("engine: restore to %s: %w", dir, err)
	}
	if fi, err := os.Lstat(target); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		to, err := filepath.EvalSymlinks(target)
		if err != nil {
			dest, _ := os.Readlink(target)
			return "", invalid("restore to %s: a symbolic link to %s, which does not exist (%v): make that directory, or restore to it", dir, dest, err)
		}
		target = to
	}
	names, err := vfs.Default.List(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("engine: restore to %s: %w", dir, err)
	case len(names) > 0:
		slices.Sort(names)
		return "", invalid("restore to %s: the directory is not empty (it holds %s): restore into a new or empty directory", dir, strings.Join(quoteAll(names[:min(len(names), 5)]), ", "))
	}
	if err := mkdirSynced(vfs.Default, filepath.Dir(target)); err != nil {
		return "", fmt.Errorf("engine: restore to %s: create its parent: %w", dir, err)
	}
	return target, nil
}

// moveInPlace renames the complete restore tmp to target (an empty
// target directory makes way) and syncs the parent.
func moveInPlace(tmp, target string) error {
	if fi, err := os.Lstat(target); err == nil {
		if !fi.IsDir() {
			return invalid("something else was made at %s meanwhile", target)
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: the target is no longer an empty directory: %w", ErrInvalid, err)
		}
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("rename the complete restore %s to it (the target must be on the file system of its parent): %w", tmp, err)
	}
	return segment.SyncDir(vfs.Default, filepath.Dir(target))
}

// restoreLedgers returns the IDs of the ledgers to restore: the one
// named (by its ID, or the name its newest manifest gives), or every one
// under ledgers/; and, for a restore of every ledger, those passed over
// because the bucket holds their manifest only (see unbornLedger), each
// with Skipped saying so.
func restoreLedgers(ctx context.Context, st store.Store, name string) ([]eventid.LedgerID, []RestoredLedger, error) {
	if id, err := eventid.ParseLedgerID(name); err == nil && id.String() == name {
		return []eventid.LedgerID{id}, nil, nil
	}
	var ids []eventid.LedgerID
	after := ""
	for {
		p, err := st.List(ctx, "ledgers/", after, 1)
		if err != nil {
			return nil, nil, fmt.Errorf("list ledgers/: %w", err)
		}
		if len(p.Objects) == 0 {
			break
		}
		key := p.Objects[0].Key
		folder, _, _ := strings.Cut(strings.TrimPrefix(key, "ledgers/"), "/")
		id, err := eventid.ParseLedgerID(folder)
		if err != nil || id.String() != folder {
			return nil, nil, fmt.Errorf("%w: %s: not in a ledger's folder (ledgers/ and 8 hex digits)", ErrCorruption, key)
		}
		ids = append(ids, id)
		after = "ledgers/" + folder + "0" // '0' follows '/': past every key of the folder
	}
	if name == "" && len(ids) == 0 {
		return nil, nil, fmt.Errorf("%w: the bucket holds no ledger (nothing under ledgers/)", replica.ErrNoReplica)
	}
	// The names the newest manifests give: two ledgers of one name (two
	// data directories replicating to one prefix, each of which made a
	// ledger of that name) are not told apart by it, nor restored into
	// one directory.
	byName := map[string][]eventid.LedgerID{}
	kept := ids[:0]
	var unborn []RestoredLedger
	for _, id := range ids {
		skip, err := unbornLedger(ctx, st, id)
		if err != nil {
			return nil, nil, err
		}
		if skip != nil {
			unborn = append(unborn, *skip)
			continue
		}
		kept = append(kept, id)
		r := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: id})
		m, _, err := r.Manifest(ctx)
		if err != nil {
			if name == "" {
				continue // the restore of the ledger says what is wrong
			}
			return nil, nil, err
		}
		byName[m.Name] = append(byName[m.Name], id)
	}
	twice := func(n string, of []eventid.LedgerID) error {
		s := make([]string, len(of))
		for i, id := range of {
			s[i] = id.String()
		}
		return invalid("restore: ledgers %s of the bucket all have the name %q (data directories that replicate to one prefix made them): restore one by its ID (--ledger ID) into a directory of its own", strings.Join(s, ", "), n)
	}
	if name != "" {
		switch of := byName[name]; len(of) {
		case 0:
			return nil, nil, fmt.Errorf("%w: %q: no ledger of the bucket has that name in its newest manifest (%d ledgers)", ErrLedgerNotFound, name, len(ids))
		case 1:
			return of, nil, nil
		default:
			return nil, nil, twice(name, of)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		if of := byName[n]; len(of) > 1 {
			return nil, nil, twice(n, of)
		}
	}
	if len(kept) == 0 {
		return nil, nil, fmt.Errorf("%w: the bucket holds no ledger with an event (under ledgers/)", replica.ErrNoReplica)
	}
	return kept, unborn, nil
}

// unbornLedger says whether the bucket's ledger id holds no event and no
// signed checkpoint, only its manifest (and perhaps a fence chunk): a
// CreateLedger that failed after its Writer took the ledger (the store
// timed out before the genesis event was stored) leaves so, and no data
// directory holds that ledger. A restore of every ledger, or of one by
// name, passes over it, and says so (the RestoredLedger returned, with
// Skipped): a ledger whose checkpoint and chunks were deleted from the
// bucket looks the same, and is never passed over in silence. A manifest
// that records what only a ledger with events has (a later epoch: a
// takeover, which needs a directory holding the ledger; a sealed segment;
// a GC boundary) makes it an error: the bucket lost that ledger's
// objects.
func unbornLedger(ctx context.Context, st store.Store, id eventid.LedgerID) (*RestoredLedger, error) {
	_, err := st.Head(ctx, replica.CheckpointKey(id))
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read %s: %w", replica.CheckpointKey(id), err)
	}
	bl, err := inspectStore(ctx, st, "the bucket", []eventid.LedgerID{id})
	if err != nil || bl[0].Stored != 0 {
		return nil, nil // its restore says what is wrong
	}
	m, key, err := replica.NewReader(replica.ReaderConfig{Store: st, Ledger: id}).Manifest(ctx)
	if err != nil {
		return nil, nil // its restore says what is wrong
	}
	if err := objectsDeleted(id, m, key); err != nil {
		return nil, err
	}
	return &RestoredLedger{ID: id, Name: m.Name, Skipped: "the bucket holds its manifest only (" + key + "), no event and no signed checkpoint: a CreateLedger that failed before its first event was stored leaves so; so does a ledger whose checkpoint and chunks were deleted from the bucket"}, nil
}

// objectsDeleted returns, for a ledger whose bucket holds no event and
// no signed checkpoint, the error that says its objects were deleted if
// its newest manifest m (under key) records what only a ledger with
// events has (a later epoch: a takeover, which needs a directory holding
// the ledger; a sealed segment; a GC boundary); nil otherwise.
func objectsDeleted(id eventid.LedgerID, m replica.Manifest, key string) error {
	if m.Epoch > 1 || m.Segments > 0 || m.GC > 1 {
		return fmt.Errorf("%w: ledger %s (%q): the bucket holds no event and no signed checkpoint of it, but its manifest %s records epoch %d, %d sealed segments and GC boundary %d, which only a ledger with events has: its objects were deleted from the bucket",
			ErrCorruption, id, m.Name, key, m.Epoch, m.Segments, m.GC)
	}
	return nil
}

// restoreInto restores the ledgers ids from st into tmp, a new data
// directory, and opens it once to build its index, trees and metadata.
func restoreInto(ctx context.Context, tmp string, st store.Store, ids []eventid.LedgerID, o RestoreOptions) ([]RestoredLedger, error) {
	// An empty data directory first: its meta.db then exists when the
	// ledgers are opened (one missing beside ledgers would say that
	// consumers' positions were lost), and its key is known.
	db, err := Open(tmp, o.Options)
	if err != nil {
		return nil, err
	}
	own := db.verifier
	if err := db.Close(); err != nil {
		return nil, err
	}
	hold, err := holdRestore(tmp)
	if err != nil {
		return nil, fmt.Errorf("hold the temporary directory %s: %w", tmp, err)
	}
	if hold != nil {
		defer hold.Close()
	}
	v := own
	if o.VerifierKey != "" {
		if v, err = note.NewVerifier(strings.TrimSpace(o.VerifierKey)); err != nil {
			return nil, fmt.Errorf("%w: restore: the verifier key: %w", ErrInvalid, err)
		}
	}
	lim := replica.Limit{Seq: o.Seq, Time: o.At}
	var res []RestoredLedger
	restored := 0
	for _, id := range ids {
		dir := filepath.Join(tmp, ledgersDir, id.String())
		r := newLedgerReader(st, id, v, o.Unsigned == RestoreUnsigned, restoreKeyHint)
		state, err := r.State(ctx)
		if errors.Is(err, ErrNoCheckpoint) {
			name := ""
			if m, _, merr := r.Manifest(ctx); merr == nil {
				name = m.Name
			}
			if o.Unsigned == SkipUnsigned {
				res = append(res, RestoredLedger{ID: id, Name: name, Skipped: "the bucket holds its events but no signed checkpoint (" + replica.CheckpointKey(id) + "); skipped as asked (--unsigned skip, RestoreOptions.Unsigned SkipUnsigned)"})
				continue
			}
			return nil, fmt.Errorf("restore ledger %s (%q): %w; a Shipped ledger whose disk was lost before its first checkpoint was stored looks so, and so does a bucket whose checkpoint was deleted: restore the other ledgers with RestoreOptions.Unsigned SkipUnsigned (annal restore --unsigned skip), or this one too, signed anew by the restored directory, with RestoreUnsigned (--unsigned restore) if you vouch for the bucket", id, name, err)
		}
		if err != nil {
			return nil, err
		}
		restored++
		rl := RestoredLedger{ID: id, Name: state.Manifest.Name}
		var progress func(records, bytes int64)
		if o.Progress != nil {
			progress = func(records, bytes int64) {
				o.Progress(RestoreProgress{Ledger: id, Name: rl.Name, Records: records, Bytes: bytes})
			}
		}
		got, err := pullLedger(ctx, vfs.Default, dir, segment.Head{ID: eventid.Genesis(id)}, r, state, lim, progress)
		if err != nil {
			return nil, err
		}
		switch {
		case got.Yielded.Seq == 0 && got.Verified.Seq == 0:
			return nil, invalid("restore: ledger %s (%q): the bucket holds no event of it (its manifest only: a CreateLedger that failed before its first event was stored leaves so)", id, rl.Name)
		case got.Yielded.Seq == 0:
			return nil, invalid("restore: ledger %s (%q): no event at the point in time given (its first event is later)", id, rl.Name)
		}
		rl.Events, rl.Verified, rl.Head = got.Yielded.Seq, got.Verified.Seq, got.Yielded.ID
		rl.Signed, rl.Ignored = got.Signed, got.Ignored
		if rl.Name != "" {
			if err := writeNameFile(vfs.Default, dir, rl.Name); err != nil {
				return nil, err
			}
		}
		rl.Resigned = state.Checkpoint == nil || state.CheckpointSize > rl.Events || v.KeyHash() != own.KeyHash() || v.Name() != own.Name()
		if !rl.Resigned {
			if err := writeFileAtomic(vfs.Default, dir, checkpointFileName, state.Checkpoint, true); err != nil {
				return nil, fmt.Errorf("engine: restore ledger %s: %w", id, err)
			}
		}
		res = append(res, rl)
	}
	if restored == 0 {
		skipped := make([]string, len(res))
		for i, rl := range res {
			skipped[i] = fmt.Sprintf("%s (%q)", rl.ID, rl.Name)
		}
		return nil, fmt.Errorf("%w: %w: no ledger restored: the bucket holds no signed checkpoint of %s, skipped (RestoreOptions.Unsigned SkipUnsigned, annal restore --unsigned skip): restore it with RestoreUnsigned (--unsigned restore) if you vouch for the bucket", ErrCorruption, ErrNoCheckpoint, strings.Join(skipped, ", "))
	}
	if db, err = Open(tmp, o.Options); err != nil {
		return nil, err
	}
	for i := range res {
		rl := &res[i]
		if rl.Resigned {
			if _, err := db.AcceptLedger(ctx, rl.ID.String()); err != nil {
				db.Close()
				return nil, fmt.Errorf("engine: restore ledger %s: sign it with the directory's key: %w", rl.ID, err)
			}
		}
	}
	var errs []error
	for _, err := range db.Unavailable() {
		errs = append(errs, err)
	}
	if err := db.Close(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("the restored directory does not open whole: %w", errors.Join(errs...))
	}
	// The restored directory holds only what Open made. Removed while
	// still held: a restore to the same target that starts before the
	// rename leaves tmp alone, for it changed just now.
	if err := os.Remove(filepath.Join(tmp, restoreHold)); err != nil {
		return nil, err
	}
	return res, nil
}

// newLedgerReader returns a Reader of ledger id in st, that checks the
// checkpoint with v and computes the engine's Merkle leaves; unsigned
// reads a ledger without a checkpoint (ReaderConfig.Unsigned). keyHint
// ends the error of a checkpoint that v does not verify: which key the
// caller's user gives, and how (restoreKeyHint, followerKeyHint).
func newLedgerReader(st store.Store, id eventid.LedgerID, v note.Verifier, unsigned bool, keyHint string) *replica.Reader {
	return replica.NewReader(ledgerReaderConfig(st, id, v, unsigned, keyHint))
}

// What an error of a checkpoint that does not verify says to give: a
// restore's (or a takeover's) key, or a follower's.
const (
	restoreKeyHint  = "give the key that signed it: Options.SigningKeyFile or Signer, or RestoreOptions.VerifierKey; annal restore --signing-key FILE or --key KEY"
	followerKeyHint = "a follower checks the bucket's checkpoints with the verifier key of the key that signs them: follow again with that key (FollowerOptions.VerifierKey, annal follow --key KEY; annal key prints it) in a new directory, as this one's follower.json names the key given"
)

// ledgerReaderConfig is newLedgerReader's configuration.
func ledgerReaderConfig(st store.Store, id eventid.LedgerID, v note.Verifier, unsigned bool, keyHint string) replica.ReaderConfig {
	var buf []byte
	return replica.ReaderConfig{
		Store:    st,
		Ledger:   id,
		Unsigned: unsigned,
		Leaf: func(r *segment.Record) tree.Hash {
			var h tree.Hash
			h, buf = leafHash(buf, r)
			return h
		},
		OpenCheckpoint: func(key string, msg []byte) (uint64, tree.Hash, error) {
			if v == nil {
				return 0, tree.Hash{}, fmt.Errorf("no verifier key to check it with")
			}
			c, err := openCheckpoint(msg, v, id)
			if err != nil {
				return 0, tree.Hash{}, fmt.Errorf("not a checkpoint of ledger %s signed by the key %s+%08x: %w (%s)", id, v.Name(), v.KeyHash(), err, keyHint)
			}
			return c.Size, c.Root, nil
		},
	}
}
