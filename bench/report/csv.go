package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// csvHeader is the header row of WriteCSV, one column per field of Result.
var csvHeader = []string{
	"workload", "params", "store", "round", "value", "unit", "higher",
	"p50_us", "p99_us", "p999_us", "max_rss_bytes", "err",
}

// WriteCSV writes rs as CSV: a header row, then one row per result. Floats
// are written in the shortest form that parses back to the same value, so
// that ReadCSV returns exactly rs.
func WriteCSV(w io.Writer, rs []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range rs {
		row := []string{
			r.Workload, r.Params, r.Store,
			strconv.Itoa(r.Round),
			formatFloat(r.Value),
			r.Unit,
			strconv.FormatBool(r.Higher),
			formatFloat(r.P50), formatFloat(r.P99), formatFloat(r.P999),
			strconv.FormatInt(r.MaxRSS, 10),
			r.Err,
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// formatFloat formats f in the shortest form that parses back exactly.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// ReadCSV reads results written by WriteCSV. The columns are found by the
// names of the header row, so their order does not matter; every column of
// WriteCSV must be there, and other columns are ignored.
func ReadCSV(r io.Reader) ([]Result, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked below, with a clearer message
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("report: CSV has no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("report: reading CSV header: %w", err)
	}
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	for _, name := range csvHeader {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("report: CSV header lacks column %q", name)
		}
	}

	var rs []Result
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("report: reading CSV: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(row) != len(header) {
			return nil, fmt.Errorf("report: CSV line %d: %d fields, want %d", line, len(row), len(header))
		}
		res, err := parseRow(row, col)
		if err != nil {
			return nil, fmt.Errorf("report: CSV line %d: %w", line, err)
		}
		rs = append(rs, res)
	}
}

// parseRow parses one CSV row, whose columns are found through col.
func parseRow(row []string, col map[string]int) (Result, error) {
	get := func(name string) string { return row[col[name]] }
	r := Result{
		Workload: get("workload"),
		Params:   get("params"),
		Store:    get("store"),
		Unit:     get("unit"),
		Err:      get("err"),
	}
	var err error
	if r.Round, err = strconv.Atoi(get("round")); err != nil {
		return r, fmt.Errorf("round: %w", err)
	}
	if r.Higher, err = strconv.ParseBool(get("higher")); err != nil {
		return r, fmt.Errorf("higher: %w", err)
	}
	if r.MaxRSS, err = strconv.ParseInt(get("max_rss_bytes"), 10, 64); err != nil {
		return r, fmt.Errorf("max_rss_bytes: %w", err)
	}
	for _, f := range []struct {
		name string
		dst  *float64
	}{
		{"value", &r.Value}, {"p50_us", &r.P50}, {"p99_us", &r.P99}, {"p999_us", &r.P999},
	} {
		if *f.dst, err = strconv.ParseFloat(get(f.name), 64); err != nil {
			return r, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return r, nil
}
