package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/segment/faultfs"
)

// TestReindexFullDiskSaysNoSpace: `annal reindex` on a full disk fails
// with the cause as its message (no space left on device), exit 1, and
// moves nothing; it said "lock held by current process", the cause in
// another line (and had moved the index aside). Once space is back,
// reindex works and every event is there. The failing reindex runs in a
// child process (runInChild): Pebble, after its open failed, keeps the
// index's files open in the process that opened it.
func TestReindexFullDiskSaysNoSpace(t *testing.T) {
	mnt := faultfs.MountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "data")
	mustAnnal(t, "", "--dir", dir, "create", "orders")
	mustAnnal(t, strings.Repeat(`{"entity":"order","key":"o-1","event":"placed","data":{}}`+"\n", 50), "--dir", dir, "append", "orders")
	filler := filepath.Join(mnt, "filler")
	faultfs.FillUp(t, filler)
	code, out := runInChild(t, "TestReindexFullDiskSaysNoSpace", t.TempDir(), nil, "--dir", dir, "reindex")
	if code != exitError || !strings.Contains(out, "no space left on device; nothing was moved or changed") || strings.Contains(out, "lock held") {
		t.Fatalf("reindex on a full disk: exit %d\n%s\nwant exit 1 with the cause, no space left on device", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.broken")); err == nil {
		t.Fatal("reindex on a full disk moved the index aside")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if out := mustAnnal(t, "", "--dir", dir, "reindex"); !strings.Contains(out, "orders\t51 events indexed") {
		t.Fatalf("reindex once space is back: %s", out)
	}
}
