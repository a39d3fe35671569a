package engine

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// The Merkle tree of a ledger (docs/format.md, section 9): one leaf per
// event, in ledger order, the leaf bytes being the event's export line
// without its "\n". Its files, in the ledger's directory:
//
//	tree        the stored hashes (package tree), derived from the segments
//	checkpoint  the latest signed checkpoint, replaced atomically
//
// and DIR/signing.key, the directory's signing key (unless the program
// gives a key file elsewhere, Options.SigningKeyFile, or a crypto.Signer,
// Options.Signer), with its memory of what it signed (signer.go).
//
// The tree is extended on the append path (index), unsynced, before the
// appended events become visible. A signed checkpoint (issueCheckpoint)
// syncs the tree and never covers an event that is not durable in the
// segments. Open trusts the tree file up to the latest checkpoint's size
// once its root there equals the signed one, cuts what follows and
// extends it again from the segments (recoverTree); a tree file it cannot
// trust is rebuilt from the segments, which must then give the signed
// root. Open judges the checkpoint evidence (evidence.go) before it cuts
// or replaces anything: a refused ledger keeps its files as they were.
const (
	treeFileName       = "tree"
	checkpointFileName = "checkpoint"
	signingKeyFile     = "signing.key"
	// signingPubFile is DIR/signing.key's verifier file (verifierFile).
	signingPubFile = "signing.pub"
	// maxCheckpointFile bounds what Open reads of a checkpoint file: a
	// signed checkpoint is a few hundred bytes.
	maxCheckpointFile = 64 << 10
	// defaultCheckpointInterval: Options.CheckpointInterval's default.
	defaultCheckpointInterval = 10 * time.Second
	// treeChunk: how many leaves a rebuild or an extension at Open
	// writes at once.
	treeChunk = 4096
)

// leafHash returns the leaf hash of r (tree.LeafHash of its export line,
// as Export writes it, without the "\n"), using buf as scratch space, and
// buf (grown) for reuse.
func leafHash(buf []byte, r *segment.Record) (tree.Hash, []byte) {
	return lineLeafHash(buf, r.ID, bytesString(r.Entity), bytesString(r.Key), bytesString(r.Event), r.Meta, r.Data)
}

// entryLeafHash is leafHash for an appended entry and its ID.
func entryLeafHash(buf []byte, id eventid.ID, e *segment.Entry) (tree.Hash, []byte) {
	return lineLeafHash(buf, id, e.Entity, e.Key, e.Event, e.Meta, e.Data)
}

// lineLeafHash hashes the 0x00 prefix and the event's export line in one
// sha256.Sum256 (which is tree.LeafHash of the line, without its
// allocation): on the append path and on Verify's, once per event.
func lineLeafHash(buf []byte, id eventid.ID, entity, key, event string, meta, data []byte) (tree.Hash, []byte) {
	buf = append(buf[:0], 0)
	buf = ndjson.AppendLine(buf, id, id.Micros(), entity, key, event, meta, data)
	return sha256.Sum256(buf[:len(buf)-1]), buf
}

// batchLeaves returns the leaf hashes of a committed batch (its IDs set).
func batchLeaves(b *segment.Batch) []tree.Hash {
	leaves := make([]tree.Hash, len(b.IDs))
	buf := make([]byte, 0, 512)
	for i := range b.IDs {
		leaves[i], buf = entryLeafHash(buf, b.IDs[i], &b.Entries[i])
	}
	return leaves
}

// errTreeClosed: the tree of a ledger that Close closed.
var errTreeClosed = errors.New("the tree file is closed")

// treeFlushLeaves: how many events wait in treePend before their leaves
// are hashed and written to the tree file in one write. One write per
// append group cost batched appends (Durability None, CPU-bound) about
// 14% of their time in pwrite alone; written every 1024 leaves (32 KiB),
// the write is no longer seen. Readers write them first (readTree).
const treeFlushLeaves = 1024

// pendLeaf is a published event whose leaf waits in treePend: its ID and
// entry, hashed when the leaves are written (treeWrite), or its leaf
// hash, when groupWritten computed it for the replica.
type pendLeaf struct {
	id   eventid.ID
	e    *segment.Entry // nil: hash is the leaf
	hash tree.Hash
}

// treeJob is a write of leaves to the tree file in progress, by a
// goroutine of its own (startTreeWriteLocked): the leaves of treeFlushLeaves
// events hashed, their interior nodes computed and written, while the
// appends go on. It owns the tree file's writing side and the buffers it
// was given until done is closed; whoever holds idxMu waits for it
// (waitTreeLocked) before touching them.
type treeJob struct {
	done   chan struct{}
	n      int // events
	pend   []pendLeaf
	leaves []tree.Hash
	buf    []byte
	err    error // set before done is closed
}

// extendTree adds a published group's events to the tree, with idxMu
// held, before idxHead moves past them: to treePend, whose leaves are
// hashed and written once treeFlushLeaves wait (startTreeWriteLocked).
// leaves, if not nil, are the group's leaf hashes, computed already (for
// the replica). A failure is kept in treeErr: the tree is not extended
// again (proofs and checkpoints fail) until a reopen recovers it from the
// segments; the events themselves are stored.
//
// The group's entries are kept until then: their meta and data are the
// append's own canonical copy, and nothing changes a committed batch.
func (l *ledger) extendTree(group []*segment.Batch, leaves []tree.Hash) {
	if l.treeErr != nil || l.tree == nil {
		return
	}
	k := 0
	for _, b := range group {
		for i := range b.IDs {
			p := pendLeaf{id: b.IDs[i], e: &b.Entries[i]}
			if leaves != nil {
				p.e, p.hash = nil, leaves[k]
			}
			l.treePend = append(l.treePend, p)
			k++
		}
	}
	if len(l.treePend) >= treeFlushLeaves {
		l.startTreeWriteLocked()
	}
}

