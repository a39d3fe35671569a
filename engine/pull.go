package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// pullLedger lays the records that r reads from the bucket (the State
// st, up to lim) into dir, the folder of ledger r's in a data directory
// that no process has open, byte for byte where the writer had them: a
// seg/ object as the segment file, whole; a chunk's records at its
// segment and offset (a segment begun from chunks gets the header the
// Piece gives, created at its first record's time). Files written are
// synced, and dir once a file was made in it. It returns what r read.
//
// local is the head of the records dir holds, as recovery found them
// (Head{ID: the genesis ID}: none, an empty or missing folder, a
// restore). A folder that holds records (a takeover's pull: the
// directory is behind the bucket) must hold a prefix of the bucket's:
// every local record up to the bucket's end must be the bucket's, byte
// for byte, at the same segment and offset, else the error matches
// replica.ErrDiverged and names the segment file and the object; then
// the bucket's records after local are written from local's end (over
// its segment's zero tail, format.md "The zero tail", which is cut at the
// records' new end, or at local's last record when the bucket's records
// go on in the next segment: a sealed segment has no zero tail) and in
// the segments after it. Local records beyond the bucket's end are left
// as they are. The records after local are
// held in memory until r has verified every object (the checkpoint's
// root among them), so that a failed pull writes nothing; a restore
// (local empty) writes them as they come, into a directory its caller
// discards on failure.
//
// progress, if not nil, is called after each object with the records and
// bytes written so far.
func pullLedger(ctx context.Context, fs vfs.FS, dir string, local segment.Head, r *replica.Reader, st replica.State, lim replica.Limit, progress func(records, bytes int64)) (replica.Result, error) {
	return layRecords(fs, dir, local, local.Seq > 0, progress, func(yield func(replica.Piece) error) (replica.Result, error) {
		return r.Read(ctx, st, lim, yield)
	})
}

// layRecords lays the pieces that read yields into dir as pullLedger
// does: held in memory until read returns without an error if buffer,
// else written as they come.
func layRecords(fs vfs.FS, dir string, local segment.Head, buffer bool, progress func(records, bytes int64), read func(yield func(replica.Piece) error) (replica.Result, error)) (replica.Result, error) {
	if err := mkdirSynced(fs, dir); err != nil {
		return replica.Result{}, fmt.Errorf("engine: create the ledger's folder %s: %w", dir, err)
	}
	l := &layer{fs: fs, dir: dir, local: local, buffer: buffer, progress: progress}
	res, err := read(l.piece)
	if err != nil {
		l.close()
		return replica.Result{}, err
	}
	for _, w := range l.pending {
		if err := l.write(w); err != nil {
			l.close()
			return replica.Result{}, err
		}
	}
	if err := l.finish(); err != nil {
		return replica.Result{}, err
	}
	if l.made {
		if err := segment.SyncDir(fs, dir); err != nil {
			return replica.Result{}, fmt.Errorf("engine: sync %s: %w", dir, err)
		}
	}
	return res, nil
}

// pullFromBucket is pullLedger from what bucket holds now of ledger id,
// every record, its checkpoint checked with v (the directory's key): a
// takeover's pull into the ledger's folder dir of a closed data directory
// whose records end at local. The bucket's checkpoint then replaces the
// folder's checkpoint file if it covers more events (the key signed it
// for the bucket's records, which the folder now holds), so that the
// next Open finds the checkpoint its signer's state remembers. With
// unsigned, a bucket without a checkpoint is pulled too (ErrNoCheckpoint
// otherwise), and the folder keeps its own checkpoint file.
func pullFromBucket(ctx context.Context, fs vfs.FS, dir string, id eventid.LedgerID, local segment.Head, bucket store.Store, v note.Verifier, unsigned bool) (replica.Result, error) {
	r := newLedgerReader(bucket, id, v, unsigned, restoreKeyHint)
	st, err := r.State(ctx)
	if err != nil {
		return replica.Result{}, err
	}
	res, err := pullLedger(ctx, fs, dir, local, r, st, replica.Limit{}, nil)
	if err != nil {
		return replica.Result{}, err
	}
	msg, err := readSmallFile(fs, fs.PathJoin(dir, checkpointFileName), maxCheckpointFile)
	if err == nil {
		if c, cerr := openCheckpoint(msg, v, id); cerr == nil && c.Size >= st.CheckpointSize {
			res.Signed = max(res.Signed, min(c.Size, res.Yielded.Seq))
			return res, nil
		}
	}
	if st.Checkpoint == nil {
		return res, nil // unsigned: nothing of the bucket's to keep
	}
	if err := writeFileAtomic(fs, dir, checkpointFileName, st.Checkpoint, true); err != nil {
		return replica.Result{}, fmt.Errorf("engine: pull ledger %s: %w", id, err)
	}
	return res, nil
}

// layer writes the pieces of a pull into a ledger's folder.
type layer struct {
	fs       vfs.FS
	dir      string
	local    segment.Head
	buffer   bool
	pending  []layWrite
	progress func(records, bytes int64)
	records  int64
	bytes    int64

	f    vfs.File // the segment file being written
	fseg uint64
	fend int64 // where its records end
	made bool  // a file was created in dir
}

// layWrite is records to write at seg and off; header, if set, begins
// a new segment file.
type layWrite struct {
	seg    uint64
	off    int64
	header []byte
	bytes  []byte
}

