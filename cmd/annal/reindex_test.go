package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReindex: annal reindex rebuilds the index from the segments (the
// old one kept in index.broken), prints each ledger's events, and verify
// --full passes after it.
func TestReindex(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	var in strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&in, `{"entity":"e","key":"k%d","event":"v","data":{"i":%d}}`+"\n", i%10, i)
	}
	if code, _, errOut := annal(t, in.String(), "--dir", dir, "append", "orders"); code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	code, out, errOut := annal(t, "", "--dir", dir, "reindex")
	if code != 0 {
		t.Fatalf("reindex: exit %d: %s", code, errOut)
	}
	if out != "orders\t2001 events indexed\n" {
		t.Fatalf("reindex printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.broken")); err != nil {
		t.Fatalf("the old index was not kept: %v", err)
	}
	if code, out, errOut := annal(t, "", "--dir", dir, "--format", "ndjson", "verify", "--full"); code != 0 || !strings.Contains(out, `"events":2001`) {
		t.Fatalf("verify --full after reindex: exit %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := annal(t, "", "--dir", dir, "reindex", "orders"); code != 2 {
		t.Fatalf("reindex with an argument: exit %d (want 2, usage): %s", code, errOut)
	}
}

// TestReindexProgress: the progress bar names the ledger and counts its
// events to the end.
func TestReindexProgress(t *testing.T) {
	t.Parallel()
	var w lockedBuffer
	p := &reindexProgress{w: &w}
	p.update("index ledger orders", 0, 1000)
	p.meter.delay = 0
	p.update("index ledger orders", 1000, 1000)
	if p.meter.value != 1000 {
		t.Fatalf("the bar is at %d of 1000", p.meter.value)
	}
	p.update("index ledger other", 10, 20)
	p.meter.delay = 0
	p.update("index ledger other", 15, 20)
	if !strings.Contains(w.String(), "index ledger orders") || !strings.Contains(w.String(), "index ledger other") {
		t.Fatalf("the bar drew %q", w.String())
	}
	p.clear()
}
