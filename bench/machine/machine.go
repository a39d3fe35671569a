// Package machine measures the limits of the machine that a benchmark runs
// on, in the same run as the benchmark, so that its figures can be read
// against them: how fast the disk writes and fsyncs, how fast the page
// cache reads, how fast a core computes CRC-32C, and what the machine is.
package machine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/crc32"
)

// Limits are the limits of the machine, measured by Measure.
type Limits struct {
	// SeqWriteMBps is the rate of writing SizeMiB MiB to a new file in
	// 1 MiB writes, then one fsync, timed including the fsync, in MB/s
	// (MB = 10^6 bytes).
	SeqWriteMBps float64
	// SeqReadMBps is the rate of reading that file back in 1 MiB reads,
	// from the page cache, in MB/s.
	SeqReadMBps float64
	// SizeMiB is the size of that file.
	SizeMiB int

	// FsyncP50 and FsyncP99 are the latencies of appending 4 KiB to a
	// file and fsyncing it, repeated FsyncSamples times.
	FsyncP50, FsyncP99 time.Duration
	// FsyncPerSec is 1/mean of those latencies.
	FsyncPerSec float64
	// FsyncSamples is how many appends were timed: fsyncSamples, or fewer
	// if they took more than fsyncBudget.
	FsyncSamples int

	// OverwriteP50, OverwriteP99, OverwritePerSec and OverwriteSamples
	// are the same for 4 KiB writes over blocks of the file already
	// written and fsynced, each followed by an fsync: the file's size and
	// blocks do not change, so the fsync commits data only (Pebble's
	// recycled WAL files are written so; annal's segments grow, as the
	// appends above do).
	OverwriteP50, OverwriteP99 time.Duration
	OverwritePerSec            float64
	OverwriteSamples           int

	// CRC32CGBps is the rate of CRC-32C (Castagnoli) of a 1 MiB buffer
	// on one core, by github.com/klauspost/crc32 as annal uses it, in
	// GB/s (GB = 10^9 bytes).
	CRC32CGBps float64

	Cores     int    // logical CPUs usable by the process (runtime.NumCPU)
	CPU       string // the model name of /proc/cpuinfo
	OS        string // runtime.GOOS/runtime.GOARCH
	Kernel    string // uname -r (/proc/sys/kernel/osrelease)
	GoVersion string // runtime.Version()
	FS        string // the type of the file system of the measured directory: ext4, xfs, tmpfs, … or its magic number in hex
	MemTotal  int64  // bytes of memory (MemTotal of /proc/meminfo)
}

const (
	// chunk is the size of one sequential write or read, and of the
	// CRC-32C buffer.
	chunk = 1 << 20
	// appendSize is the size of one append of the fsync measurement.
	appendSize = 4 << 10
	// fsyncSamples and fsyncBudget bound the fsync measurement: this many
	// appends, or fewer if they take longer than the budget.
	fsyncSamples = 200
	fsyncBudget  = 2 * time.Second
	// crcBudget is how long CRC-32C is computed for.
	crcBudget = 300 * time.Millisecond
)

