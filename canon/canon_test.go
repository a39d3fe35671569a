package canon

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// canonical is one input and the canonical bytes it must give.
type canonical struct {
	in, want string
}

// rejected is one input and the error it must give.
type rejected struct {
	in     string
	kind   error
	offset int64
}

// checkCanonical canonicalizes each input, compares with want, and checks
// that the output is stable: canonicalizing it again changes nothing.
func checkCanonical(t *testing.T, cases []canonical) {
	t.Helper()
	for _, tc := range cases {
		got, err := Append(nil, []byte(tc.in))
		if err != nil {
			t.Errorf("Append(%q): unexpected error %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Append(%q)\n got %s\nwant %s", tc.in, got, tc.want)
			continue
		}
		again, err := Append(nil, got)
		if err != nil || !bytes.Equal(again, got) {
			t.Errorf("Append(%q) is not stable: %s -> %s, %v", tc.in, got, again, err)
		}
	}
}

// checkError checks that err is an *Error wrapping kind at offset.
func checkError(t *testing.T, what string, err, kind error, offset int64) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v at offset %d", what, kind, offset)
		return
	}
	if !errors.Is(err, kind) {
		t.Errorf("%s: error %v, want kind %v", what, err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s: error %v (%T) is not a *canon.Error", what, err, err)
		return
	}
	if e.Offset != offset {
		t.Errorf("%s: error %v at offset %d, want offset %d", what, err, e.Offset, offset)
	}
	if want := fmt.Sprintf(" at offset %d", e.Offset); !strings.HasPrefix(err.Error(), "canon: ") || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("%s: error text %q should be \"canon: <problem>%s\"", what, err, want)
	}
}

func checkRejected(t *testing.T, cases []rejected) {
	t.Helper()
	for _, tc := range cases {
		got, err := Append(nil, []byte(tc.in))
		checkError(t, fmt.Sprintf("Append(%q)", tc.in), err, tc.kind, tc.offset)
		if err == nil {
			t.Errorf("Append(%q) = %s", tc.in, got)
		}
		checkError(t, fmt.Sprintf("Valid(%q)", tc.in), Valid([]byte(tc.in)), tc.kind, tc.offset)
	}
}

func TestCanonicalForm(t *testing.T) {
	checkCanonical(t, []canonical{
		// Whitespace around and between tokens goes; only space, tab, LF, CR.
		{" \t\r\n{ \"a\" :\t[ 1 ,\n2 ] , \"b\" : { } }\r\n ", `{"a":[1,2],"b":{}}`},
		{`[]`, `[]`},
		{`[ ]`, `[]`},
		{`{ }`, `{}`},
		{`true`, `true`},
		{` false `, `false`},
		{`null`, `null`},
		{`[true,false,null]`, `[true,false,null]`},
		{`""`, `""`},
		// Arrays keep their order; objects inside them are sorted.
		{`[3,1,2,{"b":1,"a":2},[{"d":0,"c":0}]]`, `[3,1,2,{"a":2,"b":1},[{"c":0,"d":0}]]`},
		{`[[[[]]]]`, `[[[[]]]]`},
		// The worked example of the vectors README.
		{`{"name":"preview","description":"Show and Tell."}`, `{"description":"Show and Tell.","name":"preview"}`},
		{`{"tenantId":"Evently Examples","created":"2022-01-14T02:05:17.252Z"}`, `{"created":"2022-01-14T02:05:17.252Z","tenantId":"Evently Examples"}`},
		// Nested objects are sorted at every level.
		{`{"z":{"y":{"x":1,"w":2},"v":3},"u":[{"t":1,"s":2}]}`, `{"u":[{"s":2,"t":1}],"z":{"v":3,"y":{"w":2,"x":1}}}`},
	})
}

