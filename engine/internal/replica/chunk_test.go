package replica

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/annal-db/annal/segment/corruption"
)

func testChunk() Chunk {
	c := Chunk{
		Ledger: 0x1234abcd, Number: 7, Epoch: 3,
		FirstSeq: 10, LastSeq: 12, FirstMicros: 100, LastMicros: 300,
		TreeSize: 12, Segment: 2, Offset: 64,
		Records: []byte("three records' frames"),
	}
	c.Prev[0], c.Root[31] = 0xaa, 0xbb
	return c
}

// TestChunkRoundTrip: a chunk decodes to what was encoded, header and
// records, and its object is the 160-byte header then the records.
func TestChunkRoundTrip(t *testing.T) {
	c := testChunk()
	b := c.Encode()
	if len(b) != ChunkHeaderSize+len(c.Records) || string(b[:8]) != "annalwal" {
		t.Fatalf("object of %d bytes starting %q", len(b), b[:8])
	}
	got, err := DecodeChunk(ChunkKey(c.Ledger, 7), c.Ledger, b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Records, c.Records) {
		t.Fatalf("records %q", got.Records)
	}
	got.Records, c.Records = nil, nil
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("decoded %+v, encoded %+v", got, c)
	}
}

// TestChunkFence: a fence chunk holds no record and says so.
func TestChunkFence(t *testing.T) {
	c := Chunk{Ledger: 1, Number: 4, Epoch: 2, FirstSeq: 13, LastSeq: 12, TreeSize: 12, FirstMicros: 5, LastMicros: 5}
	got, err := DecodeChunk(ChunkKey(1, 4), 1, c.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Fence() {
		t.Fatal("a chunk without records is not a fence")
	}
}

// TestChunkDamageRefused: every header field that is damaged, a chunk
// under another key or ledger, and inconsistent fields are corruption
// naming the key.
func TestChunkDamageRefused(t *testing.T) {
	good := testChunk()
	key := ChunkKey(good.Ledger, good.Number)
	for i := range ChunkHeaderSize {
		b := good.Encode()
		b[i] ^= 0x01
		if _, err := DecodeChunk(key, good.Ledger, b); !errors.Is(err, corruption.Err) || !strings.Contains(err.Error(), key) {
			t.Fatalf("header byte %d flipped: %v", i, err)
		}
	}
	cases := map[string]func(c *Chunk){
		"first seq 0":         func(c *Chunk) { c.FirstSeq = 0 },
		"last before first":   func(c *Chunk) { c.LastSeq = 5 },
		"tree size not last":  func(c *Chunk) { c.TreeSize = 11 },
		"fence with records":  func(c *Chunk) { c.LastSeq, c.TreeSize = 9, 9 },
		"records, no seqs":    func(c *Chunk) { c.Records = nil },
		"times backwards":     func(c *Chunk) { c.LastMicros = 1 },
		"chunk 1 with a prev": func(c *Chunk) { c.Number = 1 },
	}
	for name, mutate := range cases {
		c := testChunk()
		mutate(&c)
		if _, err := DecodeChunk(ChunkKey(c.Ledger, c.Number), c.Ledger, c.Encode()); !errors.Is(err, corruption.Err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	b := good.Encode()
	if _, err := DecodeChunk(ChunkKey(good.Ledger, 8), good.Ledger, b); !errors.Is(err, corruption.Err) {
		t.Errorf("under another number: %v", err)
	}
	if _, err := DecodeChunk(key, good.Ledger+1, b); !errors.Is(err, corruption.Err) {
		t.Errorf("another ledger: %v", err)
	}
	if _, err := DecodeChunk(key, good.Ledger, b[:100]); !errors.Is(err, corruption.Err) {
		t.Errorf("cut short: %v", err)
	}
}

// TestKeysSortAndParse: keys sort as their numbers do and parse back.
func TestKeysSortAndParse(t *testing.T) {
	if a, b := ChunkKey(9, 9), ChunkKey(9, 10); a >= b {
		t.Fatalf("%s sorts after %s", a, b)
	}
	if n, ok := ParseNumber(ManifestKey(1, 42)); !ok || n != 42 {
		t.Fatalf("manifest key parses to %d %v", n, ok)
	}
	if f, l, ok := ParseSegmentKey(SegmentKey(1, 5, 900)); !ok || f != 5 || l != 900 {
		t.Fatalf("segment key parses to %d %d %v", f, l, ok)
	}
	for _, bad := range []string{"ledgers/00000001/wal/12", "ledgers/00000001/seg/x.seg", SegmentKey(1, 9, 5)} {
		if _, ok := ParseNumber(bad); ok && !strings.Contains(bad, "seg/") {
			t.Errorf("%q parsed as a number", bad)
		}
		if _, _, ok := ParseSegmentKey(bad); ok {
			t.Errorf("%q parsed as a segment key", bad)
		}
	}
	if got := LedgerPrefix(0xab); got != "ledgers/000000ab/" {
		t.Fatalf("prefix %q", got)
	}
}
