package segment

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// mappedRSS returns how many bytes of the process's mappings of files
// in dir are resident (the Rss lines of /proc/self/smaps).
func mappedRSS(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// A mapping's first line: address perms offset dev inode path.
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], dir+"/")
			continue
		}
		if in && fields[0] == "Rss:" && len(fields) >= 2 {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// TestFollowerRSSBounded: a read-only Log following a writer reads the
// active segment through its map; the pages it has read are given back
// (madvise MADV_DONTNEED, every dropChunk bytes passed), so the pages of
// the segment files resident in the process stay far below what it read.
// Before, every page the follower read stayed resident until the segment
// was sealed and passed: a peak of a whole segment (64 MiB here, of a
// ledger of 96 MiB), and of the whole active segment at the end.
func TestFollowerRSSBounded(t *testing.T) {
	if !mapGrowing {
		t.Skip("the active segment is not mapped on this OS")
	}
	dir := t.TempDir()
	const segSize = 64 << 20
	const ledger = 96 << 20
	w := newTestLog(t, vfs.Default, dir, Options{SegmentSize: segSize, Durability: None})
	defer w.Close()
	r, err := openReadOnlyTest(t, vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.mapped {
		t.Skip("segments are not mapped here")
	}
	data := []byte(`"` + string(bytes.Repeat([]byte{'x'}, 64<<10)) + `"`)
	var written, peak int64
	for i := 0; written < ledger; i++ {
		b := &Batch{}
		for j := range 16 {
			e := entry(i*16 + j)
			e.Data = data
			b.Entries = append(b.Entries, e)
		}
		if err := w.Append(b); err != nil {
			t.Fatal(err)
		}
		written += 16 * int64(len(data))
		if _, err := r.Follow(); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			peak = max(peak, mappedRSS(t, dir))
		}
	}
	if r.Head() != w.Head() {
		t.Fatalf("the follower is at %+v, the writer at %+v", r.Head(), w.Head())
	}
	if w.Head().Loc.Segment < 2 {
		t.Fatalf("%d segments, want more", w.Head().Loc.Segment)
	}
	end := mappedRSS(t, dir)
	t.Logf("ledger %d MiB in %d segments: peak %.1f MiB of the segment files resident, %.1f MiB at the end",
		written>>20, w.Head().Loc.Segment, float64(peak)/(1<<20), float64(end)/(1<<20))
	if limit := int64(ledger / 4); peak > limit || end > limit {
		t.Fatalf("peak %d, end %d bytes of the segment files resident, want at most %d (a quarter of the ledger)", peak, end, limit)
	}
}
