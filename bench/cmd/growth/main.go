// Command growth appends many events to one ledger as fast as annal takes
// them and reports, every -every events, what the process holds (Go heap,
// the Go runtime's memory from the OS, the index's Pebble memory, RSS) and
// what the data directory holds on disk (segments, index), so that memory
// growth over a long ledger and the index's size per event show:
//
//	cd bench && go run ./cmd/growth [-events 10000000] [-batch 1000] [-durability none|interval|sync] [-every 1000000] [-dir DIR] [-csv FILE]
//
// It appends in batches of -batch events of bench.Entry's shape (about 250
// bytes framed) from one goroutine. At the end it closes the DB (which
// flushes the index), measures the directory again, and prints the growth
// of RSS and of the Go heap from the second quarter of the run to the last
// (the first quarter is the warm-up, while Pebble's cache and memtables
// fill), and the index's bytes on disk per event.
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/annal-db/annal/bench"
	"github.com/annal-db/annal/engine"
)

func main() {
	events := flag.Int("events", 10_000_000, "events to append")
	batch := flag.Int("batch", 1000, "events an append")
	every := flag.Int("every", 1_000_000, "report every this many events")
	durability := flag.String("durability", "none", "none, interval or sync")
	dir := flag.String("dir", "", "data directory (default: a new temporary one, removed at the end)")
	csvPath := flag.String("csv", "", "also write the reports to this CSV file")
	flag.Parse()
	opts := &engine.Options{}
	switch *durability {
	case "none":
		opts.Durability = engine.None
	case "interval":
		opts.Durability = engine.Interval
	case "sync":
		opts.Durability = engine.Sync
	default:
		fmt.Fprintf(os.Stderr, "growth: -durability %q: want none, interval or sync\n", *durability)
		os.Exit(2)
	}
	if *events <= 0 || *batch <= 0 || *every <= 0 {
		fmt.Fprintln(os.Stderr, "growth: -events, -batch and -every must be positive")
		os.Exit(2)
	}
	if err := run(*events, *batch, *every, *dir, *csvPath, opts); err != nil {
		fmt.Fprintln(os.Stderr, "growth:", err)
		os.Exit(1)
	}
}

// du returns the bytes of the regular files under root.
func du(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

type sample struct {
	events               int
	seconds, rate        float64
	heap, goMem, idx     int64
	rss, index, segments int64
}

func run(events, batch, every int, dir, csvPath string, opts *engine.Options) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "annal-growth")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "data")
	}
	var w *csv.Writer
	if csvPath != "" {
		f, err := os.Create(csvPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w = csv.NewWriter(f)
		defer w.Flush()
		w.Write([]string{"events", "seconds", "events_per_second", "heap_bytes", "go_bytes", "index_memory_bytes", "rss_bytes", "index_disk_bytes", "segment_bytes"})
	}
	ctx := context.Background()
	db, err := engine.Open(dir, opts)
	if err != nil {
		return err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "growth"}); err != nil {
		return err
	}
	in := make([]engine.EventInput, batch)
	fmt.Printf("%10s %8s %10s %9s %9s %9s %9s %10s %10s %8s\n", "events", "seconds", "events/s", "heap MB", "go MB", "index MB", "RSS MB", "index disk", "segments", "B/event")
	var samples []sample
	start := time.Now()
	last, lastAt := 0, start
	report := func(n int) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		now := time.Now()
		im := db.IndexMemory()
		s := sample{
			events: n, seconds: now.Sub(start).Seconds(), rate: float64(n-last) / now.Sub(lastAt).Seconds(),
			heap: int64(ms.HeapInuse), goMem: int64(ms.Sys - ms.HeapReleased), idx: im.BlockCache + im.MemTables,
			rss: bench.RSS(), index: du(filepath.Join(dir, "index")), segments: du(filepath.Join(dir, "ledgers")),
		}
		last, lastAt = n, now
		samples = append(samples, s)
		fmt.Printf("%10d %8.1f %10.0f %9.1f %9.1f %9.1f %9.1f %10.1f %10.1f %8.1f\n", s.events, s.seconds, s.rate,
			float64(s.heap)/1e6, float64(s.goMem)/1e6, float64(s.idx)/1e6, float64(s.rss)/1e6,
			float64(s.index)/1e6, float64(s.segments)/1e6, float64(s.index)/float64(max(n, 1)))
		if w != nil {
			w.Write([]string{strconv.Itoa(s.events), fmt.Sprintf("%.3f", s.seconds), fmt.Sprintf("%.0f", s.rate),
				strconv.FormatInt(s.heap, 10), strconv.FormatInt(s.goMem, 10), strconv.FormatInt(s.idx, 10),
				strconv.FormatInt(s.rss, 10), strconv.FormatInt(s.index, 10), strconv.FormatInt(s.segments, 10)})
			w.Flush()
		}
	}
	for n := 0; n < events; {
		k := min(batch, events-n)
		for i := range k {
			e := bench.Entry(n + i)
			in[i] = engine.EventInput{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
		}
		if _, err := db.Append(ctx, "growth", in[:k], nil); err != nil {
			return fmt.Errorf("append at event %d: %w", n, err)
		}
		n += k
		if n/every != (n-k)/every || n == events {
			report(n)
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	db = nil
	index := du(filepath.Join(dir, "index"))
	fmt.Printf("closed: index %.1f MB on disk (%.1f bytes an event), segments %.1f MB\n",
		float64(index)/1e6, float64(index)/float64(events), float64(du(filepath.Join(dir, "ledgers")))/1e6)
	if q := len(samples) / 4; q >= 1 && len(samples) >= 4 {
		a, b := samples[q], samples[len(samples)-1]
		fmt.Printf("growth from %d to %d events: RSS %+.1f MB (%.1f -> %.1f), Go heap %+.1f MB, index memory %+.1f MB\n",
			a.events, b.events, float64(b.rss-a.rss)/1e6, float64(a.rss)/1e6, float64(b.rss)/1e6,
			float64(b.heap-a.heap)/1e6, float64(b.idx-a.idx)/1e6)
	}
	return nil
}
