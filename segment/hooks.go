package segment

import "github.com/annal-db/annal/eventid"

// Hooks are the owner's part of every commit: the calls a Log makes into
// the code that owns it (the engine: its conditions, index, Merkle tree
// and readers' view) while it commits a group of batches. They are given
// once, in Options, and hold for the Log's life; any may be nil.
//
// # Order
//
// Concurrent appends are committed in groups, one group at a time, by
// one goroutine (the leader). For each group, in this order:
//
//  1. For each batch, in commit order: the batch's own Check (Batch.Check)
//     with the head the batch would follow. If it fails the batch alone is
//     rejected (its Append returns the error) and no other hook sees it.
//     Else the batch's IDs, FirstSeq and Locations (relative to the
//     group's start) are set and Prepared is called with it, before the
//     next batch's Check: Prepared lets the owner keep what Check needs
//     about batches that are not committed yet (the heads of streams).
//  2. If no batch was accepted, nothing more. Else the group is written
//     with one write. If the write fails, Aborted is called for each
//     accepted batch, in reverse commit order, and their Appends fail.
//  3. Written, with the whole group, its Locations now absolute, before
//     any of it is durable or published (Head). In a group that holds a
//     Sync batch it runs on another goroutine, in parallel with the
//     group's fsync, and the leader waits for both; else on the leader,
//     after the write. If the fsync then fails, the Log fails (ErrFailed)
//     and Aborted is called for each accepted batch, in reverse commit
//     order: what Written did was for records that are not in the log.
//  4. The head moves and is published (Head, and Durable after a sync),
//     then Records is called with the group's bytes, then Committed
//     with the whole group.
//  5. Only then is any of the group's Appends woken, and only then does
//     the next group's step 1 begin.
//
// Each committed batch is passed to Written and to Committed exactly
// once; an aborted one to Prepared and Aborted once each, and to Written
// at most once (if its group's write succeeded). The group slices are
// the Log's own and reused after the call returns.
//
// # Locks
//
// Every hook (and Batch.Check) runs with the Log's ioMu held, by the
// leader: appends, Sync, Close and rotations wait meanwhile, so each hook
// must be quick. Written, in a Sync group, runs while the leader holds
// fsyncMu too. The Log's mu (its queue) is not held. A hook must not
// call the Log's Append, Sync or Close (they take ioMu: a deadlock), and
// whatever lock a hook takes comes after ioMu in the owner's lock order:
// the owner must not hold such a lock while it calls Append, Sync or
// Close. The engine's order is segment ioMu → its ledger's idxMu → its
// pendMu (see engine/doc.go, "Locks").
//
// # Failure
//
// Hooks return nothing: a failure of the owner's work (an index write)
// is the owner's to keep and report; the records are committed all the
// same. Only Check can refuse a batch.
type Hooks struct {
	// Prepared is called for each batch accepted into a group (step 1).
	Prepared func(b *Batch)
	// Aborted is called for each prepared batch that will not be
	// committed (steps 2 and 3), last first, before any later batch is
	// checked.
	Aborted func(b *Batch)
	// Written is called once a group is written (step 3).
	Written func(group []*Batch)
	// Committed is called once a group is committed: written, as durable
	// as its batches ask, and published (step 4). It lets the owner
	// finish a group's work for all its appenders at once, so that each
	// is woken once with nothing left to wait for.
	Committed func(group []*Batch)
	// Records is called once a group is committed, just before
	// Committed, with the group's records as the segment holds them:
	// the bytes of their frames, one after the other, exactly as they
	// were written (format.md §6). A group never spans segments, so the
	// span is one range of one segment. It lets the owner ship the
	// records elsewhere (a replica) byte for byte. Span.Bytes is the
	// Log's own buffer, valid only during the call: copy what is kept.
	Records func(s Span)
}

// Span is a committed group's records, as Hooks.Records gets them.
type Span struct {
	// Segment and Offset are where the first record's frame is.
	Segment uint64
	Offset  int64
	// Bytes are the frames, as written: Bytes[0] is at Offset.
	Bytes []byte
	// FirstSeq and FirstID are the first record's sequence number and ID.
	FirstSeq uint64
	FirstID  eventid.ID
	// Last is the group's last record: the Log's head after the group.
	Last Head
	// Durable says that the span was synced before the call (the group
	// held a Sync batch); else it may still be in the page cache only.
	Durable bool
}

// callHook calls a group hook (Hooks.Written, Hooks.Committed) with the
// batches of the accepted pending appends. Called by the leader, with
// ioMu held.
func (l *Log) callHook(hook func([]*Batch), accepted []*pending) {
	l.group = l.group[:0]
	for _, p := range accepted {
		l.group = append(l.group, p.b)
	}
	hook(l.group)
	clear(l.group)
}

// abort fails the accepted batches of a group with err, telling the
// Aborted hook of each, last first. Called by the leader, with ioMu held.
func (l *Log) abort(accepted []*pending, err error) {
	aborted := l.opts.Hooks.Aborted
	for i := len(accepted) - 1; i >= 0; i-- {
		p := accepted[i]
		p.err = err
		if aborted != nil {
			aborted(p.b)
		}
	}
}
