package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// maxErrLen is the most runes of an error text shown in a table cell.
const maxErrLen = 48

// column is one column of Table and Markdown.
type column struct {
	title string
	right bool                 // right-aligned (numbers)
	cell  func(Summary) string // the cell of a summary
	show  func([]Summary) bool // whether the column is shown; nil: always
}

// columns are the columns of Table and Markdown, in order.
var columns = []column{
	{title: "workload", cell: func(s Summary) string { return s.Workload }},
	{title: "params", cell: func(s Summary) string { return s.Params }},
	{title: "store", cell: func(s Summary) string { return s.Store }},
	{title: "rounds", right: true, cell: roundsCell},
	{title: "median", right: true, cell: medianCell},
	{title: "spread", right: true, cell: func(s Summary) string {
		if !s.OK() {
			return "-"
		}
		return strconv.FormatFloat(s.Spread*100, 'f', 1, 64) + "%"
	}},
	{title: "p50", right: true, cell: func(s Summary) string { return Micros(s.P50) }, show: anyLatency},
	{title: "p99", right: true, cell: func(s Summary) string { return Micros(s.P99) }, show: anyLatency},
	{title: "p99.9", right: true, cell: func(s Summary) string { return Micros(s.P999) }, show: anyLatency},
	{title: "peak RSS (MiB)", right: true, cell: func(s Summary) string { return MiB(s.MaxRSS) }, show: anyRSS},
	{title: "annal vs this", right: true, cell: func(s Summary) string { return RatioString(s.Ratio) }},
	{title: "error", cell: func(s Summary) string {
		if s.Err == NA {
			return ""
		}
		return shorten(s.Err)
	}, show: anyError},
}

// roundsCell is the number of rounds measured, with the number of all the
// rounds when some erred ("4/5").
func roundsCell(s Summary) string {
	if s.Err == NA {
		return "-"
	}
	if s.Failed == 0 {
		return strconv.Itoa(s.Rounds)
	}
	return fmt.Sprintf("%d/%d", s.Rounds, s.Rounds+s.Failed)
}

// medianCell is the median with its unit, or why there is none: "n/a",
// or "error" (its text is in the last column).
func medianCell(s Summary) string {
	switch {
	case s.OK():
		return Human(s.Median, s.Unit)
	case s.Err == NA:
		return NA
	case s.Err != "":
		return "error"
	}
	return "-"
}

// shorten cuts an error text to one line of at most maxErrLen runes.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= maxErrLen {
		return s
	}
	return string([]rune(s)[:maxErrLen-1]) + "…"
}

func anyLatency(ss []Summary) bool {
	for _, s := range ss {
		if s.HasLatency() {
			return true
		}
	}
	return false
}

func anyError(ss []Summary) bool {
	for _, s := range ss {
		if s.Err != "" && s.Err != NA {
			return true
		}
	}
	return false
}

func anyRSS(ss []Summary) bool {
	for _, s := range ss {
		if s.MaxRSS != 0 {
			return true
		}
	}
	return false
}

// cells returns the columns shown for ss and the cells of each summary.
// The workload and params of a summary are left blank when they are those
// of the summary above it, so that each group of stores stands out.
func cells(ss []Summary) ([]column, [][]string) {
	var cols []column
	for _, c := range columns {
		if c.show == nil || c.show(ss) {
			cols = append(cols, c)
		}
	}
	rows := make([][]string, len(ss))
	for i, s := range ss {
		sameGroup := i > 0 && ss[i-1].Workload == s.Workload && ss[i-1].Params == s.Params
		row := make([]string, len(cols))
		for j, c := range cols {
			if sameGroup && j < 2 {
				continue // workload and params
			}
			row[j] = c.cell(s)
		}
		rows[i] = row
	}
	return cols, rows
}

// Table writes ss as a plain-text table aligned with text/tabwriter: the
// workload, its parameters, the store, the rounds measured, the median with
// its unit, the spread ((max-min)/median), the latency percentiles and the
// peak RSS (when any was measured), annal's ratio to the store (> 1: annal
// is better), and the error of a store whose every round failed (when any
// did).
func Table(w io.Writer, ss []Summary) error {
	cols, rows := cells(ss)
	header := make([]string, len(cols))
	for j, c := range cols {
		header[j] = c.title
	}
	rows = append([][]string{header}, rows...)

	// tabwriter aligns every column to the left: pad the numbers to
	// the width of their column first, so that they line up on the right.
	for j, c := range cols {
		if !c.right {
			continue
		}
		width := 0
		for _, row := range rows {
			width = max(width, utf8.RuneCountInString(row[j]))
		}
		for _, row := range rows {
			row[j] = strings.Repeat(" ", width-utf8.RuneCountInString(row[j])) + row[j]
		}
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush() // writes to a strings.Builder, which does not fail

	// Empty cells at the ends of rows leave trailing spaces: drop them.
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \n")
		if strings.HasSuffix(l, "\n") {
			lines[i] += "\n"
		}
	}
	_, err := io.WriteString(w, strings.Join(lines, ""))
	return err
}

// Markdown writes ss as a GitHub markdown table with the columns of Table.
func Markdown(w io.Writer, ss []Summary) error {
	cols, rows := cells(ss)
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cols {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString("\n|")
	for _, c := range cols {
		if c.right {
			b.WriteString(" ---: |")
		} else {
			b.WriteString(" --- |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("|")
		for _, cell := range row {
			b.WriteString(" " + escapeMarkdown(cell) + " |")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// escapeMarkdown keeps a cell's text from breaking a markdown table row.
var escapeMarkdown = strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace
