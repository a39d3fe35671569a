package machine

import (
	"fmt"
	"strings"
	"time"

	"github.com/annal-db/annal/bench/report"
)

// rows are the lines of String and Markdown: a name and a value.
func (l Limits) rows() [][2]string {
	cpu := l.CPU
	if cpu == "" {
		cpu = "unknown CPU"
	}
	osLine := l.OS
	if l.Kernel != "" {
		osLine += ", kernel " + l.Kernel
	}
	osLine += ", " + l.GoVersion
	fs := l.FS
	if fs == "" {
		fs = "unknown"
	}
	mem := "unknown"
	if l.MemTotal > 0 {
		mem = fmt.Sprintf("%.1f GiB", float64(l.MemTotal)/(1<<30))
	}
	return [][2]string{
		{"CPU", fmt.Sprintf("%s, %d cores", cpu, l.Cores)},
		{"Memory", mem},
		{"OS", osLine},
		{"File system", fs},
		{"Sequential write", fmt.Sprintf("%s MB/s (%d MiB in 1 MiB writes, then fsync)", rate(l.SeqWriteMBps), l.SizeMiB)},
		{"Sequential read", rate(l.SeqReadMBps) + " MB/s (page cache, 1 MiB reads)"},
		{"Append + fsync", fmt.Sprintf("p50 %s, p99 %s, %s/s (4 KiB appends, %d samples)",
			duration(l.FsyncP50), duration(l.FsyncP99), rate(l.FsyncPerSec), l.FsyncSamples)},
		{"Overwrite + fsync", fmt.Sprintf("p50 %s, p99 %s, %s/s (4 KiB over blocks written and synced before, %d samples)",
			duration(l.OverwriteP50), duration(l.OverwriteP99), rate(l.OverwritePerSec), l.OverwriteSamples)},
		{"CRC-32C", rate(l.CRC32CGBps) + " GB/s (one core, 1 MiB buffer)"},
	}
}

// String returns a summary of l for a person, one limit per line.
func (l Limits) String() string {
	var b strings.Builder
	for _, r := range l.rows() {
		fmt.Fprintf(&b, "%-19s %s\n", r[0]+":", r[1])
	}
	return b.String()
}

// Markdown returns l as a markdown table of two columns, what and value.
func (l Limits) Markdown() string {
	var b strings.Builder
	b.WriteString("| what | value |\n| --- | --- |\n")
	for _, r := range l.rows() {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], strings.ReplaceAll(r[1], "|", `\|`))
	}
	return b.String()
}

// rate formats a figure with three significant digits (report.Sig3):
// 0.123, 1.23, 12.3, 123, 1234.
func rate(v float64) string { return report.Sig3(v) }

// duration formats d with three significant digits in the unit that suits
// it: 850 µs, 1.23 ms, 12.3 ms.
func duration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return rate(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return rate(float64(d)/float64(time.Millisecond)) + " ms"
	}
	return rate(d.Seconds()) + " s"
}
