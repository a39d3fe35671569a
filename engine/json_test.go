package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
)

// TestEventJSONIsTheExportLine: encoding/json writes an Event as the line
// Export writes for it, byte for byte (with an Encoder that does not
// escape HTML; json.Marshal gives the same JSON value), and reads it back.
func TestEventJSONIsTheExportLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l", Actor: "me <a&b>", Description: "d"}); err != nil {
		t.Fatal(err)
	}
	evs := []EventInput{
		{Entity: "order", Key: "o-1", Event: "placed", Meta: []byte(`{"b":1, "a":"x"}`), Data: []byte(`{"total": 12.50, "items": ["a<b", "\u00e9\u2028"]}`)},
		{Entity: "order", Key: "o-1", Event: "noted", Data: []byte(`"just a string"`)},
		{Entity: "x\"y\\z", Key: "k\u00e9", Event: "e", Meta: []byte(`{}`), Data: []byte(`null`)},
	}
	if _, err := db.Append(ctx, "l", evs, nil); err != nil {
		t.Fatal(err)
	}
	var export bytes.Buffer
	if _, err := db.Export(ctx, "l", &export, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(export.String(), "\n"), "\n")
	read := collect(t, db.Scan(ctx, "l", ScanOptions{}))
	if len(read) != len(lines) || len(read) != 4 {
		t.Fatalf("%d events read, %d lines exported", len(read), len(lines))
	}
	for i, e := range read {
		var enc bytes.Buffer
		je := json.NewEncoder(&enc)
		je.SetEscapeHTML(false)
		if err := je.Encode(e); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(enc.String(), "\n"); got != lines[i] {
			t.Fatalf("event %d:\njson:   %s\nexport: %s", i, got, lines[i])
		}
		// json.Marshal: the same JSON value, HTML characters escaped.
		m, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		back.Ledger, back.Seq = "kept", 99
		if err := json.Unmarshal(m, &back); err != nil {
			t.Fatalf("event %d: Unmarshal(%s): %v", i, m, err)
		}
		if back.ID != e.ID || back.Entity != e.Entity || back.Key != e.Key || back.Event != e.Event ||
			!bytes.Equal(back.Meta, e.Meta) || !bytes.Equal(back.Data, e.Data) || back.Ledger != "kept" || back.Seq != 99 {
			t.Fatalf("event %d: round trip gave %+v, want %+v (Ledger and Seq as they were)", i, back, e)
		}
		// Pointer, slice, and indented documents too.
		ind, err := json.MarshalIndent([]*Event{&e}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var backs []Event
		if err := json.Unmarshal(ind, &backs); err != nil || len(backs) != 1 || backs[0].ID != e.ID || !bytes.Equal(backs[0].Data, e.Data) {
			t.Fatalf("event %d: indented round trip: %v, %v", i, backs, err)
		}
	}
	// Refused: a timestamp that is not the ID's time, a missing member,
	// an unknown member, meta not an object.
	good := lines[2]
	id := read[2].ID.String()
	ts := strings.Index(good, `"timestamp":"`) + len(`"timestamp":"`)
	for _, bad := range []string{
		good[:ts] + "1999" + good[ts+4:],
		strings.Replace(good, `"eventId":"`+id+`",`, ``, 1),
		strings.Replace(good, `"entity":`, `"ledger":"l","entity":`, 1),
		strings.Replace(good, `"meta":{}`, `"meta":[]`, 1),
		`"a string"`,
	} {
		var e Event
		if err := json.Unmarshal([]byte(bad), &e); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmarshal(%s): %v, want ErrInvalid", bad, err)
		}
	}
	// A zero Event marshals (meta {}, data null).
	if b, err := json.Marshal(Event{}); err != nil || !strings.Contains(string(b), `"meta":{},"data":null}`) {
		t.Errorf("zero Event: %s, %v", b, err)
	}
}

// TestLedgerInfoJSON: a LedgerInfo is written with hex IDs and RFC 3339
// times (µs, UTC), as the command's ledgers --format json, and read back.
func TestLedgerInfoJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	defer db.Close()
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l", Actor: "a", Description: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{order(1)}, nil); err != nil {
		t.Fatal(err)
	}
	info, err := db.Ledger("l")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"name":"l"`, `"id":"` + info.ID.String() + `"`, `"genesis":"` + info.Genesis.String() + `"`,
		`"head":"` + info.Head.String() + `"`, `"created":"` + info.Created.UTC().Format("2006-01-02T15:04:05.000000Z") + `"`,
		`"last":"` + info.Last.UTC().Format("2006-01-02T15:04:05.000000Z") + `"`, `"count":2`} {
		if !strings.Contains(s, want) {
			t.Errorf("LedgerInfo JSON %s lacks %s", s, want)
		}
	}
	var back LedgerInfo
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != info.ID || back.Head != info.Head || back.Genesis != info.Genesis || back.Count != info.Count || back.Name != info.Name ||
		!back.Created.Equal(info.Created.Truncate(1000)) || !back.Last.Equal(info.Last.Truncate(1000)) || back.Bytes != info.Bytes {
		t.Fatalf("round trip: %+v, want %+v", back, info)
	}
	if b, err := json.Marshal(LedgerInfo{}); err != nil || !strings.Contains(string(b), `"first":null`) {
		t.Errorf("zero LedgerInfo: %s, %v", b, err)
	}
}

// TestEventUnmarshalJSONNull: JSON null for an Event is a no-op, as
// encoding/json's convention (and eventid.ID's, LedgerID's, LedgerInfo's)
// has it: a struct with an Event member reads {"event":null}.
func TestEventUnmarshalJSONNull(t *testing.T) {
	t.Parallel()
	var v struct {
		Ev Event      `json:"ev"`
		In LedgerInfo `json:"in"`
		ID eventid.ID `json:"id"`
		Ls []Event    `json:"ls"`
	}
	v.Ev.Entity = "kept"
	if err := json.Unmarshal([]byte(`{"ev":null,"in":null,"id":null,"ls":null}`), &v); err != nil {
		t.Fatalf("null members: %v", err)
	}
	if v.Ev.Entity != "kept" {
		t.Errorf("null changed the event: %+v", v.Ev)
	}
	var ev Event
	for _, bad := range []string{`""`, `{}`, `[]`, `1`, `{"entity":"a"}`, "nul"} {
		if err := json.Unmarshal([]byte(bad), &ev); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
