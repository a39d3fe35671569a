package s3test

import (
	"context"
	"fmt"
	"strings"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// bucketDump describes every object of the bucket under s, one line each:
// a chunk's number, epoch, events, place and hash chain, a manifest's
// epoch, fence, sealed segments and GC boundary, and the other keys. A
// test that finds the bucket refused prints it, so that one rare failure
// shows how the objects came to be.
func bucketDump(ctx context.Context, s store.Store) string {
	var b strings.Builder
	after := ""
	for {
		page, err := s.List(ctx, "", after, 0)
		if err != nil {
			fmt.Fprintf(&b, "list after %q: %v\n", after, err)
			return b.String()
		}
		for _, o := range page.Objects {
			after = o.Key
			line := o.Key
			obj, err := s.Get(ctx, o.Key)
			switch {
			case err != nil:
				line += fmt.Sprintf(": get: %v", err)
			case strings.Contains(o.Key, "/wal/"):
				if c, err := replica.DecodeChunk(o.Key, ledgerOfKey(o.Key), obj.Data); err != nil {
					line += fmt.Sprintf(": %v", err)
				} else {
					sum := replica.Sum(obj.Data)
					line += fmt.Sprintf(": epoch %d events %d..%d seg %d off %d prev %x sum %x", c.Epoch, c.FirstSeq, c.LastSeq, c.Segment, c.Offset, c.Prev[:4], sum[:4])
				}
			case strings.Contains(o.Key, "/manifest/"):
				line += ": " + string(obj.Data)
			default:
				line += fmt.Sprintf(": %d bytes", len(obj.Data))
			}
			b.WriteString(line + "\n")
		}
		if !page.Truncated {
			return b.String()
		}
	}
}

// ledgerOfKey is the ledger ID in a key "ledgers/ID/…" (LedgerPrefix),
// or the zero ID.
func ledgerOfKey(key string) eventid.LedgerID {
	var id uint32
	if _, err := fmt.Sscanf(key, "ledgers/%08x/", &id); err != nil {
		return 0
	}
	return eventid.LedgerID(id)
}
