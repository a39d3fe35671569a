package main

import (
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

func TestParseRelative(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"-1h", -time.Hour},
		{"-30m", -30 * time.Minute},
		{"-7d", -7 * 24 * time.Hour},
		{"+2w", 14 * 24 * time.Hour},
		{"-1h30m", -90 * time.Minute},
		{"-1.5d", -36 * time.Hour},
		{"-250ms", -250 * time.Millisecond},
		{"-10s", -10 * time.Second},
		{"+0s", 0},
		{"-1d2h3m4s5ms", -(26*time.Hour + 3*time.Minute + 4*time.Second + 5*time.Millisecond)},
	} {
		got, err := parseRelative(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseRelative(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "-", "1h", "h", "-h", "-1", "-1x", "-1H", "-1y", "-.5h", "-1.h", "-1..5h", "-1h-2m", "- 1h", "-1h ", "-99999999999w", "--1h"} {
		if d, err := parseRelative(in); err == nil {
			t.Errorf("parseRelative(%q) = %v, want an error", in, d)
		}
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	id := eventid.MustParse("0005d5813bf9c44943545b8f9e961c04")
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"now", now},
		{"-1h", now.Add(-time.Hour)},
		{"+30m", now.Add(30 * time.Minute)},
		{"-7d", now.AddDate(0, 0, -7)},
		{"2024-04-30T10:00:00Z", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2024-04-30T12:00:00.123456+02:00", time.Date(2024, 4, 30, 10, 0, 0, 123456000, time.UTC)},
		{"2024-04-30", time.Date(2024, 4, 30, 0, 0, 0, 0, time.UTC)},
		{id.String(), id.Time()},
		{id.UUID(), id.Time()},
		{id.Base64(), id.Time()}, // starts with "--": not a relative time
		{id.Base32(), id.Time()},
		// Relative times without a sign (that long
		// ago), a date and time with a space, Unix seconds.
		{"1h", now.Add(-time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"2d", now.AddDate(0, 0, -2)},
		{"1h30m", now.Add(-90 * time.Minute)},
		{"0s", now},
		{"2024-04-30 10:00:00", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2026-11-23 11:18:20", time.Date(2026, 11, 23, 11, 18, 20, 0, time.UTC)},
		{"2024-04-30 10:00:00.25", time.Date(2024, 4, 30, 10, 0, 0, 250000000, time.UTC)},
		{"2024-04-30 12:00:00+02:00", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2024-04-30 10:00:00Z", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2024-04-30T10:00:00", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2024-04-30 10:00", time.Date(2024, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"1714564800", time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)},
		{"1714564800.250", time.Date(2024, 5, 1, 12, 0, 0, 250000000, time.UTC)},
		{"0", time.Unix(0, 0)},
	} {
		got, err := parseTime(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "yesterday", "2024-13-01", "2024-04-30 25:00:00", "-1y", "1y", "12:00", "0005d5813bf9c44943545b8f9e961c0",
		"1714564800000", "1714564800.", ".5", "1714564800.x", "1h ago", "1 h"} {
		if got, err := parseTime(in, now); err == nil {
			t.Errorf("parseTime(%q) = %v, want an error", in, got)
		} else if in == "-1y" && !strings.Contains(err.Error(), `unknown unit "y"`) {
			t.Errorf("parseTime(%q): %v does not say what is wrong", in, err)
		} else if in == "1714564800000" && !strings.Contains(err.Error(), "milliseconds as a fraction") {
			t.Errorf("parseTime(%q): %v does not say how to write milliseconds", in, err)
		}
	}
}