// startTreeWriteLocked hands the events waiting in treePend to a
// goroutine that hashes their leaves and writes them to the tree file
// (the second core, as the index's tail is written), after the previous
// one is done: at most one write is in progress, so the file is written
// in sequence order. Batch-level work off the append path: an append
// costs its leaf hashes and the tree's nodes only once per
// treeFlushLeaves events, and on another goroutine. Called with idxMu
// held.
func (l *ledger) startTreeWriteLocked() {
	l.waitTreeLocked()
	if l.treeErr != nil || l.tree == nil || len(l.treePend) == 0 {
		return
	}
	job := &treeJob{done: make(chan struct{}), n: len(l.treePend), pend: l.treePend, leaves: l.treeLeaves, buf: l.treeBuf}
	l.treePend, l.treeLeaves, l.treeBuf = l.treeSpare, nil, nil
	l.treeSpare = nil
	l.treeJob = job
	t, name, hook := l.tree, l.meta.Name, l.db.test.treeWrite
	go func() {
		defer close(job.done)
		if hook != nil {
			hook()
		}
		job.leaves, job.buf, job.err = treeWrite(t, name, job.pend, job.leaves, job.buf)
	}()
}

// waitTreeLocked waits for the tree write in progress, if any, keeps its
// failure in treeErr and takes its buffers back. Called with idxMu held;
// the write does not take it.
func (l *ledger) waitTreeLocked() {
	job := l.treeJob
	if job == nil {
		return
	}
	<-job.done
	l.treeJob = nil
	if job.err != nil && l.treeErr == nil {
		l.treeErr = job.err
	}
	clear(job.pend) // the entries are not kept
	if cap(job.pend) <= 4*treeFlushLeaves {
		l.treeSpare = job.pend[:0]
	}
	l.treeLeaves, l.treeBuf = job.leaves, job.buf
}

// treeWrite hashes the leaves of pend that are not hashed yet, into
// leaves, and appends them all to t (named ledger name in its error),
// using buf as scratch space; it returns leaves and buf, to be reused.
func treeWrite(t *tree.File, name string, pend []pendLeaf, leaves []tree.Hash, buf []byte) ([]tree.Hash, []byte, error) {
	leaves = slices.Grow(leaves[:0], len(pend))
	for i := range pend {
		p := &pend[i]
		h := p.hash
		if p.e != nil {
			h, buf = entryLeafHash(buf, p.id, p.e)
		}
		leaves = append(leaves, h)
	}
	if cap(buf) > 1<<16 {
		buf = nil // a large event's: not kept
	}
	var err error
	if aerr := t.Append(leaves); aerr != nil {
		err = fmt.Errorf("engine: tree of ledger %s: write after event #%d: %w (reopen the DB to recover it from the segments)", name, t.Size(), aerr)
	}
	if cap(leaves) > 4*treeFlushLeaves {
		leaves = nil // a large batch's: not kept
	}
	return leaves, buf, err
}

// flushTreeLocked writes the leaves waiting in treePend to the tree file,
// after the write in progress, if any. Called with idxMu held.
func (l *ledger) flushTreeLocked() {
	l.waitTreeLocked()
	if l.treeErr != nil || l.tree == nil || len(l.treePend) == 0 {
		return
	}
	var err error
	l.treeLeaves, l.treeBuf, err = treeWrite(l.tree, l.meta.Name, l.treePend, l.treeLeaves, l.treeBuf)
	if err != nil {
		l.treeErr = err
	}
	clear(l.treePend)
	if cap(l.treePend) > 4*treeFlushLeaves {
		l.treePend = nil // a large batch's: not kept
	} else {
		l.treePend = l.treePend[:0]
	}
}

// readTree returns the ledger's tree file holding every indexed event
// (the leaves waiting in treePend written first), and how many leaves it
// has, or the tree's failure. Every reader of the tree goes through it.
func (l *ledger) readTree() (*tree.File, uint64, error) {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	l.flushTreeLocked()
	if l.treeErr != nil {
		return nil, 0, l.treeErr
	}
	if l.tree == nil {
		return nil, 0, fmt.Errorf("engine: ledger %s has no tree", l.meta.Name)
	}
	return l.tree, l.indexed, nil
}

// treeState returns the ledger's tree failure, if any, and how many
// leaves it has (the events indexed), every one written to the file.
func (l *ledger) treeState() (uint64, error) {
	_, n, err := l.readTree()
	return n, err
}

// closeTree closes the tree file; later index calls leave it alone.
func (l *ledger) closeTree() error {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if l.tree == nil {
		return nil
	}
	l.flushTreeLocked()
	err := l.tree.Close()
	l.tree = nil
	if l.treeErr == nil {
		l.treeErr = fmt.Errorf("%w: ledger %s: %w", ErrClosed, l.meta.Name, errTreeClosed)
	}
	return err
}

// loadKey sets the DB's signer: Options.Signer with its state file
// (Options.SignerState, else DIR/signing.key.state), or the key file
// Options.SigningKeyFile, else DIR/signing.key, with its state beside it.
// A key file is created on first use, but never while a ledger of the
// directory holds a checkpoint signed by another key (the key was lost:
// a new one would refuse every ledger and hide the cure).
func (db *DB) loadKey() error {
	var k tree.Key
	var err error
	path, statePath := db.signerFiles()
	if db.opts.Signer != nil {
		if k, err = db.optionsSignerKey(); err != nil {
			return err
		}
	} else {
		k, err = tree.LoadKey(db.fs, path)
		if errors.Is(err, os.ErrNotExist) {
			if err := db.checkNoSignedCheckpoints(path); err != nil {
				return err
			}
			k, _, err = tree.LoadOrCreateKey(db.fs, path)
		}
		if err != nil {
			return fmt.Errorf("engine: the signing key %s: %w", path, err)
		}
		if err := writeVerifierFile(db.fs, verifierFile(path), k.Verifier); err != nil {
			return fmt.Errorf("engine: the signing key's verifier file: %w", err)
		}
	}
	if db.signer, err = openStateSigner(db.fs, k, statePath, db.opts.fs == nil); err != nil {
		return err
	}
	return db.setKey(k)
}

// optionsSignerKey returns the key of Options.Signer.
func (db *DB) optionsSignerKey() (tree.Key, error) {
	k, err := tree.SignerKey(db.opts.Signer, db.opts.SignerName)
	if err != nil {
		return tree.Key{}, fmt.Errorf("%w: options: Signer: %w", ErrInvalid, err)
	}
	return k, nil
}

// setKey makes k the DB's key, and its verifier the one checkpoints are
// checked with.
func (db *DB) setKey(k tree.Key) (err error) {
	db.key = k
	if db.verifier, err = tree.NewVerifier(k.Verifier); err != nil {
		return fmt.Errorf("engine: the signing key's verifier %q: %w", k.Verifier, err)
	}
	return nil
}

