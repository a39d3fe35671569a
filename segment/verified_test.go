package segment

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// chained returns entries i0..i0+n-1 with timestamps after head and the
// IDs that follow head, as an import's verifier computes them.
func chained(head Head, ledger eventid.LedgerID, i0, n int) []Entry {
	es := make([]Entry, n)
	prev := head.ID
	for i := range es {
		e := entry(i0 + i)
		e.Micros = prev.Micros() + 7
		c := eventid.Content{Entity: e.Entity, Key: e.Key, Event: e.Event, Meta: e.Meta, Data: e.Data}
		e.ID = c.ID(ledger, e.Micros, prev)
		es[i], prev = e, e.ID
	}
	return es
}

// TestAppendVerified: a Verified batch's IDs are stored as given, and the
// segments are the same as when the Log computes them; an ID of another
// time or ledger is still computed and refused; a wrong checksum in a
// Verified batch is stored as given (the caller's promise), and the
// segments' verification reports it.
func TestAppendVerified(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	a, b := fixedLog(t, fs, "a"), fixedLog(t, fs, "b")
	if a.Head() != b.Head() {
		t.Fatal("two logs of the same genesis differ")
	}
	es := chained(a.Head(), testLedger(), 1, 50)
	ba, bb := &Batch{Entries: es, Verified: true}, &Batch{Entries: es}
	if err := a.Append(ba); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(bb); err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if ba.IDs[i] != es[i].ID || bb.IDs[i] != es[i].ID || ba.Locations[i] != bb.Locations[i] {
			t.Fatalf("entry %d: verified %v at %v, computed %v at %v, given %v", i, ba.IDs[i], ba.Locations[i], bb.IDs[i], bb.Locations[i], es[i].ID)
		}
	}
	if _, err := a.Verify(context.Background(), nil); err != nil {
		t.Fatalf("the verified batch's segment: %v", err)
	}
	a.Close()
	b.Close()
	sa, sb := fileBytes(t, fs, "a/"+segmentName(1)), fileBytes(t, fs, "b/"+segmentName(1))
	// The records, after the headers (which hold when each was made).
	if len(sa) <= headerSize || string(sa[headerSize:]) != string(sb[headerSize:]) {
		t.Fatalf("segments' records differ: %d and %d bytes", len(sa), len(sb))
	}

	// An ID whose time or ledger is not the entry's is computed again.
	l := newTestLog(t, fs, "c", Options{})
	defer l.Close()
	e := chained(l.Head(), testLedger(), 1, 1)[0]
	for _, id := range []eventid.ID{
		eventid.New(e.Micros+1, e.ID.Checksum(), testLedger()),
		eventid.New(e.Micros, e.ID.Checksum(), testLedger()+1),
	} {
		bad := e
		bad.ID = id
		if err := l.Append(&Batch{Entries: []Entry{bad}, Verified: true}); !errors.Is(err, ErrIDMismatch) {
			t.Fatalf("verified batch, ID %v for an entry at %d µs: %v, want ErrIDMismatch", id, e.Micros, err)
		}
	}
	// A wrong checksum: taken as given, found by Verify.
	bad := e
	bad.ID = eventid.New(e.Micros, e.ID.Checksum()^1, testLedger())
	if err := l.Append(&Batch{Entries: []Entry{bad}, Verified: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Verify(context.Background(), nil); !errors.Is(err, ErrCorruption) {
		t.Fatalf("verify of a segment with a wrong ID: %v, want ErrCorruption", err)
	}
}

// TestStartWriteback: the hint leaves what was written as it was, on the
// disk and on a file system without file descriptors, and does nothing
// on a closed Log.
func TestStartWriteback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, fs := range []vfs.FS{vfs.Default, vfs.NewMem()} {
		d := filepath.Join(dir, "led")
		if fs != vfs.Default {
			d = "led"
		}
		l := newTestLog(t, fs, d, Options{SegmentSize: 64 << 10, Durability: None})
		for i := 0; i < 20; i++ {
			if err := l.Append(&Batch{Entries: []Entry{entry(2*i + 1), entry(2*i + 2)}}); err != nil {
				t.Fatal(err)
			}
			l.StartWriteback()
			l.StartWriteback() // nothing new
		}
		head := l.Head()
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		l.StartWriteback() // all synced
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l.StartWriteback() // closed
		l2, rec, err := openTestLog(t, fs, d, Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if l2.Head() != head || rec.Records == 0 {
			t.Fatalf("reopened at %+v (%d records verified), want %+v", l2.Head(), rec.Records, head)
		}
		if _, err := l2.Verify(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		l2.Close()
		if fs == vfs.Default {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fixedLog creates a ledger on fs in dir with the genesis appended at a
// fixed time, so that two such logs are the same.
func fixedLog(t *testing.T, fs vfs.FS, dir string) *Log {
	t.Helper()
	l, err := Create(dir, Options{FS: fs, Ledger: testLedger()})
	if err != nil {
		t.Fatal(err)
	}
	g := genesisEntry
	g.Micros = 1_700_000_000_000_000
	if err := l.Append(&Batch{Entries: []Entry{g}}); err != nil {
		t.Fatal(err)
	}
	return l
}
