package segment

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkReadOnlyOpen opens a ledger of 48 MiB in its active segment
// read-only: the open verifies every record by scanning the segment
// through its map (the follower's scan; segFile.passed gives back the
// pages it passed). An op is one open; the bytes are the segment's.
func BenchmarkReadOnlyOpen(b *testing.B) {
	dir := b.TempDir()
	w := newTestLog(b, vfs.Default, dir, Options{SegmentSize: 64 << 20, Durability: None})
	data := []byte(`"` + string(bytes.Repeat([]byte{'x'}, 4<<10)) + `"`)
	var written int64
	for i := 0; written < 48<<20; i++ {
		batch := &Batch{}
		for j := range 64 {
			e := entry(i*64 + j)
			e.Data = data
			batch.Entries = append(batch.Entries, e)
		}
		if err := w.Append(batch); err != nil {
			b.Fatal(err)
		}
		written += 64 * int64(len(data))
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(written)
	for b.Loop() {
		r, err := OpenReadOnly(dir, Options{FS: vfs.Default, Ledger: testLedger()})
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}
