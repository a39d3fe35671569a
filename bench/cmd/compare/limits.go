package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/annal-db/annal/bench/machine"
	"github.com/annal-db/annal/bench/report"
)

// annalFrame is the bytes annal's segment adds to an event's content: a
// 12-byte frame header and a 56-byte fixed part (segment/doc.go).
const annalFrame = 68

// meanContent is the mean content size of the workload's events.
func meanContent() float64 {
	var n int
	for i := range pool {
		n += pool[i].Size()
	}
	return float64(n) / float64(len(pool))
}

// bound is one of annal's figures set against the machine limit it is
// bound by.
type bound struct {
	workload, params string
	annal            float64 // events/s
	limit            float64 // events/s the limit allows
	what             string  // the limit, in words
}

// param returns the value of key in params ("batch=100 mode=sync").
func param(params, key string) string {
	for _, f := range strings.Fields(params) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// bounds sets annal's rates against the limits measured in the same run:
// Sync appends against an fsync a batch (or one for every appender
// waiting) plus writing the batch's bytes at the sequential write rate;
// verification against CRC-32C over the segment bytes; a full scan
// against reading the bytes from the page cache. The other workloads are
// bound by the CPU: their limit is the machine's cores, and the fraction
// is the cores annal's child process used over the workload (the store's
// open and close excluded), from getrusage.
func bounds(ss []report.Summary, lim machine.Limits, cores map[string][]float64) []bound {
	frame := meanContent() + annalFrame
	// syncLimit is the events a second of writing n events' bytes at the
	// sequential write rate and then one fsync, over and over: the disk's
	// limit for Sync appends of n events at a time (or n appenders sharing
	// every fsync), an upper bound, as the fsync of a larger write costs
	// more than the 4 KiB probe's.
	syncLimit := func(n int) float64 {
		perBatch := 1/lim.FsyncPerSec + float64(n)*frame/(lim.SeqWriteMBps*1e6)
		return float64(n) / perBatch
	}
	var out []bound
	for _, s := range ss {
		if s.Store != "annal" || !s.OK() || s.Unit != "events/s" {
			continue
		}
		b := bound{workload: s.Workload, params: s.Params, annal: s.Median}
		switch {
		case (s.Workload == "append-batch" || s.Workload == "append-tailed") && param(s.Params, "mode") == "sync":
			n, _ := strconv.Atoi(param(s.Params, "batch"))
			b.limit = syncLimit(n)
			b.what = fmt.Sprintf("one fsync (%.0f a second) and the batch's bytes at %.0f MB/s a batch", lim.FsyncPerSec, lim.SeqWriteMBps)
		case s.Workload == "concurrent-sync":
			n, _ := strconv.Atoi(param(s.Params, "appenders"))
			b.limit = syncLimit(n)
			b.what = fmt.Sprintf("every appender's event in each fsync (%.0f a second), bytes at %.0f MB/s", lim.FsyncPerSec, lim.SeqWriteMBps)
		case s.Workload == "verify":
			b.limit = lim.CRC32CGBps * 1e9 / frame
			b.what = fmt.Sprintf("CRC-32C at %.1f GB/s on one core over the segment bytes", lim.CRC32CGBps)
		case s.Workload == "scan" && strings.HasPrefix(s.Params, "range=100%"):
			b.limit = lim.SeqReadMBps * 1e6 / frame
			b.what = fmt.Sprintf("reading the segment bytes from the page cache at %.0f MB/s", lim.SeqReadMBps)
		default:
			c := report.Median(cores[s.Workload+" "+s.Params])
			if c <= 0 || lim.Cores <= 0 {
				continue
			}
			// The rate annal would reach with every core busy.
			b.limit = s.Median * float64(lim.Cores) / c
			b.what = fmt.Sprintf("the CPU: %.2f of %d cores busy (the limit is the rate with all busy)", c, lim.Cores)
		}
		out = append(out, b)
	}
	return out
}

// writeBounds writes bounds as a markdown table.
func writeBounds(w io.Writer, bs []bound) {
	fmt.Fprintf(w, "| workload | params | annal | limit | annal / limit | the limit |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, b := range bs {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f%% | %s |\n", b.workload, b.params,
			report.Human(b.annal, "events/s"), report.Human(b.limit, "events/s"), 100*b.annal/b.limit, b.what)
	}
}
