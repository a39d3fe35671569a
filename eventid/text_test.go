package eventid

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// textForms are the four text forms, by name, as the tests format them.
var textForms = []struct {
	name   string
	format func(ID) string
	append func(ID, []byte) []byte
}{
	{"hex", ID.String, ID.AppendHex},
	{"UUID", ID.UUID, ID.AppendUUID},
	{"base64", ID.Base64, ID.AppendBase64},
	{"base32", ID.Base32, ID.AppendBase32},
}

// knownForms were computed independently (Python big integers) from the hex.
var knownForms = []struct {
	hex, uuid, base64, base32 string
}{
	{"00000000000000000000000000000000", "00000000-0000-0000-0000-000000000000",
		"----------------------", "00000000000000000000000000"},
	{"00000000000000000000000000000001", "00000000-0000-0000-0000-000000000001",
		"---------------------0", "00000000000000000000000001"},
	{"ffffffffffffffffffffffffffffffff", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"2zzzzzzzzzzzzzzzzzzzzz", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"},
	{"0005d5813bf9c44943545b8f9e961c04", "0005d581-3bf9-c449-4354-5b8f9e961c04",
		"--0SL0Dzb3HJCJLsyT_Wk3", "000QAR2EZSRH4M6N2VHYF9C704"},
	{"0005d58bcf9cce57e026c6899e961c04", "0005d58b-cf9c-ce57-e026-c6899e961c04",
		"--0SLAntnDKy-alcaT_Wk3", "000QARQKWWSSBY09P6H6F9C704"},
}

func TestTextFormsKnownValues(t *testing.T) {
	for _, k := range knownForms {
		id := MustParse(k.hex)
		for i, want := range []string{k.hex, k.uuid, k.base64, k.base32} {
			f := textForms[i]
			if got := f.format(id); got != want {
				t.Errorf("%s of %s = %q, want %q", f.name, k.hex, got, want)
			}
			if got := string(f.append(id, []byte("x"))); got != "x"+want {
				t.Errorf("Append%s of %s = %q, want %q", f.name, k.hex, got, "x"+want)
			}
			got, err := Parse(want)
			if err != nil || got != id {
				t.Errorf("Parse(%q) = %s, %v; want %s", want, got, err, k.hex)
			}
		}
	}
}

func TestParseCases(t *testing.T) {
	want := MustParse("0005d5813bf9c44943545b8f9e961c04")
	for _, s := range []string{
		"0005D5813BF9C44943545B8F9E961C04",
		"0005d5813BF9c44943545b8F9E961c04",
		"0005D581-3BF9-C449-4354-5B8F9E961C04",
		"000qar2ezsrh4m6n2vhyf9c704",
		"OOOQAR2EZSRH4M6N2VHYF9C7O4", // Crockford: O reads as 0
		"ooOQAR2EZSRH4M6N2VHYF9C7o4",
	} {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	// Crockford: I and L read as 1.
	one := MustParse("00000000000000000000000001")
	for _, s := range []string{"0000000000000000000000000I", "0000000000000000000000000i",
		"0000000000000000000000000L", "0000000000000000000000000l"} {
		if got, err := Parse(s); err != nil || got != one {
			t.Errorf("Parse(%q) = %s, %v; want %s", s, got, err, one)
		}
	}
}

// maxErrorLen bounds the length of a parse error message, whatever the
// input: it echoes at most 40 bytes of input, each at most 4 characters
// once quoted ("\xff"), beside about 130 characters of its own.
const maxErrorLen = 300

func TestParseErrors(t *testing.T) {
	long := strings.Repeat("0", 1<<20)
	for _, tc := range []struct {
		in      string
		is      error
		pos     int
		message string
	}{
		{"0005dg813bf9c44943545b8f9e961c04", ErrCharacter, 5,
			`eventid: invalid character 'g' at position 5 in hex ID "0005dg813bf9c44943545b8f9e961c04"`},
		{"0005d5813bf9c44943545b8f9e961c0-", ErrCharacter, 31,
			`eventid: invalid character '-' at position 31 in hex ID "0005d5813bf9c44943545b8f9e961c0-"`},
		{"0005d5813bf9c44943545b8f9e961cé", ErrCharacter, 30,
			`eventid: invalid character 'é' at position 30 in hex ID "0005d5813bf9c44943545b8f9e961cé"`},
		{"0005d5813bf9c44943545b8f9e961c\xff\xfe", ErrCharacter, 30,
			`eventid: invalid character byte 0xff at position 30 in hex ID "0005d5813bf9c44943545b8f9e961c\xff\xfe"`},
		{"0005d581x3bf9-c449-4354-5b8f9e961c04", ErrCharacter, 8,
			`eventid: invalid character 'x' at position 8 in UUID ID "0005d581x3bf9-c449-4354-5b8f9e961c04" (want '-')`},
		{"0005d581-3bf9-c449-4354-5b8f9e961c0-", ErrCharacter, 35,
			`eventid: invalid character '-' at position 35 in UUID ID "0005d581-3bf9-c449-4354-5b8f9e961c0-"`},
		{"0005d581-3bf9-c449-4354-5B8F9E961CZ4", ErrCharacter, 34, ""},
		{"--0SL0Dzb3HJCJLsyT+Wk3", ErrCharacter, 18,
			`eventid: invalid character '+' at position 18 in base64 ID "--0SL0Dzb3HJCJLsyT+Wk3"`},
		{"3zzzzzzzzzzzzzzzzzzzzz", ErrOverflow, 0,
			`eventid: base64 ID "3zzzzzzzzzzzzzzzzzzzzz" overflows 128 bits: first character '3' is above '2'`},
		{"000QAR2EZSRH4M6N2VHYF9CU04", ErrCharacter, 23,
			`eventid: invalid character 'U' at position 23 in base32 ID "000QAR2EZSRH4M6N2VHYF9CU04"`},
		{"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", ErrOverflow, 0,
			`eventid: base32 ID "8ZZZZZZZZZZZZZZZZZZZZZZZZZ" overflows 128 bits: first character '8' is above '7'`},
		{"z0000000000000000000000000", ErrOverflow, 0, ""},
		{"", ErrLength, -1,
			`eventid: invalid length 0 for an ID "": want 32 (hex), 36 (UUID), 22 (base64) or 26 (base32) characters`},
		{"0005d5813bf9c44943545b8f9e961c0", ErrLength, -1, ""},
		{"0005d5813bf9c44943545b8f9e961c044", ErrLength, -1, ""},
		{long, ErrLength, -1,
			`eventid: invalid length 1048576 for an ID "` + long[:40] + `"...: want 32 (hex), 36 (UUID), 22 (base64) or 26 (base32) characters`},
		{strings.Repeat("é", 30), ErrLength, -1, ""},
		{strings.Repeat("\xff", 1<<20), ErrLength, -1, ""},
		{strings.Repeat("\u2028", 12), ErrCharacter, 0, ""},
	} {
		_, err := Parse(tc.in)
		_, errBytes := ParseBytes([]byte(tc.in))
		name := tc.in[:min(len(tc.in), 50)]
		var pe *ParseError
		if !errors.Is(err, tc.is) || !errors.As(err, &pe) {
			t.Errorf("Parse(%q) error = %v, want %v", name, err, tc.is)
			continue
		}
		if pe.Pos != tc.pos {
			t.Errorf("Parse(%q) error position = %d, want %d", name, pe.Pos, tc.pos)
		}
		if tc.message != "" && err.Error() != tc.message {
			t.Errorf("Parse(%q) error\n got %s\nwant %s", name, err, tc.message)
		}
		if len(err.Error()) > maxErrorLen {
			t.Errorf("Parse(%q) error is %d bytes long", name, len(err.Error()))
		}
		if errBytes == nil || errBytes.Error() != err.Error() {
			t.Errorf("ParseBytes(%q) error = %v, want %v", name, errBytes, err)
		}
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParse of a bad ID did not panic")
		}
	}()
	MustParse("not an ID")
}

func TestLedgerIDText(t *testing.T) {
	l := LedgerID(0x9e961c04)
	if got := l.String(); got != "9e961c04" {
		t.Errorf("String = %q", got)
	}
	if got := string(l.AppendHex([]byte("x"))); got != "x9e961c04" {
		t.Errorf("AppendHex = %q", got)
	}
	if got := LedgerID(0x0000000f).String(); got != "0000000f" {
		t.Errorf("String of 0xf = %q, want 0000000f", got)
	}
	for _, s := range []string{"9e961c04", "9E961C04", "9e961C04"} {
		if got, err := ParseLedgerID(s); err != nil || got != l {
			t.Errorf("ParseLedgerID(%q) = %s, %v", s, got, err)
		}
	}
	for _, tc := range []struct {
		in      string
		is      error
		message string
	}{
		{"9e961c0", ErrLength, `eventid: invalid length 7 for a ledger ID "9e961c0": want 8 hex characters`},
		{"9e961c045", ErrLength, ""},
		{"9e96-c04", ErrCharacter, `eventid: invalid character '-' at position 4 in ledger ID "9e96-c04"`},
	} {
		_, err := ParseLedgerID(tc.in)
		if !errors.Is(err, tc.is) || (tc.message != "" && err.Error() != tc.message) {
			t.Errorf("ParseLedgerID(%q) error = %v, want %v %s", tc.in, err, tc.is, tc.message)
		}
	}
	for v, want := range []uint8{0, 1, 2, 3} {
		if got := LedgerID(0x9e961c04 | v).Version(); got != want {
			t.Errorf("Version of %x = %d, want %d", 0x9e961c04|v, got, want)
		}
	}
}

// randomID returns a random ID; some have long runs of 0x00 or 0xff bytes,
// where digit boundaries and carries would show.
func randomID(r *rand.Rand) ID {
	var id ID
	for i := range id {
		id[i] = byte(r.Uint32())
	}
	switch r.IntN(4) {
	case 0:
		clear(id[r.IntN(Size):])
	case 1:
		for i := r.IntN(Size); i < Size; i++ {
			id[i] = 0xff
		}
	}
	return id
}

// TestTextRoundTrip formats random IDs in every form and case and parses
// them back.
func TestTextRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		id := randomID(r)
		if got, want := id.String(), hex.EncodeToString(id[:]); got != want {
			t.Fatalf("String = %s, want %s", got, want)
		}
		for _, f := range textForms {
			s := f.format(id)
			variants := []string{s}
			if f.name != "base64" {
				variants = append(variants, strings.ToUpper(s), strings.ToLower(s))
			}
			for _, v := range variants {
				got, err := Parse(v)
				if err != nil || got != id {
					t.Fatalf("Parse(%q) = %s, %v; want %s", v, got, err, id)
				}
				if got, err := ParseBytes([]byte(v)); err != nil || got != id {
					t.Fatalf("ParseBytes(%q) = %s, %v; want %s", v, got, err, id)
				}
			}
		}
	}
}

// TestTextOrder checks that every text form sorts as the IDs do.
func TestTextOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		a := randomID(r)
		b := a
		if r.IntN(2) == 0 {
			b = randomID(r)
		} else { // a near neighbour: one byte differs
			b[r.IntN(Size)] = byte(r.Uint32())
		}
		want := a.Compare(b)
		if ref := bytes.Compare(a[:], b[:]); want != ref {
			t.Fatalf("%s.Compare(%s) = %d, bytes.Compare = %d", a, b, want, ref)
		}
		for _, f := range textForms {
			if got := strings.Compare(f.format(a), f.format(b)); got != want {
				t.Fatalf("%s: strings.Compare(%q, %q) = %d, IDs compare %d", f.name, f.format(a), f.format(b), got, want)
			}
		}
		if a.Less(b) != (want < 0) {
			t.Fatalf("%s.Less(%s) = %v, Compare = %d", a, b, a.Less(b), want)
		}
	}
}
