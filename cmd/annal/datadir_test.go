package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1", 1},
		{"4096", 4096},
		{"64MiB", 64 << 20},
		{"64mib", 64 << 20},
		{"64 MiB", 64 << 20},
		{"64M", 64 << 20},
		{"512KiB", 512 << 10},
		{"512k", 512 << 10},
		{"1GiB", 1 << 30},
		{"2G", 2 << 30},
		{"100B", 100},
		{"1024GiB", 1 << 40},
		// --cache 32MB was once refused. Sizes are
		// binary, whatever the unit's spelling.
		{"32MB", 32 << 20},
		{"32mb", 32 << 20},
		{"32 MB", 32 << 20},
		{"512KB", 512 << 10},
		{"1GB", 1 << 30},
		{"1TB", 1 << 40},
		{"1TiB", 1 << 40},
		{"1T", 1 << 40},
	} {
		if got, err := parseSize(c.in); err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "0", "0MiB", "-1", "-64MiB", "64XB", "MiB", "1.5GiB", "1025GiB", "2TB", "32MBB", "32 M B", "1099511627777", "9223372036854775807GiB", "0x10"} {
		if got, err := parseSize(in); err == nil || !strings.Contains(err.Error(), "is not a size above zero") {
			t.Errorf("parseSize(%q) = %d, %v; want an error", in, got, err)
		}
	}
}

func TestCacheFlagSetsCacheSize(t *testing.T) {
	t.Parallel()
	g := &globals{}
	if o, err := g.options(); err != nil || o != nil {
		t.Errorf("without --cache: options() = %+v, %v; want nil (the engine's defaults)", o, err)
	}
	g.cache = "16MiB"
	if o, err := g.options(); err != nil || o == nil || o.CacheSize != 16<<20 {
		t.Errorf("--cache 16MiB: options() = %+v, %v; want CacheSize %d", o, err, 16<<20)
	}
	g.cache = "none"
	var ee *exitErr
	if _, err := g.options(); !errors.As(err, &ee) || ee.code != exitUsage {
		t.Errorf("--cache none: options() error %v; want a usage error", err)
	}
}

// TestKeyLossSameExitForReadersAndWriter: with DIR/signing.key removed the
// data is intact: the readers (ledgers, stats, scan, export, get, verify)
// exit as the writer's append does (1: the key is missing), not 3 (data
// failed).
func TestKeyLossSameExitForReadersAndWriter(t *testing.T) {
	t.Parallel()
	dir, _, _ := refusedDir(t)
	if err := os.Remove(filepath.Join(dir, "signing.key")); err != nil {
		t.Fatal(err)
	}
	wcode, _, werr := annal(t, "", "--dir", dir, "append", "acct", "--entity", "e", "--key", "k", "--event", "v")
	if wcode == 0 {
		t.Fatalf("append without the key: exit 0\n%s", werr)
	}
	for _, args := range [][]string{{"ledgers"}, {"stats"}, {"scan", "acct"}, {"export", "acct"}, {"get", "acct#5"}, {"verify"}, {"verify", "--full"}} {
		code, _, errOut := annal(t, "", append([]string{"--dir", dir}, args...)...)
		if code != wcode {
			t.Errorf("%v: exit %d, the writer's append exits %d for the same directory (its key removed)\nstderr:\n%s", args, code, wcode, errOut)
		}
		// It says the key is missing, and the cure.
		if !strings.Contains(errOut, "signing key is missing") || !strings.Contains(errOut, "restore") {
			t.Errorf("%v: stderr does not say that the signing key is missing and to restore it:\n%s", args, errOut)
		}
	}
}
