package engine

import (
	"context"
	"os"
	"strings"
	"testing"
)

// segmentFileBytes sums the sizes of the segment files in dir.
func segmentFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".seg") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			n += fi.Size()
		}
	}
	return n
}

// TestLedgerBytesLeaveOutZeros: while the writer keeps the active segment
// written with zeros ahead of its records (Sync appends), LedgerInfo.Bytes
// counts the records' bytes, not the zeros: the same figure as after
// Close, which cuts them.
func TestLedgerBytesLeaveOutZeros(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "z"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.Append(ctx, "z", []EventInput{order(2 * i), order(2*i + 1)}, &AppendOptions{Durability: Sync}); err != nil {
			t.Fatal(err)
		}
	}
	ldir := db.ledgerDir(info.ID)
	open, err := db.Ledger("z")
	if err != nil {
		t.Fatal(err)
	}
	if onDisk := segmentFileBytes(t, ldir); onDisk <= open.Bytes {
		t.Fatalf("segment files of %d bytes while open, Bytes %d: no zeros ahead of the records", onDisk, open.Bytes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if closed := segmentFileBytes(t, ldir); closed != open.Bytes {
		t.Fatalf("Bytes %d while open, %d bytes of segments after Close", open.Bytes, closed)
	}
	db = openTest(t, dir)
	defer db.Close()
	again, err := db.Ledger("z")
	if err != nil {
		t.Fatal(err)
	}
	if again.Bytes != open.Bytes {
		t.Fatalf("Bytes %d after reopen, %d before", again.Bytes, open.Bytes)
	}
}