// signerFiles returns the key file the options name ("" with
// Options.Signer) and the signer's state file: Options.SigningKeyFile, else
// DIR/signing.key, and its ".state"; for Options.Signer,
// Options.SignerState, else DIR/signing.key.state. A read-only open reads
// the same state (readSignerState) to judge the evidence as the writer.
func (db *DB) signerFiles() (keyPath, statePath string) {
	if db.opts.Signer != nil {
		return "", cmp.Or(db.opts.SignerState, filepath.Join(db.dir, signingKeyFile+signerStateSuffix))
	}
	keyPath = cmp.Or(db.opts.SigningKeyFile, filepath.Join(db.dir, signingKeyFile))
	return keyPath, keyPath + signerStateSuffix
}

// verifierFile returns the public key file of the key file keyPath:
// keyPath with ".key" replaced by ".pub", or ".pub" appended
// (DIR/signing.pub for DIR/signing.key). The writer keeps it, so that a
// reader that may read the data files but not the private key (0600, the
// writer's) can check the checkpoints.
func verifierFile(keyPath string) string {
	return strings.TrimSuffix(keyPath, ".key") + ".pub"
}

// maxVerifierFile bounds what is read of a verifier file: a verifier key
// is about 100 bytes.
const maxVerifierFile = 4096

// writeVerifierFile writes the verifier key v to path (atomically, with
// the mode of the other data files), unless path holds it already. A file
// that cannot be read (not a missing one, nor one too large) is an error,
// as one that cannot be written.
func writeVerifierFile(fs vfs.FS, path, v string) error {
	want := []byte(v + "\n")
	b, err := readSmallFile(fs, path, maxVerifierFile)
	switch {
	case err == nil && bytes.Equal(b, want):
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, tree.ErrCheckpoint):
		return fmt.Errorf("read %s: %w", path, err)
	}
	return writeFileAtomic(fs, fs.PathDir(path), fs.PathBase(path), want, true)
}

// readVerifierFile reads the verifier key in the file at path (written by
// writeVerifierFile).
func readVerifierFile(fs vfs.FS, path string) (string, note.Verifier, error) {
	b, err := readSmallFile(fs, path, maxVerifierFile)
	if err != nil {
		return "", nil, err
	}
	text := strings.TrimSuffix(string(b), "\n")
	v, err := tree.NewVerifier(text)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %s: not a verifier key: %w", tree.ErrKey, path, err)
	}
	return text, v, nil
}

// checkNoSignedCheckpoints returns ErrSigningKeyMissing, naming the keys
// that signed them, if a ledger of the directory holds a signed
// checkpoint: the key file at path, which is missing, must not be
// replaced by a new one.
func (db *DB) checkNoSignedCheckpoints(path string) error {
	dir := filepath.Join(db.dir, ledgersDir)
	names, err := db.fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("engine: list ledgers: %w", err)
	}
	sort.Strings(names)
	keys := map[string]bool{}
	var signers, ledgers []string
	for _, name := range names {
		if id, err := eventid.ParseLedgerID(name); err != nil || id.String() != name {
			continue
		}
		msg, err := readSmallFile(db.fs, db.fs.PathJoin(dir, name, checkpointFileName), maxCheckpointFile)
		if err != nil {
			continue
		}
		var unverified *note.UnverifiedNoteError
		if _, err := note.Open(msg, note.VerifierList()); !errors.As(err, &unverified) {
			continue // not a signed note: no key's evidence
		}
		ledgers = append(ledgers, name)
		for _, sig := range unverified.Note.UnverifiedSigs {
			if key := fmt.Sprintf("%s+%08x", sig.Name, sig.Hash); !keys[key] {
				keys[key] = true
				signers = append(signers, key)
			}
		}
	}
	if len(ledgers) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s does not exist, and %d ledgers (%s) hold checkpoints signed by the key %s: restore %s, or give that key with --signing-key FILE (Options.SigningKeyFile, Options.Signer); annal creates no new key while checkpoints signed by another are in the directory",
		ErrSigningKeyMissing, path, len(ledgers), strings.Join(firstN(ledgers, 5), ", "), strings.Join(signers, ", "), path)
}

// firstN returns the first n of s, with "…" after them if there are more.
func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), "…")
}

// checkpointOf returns the engine's Checkpoint of a verified body.
func checkpointOf(id eventid.LedgerID, c tree.Checkpoint, msg []byte) Checkpoint {
	return Checkpoint{Ledger: id, Origin: c.Origin, Size: c.Size, Root: c.Root, Note: msg}
}

// openCheckpoint verifies a signed checkpoint of ledger id with v: its
// signature and its origin (which must end with "/" and the ledger's ID).
// Errors wrap tree.ErrCheckpoint.
func openCheckpoint(msg []byte, v note.Verifier, id eventid.LedgerID) (Checkpoint, error) {
	c, err := tree.OpenCheckpoint(msg, v)
	if err != nil {
		return Checkpoint{}, err
	}
	want := "/" + id.String()
	if len(c.Origin) < len(want) || c.Origin[len(c.Origin)-len(want):] != want {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not of ledger %s (it must end with %q)", tree.ErrCheckpoint, c.Origin, id, want)
	}
	if c.Size == 0 {
		return Checkpoint{}, fmt.Errorf("%w: size 0 (a ledger has at least its genesis event)", tree.ErrCheckpoint)
	}
	return checkpointOf(id, c, msg), nil
}

// latestSize returns the size of the ledger's latest checkpoint (0: none).
func (l *ledger) latestSize() uint64 {
	if c := l.latest.Load(); c != nil {
		return c.Size
	}
	return 0
}

