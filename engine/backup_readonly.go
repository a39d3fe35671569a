package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// A backup made by a read-only DB (OpenReadOnly: beside a writer in
// another process, which it neither blocks nor asks anything of) takes
// only reads, in the order in which the read-only open reads its
// evidence, so that every piece of evidence copied is at or before the
// segments copied after it (see "Backups" in docs/engine.md):
//
//  1. DIR/signing.key, its state file (the signer writes the state
//     before each checkpoint file) and DIR/signing.pub;
//  2. meta.db, a byte copy: read twice in a row, the two reads equal
//     (no commit of the writer in between: a copy taken during one may
//     mix pages of two transactions) and the copy passing bbolt's check
//     and Open's; retried until one does (a commit takes milliseconds);
//  3. for each ledger the copied meta.db knows, or that has a checkpoint
//     file (a creation between its checkpoint and its metadata record):
//     its checkpoint file, its NAME, then its segments as they are now
//     (looked at again: Follow), judged with the copied evidence as the
//     read-only open judges them (the witness of the copied meta.db, the
//     checkpoint and the signer's state, judgeEvidence); the sealed
//     segments whole, the last up to the end of the head's record; the
//     tree file's prefix up to the head.
//
// A ledger the read-only open refused, or that fails that judgement now,
// is copied as it is and reported (BackupResult.Unavailable): the copy
// refuses it too. The index is left out, as by the writer's backup.

// metaCopyTries bounds the reads of a live metadata file in search of a
// consistent copy; metaCopyPause is the longest pause between two tries.
const (
	metaCopyTries = 200
	metaCopyPause = 10 * time.Millisecond
)

// runReadOnly is backup.run for a read-only DB.
func (b *backup) runReadOnly() error {
	db := b.db
	if err := b.dst.MkdirAll(filepath.Join(b.tmp, ledgersDir), 0o700); err != nil {
		return err
	}
	// 1. The key and the signer's state.
	for _, name := range []string{signingKeyFile, signingKeyFile + signerStateSuffix, signingPubFile} {
		if _, err := b.copyFile(filepath.Join(db.dir, name), filepath.Join(b.tmp, name), -1, true); err != nil {
			return err
		}
	}
	state, err := b.signerState()
	if err != nil {
		return err
	}
	// 2. The metadata file.
	known, err := b.copyLiveMeta()
	if err != nil {
		return err
	}
	// 3. The ledgers, as the reader shows them now.
	db.ro.mu.Lock()
	db.discoverLedgers()
	passed := make([]eventid.LedgerID, 0, len(db.ro.passed))
	for id := range db.ro.passed {
		passed = append(passed, id)
	}
	db.ro.mu.Unlock()
	db.mu.RLock()
	ls := make([]*ledger, 0, len(db.byID))
	for _, l := range db.byID {
		ls = append(ls, l)
	}
	refused := db.refusedLedgers()
	shown := make(map[eventid.LedgerID]bool, len(db.byID))
	for id := range db.byID {
		shown[id] = true
	}
	db.mu.RUnlock()
	isRefused := func(id eventid.LedgerID) bool {
		return slices.ContainsFunc(refused, func(r refusedLedger) bool { return r.id == id })
	}
	// Ledgers the reader passed over (see discoverLedgers), and ledgers
	// the copied metadata knows that the reader does not show: refused,
	// as the copy's Open refuses them.
	for _, id := range passed {
		if !isRefused(id) {
			refused = append(refused, refusedLedger{id.String(), id})
		}
	}
	for id, m := range known {
		if !shown[id] && !isRefused(id) && !slices.Contains(passed, id) {
			refused = append(refused, refusedLedger{cmpName(m.Name, id), id})
		}
	}
	slices.SortFunc(ls, func(a, c *ledger) int { return strings.Compare(a.meta.Name, c.meta.Name) })
	for _, l := range ls {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		_, inMeta := known[l.meta.ID]
		bl, err := b.copyLiveLedger(l, known[l.meta.ID].Witness, inMeta, state)
		var r backupRefusal
		switch {
		case errors.As(err, &r):
			refused = append(refused, refusedLedger{l.meta.Name, l.meta.ID})
			// The files written so far are copied again, as they are.
			if err := os.RemoveAll(filepath.Join(b.tmp, ledgersDir, l.meta.ID.String())); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("ledger %s: %w", l.meta.Name, err)
		case bl.Count > 0:
			b.res.Ledgers = append(b.res.Ledgers, bl)
		}
	}
	slices.SortFunc(refused, func(a, c refusedLedger) int { return strings.Compare(a.name, c.name) })
	return b.finishLedgers(refused)
}

// cmpName is a ledger's name, or its ID if it has none.
func cmpName(name string, id eventid.LedgerID) string {
	if name == "" {
		return id.String()
	}
	return name
}

