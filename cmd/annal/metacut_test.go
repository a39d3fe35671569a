package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestMetaCutCommands: meta.db cut into the pages it uses (its
// high-water mark less a page), to its two meta pages, to one page and to
// nothing. `annal ledgers` (which opens the directory read-only) lists
// the ledger; `annal verify` (which opens it to write) either verifies or
// fails with exit 1 and a message that names meta.db and says what is
// wrong, and neither panics or says "nil pointer".
func TestMetaCutCommands(t *testing.T) {
	t.Parallel()
	tpl := newDir(t)
	for i := range 3 {
		in := fmt.Sprintf(`{"entity":"order","key":"o-%d","event":"placed","data":{"n":%d}}`+"\n", i, i)
		if code, _, errOut := annal(t, in, "--dir", tpl, "append", "orders"); code != 0 {
			t.Fatalf("append: exit %d: %s", code, errOut)
		}
	}
	m, err := bolt.Open(filepath.Join(tpl, "meta.db"), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var hwm int64
	if err := m.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	m.Close()
	const page = 4096
	for _, c := range []struct {
		name   string
		size   int64
		verify string // what verify's stderr says; "" when it passes
	}{
		{"into its pages", hwm - page, "meta.db is damaged: it is cut short"},
		{"meta pages only", 2 * page, "meta.db is damaged: it is cut short"},
		{"one page", page, "meta.db: file size too small"},
		{"emptied", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.size >= 2*page && c.size >= hwm {
				t.Skipf("meta.db uses %d bytes: nothing to cut", hwm)
			}
			dir := filepath.Join(t.TempDir(), "data")
			copyDir(t, tpl, dir)
			if err := os.Truncate(filepath.Join(dir, "meta.db"), c.size); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := annal(t, "", "--dir", dir, "ledgers")
			if code != 0 || !strings.Contains(out, "orders") || strings.Contains(out+errOut, "nil pointer") || strings.Contains(out+errOut, "panic") {
				t.Errorf("ledgers: exit %d\n%s%s", code, out, errOut)
			}
			code, out, errOut = annal(t, "", "--dir", dir, "verify")
			if strings.Contains(out+errOut, "nil pointer") || strings.Contains(out+errOut, "panic") {
				t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
			}
			if c.verify == "" {
				if code != 0 {
					t.Errorf("verify: exit %d\n%s%s", code, out, errOut)
				}
				return
			}
			if code != 1 || !strings.Contains(errOut, c.verify) {
				t.Errorf("verify: exit %d\n%s%s\nwant exit 1 and %q", code, out, errOut, c.verify)
			}
		})
	}
}