// issueCheckpoint signs a checkpoint of the ledger and writes it to the
// ledger's checkpoint file: of size min(limit, the events in the tree,
// the events durable in the segments) (limit 0: no limit). A signed
// checkpoint never covers an event that is not durable: a crash could
// lose it and the checkpoint would then be a lie. The tree file is synced
// first. If the latest checkpoint has that size already, it is returned
// as it is. Checkpoints of a ledger are serialized by ckMu.
func (l *ledger) issueCheckpoint(limit uint64) (Checkpoint, error) {
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	// Not into a directory that is no longer the writer's (watch.go).
	if err := l.db.watch.fired(); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: %w", l.meta.Name, err)
	}
	if err := l.refusedErr(); err != nil {
		return Checkpoint{}, err
	}
	t, n, err := l.readTree()
	if err != nil {
		return Checkpoint{}, err
	}
	if d := l.log.Durable().Seq; d < n {
		n = d
	}
	if r := l.repl; r != nil {
		// Only events the bucket holds: the signer remembers what it
		// signed, and a restore after the disk is lost gives only those
		// (a signature past them would refuse it as a rollback, and the
		// ledger could not go on from there without forking what was
		// signed). In Replicated mode the readers' bound is what is
		// stored; in Shipped mode the background and Close's checkpoints
		// (limit 0) wait for the upload, while a requested one
		// (DB.Checkpoint) signs the local head, as does the first one
		// of a new ledger before anything is stored.
		stored := l.visible().Seq
		if r.mode == Shipped {
			stored = 0
			if limit == 0 {
				stored = r.w.Status().Stored
			}
		}
		if stored > 0 && stored < n {
			n = stored
		}
	}
	if limit != 0 && limit < n {
		n = limit
	}
	if c := l.latest.Load(); c != nil && c.Size >= n {
		return *c, nil
	}
	if n == 0 {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: no durable event", l.meta.Name)
	}
	// Sync holds off neither index's Append nor readers (tree.File.Sync
	// is an fsync under a shared lock): the leaves appended before it,
	// the first n among them (written by readTree), are durable when it
	// returns. Appenders do not wait for it.
	if err := t.Sync(); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: sync the tree file: %w", l.meta.Name, err)
	}
	root, err := t.Root(n)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s at size %d: %w", l.meta.Name, n, err)
	}
	body := tree.Checkpoint{Origin: tree.Origin(l.db.key.Signer.Name(), uint32(l.meta.ID)), Size: n, Root: root}
	msg, err := l.db.sign(t, body, l.latest.Load())
	if errors.Is(err, ErrSignerRefused) {
		// The tree or the signer's memory is not what this writer
		// signed from: no later checkpoint of the ledger can be signed
		// either. Its appends stop; Close reports it.
		err = fmt.Errorf("engine: checkpoint of ledger %s at size %d: %w; appends to the ledger stop (reads go on): close the DB and reopen it, whose Open checks the ledger's tree and checkpoint against its events (the events appended since its last checkpoint are stored, not signed)", l.meta.Name, n, err)
		l.refused.CompareAndSwap(nil, &err)
		return Checkpoint{}, err
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: sign: %w", l.meta.Name, err)
	}
	if msg, err = l.db.cosign(t, body, msg); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s at size %d: %w", l.meta.Name, n, err)
	}
	// The directory synced too: a crash must not bring back the file the
	// signer's state has passed (Open would take it for a rollback).
	if err := writeFileAtomic(l.db.fs, l.log.Dir(), checkpointFileName, msg, true); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: %w", l.meta.Name, err)
	}
	c := checkpointOf(l.meta.ID, body, msg)
	l.latest.Store(&c)
	if r := l.repl; r != nil {
		// Stored once the bucket holds its events.
		r.w.Checkpoint(msg, n)
	}
	return c, nil
}

// sign has the DB's signer sign body, a checkpoint of the tree t (which
// holds at least body.Size leaves), as an extension of the last checkpoint
// the signer signed for its origin, or else of latest (the ledger's
// checkpoint file; nil if none), with the consistency proof from t.
//
// A signer whose state file moved on since it last read it (another DB
// signing with the same key, or a state written whose directory's sync
// failed) refuses the first try, having merged the file into its memory:
// the signature is tried once more, extending what it remembers now.
func (db *DB) sign(t *tree.File, body tree.Checkpoint, latest *Checkpoint) ([]byte, error) {
	prev, ok := db.signer.Signed(body.Origin)
	if !ok && latest != nil {
		prev = tree.Checkpoint{Origin: latest.Origin, Size: latest.Size, Root: latest.Root}
	}
	for try := 0; ; try++ {
		var proof []tree.Hash
		if prev.Size > 0 && prev.Size < body.Size {
			var err error
			if proof, err = t.ConsistencyProof(prev.Size, body.Size); err != nil {
				return nil, fmt.Errorf("the consistency proof from size %d: %w", prev.Size, err)
			}
		}
		msg, err := db.signer.SignCheckpoint(prev, body, proof)
		if !errors.Is(err, ErrSignerRefused) || try > 0 {
			return msg, err
		}
		now, ok := db.signer.Signed(body.Origin)
		if !ok || now == prev {
			return msg, err
		}
		prev = now
	}
}

