package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadCommandsBesideLiveWriter: with a real writer in another process
// ("annal append" reading from a pipe) holding the data directory, verify
// (quick and --full), prove, checkpoint (printing the latest), export
// --checkpoint (of the latest signed checkpoint), key, get and scan all
// work, read-only: no command is refused as "in use", the export verifies
// offline against its checkpoint, and the writer goes on appending.
func TestReadCommandsBesideLiveWriter(t *testing.T) {
	bin, err := exec.LookPath("annal") // the test binary, put in $PATH by TestMain
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	dir := filepath.Join(work, "data")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runAnnal(t, bin, dir, "", args...)
	}
	if code, _, errOut := run("create", "shop"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, `{"entity":"order","key":"o%d","event":"placed","data":{"n":%d}}`+"\n", i%7, i)
	}
	code, out, errOut := runAnnal(t, bin, dir, lines.String(), "append", "shop", "--durability", "none")
	if code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	first := strings.Fields(out)[10]

	w, in, stdout, wErr := startAppend(t, bin, dir, "shop")
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			w.Process.Kill() // a hung writer fails the test, not the run
		}
	}()
	ids := bufio.NewScanner(stdout)
	appendOne := func(i int) string {
		t.Helper()
		if _, err := fmt.Fprintf(in, `{"entity":"order","key":"live","event":"placed","data":{"n":%d}}`+"\n", i); err != nil {
			t.Fatalf("the writer stopped: %v; stderr: %s", err, wErr)
		}
		if !ids.Scan() {
			t.Fatalf("the writer printed no ID; stderr: %s", wErr)
		}
		return ids.Text()
	}
	appendOne(0)
	for i, args := range [][]string{
		{"verify"},
		{"verify", "--full"},
		{"prove", first},
		{"checkpoint", "shop"},
		{"export", "shop", "--checkpoint", filepath.Join(work, "shop.checkpoint"), "-o", filepath.Join(work, "shop.ndjson")},
		{"key"},
		{"get", first},
		{"scan", "shop", "--limit", "1"},
	} {
		code, out, errOut := run(args...)
		if code != 0 || strings.Contains(errOut, "in use by") {
			t.Fatalf("annal %s beside a live writer: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		if out == "" && args[0] != "export" { // export writes to -o
			t.Fatalf("annal %s beside a live writer printed nothing", strings.Join(args, " "))
		}
		appendOne(i + 1) // the writer is not disturbed
	}
	_, key, _ := run("key", "--format", "table")
	code, out, errOut = runAnnal(t, bin, dir, "", "verify-file", filepath.Join(work, "shop.ndjson"), "--checkpoint", filepath.Join(work, "shop.checkpoint"), "--key", strings.TrimSpace(key))
	if code != 0 {
		t.Fatalf("verify-file of the export made beside the writer: exit %d: %s%s", code, out, errOut)
	}
	in.Close()
	if err := w.Wait(); err != nil {
		t.Fatalf("the writer: %v; stderr: %s", err, wErr)
	}
}

// TestReadCommandsChangeNothing: get, scan --limit 1, export, ledgers and
// verify of a directory no process holds change no byte of it: every
// file's contents and modification time, and every directory's listing
// and modification time, are as they were.
func TestReadCommandsChangeNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, errOut := annal(t, "", "create", "shop", "--dir", dir); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	var lines strings.Builder
	for i := range 100 {
		fmt.Fprintf(&lines, `{"entity":"order","key":"o%d","event":"placed"}`+"\n", i)
	}
	code, out, errOut := annal(t, lines.String(), "append", "shop", "--dir", dir)
	if code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	id := strings.Fields(out)[50]
	state := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			v := fmt.Sprintf("%v %v", fi.Mode(), fi.ModTime().UnixNano())
			if !d.IsDir() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				v += fmt.Sprintf(" %x", sha256.Sum256(b))
			}
			m[p] = v
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := state()
	for _, args := range [][]string{
		{"get", id}, {"scan", "shop", "--limit", "1"}, {"export", "shop"}, {"ledgers"}, {"verify"}, {"get", id},
	} {
		if code, _, errOut := annal(t, "", append(args, "--dir", dir)...); code != 0 {
			t.Fatalf("annal %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		after := state()
		for p, v := range before {
			if after[p] != v {
				t.Errorf("annal %s: %s changed (%s, was %s)", strings.Join(args, " "), p, after[p], v)
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok {
				t.Errorf("annal %s: %s created", strings.Join(args, " "), p)
			}
		}
	}
}
