package canon

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// ledgerTexts returns the meta and data texts of every line of the
// examples ledger, as the engine canonicalizes them on import.
func ledgerTexts(b *testing.B) (texts [][]byte, size int64) {
	for _, l := range readLedger(b, "evently-examples-ledger.ndjson") {
		texts = append(texts, l.Meta, l.Data)
		size += int64(len(l.Meta) + len(l.Data))
	}
	return texts, size
}

func BenchmarkCanonicalize(b *testing.B) {
	texts, size := ledgerTexts(b)
	dst := make([]byte, 0, 64<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, text := range texts {
			var err error
			if dst, err = Append(dst[:0], text); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkEncodingJSONRoundTrip is the baseline: the same inputs through
// encoding/json, Unmarshal into any and Marshal (which sorts map keys, by
// bytes, and escapes HTML: not canonical, only comparable work).
func BenchmarkEncodingJSONRoundTrip(b *testing.B) {
	texts, size := ledgerTexts(b)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, text := range texts {
			var v any
			if err := json.Unmarshal(text, &v); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// largeDocument builds a nested document of about size bytes: objects with
// unsorted keys, arrays, escaped and non-ASCII strings, numbers of all kinds.
func largeDocument(size int) []byte {
	rnd := rand.New(rand.NewSource(1))
	words := []string{"alpha", "beta", "gamma", "delta", "📒", "刅", "tenantId", "created", "description", "name", "10", "2"}
	var b strings.Builder
	var obj func(depth int)
	obj = func(depth int) {
		b.WriteString("{")
		n := 3 + rnd.Intn(8)
		for j := range n {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q: ", fmt.Sprintf("%s_%d", words[rnd.Intn(len(words))], n-j))
			switch r := rnd.Intn(10); {
			case r < 2 && depth < 6:
				obj(depth + 1)
			case r < 3 && depth < 6:
				b.WriteString("[")
				for k := range 4 {
					if k > 0 {
						b.WriteString(",")
					}
					fmt.Fprintf(&b, "%d", rnd.Intn(1e6))
				}
				b.WriteString("]")
			case r < 5:
				fmt.Fprintf(&b, "%q", strings.Repeat(words[rnd.Intn(len(words))]+" ", 1+rnd.Intn(6)))
			case r < 6:
				b.WriteString(`"line\nbreak \"quoted\" \u00e9 \ud83d\udcd2"`)
			case r < 8:
				fmt.Fprintf(&b, "%g", rnd.NormFloat64()*1000)
			case r < 9:
				fmt.Fprintf(&b, "%d", rnd.Int63n(1<<53))
			default:
				b.WriteString([]string{"true", "false", "null"}[rnd.Intn(3)])
			}
		}
		b.WriteString("}")
	}
	b.WriteString("[")
	for b.Len() < size {
		if b.Len() > 1 {
			b.WriteString(",\n")
		}
		obj(0)
	}
	b.WriteString("]")
	return []byte(b.String())
}

func BenchmarkCanonicalizeLarge(b *testing.B) {
	doc := largeDocument(1 << 20)
	dst, err := Append(nil, doc)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if dst, err = Append(dst[:0], doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodingJSONRoundTripLarge(b *testing.B) {
	doc := largeDocument(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMembers(b *testing.B) {
	line := []byte(`{"entity":"🤾","key":"Frances_Graves","event":"🤾-registered","eventId":"0005d58bcf9cce57e026c6899e961c04",` +
		`"timestamp":"2022-01-14T14:42:23.883863Z","meta":{"actor":"example","cause":"xnbjK7emmM50x5OCSdUDy"},"data":{"name":"Frances Graves","country":"BE"}}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Members(line, func(string, []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
