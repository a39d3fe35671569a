// Package names holds the rules of the names annal keeps: what every name
// it makes must be (Problem: an entity, a key, an event name of a new
// event, a ledger name, an idempotency key), what an entity, key or event
// name a ledger already holds must be (StoredProblem: those of an
// imported ledger, which Append's rule does not bind), what a ledger name
// must be besides (LedgerProblem),
// and the name Open gives a ledger whose name breaks the rule or is taken
// (Derived). Where a ledger's name is kept (its NAME file, the metadata)
// and which ledger keeps a name two claim is the engine's.
package names

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/annal-db/annal/eventid"
)

// MaxLen bounds ledger names, entities, keys, event names and idempotency
// keys, in bytes.
const MaxLen = 1024

// MaxStoredLen bounds the entity, key and event names a ledger may hold
// (StoredProblem), in bytes: the segment format's limit
// (segment.MaxNameLen), which is all the Event ID design asks of them.
const MaxStoredLen = 1<<16 - 1

// Problem says what is wrong with a name annal is given to make
// something new (the entity, key and event name of an appended event, a
// ledger name, an idempotency key), or "" if nothing is: it is 1 to
// MaxLen bytes of UTF-8 without a control character (Unicode Cc: C0,
// DEL, C1).
func Problem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxLen:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), MaxLen)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return fmt.Sprintf("%q has a control character at byte %d", s, i)
		case c >= 0x80:
			// Not ASCII: the full check, once.
			if !utf8.ValidString(s) {
				return fmt.Sprintf("%q is not valid UTF-8", s)
			}
			if j := strings.IndexFunc(s, unicode.IsControl); j >= 0 {
				return fmt.Sprintf("%q has a control character at byte %d", s, j)
			}
			return ""
		}
	}
	return ""
}

// StoredProblem says what is wrong with an entity, key or event name that
// a ledger may hold, or "" if nothing is: 1 to MaxStoredLen bytes of
// UTF-8, any characters. It is the rule of Import, which keeps every
// ledger whose Event IDs verify, whoever wrote it: the Event ID design
// checksums a name's bytes and asks nothing else of them, and a ledger of
// the reference implementation may hold a tab, a NUL or U+2028 in a name.
// It is the rule of the reads that name a stream too (a stream head, an
// expected stream), so that every stream a ledger holds can be read.
// Empty is refused: the reads take an empty entity to mean any, so an
// event with an empty name could not be selected by it.
func StoredProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxStoredLen:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), MaxStoredLen)
	case !utf8.ValidString(s):
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	return ""
}

// ShownProblem says what is wrong with a name that is printed in
// listings and typed by operators (a ledger's, a consumer's), or "" if
// nothing is: besides what every name must be (Problem), it must hold no
// invisible or reordering character (a format character, Unicode Cf:
// zero-width spaces and joiners, bidirectional marks, embeddings,
// overrides and isolates, the byte order mark; a bidirectional control;
// a line or paragraph separator), and must not begin or end with white
// space.
func ShownProblem(s string) string {
	if p := Problem(s); p != "" {
		return p
	}
	for i, r := range s {
		if unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Bidi_Control) {
			return fmt.Sprintf("%q has an invisible or bidirectional formatting character U+%04X at byte %d", s, r, i)
		}
	}
	if r, _ := utf8.DecodeRuneInString(s); unicode.IsSpace(r) {
		return fmt.Sprintf("%q begins with white space", s)
	}
	if r, _ := utf8.DecodeLastRuneInString(s); unicode.IsSpace(r) {
		return fmt.Sprintf("%q ends with white space", s)
	}
	return ""
}

// LedgerProblem says what is wrong with a ledger name, or "" if
// nothing is. Besides what every name must be (Problem: 1 to 1024
// bytes of UTF-8, no control character), a ledger name is printed in
// listings and typed by operators (ShownProblem: the first two points),
// and it is what a command takes to mean a ledger, so it must not:
//
//   - hold an invisible or reordering character: a format character
//     (Unicode Cf: zero-width spaces and joiners, bidirectional marks,
//     embeddings, overrides and isolates, the byte order mark), a
//     bidirectional control, or a line or paragraph separator;
//   - begin or end with white space;
//   - read as a ledger ID (8 hex digits, either case, which is what
//     eventid.ParseLedgerID accepts): Ledger, Append and every call that
//     takes a ledger take a name or an ID, and neither may mean two
//     ledgers;
//   - end in "~" and 8 hex digits, unless those are own, the ledger's own
//     ID in lower case: that form is reserved for the names annal derives
//     (Derived), so that they cannot collide. own is "" for a name
//     chosen by CreateLedger or Import.
func LedgerProblem(s, own string) string {
	if p := ShownProblem(s); p != "" {
		return p
	}
	if _, err := eventid.ParseLedgerID(s); err == nil {
		return fmt.Sprintf("%q reads as a ledger ID (8 hex digits); a name cannot be one", s)
	}
	if n := len(s); n > 9 && s[n-9] == '~' {
		if _, err := eventid.ParseLedgerID(s[n-8:]); err == nil && s[n-8:] != own {
			return fmt.Sprintf("%q ends in ~ and 8 hex digits, a form reserved for the names annal derives (NAME~LEDGERID)", s)
		}
	}
	return ""
}

// Derived returns the name Open gives ledger id when the name it found,
// from, breaks the rule or is taken: from without the characters the rule
// refuses, trimmed of white space and cut to fit, then "~" and the ID
// ("orders~9e961c04"); "ledger~9e961c04" if nothing of from is left. The
// ID makes it unique, since no other ledger may have a name that ends in
// it (LedgerProblem); n > 0 (a derived name taken all the same, by a
// ledger that failed recovery and whose name, from an older annal's
// metadata, no rule checked) adds "~n" before the ID.
func Derived(from string, id eventid.LedgerID, n int) string {
	suffix := "~" + id.String()
	if n > 0 {
		suffix = "~" + strconv.Itoa(n) + suffix
	}
	var b strings.Builder
	for i := 0; i < len(from); {
		r, size := utf8.DecodeRuneInString(from[i:])
		i += size
		if r == utf8.RuneError && size <= 1 || unicode.IsControl(r) ||
			unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Bidi_Control) {
			continue
		}
		if b.Len()+size > MaxLen-len(suffix) {
			break
		}
		b.WriteRune(r)
	}
	base := strings.TrimFunc(b.String(), unicode.IsSpace)
	if base == "" {
		base = "ledger"
	}
	return base + suffix
}
