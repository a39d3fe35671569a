package eventid

import (
	"database/sql"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The encoding interfaces an ID must keep implementing.
var (
	_ encoding.TextMarshaler     = ID{}
	_ encoding.TextAppender      = ID{}
	_ encoding.TextUnmarshaler   = (*ID)(nil)
	_ encoding.BinaryMarshaler   = ID{}
	_ encoding.BinaryAppender    = ID{}
	_ encoding.BinaryUnmarshaler = (*ID)(nil)
	_ json.Marshaler             = ID{}
	_ json.Unmarshaler           = (*ID)(nil)
	_ driver.Valuer              = ID{}
	_ sql.Scanner                = (*ID)(nil)
)

func TestFields(t *testing.T) {
	id := New(0x0005d5813bf9c449, 0x43545b8f, 0x9e961c05)
	if got, want := id.String(), "0005d5813bf9c44943545b8f9e961c05"; got != want {
		t.Fatalf("New = %s, want %s", got, want)
	}
	if id.Micros() != 0x0005d5813bf9c449 || id.Checksum() != 0x43545b8f || id.Ledger() != 0x9e961c05 || id.Version() != 1 {
		t.Errorf("fields of %s: %x %x %s %d", id, id.Micros(), id.Checksum(), id.Ledger(), id.Version())
	}
	want := time.Date(2022, 1, 14, 2, 5, 17, 275209000, time.UTC)
	if got := id.Time(); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("Time = %v, want %v", got, want)
	}
	// Every uint64 is a time: no wrap past math.MaxInt64 µs.
	last := New(math.MaxUint64, 0, 0).Time()
	if last.Year() != 586524 || last.Nanosecond() != 551615000 {
		t.Errorf("Time of the last µs = %v", last)
	}
	if g := Genesis(0x9e961c04); g.String() != "0000000000000000000000009e961c04" || g.Ledger() != 0x9e961c04 || g.Micros() != 0 {
		t.Errorf("Genesis = %s", g)
	}
	if !(ID{}).IsZero() || id.IsZero() || !Genesis(0).IsZero() || Genesis(4).IsZero() {
		t.Error("IsZero is wrong")
	}
}

func TestCompare(t *testing.T) {
	ids := []ID{
		{},
		New(0, 0, 1),
		New(0, 1, 0),
		New(1, 0, 0),
		New(1, math.MaxUint32, math.MaxUint32),
		New(math.MaxUint64, math.MaxUint32, math.MaxUint32-1),
		New(math.MaxUint64, math.MaxUint32, math.MaxUint32),
	}
	for i, a := range ids {
		for j, b := range ids {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := a.Compare(b); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", a, b, got, want)
			}
			if a.Less(b) != (i < j) {
				t.Errorf("%s.Less(%s) = %v", a, b, a.Less(b))
			}
		}
	}
}

func TestBinary(t *testing.T) {
	id := MustParse("0005d5813bf9c44943545b8f9e961c04")
	b, err := id.MarshalBinary()
	if err != nil || string(b) != string(id[:]) {
		t.Fatalf("MarshalBinary = %x, %v", b, err)
	}
	if b, _ := id.AppendBinary([]byte{1}); string(b) != "\x01"+string(id[:]) {
		t.Errorf("AppendBinary = %x", b)
	}
	var got ID
	if err := got.UnmarshalBinary(b); err != nil || got != id {
		t.Errorf("UnmarshalBinary = %s, %v", got, err)
	}
	for _, n := range []int{0, 15, 17, 32} {
		got := id
		err := got.UnmarshalBinary(make([]byte, n))
		if !errors.Is(err, ErrLength) || got != id {
			t.Errorf("UnmarshalBinary of %d bytes: %v, ID now %s", n, err, got)
		}
	}
}

func TestText(t *testing.T) {
	id := MustParse("0005d5813bf9c44943545b8f9e961c04")
	b, err := id.MarshalText()
	if err != nil || string(b) != id.String() {
		t.Fatalf("MarshalText = %s, %v", b, err)
	}
	if b, _ := id.AppendText([]byte("x")); string(b) != "x"+id.String() {
		t.Errorf("AppendText = %s", b)
	}
	for _, s := range []string{id.String(), id.UUID(), id.Base64(), id.Base32()} {
		var got ID
		if err := got.UnmarshalText([]byte(s)); err != nil || got != id {
			t.Errorf("UnmarshalText(%s) = %s, %v", s, got, err)
		}
	}
	got := id
	if err := got.UnmarshalText([]byte("nope")); !errors.Is(err, ErrLength) || got != id {
		t.Errorf("UnmarshalText(nope) = %v, ID now %s", err, got)
	}
}

