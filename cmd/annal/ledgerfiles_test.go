package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAppendStopsWhenSegmentsRemoved: "annal append" reading NDJSON from
// a pipe, the ledger's segment files removed (rm ledgers/*/*.seg) while
// it runs: once the engine's watch interval (100 ms) has passed, it
// prints no more IDs (they would name events in files that are gone),
// and exits 1 saying that the directory changed, naming the
// segment, and without saying that the events it printed are stored.
func TestAppendStopsWhenSegmentsRemoved(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut lockedBuffer
	done := make(chan int)
	go func() {
		code := run([]string{"--dir", dir, "append", "orders"}, inR, outW, &errOut)
		outW.Close()
		inR.Close()
		done <- code
	}()
	out := bufio.NewReader(outR)
	line := func(i int) string {
		return fmt.Sprintf(`{"entity":"order","key":"o-%d","event":"placed","data":{"n":%d}}`, i, i)
	}
	for i := range 5 {
		fmt.Fprintln(inW, line(i))
		if _, err := out.ReadString('\n'); err != nil {
			t.Fatalf("ID %d: %v; stderr %s", i, err, errOut.String())
		}
	}
	segs, err := filepath.Glob(filepath.Join(dir, "ledgers", "*", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	// Past the watch interval since the removal: the next append looks.
	time.Sleep(200 * time.Millisecond)
	fmt.Fprintln(inW, line(5))
	inW.Close()
	rest, _ := io.ReadAll(out)
	code := <-done
	if len(rest) != 0 {
		t.Errorf("IDs printed after the segments were removed and the watch interval passed: %q", rest)
	}
	msg := errOut.String()
	if code != 1 || !strings.Contains(msg, "changed under the running DB") || !strings.Contains(msg, segs[0]) {
		t.Fatalf("exit %d, stderr %q: want a failure saying the directory changed, naming %s", code, msg, segs[0])
	}
	if strings.Contains(msg, "are stored") {
		t.Errorf("stderr says the printed events are stored, though their files are gone: %q", msg)
	}
}
