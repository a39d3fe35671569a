package eventid

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that its errors are the
// documented ones, and that an ID it accepts survives every text form.
func FuzzParse(f *testing.F) {
	for _, k := range knownForms {
		f.Add(k.hex)
		f.Add(k.uuid)
		f.Add(k.base64)
		f.Add(k.base32)
	}
	// More seeds, the tricky cases, are in testdata/fuzz/FuzzParse.
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		idb, errb := ParseBytes([]byte(s))
		if id != idb || (err == nil) != (errb == nil) {
			t.Fatalf("Parse(%q) = %s, %v but ParseBytes = %s, %v", s, id, err, idb, errb)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !(errors.Is(err, ErrLength) || errors.Is(err, ErrCharacter) || errors.Is(err, ErrOverflow)) {
				t.Fatalf("Parse(%q) error %v is not a documented one", s, err)
			}
			if pe.Pos >= len(s) || len(err.Error()) > maxErrorLen {
				t.Fatalf("Parse(%q) error %v: bad position or too long", s, err)
			}
			if errb.Error() != err.Error() {
				t.Fatalf("Parse(%q) error %v, ParseBytes error %v", s, err, errb)
			}
			return
		}
		for _, form := range textForms {
			text := form.format(id)
			if got, err := Parse(text); err != nil || got != id {
				t.Fatalf("Parse(%q) = %s; its %s form %q parses as %s, %v", s, id, form.name, text, got, err)
			}
		}
		if again := MustParse(id.String()).String(); again != id.String() {
			t.Fatalf("hex %s re-formats as %s", id, again)
		}
		// Hex, UUID and base32 ignore case; base64 does not.
		if len(s) != base64Len {
			for _, v := range []string{strings.ToUpper(s), strings.ToLower(s)} {
				if got, err := Parse(v); err != nil || got != id {
					t.Fatalf("Parse(%q) = %s but Parse(%q) = %s, %v", s, id, v, got, err)
				}
			}
		}
		// The canonical form of what was given, in its own form, is s up to
		// case (and Crockford's O, I, L for base32).
		if len(s) == hexLen && !strings.EqualFold(s, id.String()) ||
			len(s) == uuidLen && !strings.EqualFold(s, id.UUID()) ||
			len(s) == base64Len && s != id.Base64() {
			t.Fatalf("Parse(%q) = %s, which does not format back to the input", s, id)
		}
	})
}

// FuzzRoundTrip checks that every 16 bytes survive every text form, the
// binary form and JSON, and that the forms sort as the bytes do.
func FuzzRoundTrip(f *testing.F) {
	for _, k := range knownForms {
		id := MustParse(k.hex)
		next := id
		next[Size-1]++
		f.Add(id[:], next[:])
	}
	// More seeds are in testdata/fuzz/FuzzRoundTrip.
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var x, y ID
		copy(x[:], a)
		copy(y[:], b)
		for _, form := range textForms {
			tx, ty := form.format(x), form.format(y)
			got, err := Parse(tx)
			if err != nil || got != x {
				t.Fatalf("%s form %q of %x parses as %s, %v", form.name, tx, x[:], got, err)
			}
			if c := strings.Compare(tx, ty); c != bytes.Compare(x[:], y[:]) || c != x.Compare(y) {
				t.Fatalf("%s forms %q, %q compare %d; the IDs %d", form.name, tx, ty, c, x.Compare(y))
			}
		}
		var bin, js ID
		if err := bin.UnmarshalBinary(x[:]); err != nil || bin != x {
			t.Fatalf("binary round trip of %s: %s, %v", x, bin, err)
		}
		j, _ := x.MarshalJSON()
		if err := js.UnmarshalJSON(j); err != nil || js != x {
			t.Fatalf("JSON round trip of %s: %s, %v", x, js, err)
		}
	})
}
