package canon

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// sortAndStringify is the reference: for each input line, JSON.parse, then
// rebuild every object by inserting its keys in Object.keys(o).sort() order
// into a fresh {} (defineProperty, so that a "__proto__" key is a key and not
// the prototype), then JSON.stringify.
const sortAndStringify = `
const sortKeys = (v) => {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v === null || typeof v !== "object") return v;
  const out = {};
  for (const k of Object.keys(v).sort()) {
    Object.defineProperty(out, k, {value: sortKeys(v[k]), enumerable: true, writable: true, configurable: true});
  }
  return out;
};
const lines = require("fs").readFileSync(0, "utf8").split("\n");
lines.pop(); // after the last newline
process.stdout.write(lines.map((l) => JSON.stringify(sortKeys(JSON.parse(l)))).join("\n") + "\n");
`

// TestAgainstJavaScript compares canon with JavaScript's JSON.stringify on
// random JSON texts full of the cases that matter: array-index-like keys,
// keys across the UTF-16 surrogate range, escapes, control characters, and
// numbers in every notation.
func TestAgainstJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH: differential test against JavaScript JSON.stringify skipped")
	}
	const texts = 3000
	g := &jsonGen{rnd: rand.New(rand.NewSource(20220114))}
	var input bytes.Buffer
	var want [][]byte
	var inputs []string
	rejectedKinds := map[error]int{}
	for len(want) < texts {
		text := g.text()
		out, err := Append(nil, []byte(text))
		if err != nil {
			// Only numbers may make a generated text invalid.
			if !errors.Is(err, ErrNumberPrecision) && !errors.Is(err, ErrNumberOverflow) {
				t.Fatalf("canon rejects generated text %q: %v", text, err)
			}
			rejectedKinds[errors.Unwrap(err)]++
			continue
		}
		inputs = append(inputs, text)
		want = append(want, out)
		input.WriteString(text)
		input.WriteByte('\n')
	}
	rejected := 0
	for _, n := range rejectedKinds {
		rejected += n
	}
	if rejected > texts/4 {
		t.Errorf("canon rejected %d of %d generated texts (%v): the generator should make mostly valid ones", rejected, rejected+texts, rejectedKinds)
	}

	got := runNode(t, node, sortAndStringify, input.Bytes(), len(want))
	mismatches := 0
	for j := range want {
		if !bytes.Equal(got[j], want[j]) {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("text %d: %s\n  canon: %s\n  JSON.stringify: %s", j, inputs[j], want[j], got[j])
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of %d texts differ from JavaScript", mismatches, len(want))
	}
	t.Logf("%d texts identical to JSON.stringify; %d generated texts rejected by canon %v", len(want), rejected, rejectedKinds)
}

// runNode runs a script under node with input on stdin and returns the
// lines it wrote, which must be lines in number.
func runNode(t *testing.T, node, script string, input []byte, lines int) [][]byte {
	t.Helper()
	cmd := exec.Command(node, "-e", script)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	got := bytes.Split(out, []byte("\n"))
	if len(got) != lines+1 || len(got[lines]) != 0 {
		t.Fatalf("node wrote %d lines for %d texts", len(got)-1, lines)
	}
	return got[:lines]
}

// numberToString prints String(JSON.parse(line)) for each input line: the
// ECMAScript Number::toString of the double nearest to the number, or
// Infinity when it overflows.
const numberToString = `
const lines = require("fs").readFileSync(0, "utf8").split("\n");
lines.pop();
process.stdout.write(lines.map((l) => String(JSON.parse(l))).join("\n") + "\n");
`

