package peer

import "errors"

// ErrUnsupported is returned by a store for an operation or a mode it does
// not offer (tidwall/wal has no secondary index and no interval sync; bbolt
// has no interval sync). The harness reports it as "n/a".
var ErrUnsupported = errors.New("peer: not supported by this store")