// backupRefusal is a ledger that fails the evidence when a read-only
// backup copies it: it is copied as it is, and reported.
type backupRefusal struct{ error }

func (r backupRefusal) Unwrap() error { return r.error }

// signerState returns the signer's state as the backup judges the
// ledgers with it: the copy's (DIR/signing.key.state, copied in step 1),
// or the state file the options name outside the directory, read now.
func (b *backup) signerState() (map[string]tree.Checkpoint, error) {
	db := b.db
	_, p := db.signerFiles()
	if p == filepath.Join(db.dir, signingKeyFile+signerStateSuffix) {
		return readSignerState(b.dst, filepath.Join(b.tmp, signingKeyFile+signerStateSuffix))
	}
	return readSignerState(db.fs, p)
}

// copyLiveMeta copies the metadata file, which a writer may be committing
// to, by reading it: a copy is kept once two reads in a row give the same
// bytes (no commit completed in between, so the pages of its latest
// transaction were not reused meanwhile) and the copy passes bbolt's
// consistency check and Open's (checkMetaCopy). It returns the ledgers'
// records of the copy.
func (b *backup) copyLiveMeta() (map[eventid.LedgerID]ledgerMeta, error) {
	db := b.db
	src := filepath.Join(db.dir, metaFile)
	if db.opts.metaPath != "" {
		src = db.opts.metaPath
	}
	dst := filepath.Join(b.tmp, metaFile)
	var why error
	for try := 0; try < metaCopyTries; try++ {
		if try > 0 {
			select {
			case <-b.ctx.Done():
				return nil, b.ctx.Err()
			case <-time.After(min(time.Duration(try)*time.Millisecond, metaCopyPause)):
			}
		}
		err := regularFile(vfs.Default, src)
		var first []byte
		if err == nil {
			first, err = os.ReadFile(src)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("the metadata file %s is missing: a copy without it would lose the consumers' positions; the writer's next Open rebuilds it (with a note), back up after that", src)
		}
		if err != nil {
			return nil, fmt.Errorf("read the metadata file: %w", err)
		}
		second, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("read the metadata file: %w", err)
		}
		if !bytes.Equal(first, second) {
			why = errors.New("it changed between two reads at every try")
			continue
		}
		if err := writeWhole(b.dst, dst, first); err != nil {
			return nil, err
		}
		metas, err := checkMetaCopy(dst, src, int64(len(first)))
		if err != nil {
			why = err
			continue
		}
		b.res.Copied++
		b.res.Bytes += int64(len(first))
		if err := b.done(dst); err != nil {
			return nil, err
		}
		known := make(map[eventid.LedgerID]ledgerMeta, len(metas))
		for _, m := range metas {
			known[m.ID] = m
		}
		return known, nil
	}
	return nil, fmt.Errorf("copy the metadata file %s: no consistent copy in %d tries: %w", src, metaCopyTries, why)
}