// TestNumbersAgainstJavaScript checks canon's number rules against
// JavaScript on random numbers, including the rejected ones: where canon
// accepts a number, its text is JavaScript's; where it rejects one as
// inexact, JavaScript's text denotes a different decimal value; where it
// rejects one as overflowing, JavaScript gets Infinity.
func TestNumbersAgainstJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH: differential test against JavaScript Number::toString skipped")
	}
	g := &jsonGen{rnd: rand.New(rand.NewSource(5))}
	var texts []string
	for range 5000 {
		g.b.Reset()
		g.number()
		texts = append(texts, g.b.String())
	}
	// Boundaries, in every notation canon must decide on.
	texts = append(texts, "1e21", "999999999999999999999", "1e-7", "0.000001", "9007199254740993", "9007199254740992",
		"1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "2e-324", "3e-324", "5e-324",
		"2.4703282292062328e-324", "2.4703282292062327e-324", "0.1000000000000000055511151231257827", "1e400", "-1e-400")
	got := runNode(t, node, numberToString, []byte(strings.Join(texts, "\n")+"\n"), len(texts))
	counts := map[string]int{}
	for j, text := range texts {
		js := string(got[j])
		out, err := Append(nil, []byte(text))
		switch {
		case err == nil:
			counts["accepted"]++
			if string(out) != js {
				t.Errorf("%s: canon writes %s, JavaScript %s", text, out, js)
			}
		case errors.Is(err, ErrNumberPrecision):
			counts["inexact"]++
			in, ok1 := new(big.Rat).SetString(text)
			back, ok2 := new(big.Rat).SetString(js)
			if !ok1 || !ok2 || in.Cmp(back) == 0 {
				t.Errorf("%s: canon rejects it as inexact (%v), but JavaScript gives %s", text, err, js)
			}
		case errors.Is(err, ErrNumberOverflow):
			counts["overflow"]++
			if js != "Infinity" && js != "-Infinity" {
				t.Errorf("%s: canon rejects it as overflowing, JavaScript gives %s", text, js)
			}
		default:
			t.Errorf("%s: %v", text, err)
		}
	}
	if counts["accepted"] < len(texts)/2 || counts["inexact"] < 50 || counts["overflow"] < 2 {
		t.Errorf("too few of each outcome to mean much: %v", counts)
	}
	t.Logf("%d numbers: %v", len(texts), counts)
}

// jsonGen writes random JSON texts that JSON.parse and canon both accept
// (except for numbers that canon rejects because they would change), with
// no duplicate keys, no lone surrogates, and no raw newline.
type jsonGen struct {
	rnd *rand.Rand
	b   strings.Builder
}

func (g *jsonGen) text() string {
	g.b.Reset()
	g.space()
	g.value(0)
	g.space()
	return g.b.String()
}

func (g *jsonGen) space() {
	for g.rnd.Intn(4) == 0 {
		g.b.WriteByte(" \t\r"[g.rnd.Intn(3)])
	}
}

func (g *jsonGen) value(depth int) {
	n := 10
	if depth > 4 {
		n = 7 // scalars only
	}
	switch g.rnd.Intn(n) {
	case 0, 1, 2:
		g.number()
	case 3, 4:
		g.str(g.text16())
	case 5:
		g.b.WriteString([]string{"true", "false", "null"}[g.rnd.Intn(3)])
	case 6:
		g.str(g.key())
	case 7:
		g.b.WriteByte('[')
		for j := range g.rnd.Intn(5) {
			if j > 0 {
				g.b.WriteByte(',')
			}
			g.space()
			g.value(depth + 1)
			g.space()
		}
		g.b.WriteByte(']')
	default:
		g.b.WriteByte('{')
		seen := map[string]bool{}
		for range g.rnd.Intn(8) {
			k := g.key()
			if seen[k] {
				continue // JSON.parse would keep the last, canon rejects it
			}
			if len(seen) > 0 {
				g.b.WriteByte(',')
			}
			seen[k] = true
			g.space()
			g.str(k)
			g.space()
			g.b.WriteByte(':')
			g.space()
			g.value(depth + 1)
			g.space()
		}
		g.b.WriteByte('}')
	}
}

