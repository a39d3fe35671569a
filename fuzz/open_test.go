package fuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
)

// The recovery fixture: a data directory with two ledgers of a few dozen
// events each, in several small segments, written once per process with a
// fixed clock (so that its bytes, and what a fuzz input does to them, are
// the same every run) and kept in memory.
const (
	fixtureSegmentSize = 2 << 10
	// Segment layout (segment/doc.go): a 64-byte header, then frames of
	// length u32, CRC u32, synced u32 and the payload.
	segHeaderSize = 64
	segFrameSize  = 12
)

type fixture struct {
	files map[string][]byte // by slash path relative to the data directory
	dirs  []string          // every directory, parents first
	names []string          // the files a program can target: segments, meta.db, index files
	// ledgers, by ID.
	ledgers []*fixtureLedger
}

type fixtureLedger struct {
	name   string
	id     eventid.LedgerID
	events []engine.Event
	// segs are the paths of its segment files, in order.
	segs []string
	// The genesis frame in segment 1, and the last frame of the last
	// segment with its synced field: the record that vouches, through
	// that field, for every byte before it.
	genesisEnd                int64
	lastOff, lastEnd, lastSyn int64
}

var (
	fixtureOnce sync.Once
	fixtureVal  *fixture
	fixtureErr  error
)

func loadFixture(tb testing.TB) *fixture {
	tb.Helper()
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "annal-fuzz-fixture-")
		if err != nil {
			fixtureErr = err
			return
		}
		defer os.RemoveAll(dir)
		fixtureVal, fixtureErr = buildFixture(filepath.Join(dir, "data"))
	})
	if fixtureErr != nil {
		tb.Fatalf("building the recovery fixture: %v", fixtureErr)
	}
	return fixtureVal
}

// fixedClock returns a clock that moves on by a millisecond a call.
func fixedClock() func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
}

func fixtureEvent(ledger string, i int) engine.EventInput {
	entities := []string{"order", "user", "invoice"}
	return engine.EventInput{
		Entity: entities[i%len(entities)],
		Key:    fmt.Sprintf("%s-%d", ledger, i%5),
		Event:  []string{"created", "updated", "closed"}[i%3],
		Meta:   []byte(fmt.Sprintf(`{"actor":"fuzz","n":%d}`, i)),
		Data:   []byte(fmt.Sprintf(`{"i":%d,"note":"event %d of %s","tags":["a","b"]}`, i, i, ledger)),
	}
}

func buildFixture(dir string) (*fixture, error) {
	ctx := context.Background()
	opts := &engine.Options{SegmentSize: fixtureSegmentSize, Now: fixedClock()}
	db, err := engine.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	for _, name := range []string{"alpha", "beta"} {
		if _, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: name, Description: "fuzz fixture"}); err != nil {
			return nil, err
		}
	}
	n := 0
	next := func(ledger string, k int) []engine.EventInput {
		var evs []engine.EventInput
		for range k {
			evs = append(evs, fixtureEvent(ledger, n))
			n++
		}
		return evs
	}
	// Interleaved appends: single, batched, idempotent (and repeated),
	// in Sync and (for beta) None durability.
	for round := range 16 {
		for _, ledger := range []string{"alpha", "beta"} {
			var o *engine.AppendOptions
			size := 1 + round%3
			switch {
			case round%3 == 1:
				o = &engine.AppendOptions{IdempotencyKey: fmt.Sprintf("%s-batch-%d", ledger, round)}
			case ledger == "beta" && round%4 == 2:
				o = &engine.AppendOptions{Durability: engine.None}
			}
			evs := next(ledger, size)
			res, err := db.Append(ctx, ledger, evs, o)
			if err != nil {
				return nil, err
			}
			if o != nil && o.IdempotencyKey != "" {
				// A retry sends the same events (other events would fail
				// with ErrIdempotencyMismatch); next is called all the
				// same, so that the fixture stays as it was.
				_ = next(ledger, size)
				again, err := db.Append(ctx, ledger, evs, o)
				if err != nil {
					return nil, err
				}
				if !slices.Equal(res.IDs, again.IDs) || res.FirstSeq != again.FirstSeq {
					return nil, fmt.Errorf("an idempotent append was appended twice")
				}
			}
		}
	}
	fx := &fixture{files: map[string][]byte{}}
	for _, info := range db.Ledgers() {
		fl := &fixtureLedger{name: info.Name, id: info.ID}
		for ev, err := range db.Scan(ctx, info.Name, engine.ScanOptions{}) {
			if err != nil {
				return nil, err
			}
			fl.events = append(fl.events, ev)
		}
		if uint64(len(fl.events)) != info.Count {
			return nil, fmt.Errorf("ledger %s: scanned %d events, it has %d", info.Name, len(fl.events), info.Count)
		}
		fx.ledgers = append(fx.ledgers, fl)
	}
	err = db.Close()
	db = nil
	if err != nil {
		return nil, err
	}

	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			fx.dirs = append(fx.dirs, rel)
			return nil
		}
		b, err := os.ReadFile(path)
		fx.files[rel] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	var segs, index []string
	for name := range fx.files {
		switch {
		case filepath.Base(name) == "LOCK":
		case strings.HasPrefix(name, "ledgers/") && strings.HasSuffix(name, ".seg"):
			// A ledger's NAME file stays as it is (it is not in names).
			segs = append(segs, name)
		case strings.HasPrefix(name, "index/"):
			index = append(index, name)
		}
	}
	slices.Sort(segs)
	// The index's tables first, then its logs, then the rest (MANIFEST,
	// OPTIONS, markers): a program names a file by its position, which
	// stays the same for the tables if Pebble's other files change.
	rank := func(name string) int {
		switch filepath.Ext(name) {
		case ".sst":
			return 0
		case ".log":
			return 1
		}
		return 2
	}
	slices.SortFunc(index, func(a, b string) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	fx.names = append(append(append(fx.names, segs...), "meta.db"), index...)
	for _, fl := range fx.ledgers {
		for _, s := range segs {
			if strings.HasPrefix(s, "ledgers/"+fl.id.String()+"/") {
				fl.segs = append(fl.segs, s)
			}
		}
		if len(fl.segs) < 3 {
			return nil, fmt.Errorf("ledger %s has %d segments, want several", fl.name, len(fl.segs))
		}
		frames := segmentFrames(fx.files[fl.segs[0]])
		if len(frames) == 0 {
			return nil, fmt.Errorf("ledger %s: no record in its first segment", fl.name)
		}
		fl.genesisEnd = frames[0][1]
		last := segmentFrames(fx.files[fl.segs[len(fl.segs)-1]])
		if len(last) < 2 {
			return nil, fmt.Errorf("ledger %s: fewer than 2 records in its last segment", fl.name)
		}
		f := last[len(last)-1]
		fl.lastOff, fl.lastEnd, fl.lastSyn = f[0], f[1], f[2]
	}
	return fx, nil
}

// segmentFrames returns the frames of an intact segment file: offset, end
// and synced field of each.
func segmentFrames(b []byte) [][3]int64 {
	var out [][3]int64
	for off := int64(segHeaderSize); off+segFrameSize <= int64(len(b)); {
		n := int64(binary.BigEndian.Uint32(b[off:]))
		end := off + segFrameSize + n
		if end > int64(len(b)) {
			break
		}
		out = append(out, [3]int64{off, end, int64(binary.BigEndian.Uint32(b[off+8:]))})
		off = end
	}
	return out
}

// A program is the fuzz input of FuzzOpenRecover: a flags byte (bit 0:
// Options.FullVerifyOnOpen), then up to maxOps operations of 5 bytes (file,
// op, offset u16, n), some followed by bytes of data. The file is an index
// (modulo their number) into fixture.names: the segment files (by path:
// ledger by ledger, in order), meta.db, then the index's files (its
// tables, its logs, the rest). An offset with its top bit set counts back
// from the end of the file, otherwise it is taken modulo the file's size
// plus one.
const maxOps = 8

const (
	opFlip      = iota // XOR the byte at offset with n (or 1)
	opOverwrite        // write the next n%16+1 input bytes at offset
	opTruncate         // cut the file to offset
	opZero             // zero n+1 bytes from offset (not past the end)
	opDelete           // remove the file
	opAppendZeros
	opAppendBytes // append the next n%16+1 input bytes
	opCopy        // replace the file with the original of file n
	numOps
)

var opNames = [numOps]string{"flip", "overwrite", "truncate", "zero", "delete", "append-zeros", "append-bytes", "copy"}

type mutation struct {
	files     map[string][]byte // nil: deleted
	fullCheck bool
	log       []string
}

func applyProgram(fx *fixture, prog []byte) *mutation {
	m := &mutation{files: make(map[string][]byte, len(fx.files))}
	for k, v := range fx.files {
		m.files[k] = v // copied on first write
	}
	if len(prog) == 0 {
		return m
	}
	m.fullCheck = prog[0]&1 != 0
	prog = prog[1:]
	owned := map[string]bool{}
	take := func(n int) []byte {
		n = min(n, len(prog))
		b := prog[:n]
		prog = prog[n:]
		return b
	}
	for range maxOps {
		if len(prog) < 5 {
			break
		}
		name := fx.names[int(prog[0])%len(fx.names)]
		op := int(prog[1]) % numOps
		rawOff := int(binary.BigEndian.Uint16(prog[2:]))
		n := int(prog[4])
		prog = prog[5:]
		b, exists := m.files[name]
		if !exists && op != opCopy {
			m.log = append(m.log, fmt.Sprintf("%s %s: already deleted", opNames[op], name))
			continue
		}
		if !owned[name] {
			b = bytes.Clone(b)
			owned[name] = true
		}
		off := rawOff % (len(b) + 1)
		if rawOff&0x8000 != 0 {
			off = max(0, len(b)-rawOff&0x7fff)
		}
		switch op {
		case opFlip:
			if len(b) > 0 {
				off = min(off, len(b)-1)
				mask := byte(n)
				if mask == 0 {
					mask = 1
				}
				b[off] ^= mask
			}
		case opOverwrite:
			data := take(n%16 + 1)
			if need := off + len(data); need > len(b) {
				b = append(b, make([]byte, need-len(b))...)
			}
			copy(b[off:], data)
		case opTruncate:
			b = b[:off]
		case opZero:
			clear(b[off:min(len(b), off+n+1)])
		case opDelete:
			delete(m.files, name)
			m.log = append(m.log, fmt.Sprintf("delete %s", name))
			continue
		case opAppendZeros:
			b = append(b, make([]byte, n+1)...)
		case opAppendBytes:
			b = append(b, take(n%16+1)...)
		case opCopy:
			src := fx.names[n%len(fx.names)]
			b = bytes.Clone(fx.files[src])
			m.log = append(m.log, fmt.Sprintf("copy %s over %s", src, name))
			m.files[name] = b
			continue
		}
		m.files[name] = b
		m.log = append(m.log, fmt.Sprintf("%s %s at %d (n %d): now %d bytes", opNames[op], name, off, n, len(b)))
	}
	return m
}

// write lays out the mutated directory under dir.
func (m *mutation) write(fx *fixture, dir string) error {
	for _, d := range fx.dirs {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o700); err != nil {
			return err
		}
	}
	for name, b := range m.files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// damage describes what a mutation did to one ledger's segments.
type damage struct {
	touched bool // a segment file differs, or is missing
	// index: a file of the index differs, or is missing. Pebble checks a
	// block's checksum when it reads the block: damage to a block that
	// Open did not read (Open reads the format version and each ledger's
	// progress marker) is found by the first read that reaches it, which
	// then fails with Pebble's corruption error, and the engine does not
	// rebuild the index until it is removed. Reads then fail; they must
	// not return anything wrong.
	index bool
	// vouched: the ledger's last record is intact where it was, every
	// segment is there, and a byte that record or a sealed segment vouches
	// for differs: nothing can explain it as a torn write, so the ledger
	// must be refused as corrupt (or, when that damage escaped a
	// verification that starts at the index's progress marker, fail Verify).
	vouched bool
	// genesis: the genesis record is intact in segment 1, so the ledger
	// cannot silently disappear.
	genesis bool
	// witnessed: the metadata file is the fixture's, written by a clean
	// close, so it holds the exact head of the ledger as its durable
	// witness: a ledger that opens must have every event.
	witnessed bool
}

