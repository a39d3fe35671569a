package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/spf13/cobra"
)

func newCreateCmd(g *globals) *cobra.Command {
	var spec engine.LedgerSpec
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a ledger",
		Long: `create makes a ledger named NAME, appending its genesis event, and prints the
ledger as 'annal ledgers' does (its name and ID among the rest). It makes the
data directory if it does not exist. A name already in use exits 1.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			db, dir, err := g.openDB(cmd, true)
			if err != nil {
				return err
			}
			created := ""
			defer closeDBStored(db, &err, cmd.ErrOrStderr(), func() string { return created }, noStored)
			spec.Name = args[0]
			info, err := db.CreateLedger(cmd.Context(), spec)
			if err == nil {
				// Its genesis event is synced: the ledger is there.
				created = fmt.Sprintf("ledger %s (%s) is created: do not create it again", safeName(info.Name), info.ID)
			}
			if errors.Is(err, engine.ErrLedgerExists) {
				return &exitErr{code: exitError, err: fmt.Errorf("ledger %q already exists in %s", spec.Name, dir)}
			}
			if err != nil {
				return &exitErr{code: exitError, err: err}
			}
			if format == formatJSON {
				return writeJSON(cmd.OutOrStdout(), format, newLedgerJSON(&info)) // an object, not a list
			}
			return writeLedgers(cmd.OutOrStdout(), format, []engine.LedgerInfo{info})
		},
	}
	cmd.Flags().StringVar(&spec.Description, "description", "", "what the ledger is for (kept in its genesis event)")
	cmd.Flags().StringVar(&spec.Actor, "actor", "", `who creates it (kept in its genesis event; default "annal")`)
	return cmd
}

func newLedgersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ledgers",
		Short: "List the ledgers of the data directory",
		Long: `ledgers lists every ledger: name, ID, event count (the genesis event
included), head (its last event's ID), the times of its first and last
events, and the size of its segment files. A ledger that the open refuses
(its segments damaged or short of what was acknowledged, its events not
those its signed checkpoint covers, its checkpoint missing or rolled back:
what the writer's open refuses too) is not listed; it is named on standard
error with why, and the command exits 3 (1 if the refusal is not the
data's: a permission, say) once the others are listed.

JSON and NDJSON objects have the fields name, id, genesis, description,
actor, created, count, head, first, last and bytes.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			db, _, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			code := warnUnavailable(cmd.ErrOrStderr(), db)
			if err := writeLedgers(cmd.OutOrStdout(), format, db.Ledgers()); err != nil {
				return err
			}
			if code != 0 {
				return silentExit(code)
			}
			return nil
		},
	}
}

// warnUnavailable names on w the ledgers that the open refused, and
// returns the exit code a command that lists every ledger ends with: 0 if
// none, 3 if one failed verification (unavailableCode), 1 otherwise.
func warnUnavailable(w io.Writer, db *engine.DB) int {
	bad := db.Unavailable()
	code := 0
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		fmt.Fprintf(w, "annal: ledger %s is unavailable: %s\n", safeName(name), errorText(bad[name]))
		if c := unavailableCode(bad[name]); c > code {
			code = c
		}
	}
	return code
}

// ledgerJSON is a ledger in JSON output.
type ledgerJSON struct {
	Name        string   `json:"name"`
	ID          string   `json:"id"`
	Genesis     string   `json:"genesis"`
	Description string   `json:"description"`
	Actor       string   `json:"actor"`
	Created     jsonTime `json:"created"`
	Count       uint64   `json:"count"`
	Head        string   `json:"head"`
	First       jsonTime `json:"first"`
	Last        jsonTime `json:"last"`
	Bytes       int64    `json:"bytes"`
}