// trickyKeys sort differently as array indices, UTF-16 or UTF-8.
var trickyKeys = []string{
	"0", "1", "2", "9", "10", "01", "00", "-1", "-0", "1.0", "1e3", " 1", "1 ",
	"4294967294", "4294967295", "4294967296", "99999999999", "18446744073709551616",
	"", "a", "A", "aa", "b", "_", "~", "\x7f", "__proto__", "constructor", "length",
	"📒", "🤾", "🤾-registered", "😀", "\U00010000", "\U0010ffff", "～", "\uff5e!", "\ue000", "\uffff", "\ufeff",
	"\ud7ff", "刅", "中文", "⑆", "é", "e\u0301", "ÿ", "Ā",
	"\x00", "\x01", "\n", "\x1f", "\"", "\\", "/", "</script>", "\u2028", "\u2029",
}

func (g *jsonGen) key() string {
	if g.rnd.Intn(3) == 0 {
		return g.text16()
	}
	k := trickyKeys[g.rnd.Intn(len(trickyKeys))]
	if g.rnd.Intn(4) == 0 {
		k += trickyKeys[g.rnd.Intn(len(trickyKeys))]
	}
	return k
}

// text16 returns a short random string drawn from interesting characters.
func (g *jsonGen) text16() string {
	var s []rune
	for range g.rnd.Intn(8) {
		switch g.rnd.Intn(8) {
		case 0:
			s = append(s, rune(g.rnd.Intn(0x20))) // control characters
		case 1:
			s = append(s, g.pick("\"\\/<>&'\x7f\u2028\u2029"))
		case 2:
			s = append(s, rune(0x20+g.rnd.Intn(0x5f))) // printable ASCII
		case 3:
			s = append(s, rune(0x80+g.rnd.Intn(0xd800-0x80))) // BMP below the surrogates
		case 4:
			s = append(s, rune(0xe000+g.rnd.Intn(0x2000))) // BMP above them
		case 5:
			s = append(s, rune(0x10000+g.rnd.Intn(0x100000))) // surrogate pairs
		case 6:
			s = append(s, g.pick("📒🤾刅⑆～😀中"))
		default:
			s = append(s, g.pick("abcxyz0123"))
		}
	}
	return string(s)
}

// pick returns one of the characters of s.
func (g *jsonGen) pick(s string) rune {
	rs := []rune(s)
	return rs[g.rnd.Intn(len(rs))]
}

// str writes s as a JSON string literal, escaping each character in one of
// the ways JSON allows, chosen at random.
func (g *jsonGen) str(s string) {
	const hexDigits = "0123456789abcdef0123456789ABCDEF"
	hex4 := func(u int) {
		g.b.WriteString(`\u`)
		upper := 16 * g.rnd.Intn(2)
		for shift := 12; shift >= 0; shift -= 4 {
			g.b.WriteByte(hexDigits[upper+(u>>shift)&15])
		}
	}
	g.b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			if g.rnd.Intn(3) == 0 {
				hex4(int(r))
			} else {
				g.b.WriteByte('\\')
				g.b.WriteRune(r)
			}
		case r < 0x20:
			short := map[rune]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]
			if short != "" && g.rnd.Intn(2) == 0 {
				g.b.WriteString(short)
			} else {
				hex4(int(r))
			}
		case r == '/' && g.rnd.Intn(2) == 0:
			g.b.WriteString(`\/`)
		case g.rnd.Intn(4) == 0:
			if r >= 0x10000 {
				r -= 0x10000
				hex4(0xd800 + int(r>>10))
				hex4(0xdc00 + int(r&0x3ff))
			} else {
				hex4(int(r))
			}
		default:
			g.b.WriteRune(r)
		}
	}
	g.b.WriteByte('"')
}