func (m *mutation) damage(fl *fixtureLedger, fx *fixture) damage {
	d := damage{witnessed: bytes.Equal(m.files["meta.db"], fx.files["meta.db"])}
	for name, b := range fx.files {
		if strings.HasPrefix(name, "index/") {
			if mb, ok := m.files[name]; !ok || !bytes.Equal(mb, b) {
				d.index = true
			}
		}
	}
	complete := true
	sealedChanged := false
	for i, s := range fl.segs {
		b, ok := m.files[s]
		if !ok {
			complete = false
		}
		if !ok || !bytes.Equal(b, fx.files[s]) {
			d.touched = true
			if i < len(fl.segs)-1 {
				sealedChanged = true
			}
		}
	}
	if seg1, ok := m.files[fl.segs[0]]; ok && int64(len(seg1)) >= fl.genesisEnd {
		orig := fx.files[fl.segs[0]]
		d.genesis = bytes.Equal(seg1[segHeaderSize:fl.genesisEnd], orig[segHeaderSize:fl.genesisEnd])
	}
	lastName := fl.segs[len(fl.segs)-1]
	last, ok := m.files[lastName]
	orig := fx.files[lastName]
	if !complete || !ok || int64(len(last)) < fl.lastEnd || !bytes.Equal(last[fl.lastOff:fl.lastEnd], orig[fl.lastOff:fl.lastEnd]) {
		return d
	}
	d.vouched = sealedChanged || !bytes.Equal(last[:fl.lastSyn], orig[:fl.lastSyn])
	return d
}

// FuzzOpenRecover damages a copy of a real data directory (two ledgers in
// several segments each, the metadata file and the index) as a program of
// file operations says (see applyProgram), and opens it. Open must not
// panic or hang. It fails only when the metadata file is damaged in a way
// bbolt detects, with an error naming meta.db (the engine leaves that file
// to the operator); otherwise every ledger whose segments are intact opens
// with all its events, whatever happened to the metadata and the index
// (the index is rebuilt when Open finds it damaged; see damage.index for
// what it does not find). A ledger that opens verifies and holds a prefix
// of its events, ID for ID and byte for byte: recovery may cut a torn
// tail, never alter or invent; and, while the metadata file is the one
// the fixture's clean close wrote (its durable witness is the exact head
// of each ledger), every event: after a clean close there is no torn tail. Damage that an intact record vouches for
// (see damage.vouched) makes the ledger unavailable, with
// segment.ErrCorruption, never shorter. Close fails only with a message.
func FuzzOpenRecover(f *testing.F) {
	fx := loadFixture(f)
	idx := func(name string) byte { return byte(slices.Index(fx.names, name)) }
	a, b := fx.ledgers[0], fx.ledgers[1]
	aLast, bLast := a.segs[len(a.segs)-1], b.segs[len(b.segs)-1]
	op := func(file string, op int, off uint16, n byte, data ...byte) []byte {
		return append([]byte{idx(file), byte(op), byte(off >> 8), byte(off), n}, data...)
	}
	prog := func(flags byte, ops ...[]byte) []byte {
		return slices.Concat(append([][]byte{{flags}}, ops...)...)
	}
	firstIndex := len(a.segs) + len(b.segs) + 1
	f.Add([]byte{})
	f.Add(prog(1))
	f.Add(prog(0, op(aLast, opTruncate, 0x8000|7, 0)))           // torn tail
	f.Add(prog(1, op(bLast, opZero, uint16(b.lastOff+20), 200))) // unwritten block in the last record
	f.Add(prog(0, op(a.segs[0], opFlip, 300, 0x10)))             // a sealed segment, before the progress marker
	f.Add(prog(1, op(a.segs[1], opFlip, 300, 0x10)))             // a sealed segment
	f.Add(prog(1, op(aLast, opFlip, uint16(a.lastOff-30), 4)))   // vouched for by the last record
	f.Add(prog(0, op(aLast, opZero, 0, 63)))                     // the last segment's header
	f.Add(prog(0, op(a.segs[1], opDelete, 0, 0)))                // a missing segment
	f.Add(prog(0, op(bLast, opDelete, 0, 0)))                    // the last segment missing
	f.Add(prog(0, op(b.segs[0], opCopy, 0, idx(a.segs[0]))))     // another ledger's segment
	f.Add(prog(0, op(aLast, opAppendBytes, 0, 15, bytes.Repeat([]byte{0xa5}, 16)...)))
	f.Add(prog(0, op("meta.db", opDelete, 0, 0))) // the metadata lost
	f.Add(prog(0, op("meta.db", opZero, 0, 255), op("meta.db", opZero, 4096, 255)))
	f.Add(prog(0, op("meta.db", opFlip, 4096+100, 0x40)))
	f.Add(prog(0, op("meta.db", opTruncate, 1000, 0)))
	// bbolt trusts its freelist page: damaged, it panicked in the write
	// that Open makes, or Close.
	f.Add(prog(0, op("meta.db", opFlip, 3*4096+12, 0x10)))
	f.Add(prog(0, op("meta.db", opFlip, 3*4096+3, 0x01)))
	for i := firstIndex; i < len(fx.names); i++ {
		name := fx.names[i]
		f.Add(prog(0, op(name, opDelete, 0, 0)))
		f.Add(prog(0, op(name, opFlip, 0x8000|40, 0x08)))
		f.Add(prog(0, op(name, opTruncate, 0x8000|10, 0)))
		if strings.HasSuffix(name, ".sst") {
			// A damaged block, one seed a block or so: the progress
			// markers' block is the one Open reads.
			for off := 0; off < len(fx.files[name]); off += 1024 {
				f.Add(prog(0, op(name, opFlip, uint16(off), 0x30)))
			}
		}
	}
	f.Add(prog(0, op("meta.db", opDelete, 0, 0), op(aLast, opTruncate, 0x8000|3, 0), op(fx.names[firstIndex], opDelete, 0, 0)))

	f.Fuzz(func(t *testing.T, p []byte) {
		m := applyProgram(fx, p)
		dir := t.TempDir()
		if err := m.write(fx, dir); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- checkRecovered(fx, m, dir) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%v\nafter:\n  %s", err, strings.Join(m.log, "\n  "))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Open, Verify and Scan took more than 20 s\nafter:\n  %s", strings.Join(m.log, "\n  "))
		}
	})
}