func TestStrings(t *testing.T) {
	checkCanonical(t, []canonical{
		// Only '"', '\' and control characters are escaped.
		{`"a\"b\\c"`, `"a\"b\\c"`},
		{`"\/ / < > & </script>"`, `"/ / < > & </script>"`},
		{`"\u003c\u003E\u0026\u002F"`, `"<>&/"`},
		{`"\u0041\u00e9\u4e2d"`, `"Aé中"`},
		// Control characters: five by name, the rest \u00xx in lower case.
		{`"\u0000\u0001\u0007\u0008\u0009\u000A\u000b\u000C\u000d\u000e\u001F"`, `"\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f"`},
		{`"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		// U+007F, U+2028, U+2029 and non-ASCII are written raw.
		{`"\u007f\u2028\u2029"`, "\"\x7f\u2028\u2029\""},
		{"\"\x7f\u2028\u2029\"", "\"\x7f\u2028\u2029\""},
		{`"\uFFFF\uffFE\ufeff"`, "\"\uffff\ufffe\ufeff\""},
		// Surrogate pairs in either case decode to the character.
		{`"\ud83d\udcd2 \uD83D\uDCD2 📒"`, `"📒 📒 📒"`},
		{`"\ud800\udc00\udbff\udfff"`, "\"\U00010000\U0010ffff\""},
		{`"Evently Examples⑆preview 刅 🤾"`, `"Evently Examples⑆preview 刅 🤾"`},
		// Long plain runs (the eight-bytes-at-a-time path) and its edges.
		{`"abcdefghijklmnopqrstuvwxyz0123456789 ~!@#$%^&*()_+"`, `"abcdefghijklmnopqrstuvwxyz0123456789 ~!@#$%^&*()_+"`},
		{`"abcdefg\"abcdefg\\abcdefgé"`, `"abcdefg\"abcdefg\\abcdefgé"`},
		{`"abcdefgh\u0001bcdefgh"`, `"abcdefgh\u0001bcdefgh"`},
	})
}

func TestNumbers(t *testing.T) {
	checkCanonical(t, []canonical{
		// Zero, of either sign and any form, is 0.
		{`0`, `0`},
		{`-0`, `0`},
		{`0e0`, `0`},
		{`-0.0`, `0`},
		{`0.000e-5`, `0`},
		{`-0E+999999999999999999999`, `0`},
		// Integers.
		{`1`, `1`},
		{`-1`, `-1`},
		{`123456789012345`, `123456789012345`},
		{`-123456789012345`, `-123456789012345`},
		{`1234567890123456`, `1234567890123456`},
		{`9007199254740992`, `9007199254740992`}, // 2^53
		{`-9007199254740992`, `-9007199254740992`},
		{`9007199254740991`, `9007199254740991`},
		{`9007199254740994`, `9007199254740994`}, // above 2^53, even: exact
		{`9999999999999998`, `9999999999999998`},
		{`1642126223883863`, `1642126223883863`}, // microseconds since the epoch
		{`4294967295`, `4294967295`},
		{`123456789012345680000`, `123456789012345680000`},
		// Trailing zeros, points and exponents go.
		{`1.50`, `1.5`},
		{`1.0`, `1`},
		{`10e-1`, `1`},
		{`0.5e1`, `5`},
		{`0.1e1`, `1`},
		{`1e0`, `1`},
		{`1E2`, `100`},
		{`1E+02`, `100`},
		{`1e-02`, `0.01`},
		{`-1.5E-10`, `-1.5e-10`},
		{`2.5`, `2.5`},
		{`0.1`, `0.1`},
		{`0.30000000000000004`, `0.30000000000000004`},
		// Up to 21 integer digits without exponent; from 1e21 with one.
		{`1e20`, `100000000000000000000`},
		{`100000000000000000000`, `100000000000000000000`},
		{`1e21`, `1e+21`},
		{`1000000000000000000000`, `1e+21`},
		{`1.5e21`, `1.5e+21`},
		{`123456789012345.6e6`, `123456789012345600000`},
		{`1e23`, `1e+23`},
		{`100000000000000000000000`, `1e+23`},
		{`1e100`, `1e+100`},
		{`1.5e300`, `1.5e+300`},
		{`1.7976931348623157e308`, `1.7976931348623157e+308`},
		{`-1.7976931348623157E+308`, `-1.7976931348623157e+308`},
		// Down to 1e-6 without exponent; from 1e-7 with one.
		{`0.000001`, `0.000001`},
		{`1e-6`, `0.000001`},
		{`0.000001234`, `0.000001234`},
		{`1.2345e-5`, `0.000012345`},
		{`1e-7`, `1e-7`},
		{`1E-7`, `1e-7`},
		{`0.0000001`, `1e-7`},
		{`0.0000001234`, `1.234e-7`},
		{`1.5e-7`, `1.5e-7`},
		{`123e-20`, `1.23e-18`},
		{`1e-300`, `1e-300`},
		{`1e-301`, `1e-301`},
		{`2.2250738585072014e-308`, `2.2250738585072014e-308`}, // smallest normal
		{`1e-310`, `1e-310`},                                   // subnormal
		{`5e-324`, `5e-324`},                                   // smallest subnormal
		{`-5E-324`, `-5e-324`},
		{`[1,-2.5,3e3]`, `[1,-2.5,3000]`},
	})
	checkRejected(t, []rejected{
		{`1e400`, ErrNumberOverflow, 0},
		{`-1e400`, ErrNumberOverflow, 0},
		{`[1,-1e400]`, ErrNumberOverflow, 3},
		{`1.7976931348623159e308`, ErrNumberOverflow, 0},
		{`1e99999999999999999999`, ErrNumberOverflow, 0},
		{`12345678901234567890`, ErrNumberPrecision, 0},
		{`18446744073709551616`, ErrNumberPrecision, 0},
		{`9007199254740993`, ErrNumberPrecision, 0},
		{`-9007199254740993`, ErrNumberPrecision, 0},
		{`9007199254740995`, ErrNumberPrecision, 0},
		{`9999999999999999`, ErrNumberPrecision, 0},
		{`123456789012345678`, ErrNumberPrecision, 0},
		{`{"a":0.1000000000000000055511151231257827}`, ErrNumberPrecision, 5},
		{`0.10000000000000001`, ErrNumberPrecision, 0},
		{`4.9406564584124654e-324`, ErrNumberPrecision, 0}, // is 5e-324
		{`3e-324`, ErrNumberPrecision, 0},                  // rounds up to 5e-324
		{`2e-324`, ErrNumberPrecision, 0},                  // rounds to 0
		{`1e-400`, ErrNumberPrecision, 0},
		{`-1e-99999999999999999999`, ErrNumberPrecision, 0},
		{`01`, ErrSyntax, 1},
		{`-01`, ErrSyntax, 2},
		{`00`, ErrSyntax, 1},
		{`1.`, ErrSyntax, 2},
		{`1.e5`, ErrSyntax, 2},
		{`.5`, ErrSyntax, 0},
		{`-`, ErrSyntax, 1},
		{`-a`, ErrSyntax, 1},
		{`+1`, ErrSyntax, 0},
		{`1e`, ErrSyntax, 2},
		{`1e+`, ErrSyntax, 3},
		{`1E-x`, ErrSyntax, 3},
		{`NaN`, ErrSyntax, 0},
		{`Infinity`, ErrSyntax, 0},
		{`-Infinity`, ErrSyntax, 1},
		{`0x10`, ErrTrailingData, 1},
		{`1_000`, ErrTrailingData, 1},
	})
}

func TestKeyOrder(t *testing.T) {
	checkCanonical(t, []canonical{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"aa":1,"a":2,"":3}`, `{"":3,"a":2,"aa":1}`},
		{`{"a":1,"_":2,"B":3}`, `{"B":3,"_":2,"a":1}`},
		{`{"é":1,"z":2,"e":3}`, `{"e":3,"z":2,"é":1}`},
		// Array indices first, in numeric order, then the other keys.
		{`{"10":1,"9":2,"a":3,"0":4}`, `{"0":4,"9":2,"10":1,"a":3}`},
		{`{"b":1,"4294967295":2,"4294967294":3,"a":4}`, `{"4294967294":3,"4294967295":2,"a":4,"b":1}`},
		{`{"01":1,"1":2,"-1":3,"1.0":4,"0":5}`, `{"0":5,"1":2,"-1":3,"01":1,"1.0":4}`},
		{`{"99999999999":1,"4294967294":2,"5":3}`, `{"5":3,"4294967294":2,"99999999999":1}`},
		{`{" 1":1,"1 ":2,"1":3,"1e0":4}`, `{"1":3," 1":1,"1 ":2,"1e0":4}`},
		// UTF-16 order: U+10000 and up (surrogate pairs) before U+E000..U+FFFF.
		{`{"～":1,"📒":2}`, `{"📒":2,"～":1}`},
		{`{"\uff5e":1,"\ud83d\udcd2":2}`, `{"📒":2,"～":1}`},
		{`{"\ue000":1,"\ud800\udc00":2,"\ud7ff":3,"\uffff":4,"\udbff\udfff":5}`, "{\"\ud7ff\":3,\"\U00010000\":2,\"\U0010ffff\":5,\"\ue000\":1,\"\uffff\":4}"},
		{`{"a～":1,"a📒":2,"a中":3,"a":4}`, `{"a":4,"a中":3,"a📒":2,"a～":1}`},
		{`{"😀":1,"📒":2,"🤾":3}`, `{"📒":2,"😀":1,"🤾":3}`},
		{`{"刅":1,"⑆":2,"é":3,"ÿ":4,"Ā":5}`, `{"é":3,"ÿ":4,"Ā":5,"⑆":2,"刅":1}`},
		// Keys are compared unescaped.
		{`{"a\n":1,"a":2,"a\u0000":3,"a\"":4,"a\\":5}`, `{"a":2,"a\u0000":3,"a\n":1,"a\"":4,"a\\":5}`},
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"\u0031":1,"0":2}`, `{"0":2,"1":1}`},
		// Already in order: nothing moves.
		{`{"0":1,"1":2,"a":3,"b":{"c":4,"d":5}}`, `{"0":1,"1":2,"a":3,"b":{"c":4,"d":5}}`},
		// More keys than the insertion sort handles.
		{`{"t":20,"s":19,"r":18,"q":17,"p":16,"o":15,"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1,"3":0,"20":0,"100":0}`,
			`{"3":0,"20":0,"100":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20}`},
		// Sorting moves nested values intact.
		{`{"b":{"y":[1,{"q":1,"p":2}],"x":"s"},"a":[{"n":1,"m":2}]}`, `{"a":[{"m":2,"n":1}],"b":{"x":"s","y":[1,{"p":2,"q":1}]}}`},
	})
}

