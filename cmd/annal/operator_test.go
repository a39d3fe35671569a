package main

import (
	"slices"
	"testing"
)

// TestProtectIDArgsLeavesValues: a flag's value, and a positional argument
// of a command that does not take IDs, are never rewritten, though each
// reads as a base64 ID (issue 12, finding 4); the positional IDs of id and
// get are, wherever the flags put them. idargs.txtar runs the same cases
// end to end.
func TestProtectIDArgsLeavesValues(t *testing.T) {
	const v = "-Quarterly_report_2026" // the base64 form of 1bea6df9ab7c7e977ab5d37e650c10c7
	const hex = "1bea6df9ab7c7e977ab5d37e650c10c7"
	const b64 = "--0SL0Dzb3HJCJLsyT_Wk3"
	const b64hex = "0005d5813bf9c44943545b8f9e961c04"
	same := [][]string{
		{"create", "--description", v, "mylog"},
		{"create", "--actor", v, "mylog"},
		{"--dir", v, "create", "mylog"},
		{"create", "--dir", v, "mylog"},
		{"--format", "json", "--dir", v, "ledgers"},
		{"append", "mylog", "--entity", v, "--key", v, "--event", v},
		{"append", "mylog", "--entity", "e", "--key", "k", "--event", "v", "--idempotency-key", v},
		{"append", "mylog", "--data", `"x"`, "--meta", "{}", "--entity", "e", "--key", "k", "--event", v},
		{"append", "mylog", "--expect-head", b64},
		{"scan", "mylog", "--entity", v, "--key", v, "--event", v},
		{"scan", "mylog", "--after", b64, "--from", b64, "--to", v},
		{"tail", "mylog", "--after", b64},
		{"export", "mylog", "-o", v},
		{"export", "mylog", "--after", b64, "--output", v},
		{"import", "--name", v, "file.ndjson"},
		{"import", v},
		{"verify-file", v},
		{"create", "--", v},
		{"id", "--", v},
		{"get", "--", b64},
		// get's and id's own flags keep their values too.
		{"get", "--dir", v, "--format", "json", hex},
		{"id", "--format", "json", hex},
	}
	root := newRootCmd()
	for _, args := range same {
		if got := protectIDArgs(root, args); !slices.Equal(got, args) {
			t.Errorf("annal %q was rewritten to %q", args, got)
		}
	}
	rewritten := []struct{ args, want []string }{
		{[]string{"id", v}, []string{"id", hex}},
		{[]string{"id", b64, v, "--format", "json"}, []string{"id", b64hex, hex, "--format", "json"}},
		{[]string{"--dir", v, "id", "--format", "text", b64}, []string{"--dir", v, "id", "--format", "text", b64hex}},
		{[]string{"get", b64}, []string{"get", b64hex}},
		{[]string{"--format", "json", "get", "--dir", v, b64}, []string{"--format", "json", "get", "--dir", v, b64hex}},
		{[]string{"--dir=" + v, "get", b64}, []string{"--dir=" + v, "get", b64hex}},
	}
	for _, c := range rewritten {
		if got := protectIDArgs(root, c.args); !slices.Equal(got, c.want) {
			t.Errorf("annal %q: got %q, want %q", c.args, got, c.want)
		}
	}
}