// checkRecovered opens dir and checks every ledger against the fixture.
// It runs on its own goroutine, so it returns what is wrong.
func checkRecovered(fx *fixture, m *mutation, dir string) error {
	ctx := context.Background()
	db, err := engine.Open(dir, &engine.Options{SegmentSize: fixtureSegmentSize, FullVerifyOnOpen: m.fullCheck})
	if err != nil {
		// Damage that bbolt detects in the metadata file fails Open (the
		// file is left as it is for the operator); nothing else may:
		// a damaged ledger is refused alone, a damaged index rebuilt.
		if !bytes.Equal(m.files["meta.db"], fx.files["meta.db"]) && strings.Contains(err.Error(), "meta.db") {
			return nil
		}
		return fmt.Errorf("Open failed: %v", err)
	}
	unavailable := db.Unavailable()
	open := map[eventid.LedgerID]string{}
	for _, info := range db.Ledgers() {
		open[info.ID] = info.Name
	}
	var problems []error
	for _, fl := range fx.ledgers {
		if err := checkLedger(ctx, db, fl, m.damage(fl, fx), m.fullCheck, open, unavailable); err != nil {
			problems = append(problems, fmt.Errorf("ledger %s (%s): %w", fl.name, fl.id, err))
		}
	}
	for id := range open {
		if !slices.ContainsFunc(fx.ledgers, func(fl *fixtureLedger) bool { return fl.id == id }) {
			problems = append(problems, fmt.Errorf("a ledger %s that was never created is open", id))
		}
	}
	for key, err := range unavailable {
		if err == nil || err.Error() == "" {
			problems = append(problems, fmt.Errorf("ledger %q is unavailable, with no message", key))
		}
	}
	if err := db.Close(); err != nil && err.Error() == "" {
		problems = append(problems, errors.New("Close failed with an empty message"))
	}
	return errors.Join(problems...)
}