func TestJSON(t *testing.T) {
	type event struct {
		ID   ID  `json:"id"`
		Prev *ID `json:"prev"`
		Opt  ID  `json:"opt"`
	}
	id := MustParse("0005d58bcf9cce57e026c6899e961c04")
	prev := MustParse("0005d5813bf9c44943545b8f9e961c04")
	b, err := json.Marshal(event{ID: id, Prev: &prev})
	want := `{"id":"0005d58bcf9cce57e026c6899e961c04","prev":"0005d5813bf9c44943545b8f9e961c04","opt":"00000000000000000000000000000000"}`
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v; want %s", b, err, want)
	}
	var got event
	if err := json.Unmarshal(b, &got); err != nil || got.ID != id || got.Prev == nil || *got.Prev != prev || !got.Opt.IsZero() {
		t.Errorf("Unmarshal(%s) = %+v, %v", b, got, err)
	}
	// Any text form, and JSON escapes, are accepted.
	in := `{"id":"` + id.UUID() + `","prev":"` + prev.Base32() + `","opt":"\u0030005d58bcf9cce57e026c6899e961c04"}`
	got = event{}
	if err := json.Unmarshal([]byte(in), &got); err != nil || got.ID != id || *got.Prev != prev || got.Opt != id {
		t.Errorf("Unmarshal(%s) = %+v, %v", in, got, err)
	}
	// null: a no-op for ID (encoding/json's convention), nil for *ID.
	got = event{Opt: id}
	if err := json.Unmarshal([]byte(`{"id":null,"prev":null}`), &got); err != nil || !got.ID.IsZero() || got.Prev != nil || got.Opt != id {
		t.Errorf("Unmarshal of nulls = %+v, %v", got, err)
	}
	for in, is := range map[string]error{
		`{"id":5}`:            ErrJSONType,
		`{"id":true}`:         ErrJSONType,
		`{"id":["x"]}`:        ErrJSONType,
		`{"id":"0005d58bcf"}`: ErrLength,
		`{"id":"0005d58bcf9cce57e026c6899e961c0x"}`: ErrCharacter,
	} {
		err := json.Unmarshal([]byte(in), &got)
		if !errors.Is(err, is) {
			t.Errorf("Unmarshal(%s) error = %v, want %v", in, err, is)
		}
	}
}

func TestSQL(t *testing.T) {
	id := MustParse("0005d5813bf9c44943545b8f9e961c04")
	v, err := id.Value()
	if err != nil || v != "0005d5813bf9c44943545b8f9e961c04" {
		t.Fatalf("Value = %v, %v", v, err)
	}
	for _, src := range []any{v, id.UUID(), []byte(id.Base32()), id[:], []byte(id.String())} {
		var got ID
		if err := got.Scan(src); err != nil || got != id {
			t.Errorf("Scan(%v) = %s, %v", src, got, err)
		}
	}
	for src, is := range map[any]error{nil: ErrNull, 42: ErrScanType, "zz": ErrLength} {
		got := id
		if err := got.Scan(src); !errors.Is(err, is) || got != id {
			t.Errorf("Scan(%v) error = %v, want %v; ID now %s", src, err, is, got)
		}
	}
	var bad ID
	if err := bad.Scan(make([]byte, 15)); !errors.Is(err, ErrLength) {
		t.Errorf("Scan of 15 bytes error = %v", err)
	}
	// A nullable column scans into sql.Null[ID].
	var n sql.Null[ID]
	if err := n.Scan(nil); err != nil || n.Valid {
		t.Errorf("Null[ID].Scan(nil) = %+v, %v", n, err)
	}
	if err := n.Scan(v); err != nil || !n.Valid || n.V != id {
		t.Errorf("Null[ID].Scan(%v) = %+v, %v", v, n, err)
	}
}

func TestBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	base := time.Date(2022, 1, 14, 2, 5, 17, 275209000, time.UTC)
	for range 10000 {
		tm := base.Add(time.Duration(r.Int64N(int64(100 * 365 * 24 * time.Hour))))
		us := uint64(tm.UnixMicro())
		lo, hi := MinForTime(tm), MaxForTime(tm)
		if lo != MinForMicros(us) || hi != MaxForMicros(us) {
			t.Fatalf("MinForTime/MaxForTime(%v) differ from the Micros forms", tm)
		}
		ledger := LedgerID(r.Uint32())
		for _, id := range []ID{
			New(us, r.Uint32(), ledger),
			New(us, 0, 0),
			New(us, math.MaxUint32, math.MaxUint32),
			ledger.MinForTime(tm),
			ledger.MaxForTime(tm),
		} {
			if id.Less(lo) || hi.Less(id) {
				t.Fatalf("%s is outside [%s, %s]", id, lo, hi)
			}
		}
		// Every ID of the ledger at that µs is within the ledger's bounds.
		llo, lhi := ledger.MinForTime(tm), ledger.MaxForTime(tm)
		if id := New(us, r.Uint32(), ledger); id.Less(llo) || lhi.Less(id) {
			t.Fatalf("%s is outside [%s, %s]", id, llo, lhi)
		}
		if llo != New(us, 0, ledger) || lhi != New(us, math.MaxUint32, ledger) {
			t.Fatalf("ledger bounds = %s, %s", llo, lhi)
		}
		if next := tm.Add(time.Microsecond); !hi.Less(MinForTime(next)) {
			t.Fatalf("MaxForTime(%v) = %s is not below MinForTime(+1µs) = %s", tm, hi, MinForTime(next))
		}
	}
	// Truncation to the µs, and the clamps at both ends.
	tm := time.Date(2022, 1, 14, 2, 5, 17, 275209999, time.UTC)
	if got := MinForTime(tm).Micros(); got != 0x0005d5813bf9c449 {
		t.Errorf("MinForTime truncates %v to %x", tm, got)
	}
	for _, tm := range []time.Time{time.Unix(0, 0), time.Unix(-1, 999999999), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), {}} {
		if got := MinForTime(tm); got != (ID{}) {
			t.Errorf("MinForTime(%v) = %s, want the zero ID", tm, got)
		}
	}
	far := time.Unix(math.MaxInt64, 0)
	if got := MaxForTime(far); got != New(math.MaxUint64, math.MaxUint32, math.MaxUint32) {
		t.Errorf("MaxForTime(%v) = %s", far, got)
	}
	lastUS := New(math.MaxUint64, 0, 0).Time()
	if got := MinForTime(lastUS).Micros(); got != math.MaxUint64 {
		t.Errorf("MinForTime(%v) = %x", lastUS, got)
	}
	if got := MinForTime(lastUS.Add(time.Microsecond)).Micros(); got != math.MaxUint64 {
		t.Errorf("MinForTime(%v) = %x, want the clamp", lastUS.Add(time.Microsecond), got)
	}
}

// TestLedgerIDTextMarshalling: a LedgerID is 8 hex digits in text and JSON (a value
// and a map key), read back in either case; JSON numbers, the form
// encoding/json wrote before, are still read.
func TestLedgerIDTextMarshalling(t *testing.T) {
	l := LedgerID(0xe95bff80)
	b, err := json.Marshal(map[string]any{"id": l, "byID": map[LedgerID]int{l: 1}})
	if err != nil || string(b) != `{"byID":{"e95bff80":1},"id":"e95bff80"}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	for _, in := range []string{`"e95bff80"`, `"E95BFF80"`, `3915120512`} {
		var got LedgerID
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != l {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, got, err, l)
		}
	}
	var m map[LedgerID]int
	if err := json.Unmarshal([]byte(`{"e95bff80":1}`), &m); err != nil || m[l] != 1 {
		t.Errorf("map key: %v, %v", m, err)
	}
	for _, in := range []string{`"e95bff8"`, `"e95bff8g"`, `-1`, `4294967296`, `1.5`, `true`, `{}`} {
		var got LedgerID
		if err := json.Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", in, got)
		}
	}
	got := l
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != l {
		t.Errorf("null: %v, %v; want unchanged", got, err)
	}
	if txt, _ := l.MarshalText(); string(txt) != "e95bff80" {
		t.Errorf("MarshalText = %s", txt)
	}
}
