package replica

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/annal-db/annal/eventid"
)

// The keys of a ledger's objects, relative to the store's prefix
// (docs/replication.md, "Objects"). Numbers are 20 decimal digits, so that
// keys sort as their numbers do.

// LedgerPrefix is the folder of a ledger's objects: "ledgers/LLLLLLLL/".
func LedgerPrefix(ledger eventid.LedgerID) string {
	return fmt.Sprintf("ledgers/%08x/", uint32(ledger))
}

// ManifestKey is the key of manifest n.
func ManifestKey(ledger eventid.LedgerID, n uint64) string {
	return fmt.Sprintf("%smanifest/%020d", LedgerPrefix(ledger), n)
}

// ChunkKey is the key of WAL chunk n.
func ChunkKey(ledger eventid.LedgerID, n uint64) string {
	return fmt.Sprintf("%swal/%020d", LedgerPrefix(ledger), n)
}

// SegmentKey is the key of the sealed segment that holds events first to
// last.
func SegmentKey(ledger eventid.LedgerID, first, last uint64) string {
	return fmt.Sprintf("%sseg/%020d-%020d.seg", LedgerPrefix(ledger), first, last)
}

// CheckpointKey is the key of a ledger's latest signed checkpoint.
func CheckpointKey(ledger eventid.LedgerID) string {
	return LedgerPrefix(ledger) + "checkpoint"
}

// ParseNumber returns the number that ends a manifest or chunk key
// (folder/NNNNNNNNNNNNNNNNNNNN), and false for any other key.
func ParseNumber(key string) (uint64, bool) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	if len(name) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil
}

// ParseSegmentKey returns the first and last events of a seg/ key, and
// false for any other key.
func ParseSegmentKey(key string) (first, last uint64, ok bool) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	if len(name) != 20+1+20+4 || name[20] != '-' || !strings.HasSuffix(name, ".seg") {
		return 0, 0, false
	}
	f, err1 := strconv.ParseUint(name[:20], 10, 64)
	l, err2 := strconv.ParseUint(name[21:41], 10, 64)
	if err1 != nil || err2 != nil || l < f {
		return 0, 0, false
	}
	return f, l, true
}
