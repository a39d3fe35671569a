// Package report collects the measurements of the side-by-side benchmark
// harness (bench/cmd/compare), which runs the same workloads against annal
// and its peers (tidwall/wal, Pebble, bbolt, SQLite), and presents them: as
// CSV (the raw rounds, to keep and to re-read), as per-store summaries with
// the ratio of annal to each peer, as a plain-text or markdown table, and as
// an SVG chart of the ratios.
package report

import (
	"math"
	"slices"
)

// Baseline is the store that every other store is compared with.
const Baseline = "annal"

// NA is the Err of a Result whose store does not offer the workload.
const NA = "n/a"

// Result is one measurement: one store, one workload with its parameters,
// one round.
type Result struct {
	Workload string  // e.g. "append-batch", "concurrent-sync", "scan", "get", "replay", "open-clean", "open-crash", "verify"
	Params   string  // e.g. "batch=100 mode=sync", "appenders=64", "range=1%", "events=1000000"
	Store    string  // "annal", "wal", "pebble", "bbolt", "sqlite"
	Round    int     // the round's number
	Value    float64 // the headline figure
	Unit     string  // "events/s", "MB/s", "ms", ...
	Higher   bool    // true when a higher Value is better (events/s), false when a lower one is (ms)

	P50, P99, P999 float64 // latencies in microseconds (0: none measured)

	MaxRSS int64  // peak RSS in bytes of the process that ran it (0: not measured)
	Err    string // "" if measured; NA ("n/a") if the store does not offer it; else the error text
}

// Summary sums up the rounds of one store in one workload with its
// parameters. Only the rounds without an error count in the figures.
type Summary struct {
	Workload, Params, Store string

	Unit   string // the Unit of the rounds (of the first one measured)
	Higher bool   // the Higher of the rounds (of the first one measured)

	Rounds int // rounds measured (without an error)
	Failed int // rounds that erred, "n/a" included

	Median, Min, Max float64 // of Value over the measured rounds
	Spread           float64 // (Max-Min)/Median; 0 when Median is 0

	P50, P99, P999 float64 // medians over the rounds that measured them, in µs (0: none)
	MaxRSS         int64   // the largest MaxRSS of the measured rounds, in bytes (0: none)

	// Err is set when no round was measured: NA if the store does not
	// offer the workload, else the first round's error text.
	Err string

	// Ratio is annal's median relative to this store's, oriented so that
	// a ratio above 1 means annal is better: annal/store when a higher
	// value is better, store/annal when a lower one is. It is 1 for annal
	// itself, and 0 (n/a) when either median is missing or is 0, or when
	// the two disagree on the unit or the orientation.
	Ratio float64
}

// OK reports whether the summary has figures (at least one round measured).
func (s Summary) OK() bool { return s.Err == "" && s.Rounds > 0 }

// HasRatio reports whether Ratio is known.
func (s Summary) HasRatio() bool {
	return s.Ratio > 0 && !math.IsInf(s.Ratio, 0) && !math.IsNaN(s.Ratio)
}

// HasLatency reports whether any latency percentile was measured.
func (s Summary) HasLatency() bool { return s.P50 != 0 || s.P99 != 0 || s.P999 != 0 }

// groupKey identifies a row of the comparison: one workload with its
// parameters.
type groupKey struct{ workload, params string }

// Summarize sums up the results per (Workload, Params, Store) and sets the
// ratios to annal. The (Workload, Params) pairs keep the order in which
// they are first seen in rs; within each, the stores follow the order in
// which they are first seen anywhere in rs, so that every group lists the
// stores in the same order.
func Summarize(rs []Result) []Summary {
	var (
		groups []groupKey
		stores []string
		seenG  = map[groupKey]bool{}
		seenS  = map[string]bool{}
		rounds = map[groupKey]map[string][]Result{}
	)
	for _, r := range rs {
		g := groupKey{r.Workload, r.Params}
		if !seenG[g] {
			seenG[g] = true
			groups = append(groups, g)
			rounds[g] = map[string][]Result{}
		}
		if !seenS[r.Store] {
			seenS[r.Store] = true
			stores = append(stores, r.Store)
		}
		rounds[g][r.Store] = append(rounds[g][r.Store], r)
	}

	var ss []Summary
	for _, g := range groups {
		first := len(ss)
		for _, st := range stores {
			if rr, ok := rounds[g][st]; ok {
				ss = append(ss, summarize(rr))
			}
		}
		setRatios(ss[first:])
	}
	return ss
}

// summarize sums up the rounds of one store in one group; rr is not empty.
func summarize(rr []Result) Summary {
	s := Summary{Workload: rr[0].Workload, Params: rr[0].Params, Store: rr[0].Store}
	var values, p50, p99, p999 []float64
	for _, r := range rr {
		if r.Err != "" {
			s.Failed++
			if s.Err == "" {
				s.Err = r.Err
			}
			continue
		}
		if len(values) == 0 {
			s.Unit, s.Higher = r.Unit, r.Higher
		}
		values = append(values, r.Value)
		if r.P50 != 0 {
			p50 = append(p50, r.P50)
		}
		if r.P99 != 0 {
			p99 = append(p99, r.P99)
		}
		if r.P999 != 0 {
			p999 = append(p999, r.P999)
		}
		s.MaxRSS = max(s.MaxRSS, r.MaxRSS)
	}
	s.Rounds = len(values)
	if s.Rounds == 0 {
		// Every round erred: keep the unit for display, and the error.
		s.Unit, s.Higher = rr[0].Unit, rr[0].Higher
		return s
	}
	s.Err = "" // some rounds were measured: the failures are counted in Failed
	s.Median = Median(values)
	s.Min, s.Max = slices.Min(values), slices.Max(values)
	if s.Median != 0 {
		s.Spread = (s.Max - s.Min) / math.Abs(s.Median)
	}
	s.P50, s.P99, s.P999 = Median(p50), Median(p99), Median(p999)
	return s
}

// setRatios sets the Ratio of each summary of one group to annal's.
func setRatios(group []Summary) {
	var base *Summary
	for i := range group {
		if group[i].Store == Baseline {
			base = &group[i]
		}
	}
	for i := range group {
		group[i].Ratio = ratio(base, &group[i])
	}
}

// ratio returns annal's median relative to s's, oriented so that above 1
// means annal is better, or 0 when it is not known.
func ratio(base, s *Summary) float64 {
	if base == nil || !base.OK() || !s.OK() {
		return 0
	}
	if s == base {
		return 1
	}
	if base.Unit != s.Unit || base.Higher != s.Higher || base.Median <= 0 || s.Median <= 0 {
		return 0
	}
	if s.Higher {
		return base.Median / s.Median
	}
	return s.Median / base.Median
}

// Median returns the median of xs (the mean of the two middle values when
// their number is even), or 0 if xs is empty. It does not modify xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
