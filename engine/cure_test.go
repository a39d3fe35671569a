package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/segment"
)

// TestMetaDamageNamesCure: a meta.db record whose CRC does not match, and
// a meta.db bbolt cannot read, fail Open with ErrMetaDamaged, and the
// message names the cure (restore it, or move it aside and the next open
// rebuilds it, the consumers' positions lost). meta.Damaged wraps its cause
// (%w), so that it can be matched. (The message was "CRC mismatch" and no
// cure; the cause was formatted with %v.)
func TestMetaDamageNamesCure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	metaPath := filepath.Join(dir, metaFile)
	saved, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Clone(rawMeta(t, metaPath)[info.ID.String()])
	v[len(v)-1] ^= 0x01 // the CRC itself
	putRawMeta(t, metaPath, info.ID.String(), v)
	cure := []string{"restore it from a copy (annal backup)", "mv " + metaPath + " " + metaPath + ".damaged", "the next open rebuilds it from the segments"}
	_, err = Open(dir, nil)
	if !errors.Is(err, ErrMetaDamaged) {
		t.Fatalf("a record with a CRC mismatch: %v, want ErrMetaDamaged", err)
	}
	for _, want := range append(cure, "CRC mismatch") {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("a record with a CRC mismatch: %v\nwant it to say %q", err, want)
		}
	}
	// bbolt's own refusal: the file's pages after its meta pages zeroed.
	b := bytes.Clone(saved)
	clear(b[2*4096:])
	if err := os.WriteFile(metaPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, nil)
	if !errors.Is(err, ErrMetaDamaged) || !strings.Contains(err.Error(), cure[1]) {
		t.Fatalf("meta.db zeroed after its meta pages: %v, want ErrMetaDamaged naming the cure", err)
	}
	if err := meta.Damaged(metaPath, io.ErrUnexpectedEOF); !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrMetaDamaged) {
		t.Fatalf("meta.Damaged does not wrap its cause: %v", err)
	}
}

// TestLostTailNamesCure: an older copy of a ledger's segment restored over
// the newer one: the ledger is refused as before (acknowledged events
// lost, segment.ErrAcknowledgedLost), and the message now names the cure:
// restore the segment files from a backup (annal backup).
func TestLostTailNamesCure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	info, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, "l", 3, appendSpec{Options: unsynced})
	db.Close()
	seg := filepath.Join(dir, ledgersDir, info.ID.String(), "00000000000000000001.seg")
	older, err := os.ReadFile(seg)
	if err != nil {
		t.Fatalf("the segment: %v", err)
	}
	db = openTest(t, dir)
	appendEvents(t, db, "l", 3, appendSpec{Options: unsynced})
	db.Close()
	if err := os.WriteFile(seg, older, 0o600); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	err = db.Unavailable()["l"]
	if !errors.Is(err, segment.ErrAcknowledgedLost) || !errors.Is(err, segment.ErrCorruption) {
		t.Fatalf("older segment restored: %v, want the ledger refused with ErrAcknowledgedLost", err)
	}
	for _, want := range []string{"acknowledged events lost", "restore the ledger's segment files", "annal backup"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("older segment restored: %v\nwant it to say %q", err, want)
		}
	}
}
