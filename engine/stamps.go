package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The writer's Open verifies every record of a ledger, and checks that
// the events give the root of the latest signed checkpoint, as a reader
// does, but for the sealed segments that an earlier Open verified whole
// and whose files did not change since: their device, inode, size, change
// and modification times are as they were (segment.Stamp). A process can
// set a file's modification time back, not its change time, and a sealed
// segment is never written again: a record damaged or forged in place, an
// older copy put back, a file restored from a backup all give another
// identity, and the segment is read and its events checked against the
// tree again. The stamps are kept in the ledger's folder (stampsFileName)
// and are a cache, not evidence: a missing or unreadable stamps file
// means every segment is read. Whoever can write the data directory can
// write stamps too: annal verify --full reads every record and recomputes
// every leaf whatever they say (docs/recovery.md, "Stamps").
const stampsFileName = "sealed"

// writtenStampsFileName is the file, in a ledger's folder, of the stamps
// of the segments the last writer's session sealed and of the one it
// closed (segment.Log.WrittenStamps), written at its Close: stamps of
// files as the writer wrote and synced them, not read back. Readers take
// them (readerStamps), so that the first read after a session does not
// read what the session wrote; a writer's Open does not: it reads those
// segments once from the files, and stamps them in stampsFileName.
const writtenStampsFileName = "written"

// maxStampsFile bounds the stamps file: a line of at most about 150 bytes
// per sealed segment.
const maxStampsFile = 64 << 20

// readStamps returns the stamps kept in the ledger folder dir, nil if
// there are none or the file is not a stamps file (every segment is then
// verified).
func readStamps(fs vfs.FS, dir string) []segment.Stamp {
	b, err := readSmallFile(fs, fs.PathJoin(dir, stampsFileName), maxStampsFile)
	if err != nil {
		return nil
	}
	stamps, err := segment.UnmarshalStamps(b)
	if err != nil {
		return nil
	}
	return stamps
}

// writeWrittenStamps keeps, at a writer's Close, the stamps of the
// segments its session wrote (writtenStampsFileName) in the ledger folder
// dir; a session that wrote nothing leaves the file as it is (its stamps
// still say what they said). A failure is not reported: readers then read
// those segments, as the writer's next Open does.
func writeWrittenStamps(fs vfs.FS, dir string, stamps []segment.Stamp) {
	path := fs.PathJoin(dir, writtenStampsFileName)
	if len(stamps) == 0 {
		return
	}
	if err := writeFileAtomic(fs, dir, writtenStampsFileName, segment.MarshalStamps(stamps), false); err != nil {
		fs.Remove(path + ".tmp")
		fs.Remove(path)
	}
}

// writerStamps returns the stamps a writer left in the ledger folder dir
// for readers: those of its Open (stampsFileName) and of its last
// session's Close (writtenStampsFileName).
func writerStamps(fs vfs.FS, dir string) []segment.Stamp {
	stamps := readStamps(fs, dir)
	if b, err := readSmallFile(fs, fs.PathJoin(dir, writtenStampsFileName), maxStampsFile); err == nil {
		if w, err := segment.UnmarshalStamps(b); err == nil {
			stamps = append(stamps, w...)
		}
	}
	return stamps
}

// writeStamps keeps the stamps of a ledger that Open recovered (now) in
// its folder dir, if they differ from those it was given (was). A write
// that fails is not reported: the next Open verifies those segments
// again.
func writeStamps(fs vfs.FS, dir string, was, now []segment.Stamp) {
	if len(now) == 0 || slices.Equal(was, now) {
		return
	}
	if err := writeFileAtomic(fs, dir, stampsFileName, segment.MarshalStamps(now), false); err != nil {
		fs.Remove(fs.PathJoin(dir, stampsFileName+".tmp"))
	}
}

// checkLeaves checks, for the writer's Open, that the events that the
// segments' recovery verified now (from event #from on, at location at)
// up to the checkpoint ck give, with the tree file f's hashes of the
// events before them, the root ck signed. f gives that root at ck's size;
// it is trusted for the events before from, which are in sealed segments
// unchanged since an earlier Open checked them. It returns why the tree
// file cannot be trusted ("" if it can): an event whose leaf is not the
// tree's (changed in place, or the tree file damaged), which the caller
// answers by rebuilding the tree from the segments and judging again.
func (l *ledger) checkLeaves(f *tree.File, from uint64, at segment.Location, ck *Checkpoint) (string, error) {
	if from == 0 || from > ck.Size {
		return "", nil
	}
	c := f.NewCheckerFrom(from-1, ck.Size)
	it := l.log.NewIterator(at.Segment, at.Offset)
	defer it.Close()
	var buf []byte
	for seq := from; seq <= ck.Size; seq++ {
		if !it.Next() {
			if err := it.Err(); err != nil {
				return "", fmt.Errorf("engine: ledger %s: read the events from #%d: %w", l.meta.Name, from, err)
			}
			return fmt.Sprintf("the segments end at event #%d, before the checkpoint's size %d", seq-1, ck.Size), nil
		}
		r := it.Record()
		if r.Seq != seq {
			return "", fmt.Errorf("engine: ledger %s: read event #%d at segment %d offset %d, expected #%d", l.meta.Name, r.Seq, it.Location().Segment, it.Location().Offset, seq)
		}
		var h tree.Hash
		h, buf = leafHash(buf, r)
		if err := c.Add(h); err != nil {
			var m *tree.MismatchError
			if errors.As(err, &m) {
				return fmt.Sprintf("the tree file does not hold the leaves of the events: %s", mismatchText(m)), nil
			}
			if errors.Is(err, tree.ErrCorrupt) {
				return fmt.Sprintf("the tree file %s is damaged: %v", f.Path(), err), nil
			}
			return "", fmt.Errorf("engine: ledger %s: %w", l.meta.Name, err)
		}
	}
	if root := c.Root(); root != ck.Root {
		return fmt.Sprintf("events #%d to #%d with the tree file's hashes of the events before them give the root %s at size %d, the checkpoint signed %s",
			from, ck.Size, root, ck.Size, ck.Root), nil
	}
	return "", nil
}
