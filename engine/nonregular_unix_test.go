//go:build unix

package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckpointFIFODoesNotHangOpen: a ledger's checkpoint file replaced
// by a named pipe (mkfifo): an open(2) of the pipe for reading blocks
// until a writer comes, so every open, read-only (annal ledgers, verify)
// or not (annal append), would block for ever, with no message, and no
// other ledger could be read or written. The open refuses the ledger,
// naming its checkpoint file as a named pipe, without opening it, and
// goes on.
func TestCheckpointFIFODoesNotHangOpen(t *testing.T) {
	t.Parallel()
	dir, id := checkpointLedger(t)
	ck := filepath.Join(dir, "ledgers", id, checkpointFileName)
	if err := os.Remove(ck); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(ck, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"read-only", "writer"} {
		done := make(chan error, 1)
		go func() {
			var db *DB
			var err error
			if mode == "writer" {
				db, err = Open(dir, nil)
			} else {
				db, err = OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
			}
			if err == nil {
				if why, ok := db.Unavailable()["acct"]; !ok {
					err = errors.New("ledger acct, whose checkpoint is a named pipe, is not refused")
				} else if !strings.Contains(why.Error(), ck) || !strings.Contains(why.Error(), "named pipe") {
					err = fmt.Errorf("ledger acct refused, but not naming its checkpoint file as a named pipe: %v", why)
				}
				db.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil && !strings.Contains(err.Error(), "checkpoint") {
				t.Errorf("%s open: %v", mode, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s open of a directory whose ledger acct has a named pipe for its checkpoint file: still blocked after 2 s", mode)
		}
	}
}