// TestKeyOrderRandom sorts random objects whose keys are made of characters
// on both sides of every boundary that matters (ASCII, U+D7FF, U+E000,
// U+FFFF, U+10000, digits for array indices), some long enough to cross the
// 8-byte prefix canon compares first, and checks the order against a
// reference written directly from the definition with unicode/utf16.
func TestKeyOrderRandom(t *testing.T) {
	alphabet := []rune{'\x00', '\x01', '0', '1', '9', 'a', 'b', '\x7f', 0x80, 'é', 0x7ff, 0x800, 0xd7ff, 0xe000, 0xefff, 0xf000, 0xff5e, 0xffff, 0x10000, 0x1f4d2, 0x10ffff}
	isIndex := func(k string) (uint64, bool) {
		v, err := strconv.ParseUint(k, 10, 64)
		return v, err == nil && strconv.FormatUint(v, 10) == k && v <= 4294967294
	}
	reference := func(a, b string) int {
		va, ia := isIndex(a)
		vb, ib := isIndex(b)
		switch {
		case ia && ib:
			return cmp.Compare(va, vb)
		case ia:
			return -1
		case ib:
			return 1
		}
		return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
	}
	rnd := rand.New(rand.NewSource(1))
	for round := range 2000 {
		seen := map[string]bool{}
		var keys []string
		for range 1 + rnd.Intn(30) {
			var k []rune
			for range rnd.Intn(12) {
				k = append(k, alphabet[rnd.Intn(len(alphabet))])
			}
			if !seen[string(k)] {
				seen[string(k)] = true
				keys = append(keys, string(k))
			}
		}
		var in []byte
		in = append(in, '{')
		for j, k := range keys {
			if j > 0 {
				in = append(in, ',')
			}
			in = AppendString(in, k)
			in = append(in, ":0"...)
		}
		in = append(in, '}')
		out, err := Append(nil, in)
		if err != nil {
			t.Fatalf("round %d: Append(%q): %v", round, in, err)
		}
		var got []string
		if err := Members(out, func(name string, _ []byte) error { got = append(got, name); return nil }); err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, reference)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: keys %q\n sorted as %q\n want      %q", round, keys, got, want)
		}
	}
}