func checkLedger(ctx context.Context, db *engine.DB, fl *fixtureLedger, d damage, fullCheck bool, open map[eventid.LedgerID]string, unavailable map[string]error) error {
	name, isOpen := open[fl.id]
	var why error
	for key, err := range unavailable {
		// The engine's messages name the ledger "ledger ID: why" or
		// "ledger ID (name): why"; a message may name another ledger
		// after that (a segment of another ledger).
		if msg := fmt.Sprint(err); key == fl.id.String() || strings.Contains(msg, "ledger "+fl.id.String()+":") || strings.Contains(msg, "ledger "+fl.id.String()+" (") {
			why = err
		}
	}
	switch {
	case isOpen && why != nil:
		return fmt.Errorf("both open and unavailable: %v", why)
	case why != nil && !d.touched:
		return fmt.Errorf("unavailable, though its segments are intact: %v", why)
	case why != nil && d.vouched && !errors.Is(why, segment.ErrCorruption):
		return fmt.Errorf("unavailable after damage that a record vouches for, but not as corruption: %v", why)
	case why != nil:
		return nil
	case !isOpen && (!d.touched || d.genesis):
		return errors.New("neither open nor unavailable, though its genesis record is intact")
	case !isOpen:
		return nil
	}

	// Open: it verifies, unless damage escaped the verification from the
	// index's progress marker (then Verify must find it).
	// A known limit (see damage.index): a damaged index block that Open
	// did not read fails the reads that reach it.
	indexDamage := func(err error) bool { return d.index && pebble.IsCorruptionError(err) }
	_, verr := db.Verify(ctx, name, nil)
	switch {
	case verr == nil || indexDamage(verr):
	case fullCheck || !d.touched:
		return fmt.Errorf("opened, but Verify fails: %w", verr)
	case !errors.Is(verr, segment.ErrCorruption):
		return fmt.Errorf("opened after damage to its segments, and Verify fails but not as corruption: %w", verr)
	}
	var got []engine.Event
	var serr error
	for ev, err := range db.Scan(ctx, name, engine.ScanOptions{}) {
		if err != nil {
			serr = err
			break
		}
		got = append(got, ev)
	}
	switch {
	case serr != nil && verr == nil:
		return fmt.Errorf("verified, but Scan fails after %d events: %w", len(got), serr)
	case serr != nil && !errors.Is(serr, segment.ErrCorruption) && !indexDamage(serr):
		return fmt.Errorf("Scan of a ledger that does not verify fails, but not as corruption: %w", serr)
	case len(got) > len(fl.events):
		return fmt.Errorf("%d events, it had %d", len(got), len(fl.events))
	}
	for i := range got {
		if err := sameEvent(&got[i], &fl.events[i]); err != nil {
			return fmt.Errorf("event %d: %w", i+1, err)
		}
	}
	// A scan that read every event without an error is complete unless
	// recovery cut the tail, which it may only do to a torn write.
	if serr == nil && len(got) < len(fl.events) {
		switch {
		case !d.touched:
			return fmt.Errorf("%d events of %d, though its segments are intact", len(got), len(fl.events))
		case d.vouched:
			return fmt.Errorf("%d events of %d: recovery cut records that an intact record vouches were synced", len(got), len(fl.events))
		case d.witnessed:
			return fmt.Errorf("%d events of %d after a clean close: the metadata's durable witness covers them all, and the lost tail was accepted", len(got), len(fl.events))
		}
	}
	return nil
}

func sameEvent(got, want *engine.Event) error {
	if got.ID != want.ID || got.Seq != want.Seq || got.Entity != want.Entity || got.Key != want.Key ||
		got.Event != want.Event || !bytes.Equal(got.Meta, want.Meta) || !bytes.Equal(got.Data, want.Data) {
		return fmt.Errorf("altered:\n got %s #%d %q %q %q %s %s\nwant %s #%d %q %q %q %s %s",
			got.ID, got.Seq, got.Entity, got.Key, got.Event, got.Meta, got.Data,
			want.ID, want.Seq, want.Entity, want.Key, want.Event, want.Meta, want.Data)
	}
	return nil
}