// Measure measures the limits of the machine, with its files in dir:
// a file of sizeMiB MiB (at least 1) for the sequential write and read,
// and a small file for the fsync latency, both removed before it returns.
// With sizeMiB = 256 on an ordinary disk it takes a few seconds: the
// sequential write, at most fsyncBudget (2 s) of fsyncs, and crcBudget
// (0.3 s) of CRC-32C. The description of the machine (CPU, kernel, memory,
// file system) is best effort: what cannot be read is left empty.
func Measure(dir string, sizeMiB int) (Limits, error) {
	sizeMiB = max(sizeMiB, 1)
	l := Limits{
		SizeMiB:   sizeMiB,
		Cores:     runtime.NumCPU(),
		CPU:       cpuModel(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Kernel:    kernel(),
		GoVersion: runtime.Version(),
		MemTotal:  memTotal(),
	}
	var err error
	if l.FS, err = fsType(dir); err != nil {
		return l, fmt.Errorf("machine: %w", err)
	}

	// Random bytes, so that no file system can compress or skip them.
	buf := make([]byte, chunk)
	rng := rand.NewChaCha8([32]byte{'a', 'n', 'n', 'a', 'l'})
	_, _ = rng.Read(buf) // never fails

	if l.SeqWriteMBps, l.SeqReadMBps, err = sequential(dir, buf, sizeMiB); err != nil {
		return l, fmt.Errorf("machine: sequential write and read: %w", err)
	}
	if err = fsyncs(dir, buf[:appendSize], &l); err != nil {
		return l, fmt.Errorf("machine: fsync: %w", err)
	}
	if err = overwrites(dir, buf[:appendSize], &l); err != nil {
		return l, fmt.Errorf("machine: fsync after overwrite: %w", err)
	}
	l.CRC32CGBps = crc32c(buf)
	return l, nil
}

// sequential writes sizeMiB chunks of buf to a new file in dir then fsyncs
// it, reads it back, removes it, and returns both rates in MB/s.
func sequential(dir string, buf []byte, sizeMiB int) (writeMBps, readMBps float64, err error) {
	f, err := os.CreateTemp(dir, "machine-seq-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()

	total := float64(sizeMiB) * chunk
	start := time.Now()
	for range sizeMiB {
		if _, err := f.Write(buf); err != nil {
			return 0, 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	writeMBps = total / 1e6 / time.Since(start).Seconds()

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	var n int64
	start = time.Now()
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, err
		}
	}
	readMBps = float64(n) / 1e6 / time.Since(start).Seconds()
	if n != int64(total) {
		return 0, 0, fmt.Errorf("read back %d bytes of %d", n, int64(total))
	}
	return writeMBps, readMBps, f.Close()
}

// fsyncs times appends of block to a new file in dir, each followed by an
// fsync, and sets the fsync figures of l. One append before them is not
// timed: it pays for the creation of the file.
func fsyncs(dir string, block []byte, l *Limits) error {
	f, err := os.CreateTemp(dir, "machine-fsync-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()

	appendSync := func() error {
		if _, err := f.Write(block); err != nil {
			return err
		}
		return f.Sync()
	}
	if err := appendSync(); err != nil {
		return err
	}
	lat, perSec, err := timeSyncs(appendSync)
	if err != nil {
		return err
	}
	l.FsyncSamples, l.FsyncPerSec = len(lat), perSec
	l.FsyncP50, l.FsyncP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return f.Close()
}

// overwrites times writes of block over the blocks of a file already
// written and fsynced (fsyncSamples+1 of them), each followed by an fsync,
// and sets the overwrite figures of l.
func overwrites(dir string, block []byte, l *Limits) error {
	f, err := os.CreateTemp(dir, "machine-overwrite-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	for range fsyncSamples + 1 {
		if _, err := f.Write(block); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	var off int64
	lat, perSec, err := timeSyncs(func() error {
		if _, err := f.WriteAt(block, off); err != nil {
			return err
		}
		off += int64(len(block))
		return f.Sync()
	})
	if err != nil {
		return err
	}
	l.OverwriteSamples, l.OverwritePerSec = len(lat), perSec
	l.OverwriteP50, l.OverwriteP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return f.Close()
}

// timeSyncs runs op fsyncSamples times, or fewer if they take more than
// fsyncBudget, and returns the latencies, sorted, and the rate (1/mean).
func timeSyncs(op func() error) ([]time.Duration, float64, error) {
	lat := make([]time.Duration, 0, fsyncSamples)
	var sum time.Duration
	for len(lat) < fsyncSamples && sum < fsyncBudget {
		start := time.Now()
		if err := op(); err != nil {
			return nil, 0, err
		}
		d := time.Since(start)
		lat = append(lat, d)
		sum += d
	}
	slices.Sort(lat)
	return lat, float64(len(lat)) / max(sum.Seconds(), 1e-9), nil
}

// percentile returns the p-th quantile of sorted by nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1 // ceil(n*p) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// crc32c computes CRC-32C over buf repeatedly for about crcBudget, and
// returns the rate in GB/s.
func crc32c(buf []byte) float64 {
	table := crc32.MakeTable(crc32.Castagnoli)
	crc := crc32.Update(0, table, buf) // warm up
	var n int64
	start := time.Now()
	var elapsed time.Duration
	for elapsed < crcBudget {
		for range 16 {
			crc = crc32.Update(crc, table, buf)
		}
		n += 16 * int64(len(buf))
		elapsed = time.Since(start)
	}
	runtime.KeepAlive(crc) // the checksums are used: the loop is not dead code
	return float64(n) / 1e9 / elapsed.Seconds()
}

// cpuModel returns the first model name of /proc/cpuinfo, or "" if there
// is none (or no /proc).
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// kernel returns the kernel's release (uname -r), or "".
func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// memTotal returns MemTotal of /proc/meminfo in bytes, or 0.
func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// MemTotal:       24568212 kB
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