func (l *layer) path(seg uint64) string { return l.fs.PathJoin(l.dir, segment.FileName(seg)) }

func (l *layer) diverged(p replica.Piece, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s (the bucket's %s)", replica.ErrDiverged, l.path(p.Segment), fmt.Sprintf(format, args...), p.Key)
}

// piece takes one piece of the bucket's records.
func (l *layer) piece(p replica.Piece) error {
	local := l.local
	b, off, header := p.Bytes, p.Offset, p.Header
	switch {
	case p.Prev.Seq < local.Seq:
		n := int64(len(b))
		if p.Last.Seq > local.Seq {
			if p.Segment != local.Loc.Segment {
				return l.diverged(p, "event %d is in segment %d here, in segment %d in the bucket", local.Seq, local.Loc.Segment, p.Segment)
			}
			n = local.Loc.End() - p.Offset
			if n < 0 || n > int64(len(b)) {
				return l.diverged(p, "event %d ends at offset %d here, outside the bucket's records at %d to %d", local.Seq, local.Loc.End(), p.Offset, p.Offset+int64(len(b)))
			}
		}
		if err := l.compare(p, b[:n]); err != nil {
			return err
		}
		if p.Last.Seq <= local.Seq {
			return nil
		}
		b, off, header = b[n:], local.Loc.End(), nil
	case local.Seq > 0 && p.Prev.Seq == local.Seq:
		if !(p.Segment == local.Loc.Segment && p.Offset == local.Loc.End() || p.Segment == local.Loc.Segment+1 && p.Offset == segment.HeaderSize) {
			return l.diverged(p, "the bucket's event %d is at segment %d offset %d, this directory's records end at segment %d offset %d", local.Seq+1, p.Segment, p.Offset, local.Loc.Segment, local.Loc.End())
		}
		if p.Segment != local.Loc.Segment {
			// The local active segment is sealed by the bucket's next
			// segment: cut its zero tail, if any (nothing written).
			l.add(layWrite{seg: local.Loc.Segment, off: local.Loc.End()})
		}
	}
	l.records += int64(p.Last.Seq - max(p.Prev.Seq, local.Seq))
	l.bytes += int64(len(b))
	if err := l.add(layWrite{seg: p.Segment, off: off, header: header, bytes: b}); err != nil {
		return err
	}
	if l.progress != nil {
		l.progress(l.records, l.bytes)
	}
	return nil
}

// add writes w, or keeps a copy of it for later (buffer).
func (l *layer) add(w layWrite) error {
	if l.buffer {
		w.header, w.bytes = bytes.Clone(w.header), bytes.Clone(w.bytes)
		l.pending = append(l.pending, w)
		return nil
	}
	return l.write(w)
}

// compare checks that the local segment file holds b at p's segment and
// offset.
func (l *layer) compare(p replica.Piece, b []byte) error {
	path := l.path(p.Segment)
	f, err := l.fs.Open(path)
	if err != nil {
		return l.diverged(p, "holds events %d to %d in the bucket, cannot be read here: %v", p.Prev.Seq+1, min(p.Last.Seq, l.local.Seq), err)
	}
	defer f.Close()
	have := make([]byte, len(b))
	n, err := f.ReadAt(have, p.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("engine: read %s: %w", path, err)
	}
	if i := mismatch(have[:n], b); i >= 0 {
		return l.diverged(p, "differs from the bucket's records at offset %d", p.Offset+int64(i))
	}
	return nil
}

// mismatch returns the index of the first byte where a and b differ
// (len(a) if a is a prefix of a longer b), or -1.
func mismatch(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// write writes w.
func (l *layer) write(w layWrite) error {
	if l.f == nil || w.seg != l.fseg {
		if err := l.finish(); err != nil {
			return err
		}
		path := l.path(w.seg)
		var err error
		if w.header != nil {
			if l.f, err = l.fs.Create(path, vfs.WriteCategoryUnspecified); err == nil {
				l.made = true
				_, err = l.f.WriteAt(w.header, 0)
			}
		} else {
			l.f, err = l.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
		}
		if err != nil {
			l.close()
			return fmt.Errorf("engine: write %s: %w", path, err)
		}
		l.fseg = w.seg
	}
	if _, err := l.f.WriteAt(w.bytes, w.off); err != nil {
		return fmt.Errorf("engine: write %s at %d: %w", l.path(w.seg), w.off, err)
	}
	l.fend = w.off + int64(len(w.bytes))
	return nil
}

// finish ends the segment file being written at its records' end (a
// zero tail after them is cut) and syncs it.
func (l *layer) finish() error {
	if l.f == nil {
		return nil
	}
	path := l.path(l.fseg)
	defer l.close()
	fi, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("engine: stat %s: %w", path, err)
	}
	if fi.Size() > l.fend {
		t, ok := l.f.(interface{ Truncate(int64) error })
		if !ok {
			return fmt.Errorf("engine: cut %s to its records' end at %d: the file system cannot truncate", path, l.fend)
		}
		if err := t.Truncate(l.fend); err != nil {
			return fmt.Errorf("engine: cut %s to its records' end at %d: %w", path, l.fend, err)
		}
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("engine: sync %s: %w", path, err)
	}
	return nil
}

func (l *layer) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
