package replica

import "errors"

// ErrFenced says that another writer took the ledger (a higher epoch):
// this one's pending and later appends fail with it. What it
// acknowledged before was stored.
var ErrFenced = errors.New("replica: fenced: another writer took the ledger")

// ErrBehind says that the bucket holds events of the ledger that the
// directory does not: an old copy of the directory, or another node
// wrote since. The directory refuses to write; the cure is a restore
// from the bucket, or a takeover.
var ErrBehind = errors.New("replica: the bucket is ahead of the directory")

// ErrDiverged says that the bucket and the directory hold different
// events at the same sequence number.
var ErrDiverged = errors.New("replica: the bucket and the directory hold different histories")

// ErrNoCheckpoint says that the bucket holds a ledger's manifests (and
// events) but no signed checkpoint: a Shipped ledger whose disk was lost
// before its first checkpoint was stored, or a checkpoint deleted. It is
// damage (it matches corruption.Err too) unless the Reader is
// configured to read such a ledger (ReaderConfig.Unsigned).
var ErrNoCheckpoint = errors.New("replica: no signed checkpoint")