// writeWhole writes data to a new file at path, synced.
func writeWhole(fs vfs.FS, path string, data []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkMetaCopy checks tmp, a copy of size bytes of the metadata file at
// path, as Open would open it (its pages within the file, its ledgers
// bucket, every record readable) and with bbolt's own consistency check
// (Tx.Check: every page reachable once, none past the end), and returns
// its ledgers' records. A copy torn by a commit fails it.
func checkMetaCopy(tmp, path string, size int64) (metas []ledgerMeta, err error) {
	defer func() {
		if r := recover(); r != nil {
			metas, err = nil, meta.Damaged(path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := meta.CheckSize(tmp, path, size); err != nil {
		return nil, err
	}
	m, err := bolt.Open(tmp, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, meta.Damaged(path, err)
	}
	defer m.Close()
	err = meta.Tx(m, false, func(tx *bolt.Tx) error {
		if tx.Bucket(meta.BucketLedgers) == nil {
			return meta.Damaged(path, "it has no ledgers bucket")
		}
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = meta.Damaged(path, err)
			}
		}
		return first
	})
	if err != nil {
		return nil, err
	}
	return meta.Load(m)
}

// copyLiveLedger copies ledger l of a read-only DB: its checkpoint file,
// its NAME, then its segments up to the head they show now, once they
// pass the evidence copied before them (w: the witness of the copied
// metadata, if inMeta; state: the signer's), its tree file's prefix. A
// ledger that fails the evidence is a backupRefusal. A ledger that the
// copied metadata does not know and that has no checkpoint file is being
// created (CreateLedger returns after both): it is left out (Count 0).
func (b *backup) copyLiveLedger(l *ledger, w segment.Head, inMeta bool, state map[string]tree.Checkpoint) (BackupLedger, error) {
	db := b.db
	id := l.meta.ID
	src, dst := l.log.Dir(), filepath.Join(b.tmp, ledgersDir, id.String())
	ckPath := filepath.Join(src, checkpointFileName)
	var (
		msg  []byte
		rerr error
		h    segment.Head
		c    *Checkpoint
		// The roots computed, by size: the checkpoint's and the signer's
		// state's are most often the same, and a try again asks again.
		roots = map[uint64]tree.Hash{}
	)
	for try := 0; ; try++ {
		msg, rerr = readSmallFile(db.fs, ckPath, maxCheckpointFile)
		if !inMeta && errors.Is(rerr, os.ErrNotExist) {
			return BackupLedger{}, nil
		}
		// The segments as they are now: after the evidence.
		db.ro.mu.Lock()
		db.followLedger(l)
		db.ro.mu.Unlock()
		if err := l.followErr(); err != nil {
			return BackupLedger{}, backupRefusal{err}
		}
		h = l.log.Head()
		if err := l.log.CheckWitness(w); err != nil {
			return BackupLedger{}, backupRefusal{err}
		}
		e := ledgerEvidence{Ledger: id, Name: l.meta.Name, Path: ckPath, Verifier: db.verifier, Head: h.Seq,
			RootAt: func(n uint64) (tree.Hash, error) {
				if root, ok := roots[n]; ok {
					return root, nil
				}
				root, _, err := l.segmentsRoot(b.ctx, nil, n)
				if err == nil {
					roots[n] = root
				}
				return root, err
			}}
		switch {
		case rerr == nil:
			e.Note = msg
		case errors.Is(rerr, os.ErrNotExist):
		case errors.Is(rerr, tree.ErrCheckpoint):
			e.Note = []byte{} // larger than any checkpoint: not one
		default:
			return BackupLedger{}, fmt.Errorf("read the checkpoint: %w", rerr)
		}
		if db.verifier == nil {
			if e.Note != nil {
				return BackupLedger{}, backupRefusal{fmt.Errorf("%w: %s: %w: no key to check it with: %s", ErrUnsigned, ckPath, tree.ErrCheckpoint, db.keyMissingText())}
			}
		} else if state != nil {
			e.Signed = signedFor(stateLookup(state), db.verifier, id)
		}
		var err error
		if c, err = judgeEvidence(e); err != nil {
			if errors.Is(err, ErrUnsigned) || errors.Is(err, ErrRewritten) {
				return BackupLedger{}, backupRefusal{err}
			}
			return BackupLedger{}, err
		}
		// The state copied ahead of the checkpoint file is the signer
		// between its two writes: the checkpoint file is read again (the
		// copy's Open would otherwise pass it as that crash, rebuilding
		// the tree beyond the checkpoint, with a note).
		if e.Signed == nil || c != nil && c.Size >= e.Signed.Size || try >= metaCopyTries {
			break
		}
		select {
		case <-b.ctx.Done():
			return BackupLedger{}, b.ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	var ck uint64
	if c != nil {
		ck = c.Size
	}
	if err := b.dst.MkdirAll(dst, 0o700); err != nil {
		return BackupLedger{}, err
	}
	if rerr == nil {
		if err := b.writeFile(filepath.Join(dst, checkpointFileName), msg); err != nil {
			return BackupLedger{}, err
		}
	}
	if _, err := b.copyFile(filepath.Join(src, nameFile), filepath.Join(dst, nameFile), -1, true); err != nil {
		return BackupLedger{}, err
	}
	if err := b.copySegments(src, dst, h); err != nil {
		return BackupLedger{}, err
	}
	// The tree file's leaves written, up to the head: those of the
	// checkpoint at least (it was signed from them). A missing or
	// damaged tree file is left out: the copy's Open rebuilds it, as the
	// writer's would.
	if t, err := tree.OpenFileReadOnly(db.fs, filepath.Join(src, treeFileName), uint32(id)); err == nil {
		leaves := t.Size()
		t.Close()
		if err := b.copyTree(src, dst, min(leaves, h.Seq), ck); err != nil {
			return BackupLedger{}, err
		}
	} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, tree.ErrCorrupt) {
		return BackupLedger{}, fmt.Errorf("the tree file: %w", err)
	}
	if err := segment.SyncDir(b.dst, dst); err != nil {
		return BackupLedger{}, err
	}
	return BackupLedger{Name: l.meta.Name, ID: id, Count: h.Seq, Head: h.ID, Checkpoint: ck}, nil
}

// writeFile writes data, read from the data directory, to a new file of
// the backup at path, synced, and counts it.
func (b *backup) writeFile(path string, data []byte) error {
	if err := writeWhole(b.dst, path, data); err != nil {
		return err
	}
	b.res.Copied++
	b.res.Bytes += int64(len(data))
	return b.done(path)
}
