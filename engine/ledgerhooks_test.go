package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/annal-db/annal/segment"
)

// TestHooksSetWhenReachable: a ledger's segment log has its hooks
// (groupWritten, published) from the moment the ledger can be reached,
// by every path that makes one (CreateLedger, Open, Import), not from its
// first Append: a group committed on the log is indexed and published by
// the committing goroutine, so that readers see it when the commit
// returns, with no Append through the DB before it.
func TestHooksSetWhenReachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, path := range []string{"create", "open", "import"} {
		t.Run(path, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir)
			defer func() { db.Close() }()
			name := "l"
			if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
				t.Fatal(err)
			}
			switch path {
			case "open":
				if _, err := db.Append(ctx, name, []EventInput{order(1), order(2)}, nil); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = openTest(t, dir)
			case "import":
				if _, err := db.Append(ctx, name, []EventInput{order(1), order(2)}, nil); err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if _, err := db.Export(ctx, name, &buf, ExportOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = openTest(t, t.TempDir())
				name = "imported"
				if _, err := db.Import(ctx, &buf, ImportOptions{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			l, err := db.ledger(name)
			if err != nil {
				t.Fatal(err)
			}
			before := l.visible().Seq
			b := &segment.Batch{Entries: make([]segment.Entry, 3), Durability: Sync}
			if err := db.entries(b.Entries, []EventInput{order(7), order(8), order(9)}); err != nil {
				t.Fatal(err)
			}
			if err := l.log.Append(b); err != nil {
				t.Fatal(err)
			}
			last := b.FirstSeq + 2
			if b.FirstSeq != before+1 {
				t.Fatalf("the batch is at #%d, after #%d", b.FirstSeq, before)
			}
			if v := l.visible().Seq; v != last {
				t.Fatalf("%s: a group committed on the ledger's log (#%d..#%d) left the visible head at #%d: the hooks are not set", path, b.FirstSeq, last, v)
			}
			ev, err := db.GetSeq(ctx, name, last)
			if err != nil || ev.ID != b.IDs[2] {
				t.Fatalf("GetSeq(#%d) = %v, %v; want %v", last, ev.ID, err, b.IDs[2])
			}
			// And the DB's own appends follow it.
			res, err := db.Append(ctx, name, []EventInput{order(10)}, &AppendOptions{Durability: Sync})
			if err != nil || res.FirstSeq != last+1 {
				t.Fatalf("Append after it: %+v, %v; want #%d", res, err, last+1)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
