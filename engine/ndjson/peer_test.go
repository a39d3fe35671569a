package ndjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/annal-db/annal/eventid"
)

// jsonPeerVerify verifies an Evently NDJSON ledger the way a program
// without package canon would: encoding/json decodes each line, meta and
// data are decoded to any and encoded again (encoding/json sorts object
// keys and, without HTML escaping, writes numbers and strings as
// JSON.stringify does for the ledgers at hand), and the ID is recomputed.
// It is the peer of VerifyAll in BenchmarkVerifyAgainstEncodingJSON, and
// TestJSONPeerVerifies shows that it does the same work: it accepts the
// examples ledger and finds a changed character.
func jsonPeerVerify(r io.Reader) (int, error) {
	type line struct {
		Entity, Key, Event, EventID, Timestamp string
		Meta, Data                             json.RawMessage
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), DefaultMaxLineBytes)
	var ledger eventid.LedgerID
	var prev eventid.ID
	n := 0
	canonical := func(raw json.RawMessage) ([]byte, error) {
		var v any
		d := json.NewDecoder(bytes.NewReader(raw))
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
	}
	for sc.Scan() {
		n++
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return n, fmt.Errorf("line %d: %w", n, err)
		}
		meta, err := canonical(l.Meta)
		if err != nil {
			return n, fmt.Errorf("line %d: meta: %w", n, err)
		}
		data, err := canonical(l.Data)
		if err != nil {
			return n, fmt.Errorf("line %d: data: %w", n, err)
		}
		ts, err := time.Parse(time.RFC3339Nano, l.Timestamp)
		if err != nil {
			return n, fmt.Errorf("line %d: %w", n, err)
		}
		got, err := eventid.Parse(l.EventID)
		if err != nil {
			return n, fmt.Errorf("line %d: %w", n, err)
		}
		c := eventid.Content{Entity: l.Entity, Key: l.Key, Event: l.Event, Meta: meta, Data: data}
		if n == 1 {
			ledger, prev = c.LedgerID(), eventid.Genesis(c.LedgerID())
		}
		if want := c.ID(ledger, uint64(ts.UnixMicro()), prev); want != got {
			return n, fmt.Errorf("line %d: ID %s, computed %s", n, got, want)
		}
		prev = got
	}
	return n, sc.Err()
}

func TestJSONPeerVerifies(t *testing.T) {
	data := readVector(t, "evently-examples-ledger.ndjson")
	if n, err := jsonPeerVerify(bytes.NewReader(data)); err != nil || n != 11550 {
		t.Fatalf("the peer on the examples ledger: %d lines, %v", n, err)
	}
	i := bytes.Index(data, []byte(`"data":{"name":"Frances Graves"`))
	tampered := bytes.Clone(data)
	tampered[i+len(`"data":{"name":"F`)] = 'G'
	if n, err := jsonPeerVerify(bytes.NewReader(tampered)); err == nil || n != 2 {
		t.Fatalf("the peer on a tampered ledger: line %d, %v; want line 2", n, err)
	}
}

// BenchmarkVerifyAgainstEncodingJSON verifies the examples ledger with
// VerifyAll (what `annal verify-file` runs) and with the encoding/json
// peer, in the same run: compare the two MB/s figures.
func BenchmarkVerifyAgainstEncodingJSON(b *testing.B) {
	data := readVector(b, "evently-examples-ledger.ndjson")
	b.Run("annal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := VerifyAll(NewReader(bytes.NewReader(data))); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*11550/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonPeerVerify(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*11550/b.Elapsed().Seconds(), "events/s")
	})
}