func TestRejections(t *testing.T) {
	checkRejected(t, []rejected{
		// Syntax, with the offset of what was unexpected.
		{``, ErrSyntax, 0},
		{"  \t", ErrSyntax, 3},
		{`nul`, ErrSyntax, 3},
		{`nulL`, ErrSyntax, 3},
		{`True`, ErrSyntax, 0},
		{`[1,]`, ErrSyntax, 3},
		{`[1 2]`, ErrSyntax, 3},
		{`[1`, ErrSyntax, 2},
		{`[`, ErrSyntax, 1},
		{`]`, ErrSyntax, 0},
		{`{,}`, ErrSyntax, 1},
		{`{"a"}`, ErrSyntax, 4},
		{`{"a":}`, ErrSyntax, 5},
		{`{"a":1,}`, ErrSyntax, 7},
		{`{"a":1 "b":2}`, ErrSyntax, 7},
		{`{a:1}`, ErrSyntax, 1},
		{`{'a':1}`, ErrSyntax, 1},
		{`{"a":1`, ErrSyntax, 6},
		{`"abc`, ErrSyntax, 4},
		{`"\x"`, ErrSyntax, 2},
		{`"\U0041"`, ErrSyntax, 2},
		{`"\u12G4"`, ErrSyntax, 5},
		{`"\u12"`, ErrSyntax, 5},
		{`"\`, ErrSyntax, 2},
		{"[1,\f2]", ErrSyntax, 3},          // form feed is not JSON whitespace
		{"\u00a01", ErrSyntax, 0},          // nor is U+00A0
		{"\xef\xbb\xbf{}", ErrSyntax, 0},   // a byte order mark
		{"/* c */ 1", ErrSyntax, 0},        // comments
		{"\"a\x01\"", ErrSyntax, 2},        // raw control characters in strings
		{"\"\t\"", ErrSyntax, 1},           //
		{"\"\n\"", ErrSyntax, 1},           //
		{"{\"a\x1f\":1}", ErrSyntax, 3},    //
		{"\"abcdefgh\x00\"", ErrSyntax, 9}, //
		// Invalid UTF-8, in strings or anywhere.
		{"\"\xff\"", ErrInvalidUTF8, 1},
		{"\"abc\xc3\"", ErrInvalidUTF8, 4},          // truncated sequence
		{"\"\xc0\xaf\"", ErrInvalidUTF8, 1},         // overlong '/'
		{"\"\xed\xa0\x80\"", ErrInvalidUTF8, 1},     // encoded surrogate
		{"\"\xf4\x90\x80\x80\"", ErrInvalidUTF8, 1}, // above U+10FFFF
		{"\"abcdefgh\x80\"", ErrInvalidUTF8, 9},
		{"{\"k\xfe\":1}", ErrInvalidUTF8, 3},
		{"[\xff]", ErrInvalidUTF8, 1},
		{"\xff", ErrInvalidUTF8, 0},
		{"1 \xff", ErrInvalidUTF8, 2},
		// Duplicate keys, at the second occurrence.
		{`{"a":1,"a":2}`, ErrDuplicateKey, 7},
		{`{"a":1,"\u0061":2}`, ErrDuplicateKey, 7},
		{`{"0":1,"0":2}`, ErrDuplicateKey, 7},
		{`{"b":1,"a":1,"b":2}`, ErrDuplicateKey, 13},
		{`{"x":{"a":1,"a":2}}`, ErrDuplicateKey, 12},
		{`[{},{"a":[],"b":{},"a":null}]`, ErrDuplicateKey, 19},
		{`{"c":1,"b":2,"a":3,"b":4,"c":5}`, ErrDuplicateKey, 19},
		{`{"c":1,"b":2,"a":3,"c":4,"b":5}`, ErrDuplicateKey, 19},
		{`{"📒":1,"\ud83d\udcd2":2}`, ErrDuplicateKey, 10},
		// Lone surrogates, at the escape.
		{`"\ud800"`, ErrLoneSurrogate, 1},
		{`"\udc00"`, ErrLoneSurrogate, 1},
		{`"\uDFFF"`, ErrLoneSurrogate, 1},
		{`"\ud800\u0041"`, ErrLoneSurrogate, 1},
		{`"\ud83d\ud83d"`, ErrLoneSurrogate, 1},
		{`"\ud83dx"`, ErrLoneSurrogate, 1},
		{`"a\ud83d"`, ErrLoneSurrogate, 2},
		{`"\udcd2\ud83d"`, ErrLoneSurrogate, 1},
		{`{"\ud800":1}`, ErrLoneSurrogate, 2},
		{`"\ud800\u00"`, ErrSyntax, 11},
		// Trailing data.
		{`{} {}`, ErrTrailingData, 3},
		{`1 2`, ErrTrailingData, 2},
		{`"a""b"`, ErrTrailingData, 3},
		{`[1]]`, ErrTrailingData, 3},
		{`nullx`, ErrTrailingData, 4},
		{"{}\x00", ErrTrailingData, 2},
		{"0\n,", ErrTrailingData, 2},
	})
}

func TestDepth(t *testing.T) {
	nest := func(open, close string, depth int) string {
		return strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth)
	}
	objects := func(depth int) string {
		return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	}
	mixed := func(depth int) string {
		var b strings.Builder
		for j := range depth {
			if j%2 == 0 {
				b.WriteString(`[`)
			} else {
				b.WriteString(`{"k":`)
			}
		}
		b.WriteString("0")
		for j := depth - 1; j >= 0; j-- {
			if j%2 == 0 {
				b.WriteString(`]`)
			} else {
				b.WriteString(`}`)
			}
		}
		return b.String()
	}
	for _, tc := range []struct {
		name string
		text func(int) string
		step int // bytes each level opens with
	}{
		{"arrays", func(d int) string { return nest("[", "]", d) }, 1},
		{"objects", objects, 5},
	} {
		in := tc.text(MaxDepth)
		got, err := Append(nil, []byte(in))
		if err != nil || string(got) != in {
			t.Errorf("%s nested MaxDepth deep: %v", tc.name, err)
		}
		_, err = Append(nil, []byte(tc.text(MaxDepth+1)))
		checkError(t, tc.name+" nested MaxDepth+1 deep", err, ErrTooDeep, int64(MaxDepth*tc.step))
	}
	in := mixed(MaxDepth)
	if got, err := Append(nil, []byte(in)); err != nil || string(got) != in {
		t.Errorf("arrays and objects nested MaxDepth deep: %v", err)
	}
	if _, err := Append(nil, []byte(mixed(MaxDepth+1))); !errors.Is(err, ErrTooDeep) {
		t.Errorf("arrays and objects nested MaxDepth+1 deep: %v, want ErrTooDeep", err)
	}
	// Depth is nesting, not the number of containers.
	wide := "[" + strings.Repeat("[[]],", 2*MaxDepth) + "[]]"
	if _, err := Append(nil, []byte(wide)); err != nil {
		t.Errorf("many shallow arrays: %v", err)
	}
	// Far too deep fails at the first level too many, without trouble.
	_, err := Append(nil, []byte(strings.Repeat("[", 1<<20)))
	checkError(t, "a million '['", err, ErrTooDeep, MaxDepth)
}

func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix:")
	for _, tc := range []struct {
		in   string
		want string // "" when in is rejected
	}{
		{`{"b":[1,2],"a":"x"}`, `prefix:{"a":"x","b":[1,2]}`},
		{`{"b":[1,2],"a":"x"`, ``},
		{`{"b":[1,2],"a":"x","b":3}`, ``},
		{`["long string to write before failing", 1e400]`, ``},
	} {
		for _, c := range []struct {
			name   string
			append func(dst, src []byte) ([]byte, error)
		}{
			{"Append", Append},
			{"AppendObject", AppendObject},
			{"Canonicalizer.Append", new(Canonicalizer).Append},
		} {
			dst := append(make([]byte, 0, 4), prefix...)
			got, err := c.append(dst, []byte(tc.in))
			if tc.want == "" {
				if err == nil || string(got) != string(prefix) {
					t.Errorf("%s(%q, %q) = %q, %v; want the prefix back and an error", c.name, prefix, tc.in, got, err)
				}
				continue
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("%s(%q, %q) = %q, %v; want %q", c.name, prefix, tc.in, got, err, tc.want)
			}
		}
	}
}

func TestAppendObject(t *testing.T) {
	got, err := AppendObject(nil, []byte(` {"b":1,"a":2} `))
	if err != nil || string(got) != `{"a":2,"b":1}` {
		t.Errorf("AppendObject(object) = %s, %v", got, err)
	}
	for _, tc := range []rejected{
		{`[1]`, ErrNotObject, 0},
		{`  "a"`, ErrNotObject, 2},
		{`null`, ErrNotObject, 0},
		{` 0 `, ErrNotObject, 1},
		{`[1e400]`, ErrNumberOverflow, 1}, // bad input is reported as such
		{`{"a":1} x`, ErrTrailingData, 8},
		{``, ErrSyntax, 0},
	} {
		_, err := AppendObject(nil, []byte(tc.in))
		checkError(t, fmt.Sprintf("AppendObject(%q)", tc.in), err, tc.kind, tc.offset)
	}
}

func TestValid(t *testing.T) {
	if err := Valid([]byte(`{"b":[1,2.50,"\u0041"],"a":null}`)); err != nil {
		t.Errorf("Valid(good) = %v", err)
	}
	checkError(t, "Valid(bad)", Valid([]byte(`{"a":1,"a":2}`)), ErrDuplicateKey, 7)
}

func TestCanonicalizerReuse(t *testing.T) {
	// One Canonicalizer across inputs that fail at every stage must give the
	// same bytes as a fresh one each time.
	inputs := []string{
		`{"b":{"d":1,"c":2},"a":[{"f":1,"e":2}]}`,
		`{"b":{"d":1,"c":2,"d":3}}`,
		`{"z":1,"y":{"x":[1e400]}}`,
		`{"\u0062\n":1,"a\"":{"\u0063":2,"b":3}}`,
		`{"y":1,"x":2,"w":{"v":1,"u":"unterminated`,
		`{"t":20,"s":19,"r":18,"q":17,"p":16,"o":15,"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8}`,
	}
	var c Canonicalizer
	for round := range 3 {
		for _, in := range inputs {
			want, wantErr := new(Canonicalizer).Append(nil, []byte(in))
			got, err := c.Append(nil, []byte(in))
			if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Errorf("round %d, %q: reused gives %s, %v; fresh gives %s, %v", round, in, got, err, want, wantErr)
			}
		}
	}
}

func TestCanonicalizerAllocs(t *testing.T) {
	src := []byte(`{"meta":{"tenantId":"Evently Examples","created":"2022-01-14T02:05:17.252Z"},` +
		`"data":{"name":"pre\u0076iew","description":"Show and Tell.","n":[1.50,1e21,0.1,-0,12345678901234567e4]},` +
		`"\u006b":{"y":1,"x":2,"w":3,"v":4,"u":5,"t":6,"s":7,"r":8,"q":9,"p":10,"o":11,"n":12,"m":13,"l":14},` +
		`"many":{"t":20,"s":19,"r":18,"q":17,"p":16,"o":15,"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1,"3":0,"20":0}}`)
	var c Canonicalizer
	dst := make([]byte, 0, 4*len(src))
	if _, err := c.Append(dst, src); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Append(dst, src); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Canonicalizer.Append allocates %v times per call in steady state, want 0", allocs)
	}
}

func TestMembers(t *testing.T) {
	src := []byte(` { "entity" : "📒", "key":"a\"b" ,"meta":{"b":1, "a":2},` + "\n" + `"n": 1.50 , "\u0061b\n":[ ],"0":null} `)
	type pair struct{ name, value string }
	want := []pair{
		{"entity", `"📒"`},
		{"key", `"a\"b"`},
		{"meta", `{"b":1, "a":2}`},
		{"n", `1.50`},
		{"ab\n", `[ ]`},
		{"0", `null`},
	}
	var got []pair
	err := Members(src, func(name string, value []byte) error {
		got = append(got, pair{name, string(value)})
		return nil
	})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Members = %q, %v\nwant %q", got, err, want)
	}

	// Values are subslices of src.
	err = Members(src, func(name string, value []byte) error {
		if name == "meta" && &value[0] != &src[bytes.Index(src, []byte(`{"b"`))] {
			t.Errorf("value of meta is not a subslice of src")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// fn's error stops the walk and comes back as is.
	stop := errors.New("stop")
	calls := 0
	err = Members(src, func(string, []byte) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("Members with failing fn = %v after %d calls, want stop after 1", err, calls)
	}

	// fn may call Members itself.
	var inner []string
	err = Members(src, func(name string, value []byte) error {
		if name != "meta" {
			return nil
		}
		return Members(value, func(name string, value []byte) error {
			inner = append(inner, name+"="+string(value))
			return nil
		})
	})
	if err != nil || strings.Join(inner, ",") != "b=1,a=2" {
		t.Errorf("nested Members = %q, %v", inner, err)
	}

	if err := Members([]byte(`{}`), func(string, []byte) error { t.Error("fn called for {}"); return nil }); err != nil {
		t.Errorf("Members({}) = %v", err)
	}

	// Anything Append rejects is rejected before fn is called.
	for _, tc := range []rejected{
		{`{"a":1,"b":2,"a":3}`, ErrDuplicateKey, 13},
		{`{"a":1,"b":[1e400]}`, ErrNumberOverflow, 12},
		{`{"a":1,"b":"\ud800"}`, ErrLoneSurrogate, 12},
		{`{"a":1} {}`, ErrTrailingData, 8},
		{`{"a":1,"b":2`, ErrSyntax, 12},
		{` [{"a":1}]`, ErrNotObject, 1},
		{`"a"`, ErrNotObject, 0},
	} {
		err := Members([]byte(tc.in), func(string, []byte) error {
			t.Errorf("Members(%q) called fn", tc.in)
			return nil
		})
		checkError(t, fmt.Sprintf("Members(%q)", tc.in), err, tc.kind, tc.offset)
	}
}

func TestUnquote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`""`, ``},
		{`"abc"`, `abc`},
		{`"\u0041\ud83d\udcd2\n\/\"\\\b\f\r\t"`, "A📒\n/\"\\\b\f\r\t"},
		{`"\u0000"`, "\x00"},
		{"\"\u2028📒\x7f\"", "\u2028📒\x7f"},
		{`"long plain run of ASCII text with no escapes at all"`, `long plain run of ASCII text with no escapes at all`},
	} {
		got, err := Unquote([]byte("pre"), []byte(tc.in))
		if err != nil || string(got) != "pre"+tc.want {
			t.Errorf("Unquote(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []rejected{
		{``, ErrSyntax, 0},
		{`x`, ErrSyntax, 0},
		{` "a"`, ErrSyntax, 0},
		{`"a`, ErrSyntax, 2},
		{`"a"x`, ErrTrailingData, 3},
		{`"a" `, ErrTrailingData, 3},
		{`"\q"`, ErrSyntax, 2},
		{"\"\x1f\"", ErrSyntax, 1},
		{"\"ab\xff\"", ErrInvalidUTF8, 3},
		{`"\ud800"`, ErrLoneSurrogate, 1},
		{`"x\udfff"`, ErrLoneSurrogate, 2},
	} {
		got, err := Unquote([]byte("pre"), []byte(tc.in))
		checkError(t, fmt.Sprintf("Unquote(%q)", tc.in), err, tc.kind, tc.offset)
		if string(got) != "pre" {
			t.Errorf("Unquote(%q) on error returned %q, want the prefix %q", tc.in, got, "pre")
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"/ < > & </script>", `"/ < > & </script>"`},
		{"\x00\x01\x07\b\t\n\x0b\f\r\x0e\x1f ", `"\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f "`},
		{"\x7f\u2028\u2029\ufeff\uffff", "\"\x7f\u2028\u2029\ufeff\uffff\""},
		{"📒 刅 ⑆ é", `"📒 刅 ⑆ é"`},
		{"\ufffd", "\"\ufffd\""}, // a real U+FFFD is written raw
		// Invalid UTF-8: each bad byte becomes the escape \ufffd.
		{"\xff", `"\ufffd"`},
		{"a\xed\xa0\x80b", `"a\ufffd\ufffd\ufffdb"`},
		{"\xc3", `"\ufffd"`},
		{"é\xc3(", `"é\ufffd("`},
	} {
		got := AppendString([]byte("pre"), tc.in)
		if string(got) != "pre"+tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got[3:], tc.want)
		}
	}

	// For valid UTF-8, AppendString writes the canonical form, and Unquote
	// gives s back.
	for r := rune(0); r <= 0x10ffff; r += 7 {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		s := "x" + string(r) + "y\\"
		lit := AppendString(nil, s)
		if again, err := Append(nil, lit); err != nil || !bytes.Equal(again, lit) {
			t.Fatalf("AppendString(%q) = %s is not canonical: %s, %v", s, lit, again, err)
		}
		if back, err := Unquote(nil, lit); err != nil || string(back) != s {
			t.Fatalf("Unquote(AppendString(%q)) = %q, %v", s, back, err)
		}
	}
}

func TestErrorText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"a":2}`, `canon: duplicate key "a" at offset 7`},
		{`[1,]`, `canon: expected a JSON value, found ']' at offset 3`},
		{`1e400`, `canon: number 1e400 overflows a double at offset 0`},
		{`12345678901234567890`, `canon: number 12345678901234567890 is not exactly representable as a double (it would become 12345678901234567000) at offset 0`},
		{`"\ud800"`, `canon: high surrogate \ud800 not followed by a low surrogate at offset 1`},
		{"\"\x01\"", `canon: raw control character U+0001 in string (must be escaped) at offset 1`},
		{`1 2`, `canon: trailing data '2' after the JSON value at offset 2`},
	} {
		_, err := Append(nil, []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Append(%q) error = %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestExactFloat checks the fast conversion that spares strconv.ParseFloat
// for short mantissas against strconv.ParseFloat itself.
func TestExactFloat(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	fast := 0
	for range 200000 {
		k := 1 + rnd.Intn(maxShortest)
		mant := uint64(1 + rnd.Int63n(9))
		for j := 1; j < k; j++ {
			mant = mant*10 + uint64(rnd.Intn(10))
		}
		for mant%10 == 0 {
			mant /= 10 // significant digits end in a non-zero digit
		}
		k = len(strconv.FormatUint(mant, 10))
		n := rnd.Intn(61) - 30
		f, ok := exactFloat(mant, k, n)
		if !ok {
			continue
		}
		fast++
		text := strconv.FormatUint(mant, 10) + "e" + strconv.Itoa(n-k)
		want, err := strconv.ParseFloat(text, 64)
		if err != nil || f != want {
			t.Fatalf("exactFloat(%d, %d, %d) = %v, ParseFloat(%s) = %v, %v", mant, k, n, f, text, want, err)
		}
	}
	if fast < 10000 {
		t.Errorf("only %d of the random cases took the fast path", fast)
	}
}
