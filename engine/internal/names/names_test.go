package names

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// TestLedgerProblem: the rule refuses what it says it refuses, and a
// derived name may end in its own ledger's ID.
func TestLedgerProblem(t *testing.T) {
	for _, tc := range []struct{ name, own, says string }{
		{"orders", "", ""},
		{"", "", "is empty"},
		{strings.Repeat("n", MaxLen+1), "", "the limit is"},
		{"a\x1bb", "", "control character"},
		{"\xff", "", "not valid UTF-8"},
		{"orders\u202e", "", "bidirectional formatting character"},
		{" orders", "", "begins with white space"},
		{"orders ", "", "ends with white space"},
		{"9E961C04", "", "reads as a ledger ID"},
		{"orders~9e961c04", "", "a form reserved"},
		{"orders~9e961c04", "9e961c04", ""},
	} {
		p := LedgerProblem(tc.name, tc.own)
		if tc.says == "" && p != "" || tc.says != "" && !strings.Contains(p, tc.says) {
			t.Errorf("LedgerProblem(%.20q, %q) = %q, want %q", tc.name, tc.own, p, tc.says)
		}
	}
}

// TestShownProblem: a shown name is refused for what a ledger name is
// refused for, but for the forms of a ledger ID.
func TestShownProblem(t *testing.T) {
	for name, says := range map[string]string{
		"c":               "",
		"9E961C04":        "",
		"orders~9e961c04": "",
		"":                "is empty",
		"a\u200bb":        "bidirectional formatting character",
		"\u00a0c":         "begins with white space",
		"c\u3000":         "ends with white space",
	} {
		if p := ShownProblem(name); says == "" && p != "" || says != "" && !strings.Contains(p, says) {
			t.Errorf("ShownProblem(%q) = %q, want %q", name, p, says)
		}
	}
}

// TestDerived: a derived name keeps what the rule allows of the name it
// replaces, fits MaxLen, and passes the rule as its own ledger's.
func TestDerived(t *testing.T) {
	id := eventid.LedgerID(0x9e961c04)
	for _, tc := range []struct {
		from string
		n    int
		want string
	}{
		{"orders\u202e", 0, "orders~9e961c04"},
		{" \u200b\x1b ", 0, "ledger~9e961c04"},
		{"orders", 2, "orders~2~9e961c04"},
		{strings.Repeat("é", 700), 0, strings.Repeat("é", (MaxLen-9)/2) + "~9e961c04"},
	} {
		got := Derived(tc.from, id, tc.n)
		if got != tc.want {
			t.Errorf("Derived(%.20q, %d) = %.40q, want %.40q", tc.from, tc.n, got, tc.want)
		}
		if p := LedgerProblem(got, id.String()); p != "" || !utf8.ValidString(got) || len(got) > MaxLen {
			t.Errorf("Derived(%.20q, %d) breaks the rule: %s", tc.from, tc.n, p)
		}
	}
}

// TestStoredProblem: a name a ledger may hold is any UTF-8 of 1 to the
// segment format's limit of bytes, control, format and separator
// characters included; Append's rule (Problem) refuses the control
// characters among them.
func TestStoredProblem(t *testing.T) {
	if MaxStoredLen != segment.MaxNameLen {
		t.Fatalf("MaxStoredLen %d, the segment format's limit %d", MaxStoredLen, segment.MaxNameLen)
	}
	for _, tc := range []struct{ name, stored, appended string }{
		{"tab\tname", "", "control character at byte 3"},
		{"nul\x00", "", "control character at byte 3"},
		{"a\x7f", "", "control character at byte 1"},
		{"é\u0085", "", "control character at byte 2"},
		{"\x1b[31mred\r\n", "", "control character at byte 0"},
		{"line\u2028sep\u2029", "", ""},
		{"order\u202e\u200b\ufeff", "", ""},
		{strings.Repeat("k", MaxLen+1), "", "the limit is 1024"},
		{strings.Repeat("k", MaxStoredLen), "", "the limit is 1024"},
		{strings.Repeat("k", MaxStoredLen+1), "is 65536 bytes, the limit is 65535", "the limit is 1024"},
		{"", "is empty", "is empty"},
		{"a\xffb", "not valid UTF-8", "not valid UTF-8"},
	} {
		if p := StoredProblem(tc.name); tc.stored == "" && p != "" || tc.stored != "" && !strings.Contains(p, tc.stored) {
			t.Errorf("StoredProblem(%.20q) = %q, want %q", tc.name, p, tc.stored)
		}
		if p := Problem(tc.name); tc.appended == "" && p != "" || tc.appended != "" && !strings.Contains(p, tc.appended) {
			t.Errorf("Problem(%.20q) = %q, want %q", tc.name, p, tc.appended)
		}
	}
}