func newLedgerJSON(l *engine.LedgerInfo) ledgerJSON {
	return ledgerJSON{Name: l.Name, ID: l.ID.String(), Genesis: l.Genesis.String(), Description: l.Description,
		Actor: l.Actor, Created: jsonTime(l.Created), Count: l.Count, Head: l.Head.String(),
		First: jsonTime(l.First), Last: jsonTime(l.Last), Bytes: l.Bytes}
}

func writeLedgers(w io.Writer, format string, ls []engine.LedgerInfo) error {
	switch format {
	case formatTable:
		tw := newTable(w)
		fmt.Fprintln(tw, "NAME\tID\tCOUNT\tHEAD\tFIRST\tLAST\tBYTES")
		for _, l := range ls {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", safeName(l.Name), l.ID, l.Count, l.Head, tableTime(l.First), tableTime(l.Last), humanBytes(l.Bytes))
		}
		return tw.Flush()
	case formatJSON:
		out := make([]ledgerJSON, 0, len(ls))
		for i := range ls {
			out = append(out, newLedgerJSON(&ls[i]))
		}
		return writeJSON(w, format, out)
	}
	for i := range ls {
		if err := writeJSON(w, format, newLedgerJSON(&ls[i])); err != nil {
			return err
		}
	}
	return nil
}

func newStatsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stats [NAME]",
		Short: "Show per-ledger statistics and totals",
		Long: `stats shows, for one ledger (NAME, or its ID) or for every ledger and their
total: the event count, head, times of the first and last events, the size
and number of its segment files, and the rate: the count divided by the time
from the first to the last event, per second, minute, hour or day, whichever
is the largest unit the span covers (a 7-second ledger shows events a
second, never a day's worth extrapolated from seconds); "-" for a span of
zero. Then the size of the index (DIR/index, all ledgers together: the
index is one store) in bytes of its files. A ledger that the open refuses
is named on standard error with why, and the command exits 3 (1 if the
refusal is not the data's), as ledgers does.

JSON and NDJSON objects have the fields name, id, count, head, first, last,
bytes, segments, span_seconds, events_per_second (null for a span of zero)
and events_per_day (null for a span shorter than a day: not extrapolated).
In NDJSON the totals are a last line with "total": true, the number of
ledgers and index_bytes; in JSON the document is {"ledgers": [...],
"total": {...}}.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			db, dir, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			var ls []engine.LedgerInfo
			code := 0 // a ledger refused: 1 or 3, once the others are shown
			if len(args) == 1 {
				info, err := db.Ledger(args[0])
				if err != nil {
					return ledgerError(dir, args[0], err)
				}
				ls = append(ls, info)
			} else {
				code = warnUnavailable(cmd.ErrOrStderr(), db)
				ls = db.Ledgers()
			}
			rows := make([]statsRow, 0, len(ls)+1)
			total := statsRow{Total: true}
			for i := range ls {
				r := newStatsRow(dir, &ls[i])
				rows = append(rows, r)
				total.add(&r)
			}
			n := len(rows)
			total.Ledgers = &n
			total.finish()
			if size, err := dirSize(filepath.Join(dir, "index")); err == nil {
				total.IndexBytes = &size
			}
			if err := writeStats(cmd.OutOrStdout(), format, rows, total); err != nil {
				return err
			}
			if code != 0 {
				return silentExit(code)
			}
			return nil
		},
	}
}

// statsRow is one line of 'annal stats'.
type statsRow struct {
	Name         string   `json:"name,omitempty"` // "" for the totals
	ID           string   `json:"id,omitempty"`
	Count        uint64   `json:"count"`
	Head         string   `json:"head,omitempty"`
	First        jsonTime `json:"first"`
	Last         jsonTime `json:"last"`
	Bytes        int64    `json:"bytes"`
	Segments     int      `json:"segments"`
	SpanSeconds  float64  `json:"span_seconds"`
	EventsPerSec *float64 `json:"events_per_second"` // nil for a span of zero
	EventsPerDay *float64 `json:"events_per_day"`    // nil for a span under a day
	Total        bool     `json:"total,omitempty"`
	Ledgers      *int     `json:"ledgers,omitempty"`     // for the totals
	IndexBytes   *int64   `json:"index_bytes,omitempty"` // for the totals
}

func newStatsRow(dir string, l *engine.LedgerInfo) statsRow {
	r := statsRow{Name: l.Name, ID: l.ID.String(), Count: l.Count, Head: l.Head.String(),
		First: jsonTime(l.First), Last: jsonTime(l.Last), Bytes: l.Bytes,
		Segments: countSegments(filepath.Join(dir, "ledgers", l.ID.String()))}
	r.finish()
	return r
}

// countSegments counts the segment files (NNN….seg) of a ledger directory;
// the engine does not report them, so they are counted on disk (the layout
// is engine's package doc). -1 if the directory cannot be read.
func countSegments(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".seg") {
			n++
		}
	}
	return n
}

func (r *statsRow) add(o *statsRow) {
	r.Count += o.Count
	r.Bytes += o.Bytes
	if o.Segments > 0 {
		r.Segments += o.Segments
	}
	if f := time.Time(o.First); !f.IsZero() && (time.Time(r.First).IsZero() || f.Before(time.Time(r.First))) {
		r.First = o.First
	}
	if l := time.Time(o.Last); l.After(time.Time(r.Last)) {
		r.Last = o.Last
	}
}

// finish computes the span and the rates. A rate is given only over a span
// that holds its unit: events a day need a span of a day at least.
func (r *statsRow) finish() {
	span := time.Time(r.Last).Sub(time.Time(r.First))
	r.SpanSeconds = span.Seconds()
	r.EventsPerSec, r.EventsPerDay = nil, nil
	if span <= 0 {
		return
	}
	perSec := float64(r.Count) / span.Seconds()
	r.EventsPerSec = &perSec
	if span >= 24*time.Hour {
		perDay := perSec * 86400
		r.EventsPerDay = &perDay
	}
}

// rateUnits are the units of stats' rate, largest first.
var rateUnits = []struct {
	name string
	d    time.Duration
}{{"day", 24 * time.Hour}, {"h", time.Hour}, {"min", time.Minute}, {"s", time.Second}}

// rate is the table's rate of r: events per the largest unit its span
// covers (per second for a span under a second), or "-" for a span of
// zero.
func (r *statsRow) rate() string {
	if r.EventsPerSec == nil {
		return "-"
	}
	span := time.Duration(r.SpanSeconds * float64(time.Second))
	for _, u := range rateUnits {
		if span >= u.d || u.d == time.Second {
			return fmt.Sprintf("%.1f/%s", *r.EventsPerSec*u.d.Seconds(), u.name)
		}
	}
	return "-"
}

// dirSize returns the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

func writeStats(w io.Writer, format string, rows []statsRow, total statsRow) error {
	switch format {
	case formatTable:
		tw := newTable(w)
		fmt.Fprintln(tw, "NAME\tID\tCOUNT\tFIRST\tLAST\tRATE\tSEGMENTS\tBYTES\tHEAD")
		for _, r := range append(rows, total) {
			name := safeName(r.Name)
			if r.Total {
				name = "TOTAL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", name, orDash(r.ID), r.Count,
				tableTime(time.Time(r.First)), tableTime(time.Time(r.Last)), r.rate(), r.Segments, humanBytes(r.Bytes), orDash(r.Head))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if total.IndexBytes != nil {
			_, err := fmt.Fprintf(w, "index: %s (the index of all ledgers, one store)\n", humanBytes(*total.IndexBytes))
			return err
		}
		return nil
	case formatJSON:
		return writeJSON(w, format, struct {
			Ledgers []statsRow `json:"ledgers"`
			Total   statsRow   `json:"total"`
		}{rows, total})
	}
	for _, r := range append(rows, total) {
		if err := writeJSON(w, format, r); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