// writeFileAtomic writes data to dir/name through dir/name.tmp: written,
// synced, renamed; the directory synced too if syncDir.
func writeFileAtomic(fs vfs.FS, dir, name string, data []byte, syncDir bool) error {
	tmp, path := fs.PathJoin(dir, name+".tmp"), fs.PathJoin(dir, name)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// A copy: a file system may use the buffer (pebble's memory FS, with
	// its invariants on, as under -race, inverts it after the write), and
	// data is kept (the checkpoint's note).
	_, err = f.Write(bytes.Clone(data))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil && syncDir {
		err = segment.SyncDir(fs, dir)
	}
	if err != nil {
		fs.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readSmallFile reads a file of at most max bytes. A path that is not a
// regular file (a named pipe, a device, a socket, a directory) is refused
// without being opened (see regularFile).
func readSmallFile(fs vfs.FS, path string, max int64) ([]byte, error) {
	if err := regularFile(fs, path); err != nil {
		return nil, err
	}
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", tree.ErrCheckpoint, path, max)
	}
	return b, nil
}

// startCheckpointer starts the background writer of signed checkpoints
// (none with a negative CheckpointInterval).
func (db *DB) startCheckpointer() {
	if db.opts.CheckpointInterval < 0 {
		return
	}
	db.ckStop = make(chan struct{})
	db.ckDone = make(chan struct{})
	go db.checkpointLoop()
}

// stopCheckpointer stops the checkpointer and waits until it has stopped.
// Called once, by Close, before it closes any file.
func (db *DB) stopCheckpointer() {
	if db.ckStop == nil {
		return
	}
	close(db.ckStop)
	<-db.ckDone
}

// checkpointLoop issues, every CheckpointInterval, a checkpoint of every
// open ledger whose durable head passed its latest checkpoint: none while
// nothing is appended. A failure (a full disk, a tree failure) is tried
// again at the next tick; DB.Checkpoint reports errors.
func (db *DB) checkpointLoop() {
	defer close(db.ckDone)
	t := time.NewTicker(db.opts.CheckpointInterval)
	defer t.Stop()
	var ls []*ledger
	for {
		select {
		case <-db.ckStop:
			return
		case <-t.C:
		}
		ls = db.openLedgers(ls[:0])
		for _, l := range ls {
			if l.log.Durable().Seq <= l.latestSize() {
				continue
			}
			if db.enterRead() != nil {
				return
			}
			if _, err := l.issueCheckpoint(0); err == nil {
				db.checkpointsIssued.Add(1)
			}
			db.exitRead()
		}
	}
}

// refusedErr returns the error of the signer's refusal of a checkpoint
// of the ledger (see ledger.refused), or nil.
func (l *ledger) refusedErr() error {
	if p := l.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// closeCheckpoints issues, in Close once the logs are closed (synced), a
// checkpoint of every ledger that grew since its latest. A ledger whose
// tree failed gets none, and the failure is reported (the next Open
// recovers the tree from the segments).
func (db *DB) closeCheckpoints(ledgers []*ledger) []error {
	var errs []error
	for _, l := range ledgers {
		if err := l.refusedErr(); err != nil {
			errs = append(errs, err) // refused during the run
			continue
		}
		n, err := l.treeState()
		if err != nil {
			if !errors.Is(err, errTreeClosed) {
				errs = append(errs, fmt.Errorf("no checkpoint at Close: %w", err))
			}
			continue
		}
		if n <= l.latestSize() {
			continue
		}
		if _, err := l.issueCheckpoint(0); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkpoint is DB.Checkpoint for an open ledger: the log synced, then a
// checkpoint at the head readers see.
func (db *DB) checkpoint(ctx context.Context, l *ledger) (Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	if err := db.enterRead(); err != nil {
		return Checkpoint{}, err
	}
	defer db.exitRead()
	head := l.visible().Seq
	if err := l.log.Sync(); err != nil {
		if errors.Is(err, segment.ErrClosed) {
			return Checkpoint{}, fmt.Errorf("%w: checkpoint of ledger %s: %w", ErrClosed, l.meta.Name, err)
		}
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: sync: %w", l.meta.Name, err)
	}
	c, err := l.issueCheckpoint(head)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Size < head {
		// Not reachable: the sync made every visible event durable, and
		// the tree holds every visible event.
		return Checkpoint{}, fmt.Errorf("engine: checkpoint of ledger %s: signed at size %d, below the head #%d", l.meta.Name, c.Size, head)
	}
	return c, nil
}

// TreeRebuilt returns the ledgers whose tree file Open rebuilt from the
// segments, by name (or ledger ID), with why: missing, damaged, not
// matching the latest signed checkpoint, or no checkpoint to check it
// against. The segments are the truth and the rebuilt tree gave the
// signed root, so nothing is lost; the errors are for the operator.
func (db *DB) TreeRebuilt() map[string]error {
	db.mu.RLock()
	defer db.mu.RUnlock()
	out := make(map[string]error, len(db.treeRebuilt))
	for id, why := range db.treeRebuilt {
		key := id.String()
		if l, ok := db.byID[id]; ok {
			key = l.meta.Name
		}
		out[key] = why
	}
	return out
}

// recoverTree opens the tree of a recovered ledger (its segments
// recovered and indexed) and brings it to the segments' head; see
// docs/recovery.md. It decides first, and changes files only after: the
// ledger's checkpoint evidence (judgeEvidence: the checkpoint file, the
// signer's memory) is judged against the segments' roots, computed from
// the tree file where the checkpoint vouches for it, else from a tree
// rebuilt beside it; a refused ledger (its error: Open reports it
// unavailable) keeps its files as they were. Once it passes, the tree file
// is cut back to the checkpoint (what follows was written unsynced) and
// extended from the segments, or replaced by the rebuilt one (reported
// by TreeRebuilt).
//
// A ledger of only its genesis event without a checkpoint (a crash inside
// CreateLedger) is signed now; one refused for its checkpoint evidence
// only (ErrUnsigned) is signed as it is when AcceptLedger recovers it.
//
// built, if not nil, is the tree file catchUp wrote beside the old one
// (treeFileName+".tmp") from every record, when the index is rebuilt:
// the rebuild uses it instead of reading the segments again.
// recoverTree closes it, or removes it if it does not use it.
func (db *DB) recoverTree(l *ledger, built *tree.File, rec *segment.Recovery) error {
	fs, dir, id := db.fs, l.log.Dir(), l.meta.ID
	p := &treePrep{db: db, l: l, built: built, from: rec.VerifiedFrom, at: rec.VerifiedAt}
	defer p.discard()
	head := l.log.Head().Seq
	ckPath := fs.PathJoin(dir, checkpointFileName)
	msg, err := readSmallFile(fs, ckPath, maxCheckpointFile)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		msg = nil
	case errors.Is(err, tree.ErrCheckpoint):
		msg = []byte{} // larger than any checkpoint: not one
	default:
		return fmt.Errorf("read the checkpoint: %w", err)
	}
	// The checkpoint the tree file is checked against, if it verifies
	// (judgeEvidence decides whether the ledger passes).
	if msg != nil {
		if c, err := openCheckpoint(msg, db.verifier, id); err == nil && c.Size <= head {
			p.anchor = &c
		}
	}
	ck, judged := judgeEvidence(ledgerEvidence{Ledger: id, Name: l.meta.Name, Path: ckPath, Note: msg,
		Verifier: db.verifier, Signed: signedFor(db.signer.Signed, db.verifier, id), Head: head, RootAt: p.rootAt})
	accept := judged != nil && db.accepting == id && errors.Is(judged, ErrUnsigned)
	if judged != nil && !accept {
		return judged
	}
	f, err := p.commit()
	if err != nil {
		return err
	}
	if f.Size() != head {
		f.Close()
		return fmt.Errorf("the tree file %s: %d leaves after recovery, the segments hold %d events", f.Path(), f.Size(), head)
	}
	l.tree = f
	switch {
	case accept:
		_, err = l.acceptCheckpoint()
	case ck != nil:
		l.latest.Store(ck)
	default:
		// A ledger of only its genesis event, without a checkpoint (a
		// crash inside CreateLedger): its segments are synced by
		// recovery.
		_, err = l.issueCheckpoint(0)
	}
	if err != nil {
		l.tree = nil
		f.Close()
		return err
	}
	return nil
}

// acceptCheckpoint signs a checkpoint of every event of the ledger, as it
// is, whatever its signer signed for it before (AcceptLedger), and writes
// it to the ledger's checkpoint file.
func (l *ledger) acceptCheckpoint() (Checkpoint, error) {
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	t, n, err := l.readTree()
	if err != nil {
		return Checkpoint{}, err
	}
	if err := t.Sync(); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s: sync the tree file: %w", l.meta.Name, err)
	}
	root, err := t.Root(n)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s at size %d: %w", l.meta.Name, n, err)
	}
	body := tree.Checkpoint{Origin: tree.Origin(l.db.key.Signer.Name(), uint32(l.meta.ID)), Size: n, Root: root}
	msg, err := l.db.signer.AcceptCheckpoint(body)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s: sign: %w", l.meta.Name, err)
	}
	if msg, err = l.db.cosign(t, body, msg); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s at size %d: %w", l.meta.Name, n, err)
	}
	if err := writeFileAtomic(l.db.fs, l.log.Dir(), checkpointFileName, msg, true); err != nil {
		return Checkpoint{}, fmt.Errorf("engine: accept ledger %s: %w", l.meta.Name, err)
	}
	c := checkpointOf(l.meta.ID, body, msg)
	l.latest.Store(&c)
	return c, nil
}

