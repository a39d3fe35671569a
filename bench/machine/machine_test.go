package machine

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	l, err := Measure(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in %v:\n%s", time.Since(start), l)

	for name, v := range map[string]float64{
		"SeqWriteMBps": l.SeqWriteMBps,
		"SeqReadMBps":  l.SeqReadMBps,
		"FsyncPerSec":  l.FsyncPerSec,
		"CRC32CGBps":   l.CRC32CGBps,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if l.FsyncP50 <= 0 || l.FsyncP99 < l.FsyncP50 || l.FsyncSamples <= 0 {
		t.Errorf("fsync: p50 %v, p99 %v, %d samples", l.FsyncP50, l.FsyncP99, l.FsyncSamples)
	}
	if l.OverwriteP50 <= 0 || l.OverwriteP99 < l.OverwriteP50 || l.OverwriteSamples <= 0 || !(l.OverwritePerSec > 0) {
		t.Errorf("overwrite: p50 %v, p99 %v, %d samples, %v/s", l.OverwriteP50, l.OverwriteP99, l.OverwriteSamples, l.OverwritePerSec)
	}
	if l.Cores <= 0 || l.OS == "" || l.GoVersion == "" || l.SizeMiB != 4 {
		t.Errorf("limits: %+v", l)
	}
	if _, err := os.Stat("/proc/meminfo"); err == nil {
		if l.MemTotal <= 0 || l.Kernel == "" || l.FS == "" {
			t.Errorf("linux: MemTotal %d, Kernel %q, FS %q", l.MemTotal, l.Kernel, l.FS)
		}
	}

	// Measure leaves nothing behind.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("left in dir: %v, %v", entries, err)
	}

	s := l.String()
	if s == "" || !strings.Contains(s, "MB/s") || !strings.Contains(s, "GB/s") || strings.Count(s, "\n") < 5 {
		t.Errorf("String:\n%s", s)
	}
	md := l.Markdown()
	if !strings.HasPrefix(md, "| ") || strings.Count(md, "\n") != strings.Count(s, "\n")+2 {
		t.Errorf("Markdown:\n%s", md)
	}
}

func TestMeasureBadDir(t *testing.T) {
	if _, err := Measure("/nonexistent/dir/for/machine", 1); err == nil {
		t.Error("no error for a directory that does not exist")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.5); p != 100 {
		t.Errorf("p50 = %d, want 100", p)
	}
	if p := percentile(d, 0.99); p != 198 {
		t.Errorf("p99 = %d, want 198", p)
	}
	if p := percentile(d[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %d", p)
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500 * time.Nanosecond:    "500 ns",
		850 * time.Microsecond:   "850 µs",
		1234 * time.Microsecond:  "1.23 ms",
		12345 * time.Microsecond: "12.3 ms",
		1500 * time.Millisecond:  "1.50 s",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
}