// number writes a number in one of many notations. Most are exact, so
// canon accepts them; some (long digit strings) are not, and are counted.
func (g *jsonGen) number() {
	var f float64
	switch g.rnd.Intn(8) {
	case 0:
		f = float64(g.rnd.Int63n(1<<53+1)) * float64(1-2*g.rnd.Intn(2)) // integers up to 2^53
	case 1:
		f = float64(g.rnd.Intn(2000000)-1000000) / math.Pow10(g.rnd.Intn(12))
	case 2:
		for f = math.NaN(); math.IsNaN(f) || math.IsInf(f, 0); {
			f = math.Float64frombits(g.rnd.Uint64()) // any double at all
		}
	case 3:
		f = g.rnd.NormFloat64() * math.Pow10(g.rnd.Intn(60)-30)
	case 4:
		f = []float64{0, math.Copysign(0, -1), 1e21, 1e20, 999999999999999900000, 1e-6, 1e-7, 0.000001234, 5e-324,
			math.MaxFloat64, -math.MaxFloat64, 2.2250738585072014e-308, 1 << 53, 0.1, 0.30000000000000004, 123e-20,
			4294967295, 4294967296, 1e23, 1.5, -2.5}[g.rnd.Intn(21)]
	case 5:
		// Random digits at a random scale: some have more than a double holds.
		digits := strconv.FormatInt(g.rnd.Int63n(1e18), 10)
		g.b.WriteString(digits[:1+g.rnd.Intn(len(digits))])
		g.exponent(g.rnd.Intn(80) - 40)
		return
	case 6:
		// A double written with 17 digits, or with its last digit moved:
		// sometimes exact, often not, always close to the boundary.
		f = math.Float64frombits(g.rnd.Uint64() >> 1)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = 1
		}
		s := []byte(strconv.FormatFloat(f, 'e', 16, 64))
		if g.rnd.Intn(2) == 0 {
			s = []byte(strconv.FormatFloat(f, 'e', -1, 64))
		}
		if p := bytes.IndexByte(s, 'e') - 1; g.rnd.Intn(2) == 0 && s[p] > '0' && s[p] < '9' {
			s[p] += byte(2*g.rnd.Intn(2) - 1)
		}
		g.b.Write(s)
		return
	default:
		f = float64(g.rnd.Intn(100))
	}
	g.float(f)
}

// float writes f exactly (its shortest digits) in a random notation.
func (g *jsonGen) float(f float64) {
	if f == 0 {
		if math.Signbit(f) {
			g.b.WriteString("-")
		}
		g.b.WriteString([]string{"0", "0.0", "0e0", "0.000E+5", "0e-7"}[g.rnd.Intn(5)])
		return
	}
	switch g.rnd.Intn(5) {
	case 0:
		g.b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case 1:
		g.b.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
	case 2:
		s := strconv.FormatFloat(f, 'e', -1, 64)
		if g.rnd.Intn(2) == 0 {
			s = strings.Replace(s, "e", "E", 1)
		}
		if g.rnd.Intn(2) == 0 {
			s = strings.Replace(s, "+", "", 1)
		}
		g.b.WriteString(s)
	case 3:
		// digits shifted into the exponent, with trailing zeros: 1.5 -> 15000e-4
		s := strconv.FormatFloat(f, 'e', -1, 64)
		mant, exp, _ := strings.Cut(s, "e")
		e, _ := strconv.Atoi(exp)
		whole, frac, _ := strings.Cut(mant, ".")
		zeros := g.rnd.Intn(3)
		g.b.WriteString(whole + frac + strings.Repeat("0", zeros))
		g.exponent(e - len(frac) - zeros)
	default:
		g.b.WriteString(strconv.FormatFloat(f, 'G', -1, 64))
	}
}

func (g *jsonGen) exponent(e int) {
	if e == 0 && g.rnd.Intn(2) == 0 {
		return
	}
	g.b.WriteString([]string{"e", "E"}[g.rnd.Intn(2)])
	switch {
	case e < 0:
		g.b.WriteString("-")
		e = -e
	case g.rnd.Intn(2) == 0:
		g.b.WriteString("+")
	}
	if g.rnd.Intn(4) == 0 {
		g.b.WriteString("0")
	}
	fmt.Fprint(&g.b, e)
}