// treePrep is the tree of a ledger that recoverTree is deciding about:
// the tree file as it is, trusted up to the checkpoint (anchor) whose
// root it gives there, or else a tree rebuilt from the segments in the
// temporary file beside it. Nothing replaces or cuts the tree file before
// commit.
type treePrep struct {
	db     *DB
	l      *ledger
	anchor *Checkpoint // the checkpoint file's, if it verifies and fits
	built  *tree.File  // the temporary file catchUp wrote, if any
	// from is the first event that the segments' recovery read and
	// verified at this Open (at is where it is): those before it are in
	// sealed segments unchanged since an earlier Open verified them
	// (stamps.go). The tree file is trusted for them; the events from
	// it to the anchor must give the anchor's root with the tree's
	// hashes of those before (checkLeaves).
	from uint64
	at   segment.Location

	done    bool
	err     error
	f       *tree.File // the tree file (trusted to anchor.Size), or the rebuilt temporary one
	rebuilt bool       // f is the rebuilt temporary file
	why     string     // why the tree file is not trusted
}

// prepare opens the tree file and decides whether the anchor vouches for
// it; if not, it rebuilds the tree from the segments in the temporary
// file.
func (p *treePrep) prepare() error {
	if p.done {
		return p.err
	}
	p.done = true
	db, l := p.db, p.l
	fs, dir, id := db.fs, l.log.Dir(), l.meta.ID
	treePath := fs.PathJoin(dir, treeFileName)
	var f *tree.File
	var err error
	if p.built == nil && p.why == "" {
		if _, err = fs.Stat(treePath); err == nil {
			f, err = tree.OpenFile(fs, treePath, uint32(id))
		}
		ck := p.anchor
		switch {
		case err == nil:
		case errors.Is(err, os.ErrNotExist):
			p.why = "the tree file " + treePath + " was missing"
		case errors.Is(err, tree.ErrCorrupt):
			p.why = fmt.Sprintf("the tree file %s is damaged: %v", treePath, err)
		default:
			p.err = fmt.Errorf("open the tree file: %w", err)
			return p.err
		}
		if f != nil {
			switch {
			case ck == nil:
				p.why = "no signed checkpoint to check the tree file " + treePath + " against (a ledger of only its genesis event, or one being accepted)"
			case f.Size() < ck.Size:
				p.why = fmt.Sprintf("the tree file %s holds %d leaves, the checkpoint was signed at size %d", treePath, f.Size(), ck.Size)
			default:
				root, err := f.Root(ck.Size)
				switch {
				case err != nil && !errors.Is(err, tree.ErrCorrupt):
					f.Close()
					p.err = fmt.Errorf("read the tree file: %w", err)
					return p.err
				case err != nil:
					p.why = fmt.Sprintf("the tree file %s is damaged: %v", treePath, err)
				case root != ck.Root:
					p.why = fmt.Sprintf("the tree file %s gives the root %s at size %d, the checkpoint signed %s", treePath, root, ck.Size, ck.Root)
				default:
					if p.why, err = l.checkLeaves(f, p.from, p.at, ck); err != nil {
						f.Close()
						p.err = err
						return err
					}
				}
			}
			if p.why == "" {
				p.f = f
				return nil
			}
			f.Close()
		}
	} else if p.built != nil {
		p.why = "Options.RebuildIndex (annal reindex) rebuilds every tree file"
	}
	// Rebuilt beside the tree file, which stays as it is until commit.
	t := p.built
	p.built = nil
	if t == nil {
		if t, err = createTreeTmp(fs, dir, id); err != nil {
			p.err = err
			return err
		}
	}
	if err := l.extendTreeFrom(t, t.Size()); err != nil {
		discardTreeTmp(fs, dir, t)
		p.err = fmt.Errorf("rebuild the tree file: %w", err)
		return p.err
	}
	p.f, p.rebuilt = t, true
	return nil
}

// rootAt is ledgerEvidence.RootAt. The tree file is trusted up to the
// checkpoint only: a root beyond it (the signer's state ahead of the
// checkpoint file, after a crash between their writes) is the rebuilt
// tree's.
func (p *treePrep) rootAt(n uint64) (tree.Hash, error) {
	if err := p.prepare(); err != nil {
		return tree.Hash{}, err
	}
	if !p.rebuilt && n > p.anchor.Size {
		p.f.Close()
		p.f, p.done = nil, false
		p.why = fmt.Sprintf("the signer signed size %d, the checkpoint file size %d (a crash between their writes): the tree is checked beyond the checkpoint from the segments", n, p.anchor.Size)
		if err := p.prepare(); err != nil {
			return tree.Hash{}, err
		}
	}
	return p.f.Root(n)
}

