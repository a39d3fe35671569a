package canon

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestScanCanonical checks ScanCanonical against Append: it confirms only
// texts that Append writes back unchanged, and it confirms the common
// canonical shapes (so that the fast path of an import is taken).
func TestScanCanonical(t *testing.T) {
	for _, c := range []struct {
		src  string
		want bool // ScanCanonical confirms it
	}{
		{`{}`, true}, {`[]`, true}, {`""`, true}, {`0`, true}, {`-1`, true}, {`1.5`, true}, {`-0.5`, true},
		{`0.000001`, true}, {`123456789012345`, true}, {`true`, true}, {`false`, true}, {`null`, true},
		{`{"a":1,"b":[1,2,{"c":null}]}`, true}, {`{"0":1,"1":2,"10":3,"a":4}`, true},
		{`{"📒":1,"～":2}`, true}, {`"a\"b\\c\n\u001f\u007f"`, false}, {`"a\"b\\c\n\u001f"`, true},
		{"\"\x7f\u2028\"", true},
		// Not canonical, or not confirmed.
		{`-0`, false}, {`0.0000001`, false}, {`1.50`, false}, {`1e2`, false}, {`1E2`, false}, {`01`, false},
		{`1234567890123456`, false}, {`0.1234567890123456`, false}, {`1.`, false}, {`.5`, false}, {`-`, false},
		{`{"b":1,"a":2}`, false}, {`{"a":1,"a":2}`, false}, {`{"10":1,"9":2}`, false}, {`{"a":1,"0":2}`, false},
		{`{"～":1,"📒":2}`, false}, {`{"\u0061":1}`, false}, {`{ }`, false}, {`[1, 2]`, false}, {`{"a" :1}`, false},
		{`"\u0041"`, false}, {`"\/"`, false}, {`"\u000a"`, false}, {`"\u001F"`, false}, {"\"\x01\"", false},
		{"\"\xff\"", false}, {"\"\xed\xa0\x80\"", false}, {`"abc`, false}, {`tru`, false}, {`nul`, false},
		{`[1,]`, false}, {`{"a":}`, false}, {``, false}, {` 1`, false},
	} {
		n, ok := ScanCanonical([]byte(c.src))
		if ok != c.want {
			t.Errorf("ScanCanonical(%q) = %d, %v; want %v", c.src, n, ok, c.want)
			continue
		}
		if ok {
			out, err := Append(nil, []byte(c.src))
			if err != nil || string(out) != c.src[:n] || n != len(c.src) {
				t.Errorf("ScanCanonical(%q) = %d, true; Append gives %q, %v", c.src, n, out, err)
			}
		}
	}
	// A value followed by more text: the length of the value.
	if n, ok := ScanCanonical([]byte(`{"a":[1,"x"]},"b"`)); !ok || n != 13 {
		t.Errorf(`ScanCanonical of a value and more = %d, %v; want 13, true`, n, ok)
	}
}

// TestScanCanonicalRandom builds random JSON texts, canonicalizes them with
// Append, and checks that ScanCanonical confirms the canonical forms it
// should, that whatever it confirms is a fixed point of Append, and that it
// never confirms a text Append changes or refuses.
func TestScanCanonicalRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 15))
	confirmed := 0
	const n = 20000
	for range n {
		src := randomJSON(rng, 0)
		out, err := Append(nil, src)
		if m, ok := ScanCanonical(src); ok {
			if err != nil || m != len(src) || !bytes.Equal(out, src) {
				t.Fatalf("ScanCanonical(%q) = %d, true; Append gives %q, %v", src, m, out, err)
			}
		}
		if err != nil {
			continue
		}
		if m, ok := ScanCanonical(out); ok {
			confirmed++
			if m != len(out) {
				t.Fatalf("ScanCanonical(%q) = %d, want %d", out, m, len(out))
			}
		}
	}
	// Most canonical forms are confirmed (those with exponents or long
	// numbers are not).
	if confirmed < n/2 {
		t.Errorf("ScanCanonical confirmed %d of %d canonical texts", confirmed, n)
	}
}

// randomJSON returns a random JSON text, often not canonical (key order,
// spaces, escapes, number spellings).
func randomJSON(rng *rand.Rand, depth int) []byte {
	k := rng.IntN(10)
	if depth > 3 && k >= 6 {
		k = rng.IntN(6)
	}
	switch k {
	case 0:
		return []byte([]string{"true", "false", "null"}[rng.IntN(3)])
	case 1, 2:
		return []byte(randomNumber(rng))
	case 3, 4, 5:
		return randomString(rng)
	case 6, 7:
		var b []byte
		b = append(b, '[')
		for i := range rng.IntN(4) {
			if i > 0 {
				b = append(b, ',')
				if rng.IntN(8) == 0 {
					b = append(b, ' ')
				}
			}
			b = append(b, randomJSON(rng, depth+1)...)
		}
		return append(b, ']')
	default:
		var b []byte
		b = append(b, '{')
		for i := range rng.IntN(5) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, randomString(rng)...)
			b = append(b, ':')
			b = append(b, randomJSON(rng, depth+1)...)
		}
		return append(b, '}')
	}
}

func randomNumber(rng *rand.Rand) string {
	switch rng.IntN(8) {
	case 0:
		return strconv.Itoa(rng.IntN(100) - 50)
	case 1:
		return strconv.FormatInt(rng.Int64N(1<<53), 10)
	case 2:
		return strconv.FormatFloat(rng.Float64()*1000, 'f', rng.IntN(8), 64)
	case 3:
		return strconv.FormatFloat(rng.NormFloat64(), 'g', -1, 64)
	case 4:
		return fmt.Sprintf("%de%d", rng.IntN(1000), rng.IntN(40)-20)
	case 5:
		return []string{"-0", "0", "0.0", "1.50", "0.000001", "0.0000001", "-0.5", "1E2", "100000000000000000000"}[rng.IntN(9)]
	case 6:
		return strconv.FormatFloat(float64(rng.IntN(100000))/100, 'f', -1, 64)
	default:
		return strconv.FormatFloat(rng.Float64(), 'f', -1, 64)
	}
}

func randomString(rng *rand.Rand) []byte {
	parts := []string{"a", "b", "0", "1", "10", "9", "z", "é", "📒", "～", `\"`, `\\`, `\n`, `\u0041`, `\u001f`, `\/`, "\u2028", "\x7f", `\ud83d\udcd2`, " "}
	b := []byte{'"'}
	for range rng.IntN(4) {
		b = append(b, parts[rng.IntN(len(parts))]...)
	}
	return append(b, '"')
}