// discard closes what commit did not take: the tree file, unchanged, and
// removes the temporary one.
func (p *treePrep) discard() {
	fs, dir := p.db.fs, p.l.log.Dir()
	if p.built != nil {
		discardTreeTmp(fs, dir, p.built)
		p.built = nil
	}
	if p.f != nil {
		if p.rebuilt {
			discardTreeTmp(fs, dir, p.f)
		} else {
			p.f.Close()
		}
		p.f = nil
	}
}

// commit makes the tree the ledger's, its head the segments': the trusted
// tree file cut back to the checkpoint and extended from the segments, or
// the rebuilt one renamed over it (recorded for TreeRebuilt).
func (p *treePrep) commit() (*tree.File, error) {
	if err := p.prepare(); err != nil {
		return nil, err
	}
	db, l := p.db, p.l
	fs, dir, id := db.fs, l.log.Dir(), l.meta.ID
	treePath := fs.PathJoin(dir, treeFileName)
	f := p.f
	p.f = nil
	if !p.rebuilt {
		// What follows the checkpoint was written unsynced: not trusted.
		var err error
		if n := p.anchor.Size; f.Size() > n {
			err = f.Truncate(n)
		}
		if err == nil {
			err = l.extendTreeFrom(f, p.anchor.Size)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("the tree file %s: extend it from the segments after #%d: %w", treePath, p.anchor.Size, err)
		}
		return f, nil
	}
	tmp := fs.PathJoin(dir, treeFileName+".tmp")
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, treePath)
	}
	if err != nil {
		fs.Remove(tmp)
		return nil, fmt.Errorf("rebuild the tree file: %w", err)
	}
	if f, err = tree.OpenFile(fs, treePath, uint32(id)); err != nil {
		return nil, fmt.Errorf("open the rebuilt tree file: %w", err)
	}
	db.mu.Lock()
	if db.treeRebuilt == nil {
		db.treeRebuilt = map[eventid.LedgerID]error{}
	}
	db.treeRebuilt[id] = fmt.Errorf("engine: the tree of ledger %s was rebuilt from the segments: %s", id, p.why)
	db.mu.Unlock()
	return f, nil
}

// createTreeTmp creates the temporary file (treeFileName+".tmp") in which
// the tree file of the ledger in dir is rebuilt, replacing any earlier one.
func createTreeTmp(fs vfs.FS, dir string, id eventid.LedgerID) (*tree.File, error) {
	tmp := fs.PathJoin(dir, treeFileName+".tmp")
	fs.Remove(tmp)
	f, err := tree.Create(fs, tmp, uint32(id))
	if err != nil {
		return nil, fmt.Errorf("rebuild the tree file: %w", err)
	}
	return f, nil
}

// discardTreeTmp closes and removes f, the temporary tree file of the
// ledger in dir made by createTreeTmp, if not nil.
func discardTreeTmp(fs vfs.FS, dir string, f *tree.File) {
	if f != nil {
		f.Close()
		fs.Remove(fs.PathJoin(dir, treeFileName+".tmp"))
	}
}

// extendTreeFrom appends to f (of n leaves) the leaves of the ledger's
// events n+1 to its head, read from the segments: from the location the
// index gives for event #n, or from the first segment.
func (l *ledger) extendTreeFrom(f *tree.File, n uint64) error {
	head := l.log.Head().Seq
	if n >= head {
		return nil
	}
	seg, off := uint64(1), int64(segment.FirstOffset)
	if n > 0 {
		if id, ok, err := l.db.idx.BySeq(l.meta.ID, n); err == nil && ok {
			if seq, loc, found, err := l.db.idx.Lookup(id); err == nil && found && seq == n {
				seg, off = loc.Segment, loc.End()
			}
		}
	}
	it := l.log.NewIterator(seg, off)
	defer it.Close()
	leaves := make([]tree.Hash, 0, treeChunk)
	var buf []byte
	next := n + 1
	for it.Next() {
		r := it.Record()
		if r.Seq < next {
			continue // from the first segment: skip the leaves f has
		}
		if r.Seq != next {
			return fmt.Errorf("event #%d follows #%d in the segments", r.Seq, next-1)
		}
		var h tree.Hash
		h, buf = leafHash(buf, r)
		leaves = append(leaves, h)
		if len(leaves) == treeChunk {
			if err := f.Append(leaves); err != nil {
				return err
			}
			leaves = leaves[:0]
		}
		if next++; next > head {
			break
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(leaves) > 0 {
		if err := f.Append(leaves); err != nil {
			return err
		}
	}
	if next != head+1 {
		return fmt.Errorf("the segments end at event #%d, the head is #%d", next-1, head)
	}
	return nil
}

// latestCheckpoint is DB.LatestCheckpoint.
func (db *DB) latestCheckpoint(ledgerName string) (Checkpoint, error) {
	l, err := db.ledger(ledgerName)
	if err != nil {
		return Checkpoint{}, err
	}
	c := l.latest.Load()
	if c == nil {
		return Checkpoint{}, fmt.Errorf("%w: ledger %s has no signed checkpoint", ErrNotFound, l.meta.Name)
	}
	return *c, nil
}

// proofTree returns the ledger's tree for a proof against the tree of
// size n (0: the latest checkpoint's, returned too), n checked against
// the head readers see. Called under enterRead.
func (l *ledger) proofTree(n uint64, what string) (*tree.File, uint64, *Checkpoint, error) {
	var ck *Checkpoint
	if n == 0 {
		if ck = l.latest.Load(); ck == nil {
			return nil, 0, nil, fmt.Errorf("%w: %s: ledger %s has no signed checkpoint", ErrNotFound, what, l.meta.Name)
		}
		n = ck.Size
	}
	var t *tree.File
	var head uint64
	var err error
	if l.db.ro != nil {
		t, head, err = l.db.roProofTree(l)
	} else {
		t, head, err = l.readTree()
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("engine: %s: %w", what, err)
	}
	if n > head {
		return nil, 0, nil, invalid("%s: tree size %d is beyond the head of ledger %s (#%d)", what, n, l.meta.Name, head)
	}
	return t, n, ck, nil
}

// roProofTree returns, on a read-only DB, ledger l's tree file opened
// read-only (roTree) for proofs, and how many of its leaves are of events
// the DB shows. The file must give the root of the latest checkpoint
// that the open checked (ErrTreeDamaged otherwise): the hashes of a proof
// are then bound to signed ones; every proof is checked before it is
// given, as the writer's are.
func (db *DB) roProofTree(l *ledger) (*tree.File, uint64, error) {
	t, why := db.roTree(l)
	if t == nil {
		return nil, 0, fmt.Errorf("%w: ledger %s: %s", ErrTreeDamaged, l.meta.Name, why)
	}
	head := min(t.Size(), l.log.Head().Seq)
	if ck := l.latest.Load(); ck != nil {
		if ck.Size > t.Size() {
			return nil, 0, fmt.Errorf("%w: ledger %s: the tree file %s holds %d leaves, the checkpoint was signed at size %d", ErrTreeDamaged, l.meta.Name, t.Path(), t.Size(), ck.Size)
		}
		if root, err := t.Root(ck.Size); err != nil || root != ck.Root {
			return nil, 0, fmt.Errorf("%w: ledger %s: the tree file %s does not give the root of the checkpoint of size %d (%v)", ErrTreeDamaged, l.meta.Name, t.Path(), ck.Size, err)
		}
	}
	return t, head, nil
}

// proveInclusion is DB.ProveInclusion.
func (db *DB) proveInclusion(ctx context.Context, id eventid.ID, treeSize uint64) (InclusionProof, error) {
	if err := ctx.Err(); err != nil {
		return InclusionProof{}, err
	}
	l, err := db.ledger(id.Ledger().String())
	if err != nil {
		return InclusionProof{}, err
	}
	if err := db.enterRead(); err != nil {
		return InclusionProof{}, err
	}
	defer db.exitRead()
	what := "prove the inclusion of " + id.String()
	if err := l.readable(); err != nil {
		return InclusionProof{}, err
	}
	seq, _, found, err := db.idx.Lookup(id)
	if err != nil {
		return InclusionProof{}, l.indexErr(what, err)
	}
	if !found || seq > l.visible().Seq {
		return InclusionProof{}, fmt.Errorf("%w: %s: no such event in ledger %s", ErrNotFound, what, l.meta.Name)
	}
	t, n, ck, err := l.proofTree(treeSize, what)
	if err != nil {
		return InclusionProof{}, err
	}
	if seq > n {
		if treeSize == 0 {
			return InclusionProof{}, fmt.Errorf("%w: %s: event #%d comes after the latest checkpoint of ledger %s, of size %d: DB.Checkpoint issues one that covers it", ErrNotInTree, what, seq, l.meta.Name, n)
		}
		return InclusionProof{}, fmt.Errorf("%w: %s: event #%d is not in the tree of size %d of ledger %s", ErrNotInTree, what, seq, n, l.meta.Name)
	}
	leaf, err := t.Leaf(seq - 1)
	if err != nil {
		return InclusionProof{}, fmt.Errorf("engine: %s (event #%d, ledger %s): %w", what, seq, l.meta.Name, err)
	}
	hashes, err := t.InclusionProof(seq-1, n)
	if err != nil {
		return InclusionProof{}, fmt.Errorf("engine: %s (event #%d, ledger %s, tree size %d): %w", what, seq, l.meta.Name, n, err)
	}
	// The tree file's hashes of the events in sealed segments that Open
	// need not read are not checked at Open (stamps.go): a proof made of
	// them is checked before it is given.
	var root tree.Hash
	if ck != nil {
		root = ck.Root
	} else if root, err = t.Root(n); err != nil {
		return InclusionProof{}, fmt.Errorf("engine: %s (event #%d, ledger %s, tree size %d): %w", what, seq, l.meta.Name, n, err)
	}
	if err := tree.VerifyInclusion(seq-1, n, leaf, hashes, root); err != nil {
		return InclusionProof{}, fmt.Errorf("%w: ledger %s: %s: the tree file %s gives a proof of event #%d that does not verify against the root at size %d: %v; annal reindex (Options.RebuildIndex) rebuilds the tree from the segments",
			ErrTreeDamaged, l.meta.Name, what, t.Path(), seq, n, err)
	}
	p := InclusionProof{Ledger: l.meta.ID, ID: id, Seq: seq, TreeSize: n, LeafHash: leaf, Hashes: hashes}
	if ck != nil {
		p.Checkpoint = ck.Note
	}
	return p, nil
}

// proveConsistency is DB.ProveConsistency.
func (db *DB) proveConsistency(ctx context.Context, ledgerName string, oldSize, newSize uint64) (ConsistencyProof, error) {
	if err := ctx.Err(); err != nil {
		return ConsistencyProof{}, err
	}
	l, err := db.ledger(ledgerName)
	if err != nil {
		return ConsistencyProof{}, err
	}
	if err := db.enterRead(); err != nil {
		return ConsistencyProof{}, err
	}
	defer db.exitRead()
	what := fmt.Sprintf("prove the consistency of ledger %s from size %d", l.meta.Name, oldSize)
	t, n, ck, err := l.proofTree(newSize, what)
	if err != nil {
		return ConsistencyProof{}, err
	}
	if oldSize == 0 || oldSize > n {
		return ConsistencyProof{}, invalid("%s: the old size must be 1 to the new size, %d", what, n)
	}
	p := ConsistencyProof{Ledger: l.meta.ID, OldSize: oldSize, NewSize: n}
	if p.OldRoot, err = t.Root(oldSize); err == nil {
		if p.NewRoot, err = t.Root(n); err == nil {
			p.Hashes, err = t.ConsistencyProof(oldSize, n)
		}
	}
	if err != nil {
		return ConsistencyProof{}, fmt.Errorf("engine: %s to %d: %w", what, n, err)
	}
	if ck != nil {
		p.Checkpoint = ck.Note
	}
	return p, nil
}

// regularFile returns an error naming path if it is not a regular file
// (after symbolic links), or the error of its Stat (os.ErrNotExist for a
// missing file). The small files of a data directory (a checkpoint, NAME,
// the signing key and its state, the metadata file) are checked so
// before they are opened: an open(2) for reading of a named pipe blocks
// until a writer comes, and would hang the Open for ever.
func regularFile(fs vfs.FS, path string) error {
	fi, err := fs.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s): not read", path, fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names the kind of a file that is not a regular file.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return "mode " + m.String()
}
