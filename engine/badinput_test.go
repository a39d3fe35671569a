package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/klauspost/crc32"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The bad input catalogue: malformed input of every kind the engine takes
// (JSON, names, sizes, IDs and prefixes, options, NDJSON imports) and
// damaged files of a data directory. docs/badinput.md lists every case, the
// error it gets and what guards it; cmd/annal/testdata/script/badinput.txtar
// has the command's cases.
//
// An API case must fail with an error that matches its sentinels and names
// what and where (a field, an event, a line, an offset), and must store
// nothing: the ledgers (count and head), every segment file and the ledger
// directories are the same after it. A few cases are limits exactly reached,
// which must succeed and store exactly their events.
//
// A file case damages a closed copy of a small data directory. Damage to a
// ledger's segments must make Open refuse that ledger (Unavailable:
// ErrLedgerUnavailable wrapping the *segment.CorruptionError that names the
// file and the offset), change no file, and leave the other ledger open and
// verifying. Damage to the index must make Open rebuild it (IndexRebuilt).
// Damage to meta.db fails Open with an error that names meta.db and changes
// nothing, or is tolerated. After every file case, Close leaves no file of
// the directory open.

const (
	badMaxEvent = 16 << 10 // Options.MaxEventSize of the API fixture
	badSegSize  = 4 << 10  // segment size of both fixtures
	badMinCases = 60
)

// badCase is one entry of the catalogue.
type badCase struct {
	cat, name string
	// An API case: do makes the call against the shared fixture.
	do func(ctx context.Context, t *testing.T, f *badFixture) error
	// stores: the call must succeed and store this many events (a limit
	// reached exactly); 0 means it must fail and store nothing.
	stores uint64
	// needsVectors: the case reads ../shared/vectors.
	needsVectors bool
	// A file case: damage changes the closed copy dir of the template.
	damage  func(t *testing.T, dir string, tpl *badTemplate)
	outcome badOutcome
	// A refused ledger: the victim's segment file (its number) and the
	// offset the *segment.CorruptionError must name.
	segNum func(tpl *badTemplate) uint64
	offset func(tpl *badTemplate) int64

	is  []error  // the error must match each
	not []error  // and none of these
	msg []string // and say each of these
}

type badOutcome int

const (
	badRefused   badOutcome = iota + 1 // the victim ledger is unavailable, the other opens
	badRebuilt                         // the index is rebuilt, every ledger opens
	badOpenFails                       // Open fails
	badTolerated                       // Open works, every ledger opens and verifies
)

// badFixture is the data directory the API cases run against.
type badFixture struct {
	dir          string
	db           *DB
	ids          []eventid.ID // ledger "l", after its genesis
	lInfo, other LedgerInfo
	examples     [][]byte // the first lines of the Evently examples ledger
	twoEvents    [][]byte // the Evently CLI ledger (another ledger)
}

func (f *badFixture) append(ctx context.Context, evs ...EventInput) error {
	_, err := f.db.Append(ctx, "l", evs, nil)
	return err
}

func (f *badFixture) importLines(ctx context.Context, lines ...[]byte) error {
	_, err := f.db.Import(ctx, bytes.NewReader(bytes.Join(lines, nil)), ImportOptions{})
	return err
}

// badTemplate is a closed data directory the file cases copy: ledger
// "victim" over several segments and ledger "bystander".
type badTemplate struct {
	dir               string
	victim, bystander LedgerInfo
	locs              map[eventid.ID]segment.Location // every victim record
	ids               []eventid.ID                    // victim's, genesis first
	segs              uint64                          // victim's segment files
}

func (tpl *badTemplate) segPath(dir string, ledger eventid.LedgerID, n uint64) string {
	return filepath.Join(dir, ledgersDir, ledger.String(), fmt.Sprintf("%020d.seg", n))
}

// records returns the victim's records in segment n, in order.
func (tpl *badTemplate) records(n uint64) []segment.Location {
	var out []segment.Location
	for _, id := range tpl.ids {
		if loc := tpl.locs[id]; loc.Segment == n {
			out = append(out, loc)
		}
	}
	return out
}

// recordAt returns the offset of the victim's record of segment n that
// holds byte off.
func (tpl *badTemplate) recordAt(n uint64, off int64) int64 {
	for _, loc := range tpl.records(n) {
		if off >= loc.Offset && off < loc.End() {
			return loc.Offset
		}
	}
	return -1
}

func TestBadInputCatalogue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newBadFixture(t)
	defer f.db.Close()
	tpl := newBadTemplate(t)
	cases := badCases()
	seen := map[string]bool{}
	ran := map[string]int{}
	attempted := 0 // not left out by -run
	var cats []string
	for _, c := range cases {
		key := c.cat + "/" + c.name
		if seen[key] {
			t.Fatalf("case %s twice", key)
		}
		seen[key] = true
		if _, ok := ran[c.cat]; !ok {
			cats = append(cats, c.cat)
			ran[c.cat] = 0
		}
		t.Run(key, func(t *testing.T) {
			attempted++
			if c.needsVectors && f.examples == nil {
				t.Skip("test vectors not found (../shared/vectors)")
			}
			ran[c.cat]++
			if c.do != nil {
				runBadAPICase(ctx, t, f, &c)
			} else {
				runBadFileCase(ctx, t, tpl, &c)
			}
		})
	}
	total := 0
	for _, cat := range cats {
		total += ran[cat]
		t.Logf("%-8s %3d cases", cat, ran[cat])
	}
	t.Logf("%d bad inputs in the catalogue, %d ran", len(cases), total)
	if attempted == len(cases) && total < badMinCases {
		t.Fatalf("only %d cases ran, the catalogue needs at least %d", total, badMinCases)
	}
}

// checkBadErr checks that err matches every sentinel of c (and none of
// c.not) and says c.msg.
func checkBadErr(t *testing.T, err error, c *badCase) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one matching %v", c.is)
	}
	t.Logf("error: %v", err)
	for _, target := range c.is {
		if !errors.Is(err, target) {
			t.Errorf("error %q does not match %v", err, target)
		}
	}
	for _, target := range c.not {
		if errors.Is(err, target) {
			t.Errorf("error %q matches %v", err, target)
		}
	}
	for _, m := range c.msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not say %q", err, m)
		}
	}
}

// badStored is what the API cases must not change.
type badStored struct {
	ledgers []string          // name, ID, count and head of each ledger
	files   map[string]string // every file under ledgers/, by path
}

func badSnapshot(t *testing.T, db *DB, dir string) badStored {
	t.Helper()
	s := badStored{files: badTreeFiles(t, filepath.Join(dir, ledgersDir))}
	for _, l := range db.Ledgers() {
		s.ledgers = append(s.ledgers, fmt.Sprintf("%s %s %d %s", l.Name, l.ID, l.Count, l.Head))
	}
	return s
}

// badTreeFiles reads every file under root (directories as an empty entry
// ending in "/").
func badTreeFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func badDiffFiles(before, after map[string]string) string {
	var d []string
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			d = append(d, name+" removed")
		case a != b:
			d = append(d, fmt.Sprintf("%s changed (%d bytes, then %d)", name, len(b), len(a)))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			d = append(d, name+" added")
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// badStoredEvents returns the events of every ledger together.
func badStoredEvents(s badStored) uint64 {
	var total uint64
	for _, l := range s.ledgers {
		var n uint64
		fmt.Sscanf(strings.Fields(l)[2], "%d", &n)
		total += n
	}
	return total
}

func runBadAPICase(ctx context.Context, t *testing.T, f *badFixture, c *badCase) {
	before := badSnapshot(t, f.db, f.dir)
	err := c.do(ctx, t, f)
	after := badSnapshot(t, f.db, f.dir)
	if c.stores > 0 {
		// A limit reached exactly: it must be accepted, and store
		// exactly its events.
		if err != nil {
			t.Fatalf("a limit reached exactly was refused: %v", err)
		}
		if n, m := badStoredEvents(before), badStoredEvents(after); m != n+c.stores {
			t.Fatalf("stored %d events, want %d:\n%v\n%v", m-n, c.stores, before.ledgers, after.ledgers)
		}
		return
	}
	checkBadErr(t, err, c)
	if !reflect.DeepEqual(before.ledgers, after.ledgers) {
		t.Errorf("the ledgers changed:\n%v\n%v", before.ledgers, after.ledgers)
	}
	if d := badDiffFiles(before.files, after.files); d != "" {
		t.Errorf("the files of the ledgers changed: %s", d)
	}
	if u := f.db.Unavailable(); len(u) != 0 {
		t.Errorf("unavailable ledgers: %v", u)
	}
}

func runBadFileCase(ctx context.Context, t *testing.T, tpl *badTemplate, c *badCase) {
	dir := t.TempDir()
	copyTree(t, tpl.dir, dir)
	c.damage(t, dir, tpl)
	damaged := badTreeFiles(t, dir)
	orig := badTreeFiles(t, tpl.dir)
	// Compared after each Open: the segments and meta.db (the index may
	// be rebuilt, and Open writes the ledgers' heads to meta.db when it opens).
	kept := func(after map[string]string, what string) {
		t.Helper()
		for name, b := range damaged {
			if !strings.HasPrefix(name, ledgersDir+"/") && !(c.outcome == badOpenFails && name == metaFile) {
				continue
			}
			if after[name] != b {
				t.Errorf("%s: Open changed %s (%d bytes, then %d)", what, name, len(b), len(after[name]))
			}
		}
	}
	for _, full := range []bool{true, false} {
		what := "Open"
		if full {
			what = "Open with FullVerifyOnOpen"
		}
		db, err := Open(dir, &Options{FullVerifyOnOpen: full})
		switch c.outcome {
		case badOpenFails:
			if db != nil {
				db.Close()
				t.Fatalf("%s: opened", what)
			}
			checkBadErr(t, err, c)
		case badRefused:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkBadRefused(ctx, t, db, tpl, c, what)
		case badRebuilt, badTolerated:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkBadAllOpen(ctx, t, db, tpl, what)
			if c.outcome == badRebuilt && full {
				// The first Open rebuilt it (and kept the damaged one
				// as it was); the second finds it whole.
				checkBadErr(t, db.IndexRebuilt(), c)
				after := badTreeFiles(t, dir)
				for name, b := range damaged {
					rel, ok := strings.CutPrefix(name, indexDir+"/")
					if ok && b != orig[name] && after[indexDir+".broken/"+rel] != b {
						t.Errorf("the damaged %s is not kept as it was in %s.broken", name, indexDir)
					}
				}
			} else if rb := db.IndexRebuilt(); rb != nil {
				t.Errorf("%s: the index was rebuilt: %v", what, rb)
			}
		}
		if db != nil {
			if err := db.Close(); err != nil {
				t.Errorf("%s: Close: %v", what, err)
			}
		}
		checkBadNoOpenFiles(t, dir, what)
		kept(badTreeFiles(t, dir), what)
	}
}

// checkBadRefused checks that the victim is refused with c's error naming its
// segment file and offset, and that the bystander opens and verifies.
func checkBadRefused(ctx context.Context, t *testing.T, db *DB, tpl *badTemplate, c *badCase, what string) {
	t.Helper()
	// Damage behind the index's progress marker is found too: Open reads
	// every segment that changed since an earlier Open stamped it (a copy
	// of the template has no stamp that matches).
	u := db.Unavailable()
	if len(u) != 1 || u["victim"] == nil {
		t.Fatalf("%s: unavailable ledgers %v, want victim", what, u)
	}
	err := u["victim"]
	if _, lerr := db.Ledger("victim"); !errors.Is(lerr, ErrLedgerUnavailable) {
		t.Errorf("%s: Ledger(victim): %v, want ErrLedgerUnavailable", what, lerr)
	}
	if !errors.Is(err, ErrLedgerUnavailable) {
		t.Errorf("%s: %v does not match ErrLedgerUnavailable", what, err)
	}
	checkBadErr(t, err, c)
	if c.segNum != nil {
		ledger := tpl.victim.ID
		seg := tpl.segPath("", ledger, c.segNum(tpl))
		var ce *segment.CorruptionError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v is not a *segment.CorruptionError", what, err)
		}
		if !strings.HasSuffix(ce.File, seg) {
			t.Errorf("%s: the error names file %s, want %s", what, ce.File, seg)
		}
		if want := c.offset(tpl); ce.Offset != want {
			t.Errorf("%s: the error names offset %d, want %d", what, ce.Offset, want)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", filepath.Base(seg), ce.Offset)) {
			t.Errorf("%s: %q does not say the file and the offset", what, err)
		}
	}
	info, lerr := db.Ledger("bystander")
	if lerr != nil || info.Count != tpl.bystander.Count || info.Head != tpl.bystander.Head {
		t.Fatalf("%s: the other ledger: %+v %v", what, info, lerr)
	}
	if _, verr := db.Verify(ctx, "bystander", nil); verr != nil {
		t.Fatalf("%s: the other ledger does not verify: %v", what, verr)
	}
}

// checkBadAllOpen checks that both ledgers are open with every event, and
// verify.
func checkBadAllOpen(ctx context.Context, t *testing.T, db *DB, tpl *badTemplate, what string) {
	t.Helper()
	if u := db.Unavailable(); len(u) != 0 {
		t.Fatalf("%s: unavailable ledgers %v", what, u)
	}
	for _, want := range []LedgerInfo{tpl.victim, tpl.bystander} {
		info, err := db.Ledger(want.Name)
		if err != nil || info.Count != want.Count || info.Head != want.Head || info.ID != want.ID {
			t.Fatalf("%s: ledger %s: %+v %v", what, want.Name, info, err)
		}
		if _, err := db.Verify(ctx, want.Name, nil); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, id := range tpl.ids {
		if _, err := db.Get(ctx, id); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// checkBadNoOpenFiles checks, where /proc/self/fd lists this process's files
// (Linux), that none under dir is open.
func checkBadNoOpenFiles(t *testing.T, dir, what string) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && (strings.HasPrefix(target, dir+"/") || strings.HasPrefix(target, real+"/")) {
			t.Errorf("%s: after Close, %s is still open", what, target)
		}
	}
}

func newBadFixture(t *testing.T) *badFixture {
	t.Helper()
	ctx := context.Background()
	f := &badFixture{dir: t.TempDir()}
	var err error
	// No background checkpointer: its tick (every 10 s by default) writes
	// the checkpoint and tree files of a ledger appended to by an earlier
	// case, which a slow case (the 1 GiB batch) then saw as "the files of
	// the ledgers changed" (it failed so once under load).
	if f.db, err = Open(f.dir, &Options{SegmentSize: badSegSize, MaxEventSize: badMaxEvent, CheckpointInterval: -1}); err != nil {
		t.Fatal(err)
	}
	if f.lInfo, err = f.db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	if f.other, err = f.db.CreateLedger(ctx, LedgerSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		ids, err := idsOf(f.db.Append(ctx, "l", []EventInput{order(i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		f.ids = append(f.ids, ids...)
	}
	// The NDJSON cases change a good import: the first lines of the
	// Evently examples ledger (a ledger's first lines are one), with a
	// line of the two-event Evently CLI ledger, another ledger. Each case
	// would import but for its damage: the good lines import into a
	// scratch directory with the same options.
	_, file, _, _ := runtime.Caller(0)
	if _, err := os.Stat(filepath.Join(filepath.Dir(file), "..", "..", "shared", "vectors")); err == nil {
		f.examples = splitLines(vector(t, examplesFile))[:12]
		f.twoEvents = splitLines(vector(t, twoEventFile))
		scratch, err := Open(t.TempDir(), &Options{SegmentSize: badSegSize, MaxEventSize: badMaxEvent})
		if err != nil {
			t.Fatal(err)
		}
		defer scratch.Close()
		if _, err := scratch.Import(ctx, bytes.NewReader(bytes.Join(f.examples, nil)), ImportOptions{}); err != nil {
			t.Fatalf("the good lines the NDJSON cases change do not import: %v", err)
		}
	}
	return f
}

func newBadTemplate(t *testing.T) *badTemplate {
	t.Helper()
	ctx := context.Background()
	tpl := &badTemplate{locs: map[eventid.ID]segment.Location{}}
	var db *DB
	// The cases that rename the victim's directory to upper case need an
	// ID with a letter in it; one ledger ID in 43 is all digits (its time
	// decides it), so such a directory is made again.
	for attempt := 0; ; attempt++ {
		tpl.dir = t.TempDir()
		var err error
		if db, err = Open(tpl.dir, &Options{SegmentSize: badSegSize}); err != nil {
			t.Fatal(err)
		}
		if tpl.victim, err = db.CreateLedger(ctx, LedgerSpec{Name: "victim"}); err != nil {
			t.Fatal(err)
		}
		if id := tpl.victim.ID.String(); strings.ToUpper(id) != id || attempt == 20 {
			break
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if tpl.bystander, err = db.CreateLedger(ctx, LedgerSpec{Name: "bystander"}); err != nil {
		t.Fatal(err)
	}
	tpl.ids = []eventid.ID{tpl.victim.Genesis}
	for i := range 50 {
		e := order(i)
		e.Data = fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("p", 200))
		ids, err := idsOf(db.Append(ctx, "victim", []EventInput{e}, nil))
		if err != nil {
			t.Fatal(err)
		}
		tpl.ids = append(tpl.ids, ids...)
		if i%10 == 0 {
			if _, err := db.Append(ctx, "bystander", []EventInput{order(i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range tpl.ids {
		_, loc, found, err := db.idx.Lookup(id)
		if err != nil || !found {
			t.Fatalf("index lookup of %s: %v %v", id, found, err)
		}
		tpl.locs[id] = loc
		tpl.segs = max(tpl.segs, loc.Segment)
	}
	if tpl.victim, err = db.Ledger("victim"); err != nil {
		t.Fatal(err)
	}
	if tpl.bystander, err = db.Ledger("bystander"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if tpl.segs < 4 {
		t.Fatalf("the victim has %d segments, the file cases need 4", tpl.segs)
	}
	return tpl
}

// Helpers that build the bad inputs.

func badData(data string) EventInput {
	return EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(data)}
}

func badMeta(meta string) EventInput {
	return EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(meta), Data: []byte(`{}`)}
}

func badNames(entity, key, event string) EventInput {
	return EventInput{Entity: entity, Key: key, Event: event, Meta: []byte(`{}`), Data: []byte(`{}`)}
}

// badAppendCase appends a good event and then e: the error must name event 1.
func badAppendCase(e EventInput) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, _ *testing.T, f *badFixture) error {
		return f.append(ctx, order(1), e)
	}
}

func badNested(open, close string, depth int, inner string) string {
	return strings.Repeat(open, depth) + inner + strings.Repeat(close, depth)
}

// badLineWith returns a copy of line with old replaced by new once; it fails
// the test if old is not there.
func badLineWith(t *testing.T, line []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(line, []byte(old)) {
		t.Fatalf("%q not in %s", old, line)
	}
	return bytes.Replace(line, []byte(old), []byte(new), 1)
}

// badImportCase imports the first lines of the examples ledger with change
// applied to them.
func badImportCase(change func(t *testing.T, lines, other [][]byte) [][]byte) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, t *testing.T, f *badFixture) error {
		lines := make([][]byte, len(f.examples))
		for i, l := range f.examples {
			lines[i] = bytes.Clone(l)
		}
		return f.importLines(ctx, change(t, lines, f.twoEvents)...)
	}
}

// badNDJSONLedger makes an NDJSON ledger of a genesis event and events with
// the given data, with correct IDs.
func badNDJSONLedger(name string, data ...string) []byte {
	g := eventid.Content{Entity: "ledger", Key: name, Event: "ledger-created", Meta: []byte(`{}`), Data: fmt.Appendf(nil, `{"name":%q}`, name)}
	ledger := g.LedgerID()
	prev := g.ID(ledger, 1000, eventid.Genesis(ledger))
	out := ndjson.AppendLine(nil, prev, 1000, g.Entity, g.Key, g.Event, g.Meta, g.Data)
	for i, d := range data {
		c := eventid.Content{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{}`), Data: []byte(d)}
		micros := uint64(2000 + i)
		id := c.ID(ledger, micros, prev)
		out = ndjson.AppendLine(out, id, micros, c.Entity, c.Key, c.Event, c.Meta, c.Data)
		prev = id
	}
	return out
}

// Helpers that damage a copy of the template.

func badRewrite(t *testing.T, path string, change func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, change(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func badVictimSeg(n uint64) func(t *testing.T, dir string, tpl *badTemplate) string {
	return func(_ *testing.T, dir string, tpl *badTemplate) string {
		return tpl.segPath(dir, tpl.victim.ID, n)
	}
}

func badSegFile(n uint64) func(*badTemplate) uint64 { return func(*badTemplate) uint64 { return n } }
func badLastSeg(tpl *badTemplate) uint64            { return tpl.segs }
func badAt(off int64) func(*badTemplate) int64      { return func(*badTemplate) int64 { return off } }

// badIndexFiles applies change to the index's files whose names match.
func badIndexFiles(match func(name string) bool, change func([]byte) []byte) func(*testing.T, string, *badTemplate) {
	return func(t *testing.T, dir string, _ *badTemplate) {
		entries, err := os.ReadDir(filepath.Join(dir, indexDir))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if !e.IsDir() && match(e.Name()) {
				badRewrite(t, filepath.Join(dir, indexDir, e.Name()), change)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no index file to damage among %v", entries)
		}
	}
}

func badZeros(b []byte) []byte { return make([]byte, len(b)) }
func badHalve(b []byte) []byte { return b[:len(b)/2] }
func badEmpty([]byte) []byte   { return nil }
func badSuffix(s string) func(string) bool {
	return func(name string) bool { return strings.HasSuffix(name, s) }
}
func badPrefix(s string) func(string) bool {
	return func(name string) bool { return strings.HasPrefix(name, s) }
}

func badMetaChange(change func([]byte) []byte) func(*testing.T, string, *badTemplate) {
	return func(t *testing.T, dir string, _ *badTemplate) {
		badRewrite(t, filepath.Join(dir, metaFile), change)
	}
}

const badBoltPage = 4096

// badMetaCut cuts meta.db to short bytes before the end of the pages it
// uses (its high-water mark, which its meta page gives).
func badMetaCut(short int64) func(*testing.T, string, *badTemplate) {
	return func(t *testing.T, dir string, _ *badTemplate) {
		path := filepath.Join(dir, metaFile)
		m, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var hwm int64
		err = m.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, hwm-short); err != nil {
			t.Fatal(err)
		}
	}
}

func badCases() []badCase {
	var cases []badCase
	add := func(cat string, cs ...badCase) {
		for _, c := range cs {
			c.cat = cat
			cases = append(cases, c)
		}
	}
	long := strings.Repeat("n", maxNameLen+1)
	exact := strings.Repeat("n", maxNameLen)

	// Canonical JSON in meta and data: the canon sentinel, the event, the
	// field and the byte offset.
	add("json",
		badCase{name: "duplicate key", do: badAppendCase(badData(`{"a":1,"a":2}`)),
			is: []error{ErrInvalid, canon.ErrDuplicateKey}, msg: []string{`event 1: data: canon: duplicate key "a" at offset 7`}},
		badCase{name: "duplicate key spelled with an escape", do: badAppendCase(badMeta(`{"a":1,"\u0061":2}`)),
			is: []error{ErrInvalid, canon.ErrDuplicateKey}, msg: []string{`event 1: meta: canon: duplicate key "a" at offset 7`}},
		badCase{name: "trailing comma in an object", do: badAppendCase(badData(`{"a":1,}`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected '"' to start an object key, found '}' at offset 7`}},
		badCase{name: "trailing comma in an array", do: badAppendCase(badData(`[1,2,]`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected a JSON value, found ']' at offset 5`}},
		badCase{name: "NaN", do: badAppendCase(badData(`NaN`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected a JSON value, found 'N' at offset 0`}},
		badCase{name: "Infinity", do: badAppendCase(badMeta(`{"x":Infinity}`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: meta: canon: expected a JSON value, found 'I' at offset 5`}},
		badCase{name: "-Infinity", do: badAppendCase(badData(`-Infinity`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected digit in number, found 'I' at offset 1`}},
		badCase{name: "leading zero", do: badAppendCase(badData(`012`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: leading zero in number at offset 1`}},
		badCase{name: "leading zero of a negative number", do: badAppendCase(badData(`{"n":[-01]}`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: leading zero in number at offset 8`}},
		badCase{name: "lone high surrogate", do: badAppendCase(badData(`"\ud800"`)),
			is: []error{ErrInvalid, canon.ErrLoneSurrogate}, msg: []string{`event 1: data: canon: high surrogate \ud800 not followed by a low surrogate at offset 1`}},
		badCase{name: "high surrogate before a non-surrogate", do: badAppendCase(badData(`"\ud800\u0041"`)),
			is: []error{ErrInvalid, canon.ErrLoneSurrogate}, msg: []string{`event 1: data: canon: high surrogate \ud800 not followed by a low surrogate at offset 1`}},
		badCase{name: "lone low surrogate", do: badAppendCase(badMeta(`{"s":"\udc00"}`)),
			is: []error{ErrInvalid, canon.ErrLoneSurrogate}, msg: []string{`event 1: meta: canon: lone low surrogate \udc00 at offset 6`}},
		badCase{name: "invalid escape", do: badAppendCase(badData(`"\x41"`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected escape character (one of "\/bfnrtu), found 'x' at offset 2`}},
		badCase{name: "raw tab in a string", do: badAppendCase(badData("\"a\tb\"")),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: raw control character U+0009 in string (must be escaped) at offset 2`}},
		badCase{name: "raw NUL in a key", do: badAppendCase(badMeta("{\"a\x00\":1}")),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: meta: canon: raw control character U+0000 in string (must be escaped) at offset 3`}},
		badCase{name: "1e400", do: badAppendCase(badData(`1e400`)),
			is: []error{ErrInvalid, canon.ErrNumberOverflow}, msg: []string{`event 1: data: canon: number 1e400 overflows a double at offset 0`}},
		badCase{name: "-1e400 in meta", do: badAppendCase(badMeta(`{"n":-1e400}`)),
			is: []error{ErrInvalid, canon.ErrNumberOverflow}, msg: []string{`event 1: meta: canon: number -1e400 overflows a double at offset 5`}},
		badCase{name: "more digits than a double holds", do: badAppendCase(badData(`12345678901234567890`)),
			is: []error{ErrInvalid, canon.ErrNumberPrecision}, msg: []string{`event 1: data: canon: number 12345678901234567890 is not exactly representable`, `at offset 0`}},
		badCase{name: "1e-400", do: badAppendCase(badData(`[1e-400]`)),
			is: []error{ErrInvalid, canon.ErrNumberPrecision}, msg: []string{`event 1: data: canon: number 1e-400 underflows a double (it would become 0) at offset 1`}},
		badCase{name: "arrays nested 1001 deep", do: badAppendCase(badData(badNested("[", "]", canon.MaxDepth+1, ""))),
			is: []error{ErrInvalid, canon.ErrTooDeep}, msg: []string{`event 1: data: canon: array nested deeper than MaxDepth (1000) at offset 1000`}},
		badCase{name: "objects nested 1001 deep in meta", do: badAppendCase(badMeta(badNested(`{"a":`, "}", canon.MaxDepth+1, "1"))),
			is: []error{ErrInvalid, canon.ErrTooDeep}, msg: []string{`event 1: meta: canon: object nested deeper than MaxDepth (1000) at offset 5000`}},
		badCase{name: "nested exactly 1000 deep (accepted)", do: badAppendCase(badData(badNested("[", "]", canon.MaxDepth, ""))), stores: 2},
		badCase{name: "meta an array", do: badAppendCase(badMeta(`[1]`)),
			is: []error{ErrInvalid, canon.ErrNotObject}, msg: []string{`event 1: meta: canon: JSON value is not an object at offset 0`}},
		badCase{name: "meta a string", do: badAppendCase(badMeta(` "x"`)),
			is: []error{ErrInvalid, canon.ErrNotObject}, msg: []string{`event 1: meta: canon: JSON value is not an object at offset 1`}},
		badCase{name: "meta null", do: badAppendCase(badMeta(`null`)),
			is: []error{ErrInvalid, canon.ErrNotObject}, msg: []string{`event 1: meta: canon: JSON value is not an object at offset 0`}},
		badCase{name: "empty data", do: badAppendCase(badData(``)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected a JSON value, found end of input at offset 0`}},
		// Empty (or nil) meta means {}; only whitespace is not empty.
		badCase{name: "empty meta (accepted: {})", do: badAppendCase(badMeta(``)), stores: 2},
		badCase{name: "meta only whitespace", do: badAppendCase(badMeta(" \n")),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: meta: canon: expected a JSON value, found end of input at offset 2`}},
		badCase{name: "whitespace only", do: badAppendCase(badData(" \t\n")),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected a JSON value, found end of input at offset 3`}},
		badCase{name: "trailing garbage", do: badAppendCase(badMeta(`{} x`)),
			is: []error{ErrInvalid, canon.ErrTrailingData}, msg: []string{`event 1: meta: canon: trailing data 'x' after the JSON value at offset 3`}},
		badCase{name: "two values", do: badAppendCase(badData(`1 2`)),
			is: []error{ErrInvalid, canon.ErrTrailingData}, msg: []string{`event 1: data: canon: trailing data '2' after the JSON value at offset 2`}},
		badCase{name: "byte order mark", do: badAppendCase(badMeta("\ufeff{}")),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: meta: canon: expected a JSON value, found '\ufeff' (U+feff) at offset 0`}},
		badCase{name: "single quotes", do: badAppendCase(badData(`{'a':1}`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected '"' to start an object key, found '\'' at offset 1`}},
		badCase{name: "comment", do: badAppendCase(badData(`{"a":1 /* c */}`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected ',' or '}' after object member, found '/' at offset 7`}},
		badCase{name: "cut short", do: badAppendCase(badData(`{"a":`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected a JSON value, found end of input at offset 5`}},
		badCase{name: "number ending in a point", do: badAppendCase(badData(`1.`)),
			is: []error{ErrInvalid, canon.ErrSyntax}, msg: []string{`event 1: data: canon: expected digit after decimal point, found end of input at offset 2`}},
		badCase{name: "hexadecimal number", do: badAppendCase(badData(`0x10`)),
			is: []error{ErrInvalid, canon.ErrTrailingData}, msg: []string{`event 1: data: canon: trailing data 'x' after the JSON value at offset 1`}},
		badCase{name: "invalid UTF-8 in a string", do: badAppendCase(badData("\"\xff\"")),
			is: []error{ErrInvalid, canon.ErrInvalidUTF8}, msg: []string{`event 1: data: canon: invalid UTF-8 byte 0xff in string at offset 1`}},
		badCase{name: "overlong UTF-8", do: badAppendCase(badData("\"\xc0\xaf\"")),
			is: []error{ErrInvalid, canon.ErrInvalidUTF8}, msg: []string{`event 1: data: canon: invalid UTF-8 byte 0xc0 in string at offset 1`}},
		badCase{name: "UTF-8 of a surrogate", do: badAppendCase(badData("\"\xed\xa0\x80\"")),
			is: []error{ErrInvalid, canon.ErrInvalidUTF8}, msg: []string{`event 1: data: canon: invalid UTF-8 byte 0xed in string at offset 1`}},
		badCase{name: "invalid UTF-8 in a key", do: badAppendCase(badMeta("{\"\xff\":1}")),
			is: []error{ErrInvalid, canon.ErrInvalidUTF8}, msg: []string{`event 1: meta: canon: invalid UTF-8 byte 0xff in string at offset 2`}},
		badCase{name: "invalid UTF-8 outside a string", do: badAppendCase(badData("[\xff]")),
			is: []error{ErrInvalid, canon.ErrInvalidUTF8}, msg: []string{`event 1: data: canon: invalid UTF-8 byte 0xff (expected a JSON value) at offset 1`}},
	)

	// Names: entity, key, event name, ledger name, idempotency key, and
	// the other strings of a ledger.
	add("names",
		badCase{name: "empty entity", do: badAppendCase(badNames("", "k", "v")),
			is: []error{ErrInvalid}, msg: []string{"event 1: entity is empty"}},
		badCase{name: "empty key", do: badAppendCase(badNames("e", "", "v")),
			is: []error{ErrInvalid}, msg: []string{"event 1: key is empty"}},
		badCase{name: "empty event name", do: badAppendCase(badNames("e", "k", "")),
			is: []error{ErrInvalid}, msg: []string{"event 1: event name is empty"}},
		badCase{name: "entity not UTF-8", do: badAppendCase(badNames("\xff", "k", "v")),
			is: []error{ErrInvalid}, msg: []string{`event 1: entity "\xff" is not valid UTF-8`}},
		badCase{name: "key with a cut UTF-8 sequence", do: badAppendCase(badNames("e", "k\xc3", "v")),
			is: []error{ErrInvalid}, msg: []string{`event 1: key "k\xc3" is not valid UTF-8`}},
		badCase{name: "event name with the UTF-8 of a surrogate", do: badAppendCase(badNames("e", "k", "v\xed\xa0\x80")),
			is: []error{ErrInvalid}, msg: []string{`event 1: event name "v\xed\xa0\x80" is not valid UTF-8`}},
		badCase{name: "entity of 1025 bytes", do: badAppendCase(badNames(long, "k", "v")),
			is: []error{ErrInvalid}, msg: []string{"event 1: entity is 1025 bytes, the limit is 1024"}},
		badCase{name: "event name of 1025 bytes of UTF-8", do: badAppendCase(badNames("e", "k", strings.Repeat("é", 512)+"x")),
			is: []error{ErrInvalid}, msg: []string{"event 1: event name is 1025 bytes, the limit is 1024"}},
		badCase{name: "names of exactly 1024 bytes (accepted)", do: badAppendCase(badNames(exact, exact, exact)), stores: 2},
		badCase{name: "NUL in a key", do: badAppendCase(badNames("e", "k\x00", "v")),
			is: []error{ErrInvalid}, msg: []string{`event 1: key "k\x00" has a control character at byte 1`}},
		badCase{name: "newline in an event name", do: badAppendCase(badNames("e", "k", "a\nb")),
			is: []error{ErrInvalid}, msg: []string{`event 1: event name "a\nb" has a control character at byte 1`}},
		badCase{name: "DEL in an entity", do: badAppendCase(badNames("e\x7f", "k", "v")),
			is: []error{ErrInvalid}, msg: []string{`event 1: entity "e\x7f" has a control character at byte 1`}},
		badCase{name: "C1 control character U+0085", do: badAppendCase(badNames("e", "é\u0085", "v")),
			is: []error{ErrInvalid}, msg: []string{`event 1: key "é\u0085" has a control character at byte 2`}},
		badCase{name: "ledger name not UTF-8", do: badCreateCase(LedgerSpec{Name: "l\xff"}),
			is: []error{ErrInvalid}, msg: []string{`ledger name "l\xff" is not valid UTF-8`}},
		badCase{name: "ledger name of 1025 bytes", do: badCreateCase(LedgerSpec{Name: long}),
			is: []error{ErrInvalid}, msg: []string{"ledger name is 1025 bytes, the limit is 1024"}},
		badCase{name: "empty ledger name", do: badCreateCase(LedgerSpec{}),
			is: []error{ErrInvalid}, msg: []string{"ledger name is empty"}},
		badCase{name: "tab in a ledger name", do: badCreateCase(LedgerSpec{Name: "a\tb"}),
			is: []error{ErrInvalid}, msg: []string{`ledger name "a\tb" has a control character at byte 1`}},
		badCase{name: "ledger description not UTF-8", do: badCreateCase(LedgerSpec{Name: "d", Description: "caf\xe9"}),
			is: []error{ErrInvalid}, msg: []string{`ledger "d": description "caf\xe9" is not valid UTF-8`}},
		badCase{name: "ledger actor not UTF-8", do: badCreateCase(LedgerSpec{Name: "d", Actor: "\xfe"}),
			is: []error{ErrInvalid}, msg: []string{`ledger "d": actor "\xfe" is not valid UTF-8`}},
		badCase{name: "idempotency key not UTF-8", do: badOptionsCase(&AppendOptions{IdempotencyKey: "\xfe"}),
			is: []error{ErrInvalid}, msg: []string{`idempotency key "\xfe" is not valid UTF-8`}},
		badCase{name: "idempotency key of 1025 bytes", do: badOptionsCase(&AppendOptions{IdempotencyKey: long}),
			is: []error{ErrInvalid}, msg: []string{"idempotency key is 1025 bytes, the limit is 1024"}},
		badCase{name: "idempotency key with a control character", do: badOptionsCase(&AppendOptions{IdempotencyKey: "a\x1bb"}),
			is: []error{ErrInvalid}, msg: []string{`idempotency key "a\x1bb" has a control character at byte 1`}},
		badCase{name: "expected stream key not UTF-8", do: badOptionsCase(&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "order", Key: "\xc3"}}}),
			is: []error{ErrInvalid}, msg: []string{`expected stream 0: key "\xc3" is not valid UTF-8`}},
		badCase{name: "import under a name with a control character", needsVectors: true,
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Import(ctx, bytes.NewReader(bytes.Join(f.examples, nil)), ImportOptions{Name: "a\rb"})
				return err
			},
			is: []error{ErrInvalid}, msg: []string{`import: engine: invalid input: ledger name "a\rb" has a control character at byte 1`}},
	)

	// Sizes: an event over Options.MaxEventSize, exactly at it, a batch
	// over the segment format's limit.
	atLimit := func(extra int) string {
		// The meta {"actor":"user-1"} is 18 bytes.
		return `"` + strings.Repeat("x", badMaxEvent-18-2+extra) + `"`
	}
	add("size",
		badCase{name: "event one byte over MaxEventSize", do: badAppendCase(EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{"actor":"user-1"}`), Data: []byte(atLimit(1))}),
			is: []error{ErrInvalid}, msg: []string{fmt.Sprintf("event 1: meta and data are %d bytes in canonical form, the limit is %d", badMaxEvent+1, badMaxEvent)}},
		badCase{name: "event exactly MaxEventSize (accepted)", do: badAppendCase(EventInput{Entity: "e", Key: "k", Event: "v", Meta: []byte(`{"actor":"user-1"}`), Data: []byte(atLimit(0))}), stores: 2},
		badCase{name: "event within MaxEventSize only once canonical (accepted)", do: badAppendCase(badData(strings.Repeat(" ", badMaxEvent) + "1")), stores: 2},
		badCase{name: "meta alone over MaxEventSize", do: badAppendCase(badMeta(`{"m":"` + strings.Repeat("m", badMaxEvent) + `"}`)),
			is: []error{ErrInvalid}, msg: []string{fmt.Sprintf("event 1: meta and data are %d bytes in canonical form, the limit is %d", badMaxEvent+10, badMaxEvent)}},
		badCase{name: "batch over the segment format's 1 GiB", do: badHugeBatch,
			is: []error{ErrInvalid, segment.ErrTooLarge}, msg: []string{"append to l: segment: entry too large: batch of", "bytes, the limit is 1073741824"}},
		badCase{name: "no events", do: func(ctx context.Context, _ *testing.T, f *badFixture) error { return f.append(ctx) },
			is: []error{ErrInvalid}, msg: []string{"no events to append"}},
		badCase{name: "genesis event over MaxEventSize", do: badCreateCase(LedgerSpec{Name: "huge", Description: strings.Repeat("d", badMaxEvent)}),
			is: []error{ErrInvalid}, msg: []string{`ledger "huge": the genesis event's meta and data (actor, name and description) are`, fmt.Sprintf("the limit is %d", badMaxEvent)}},
		badCase{name: "imported event over MaxEventSize",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Import(ctx, bytes.NewReader(badNDJSONLedger("big", `1`, `"`+strings.Repeat("x", badMaxEvent)+`"`)), ImportOptions{})
				return err
			},
			is: []error{ErrInvalid}, msg: []string{fmt.Sprintf("line 3: meta and data are %d bytes in canonical form, the limit (Options.MaxEventSize) is %d", badMaxEvent+4, badMaxEvent)}},
	)

	// Options of a DB and of an append.
	add("options",
		badCase{name: "append durability out of range", do: badOptionsCase(&AppendOptions{Durability: 99}),
			is: []error{ErrInvalid}, msg: []string{"durability Durability(99) is not Sync, Interval or None"}},
		badCase{name: "Options.Durability out of range", do: badOpenCase(Options{Durability: 99}),
			is: []error{ErrInvalid}, msg: []string{"options: segment: unknown durability Durability(99)"}},
		badCase{name: "Options.SegmentSize negative", do: badOpenCase(Options{SegmentSize: -1}),
			is: []error{ErrInvalid}, msg: []string{"options: segment: SegmentSize -1 out of range"}},
		badCase{name: "Options.SegmentSize over 1 GiB", do: badOpenCase(Options{SegmentSize: 2 << 30}),
			is: []error{ErrInvalid}, msg: []string{"options: segment: SegmentSize 2147483648 out of range"}},
		badCase{name: "Options.CacheSize negative", do: badOpenCase(Options{CacheSize: -1}),
			is: []error{ErrInvalid}, msg: []string{"options: CacheSize -1 is out of range: 0 (the default, 128 MiB) or 8 MiB (8388608) to 1 TiB (1099511627776)"}},
		badCase{name: "Options.CacheSize 1 byte", do: badOpenCase(Options{CacheSize: 1}),
			is: []error{ErrInvalid}, msg: []string{"options: CacheSize 1 is out of range"}},
		badCase{name: "Options.SyncInterval 1 ns", do: badOpenCase(Options{SyncInterval: time.Nanosecond}),
			is: []error{ErrInvalid}, msg: []string{"options: SyncInterval 1ns is out of range: 0 (the default, 50ms) or 1ms to 1h0m0s"}},
		badCase{name: "Options.SyncInterval negative", do: badOpenCase(Options{SyncInterval: -time.Second}),
			is: []error{ErrInvalid}, msg: []string{"options: SyncInterval -1s is out of range"}},
		badCase{name: "Options.WitnessInterval 1 µs", do: badOpenCase(Options{WitnessInterval: time.Microsecond}),
			is: []error{ErrInvalid}, msg: []string{"options: WitnessInterval 1µs is out of range: 0 (the default, 1s) or 1ms to 1h0m0s"}},
		badCase{name: "Options.MaxEventSize negative", do: badOpenCase(Options{MaxEventSize: -1}),
			is: []error{ErrInvalid}, msg: []string{"options: MaxEventSize -1 is out of range: 0 (the default, 1 MiB) or 1 KiB (1024) to 16 MiB (16777216)"}},
	)

	// IDs and prefixes.
	prefix := func(p string) func(context.Context, *testing.T, *badFixture) error {
		return func(ctx context.Context, _ *testing.T, f *badFixture) error {
			_, err := f.db.GetPrefix(ctx, p)
			return err
		}
	}
	add("ids",
		badCase{name: "prefix not hex", do: prefix("zzzz"), is: []error{ErrInvalid}, msg: []string{`ID prefix "zzzz" is not hex`}},
		badCase{name: "prefix too short", do: prefix("abc"), is: []error{ErrInvalid}, msg: []string{`ID prefix "abc": want 4 to 32 hex digits`}},
		badCase{name: "prefix too long", do: prefix(strings.Repeat("0", 33)), is: []error{ErrInvalid}, msg: []string{`want 4 to 32 hex digits`}},
		badCase{name: "empty prefix", do: prefix(""), is: []error{ErrInvalid}, msg: []string{`ID prefix "": want 4 to 32 hex digits`}},
		badCase{name: "prefix of Arabic-Indic digits", do: prefix("١٢٣٤"), is: []error{ErrInvalid}, msg: []string{`ID prefix "١٢٣٤" is not hex`}},
		badCase{name: "prefix of fullwidth digits", do: prefix("０００５"), is: []error{ErrInvalid}, msg: []string{`ID prefix "０００５" is not hex`}},
		badCase{name: "odd prefix ending in a non-hex character", do: prefix("0005g"), is: []error{ErrInvalid}, msg: []string{`ID prefix "0005g" is not hex`}},
		badCase{name: "prefix with a sign", do: prefix("+0005"), is: []error{ErrInvalid}, msg: []string{`ID prefix "+0005" is not hex`}},
		badCase{name: "prefix with a space", do: prefix("0005 "), is: []error{ErrInvalid}, msg: []string{`ID prefix "0005 " is not hex`}},
		badCase{name: "ID of an unknown ledger",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Get(ctx, eventid.New(1, 2, 0xdeadbeef))
				return err
			},
			is: []error{ErrNotFound}, msg: []string{"(no ledger deadbeef)"}},
		badCase{name: "zero ID",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Get(ctx, eventid.ID{})
				return err
			},
			is: []error{ErrNotFound}, msg: []string{"00000000000000000000000000000000 (no ledger 00000000)"}},
		badCase{name: "ID of a known ledger that names no event",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				id := eventid.New(f.ids[0].Micros(), 12345, f.lInfo.ID)
				_, err := f.db.Get(ctx, id)
				return err
			},
			is: []error{ErrNotFound}, msg: []string{"engine: event not found: 0"}, not: []error{ErrInvalid}},
		badCase{name: "sequence number 0", do: badSeqCase("l", 0), is: []error{ErrNotFound}, msg: []string{"ledger l has no event #0 (it has "}},
		badCase{name: "sequence number 2^64-1", do: badSeqCase("l", math.MaxUint64), is: []error{ErrNotFound}, msg: []string{"ledger l has no event #18446744073709551615 (it has "}},
		badCase{name: "sequence number of an unknown ledger", do: badSeqCase("nope", 1), is: []error{ErrLedgerNotFound}, msg: []string{`"nope"`}},
		badCase{name: "expected head of another ledger",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Append(ctx, "l", []EventInput{order(1)}, &AppendOptions{ExpectedHead: f.other.Genesis})
				return err
			},
			is: []error{ErrInvalid}, msg: []string{"expected head 0", "is an ID of ledger", ", not of l ("}},
		badCase{name: "scan after an ID of another ledger",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				for _, err := range f.db.Scan(ctx, "l", ScanOptions{After: f.other.Genesis}) {
					return err
				}
				return nil
			},
			is: []error{ErrInvalid}, msg: []string{"an ID of another ledger"}},
		badCase{name: "export after an ID of another ledger",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Export(ctx, "l", &bytes.Buffer{}, ExportOptions{After: f.other.Genesis})
				return err
			},
			is: []error{ErrInvalid}, msg: []string{"export: after", "an ID of ledger"}},
		badCase{name: "ledger ID with a character too many",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				_, err := f.db.Append(ctx, f.lInfo.ID.String()+"0", []EventInput{order(1)}, nil)
				return err
			},
			is: []error{ErrLedgerNotFound}, msg: []string{"engine: ledger not found: \""}},
		badCase{name: "replay of keys without an entity",
			do: func(ctx context.Context, _ *testing.T, f *badFixture) error {
				for _, err := range f.db.Replay(ctx, "l", ReplayOptions{Keys: []string{"order-1"}, Events: []string{"order-paid"}}) {
					return err
				}
				return nil
			},
			is: []error{ErrInvalid}, msg: []string{"replay: keys without an entity"}},
	)

	// NDJSON imports: the first lines of the Evently examples ledger,
	// changed. The error names the line (an *ndjson.LineError) and
	// matches ErrInvalid; nothing is left of the import.
	imp := func(name string, line int, is error, msg string, change func(t *testing.T, lines, other [][]byte) [][]byte) badCase {
		c := badCase{name: name, needsVectors: true, do: badImportCase(change), is: []error{ErrInvalid}, msg: []string{fmt.Sprintf("import: line %d: ", line)}}
		if is != nil {
			c.is = append(c.is, is)
		}
		if msg != "" {
			c.msg = append(c.msg, msg)
		}
		return c
	}
	insert := func(lines [][]byte, i int, line []byte) [][]byte {
		return append(lines[:i:i], append([][]byte{line}, lines[i:]...)...)
	}
	add("ndjson",
		imp("truncated line", 5, canon.ErrSyntax, "found end of input", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			ls[4] = append(ls[4][:len(ls[4])/2:len(ls[4])/2], '\n')
			return ls
		}),
		imp("truncated last line without a newline", 12, canon.ErrSyntax, "found end of input", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			ls[11] = ls[11][:len(ls[11])-20]
			return ls
		}),
		imp("lines reordered", 6, ndjson.ErrMismatch, "(checksum differs: the content or the chain was altered)", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			ls[5], ls[6] = ls[6], ls[5]
			return ls
		}),
		imp("a line twice", 5, ndjson.ErrMismatch, "event ID mismatch", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			return insert(ls, 4, ls[3])
		}),
		imp("a line of another ledger", 6, ndjson.ErrMismatch, "(the eventId names ledger e95bff80, not 9e961c04)", func(_ *testing.T, ls, other [][]byte) [][]byte {
			return insert(ls, 5, other[1])
		}),
		imp("another ledger's genesis first", 2, ndjson.ErrMismatch, "(the eventId names ledger 9e961c04, not e95bff80)", func(_ *testing.T, ls, other [][]byte) [][]byte {
			return append([][]byte{other[0]}, ls[1:]...)
		}),
		imp("no genesis line", 1, ndjson.ErrMismatch, "; the first line must be the ledger's genesis event, whose content gives the ledger ID", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			return ls[1:]
		}),
		imp("unknown member", 3, ndjson.ErrUnknownField, `ndjson: unknown field "x"`, func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[2] = badLineWith(t, ls[2], `{"entity"`, `{"x":1,"entity"`)
			return ls
		}),
		imp("missing member", 4, ndjson.ErrMissingField, `ndjson: missing field "meta"`, func(t *testing.T, ls, _ [][]byte) [][]byte {
			i, j := bytes.Index(ls[3], []byte(`,"meta":`)), bytes.Index(ls[3], []byte(`,"data":`))
			ls[3] = append(ls[3][:i:i], ls[3][j:]...)
			return ls
		}),
		imp("member twice", 4, canon.ErrDuplicateKey, `duplicate key "entity"`, func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[3] = badLineWith(t, ls[3], `{"entity"`, `{"entity":"x","entity"`)
			return ls
		}),
		imp("timestamp with 2 fraction digits", 3, ndjson.ErrTimestamp, "ndjson: bad timestamp", func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[2] = badFraction(t, ls[2], "88")
			return ls
		}),
		imp("timestamp with 7 fraction digits", 3, ndjson.ErrTimestamp, "ndjson: bad timestamp", func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[2] = badFraction(t, ls[2], "0883863")
			return ls
		}),
		imp("timestamp with an offset", 7, ndjson.ErrTimestamp, "ndjson: bad timestamp", func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[6] = badLineWith(t, ls[6], `Z","meta"`, `+00:00","meta"`)
			return ls
		}),
		imp("not JSON", 6, canon.ErrSyntax, "", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			return insert(ls, 5, []byte("hello\n"))
		}),
		imp("eventId changed", 4, ndjson.ErrMismatch, "(checksum differs: the content or the chain was altered)", func(t *testing.T, ls, _ [][]byte) [][]byte {
			i := bytes.Index(ls[3], []byte(`"eventId":"`)) + len(`"eventId":"`) + 20
			ls[3][i] = "01"[min(int(ls[3][i]-'0'), 1)^1]
			return ls
		}),
		imp("eventId not an ID", 4, ndjson.ErrFieldType, `eventId must be a string of 32 hex characters, found "nope"`, func(t *testing.T, ls, _ [][]byte) [][]byte {
			i := bytes.Index(ls[3], []byte(`"eventId":"`)) + len(`"eventId":"`)
			ls[3] = append(append(ls[3][:i:i], "nope"...), ls[3][i+32:]...)
			return ls
		}),
		imp("data changed", 9, ndjson.ErrMismatch, "(checksum differs: the content or the chain was altered)", func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[8] = badLineWith(t, ls[8], `"country":"`, `"country":"X`)
			return ls
		}),
		imp("empty line", 7, ndjson.ErrEmptyLine, "ndjson: empty line", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			return insert(ls, 6, []byte("\n"))
		}),
		imp("line of blanks", 7, ndjson.ErrEmptyLine, "ndjson: empty line", func(_ *testing.T, ls, _ [][]byte) [][]byte {
			return insert(ls, 6, []byte(" \t \r\n"))
		}),
		imp("invalid UTF-8 in a name", 2, canon.ErrInvalidUTF8, "invalid UTF-8 byte 0xff", func(t *testing.T, ls, _ [][]byte) [][]byte {
			ls[1] = badLineWith(t, ls[1], `"key":"Frances_Graves"`, "\"key\":\"Frances\xffGraves\"")
			return ls
		}),
		badCase{name: "empty input", do: func(ctx context.Context, _ *testing.T, f *badFixture) error { return f.importLines(ctx) },
			is: []error{ErrInvalid, ndjson.ErrNoEvents}, msg: []string{"import: ndjson: no events"}},
		badCase{name: "data nested 1001 deep", do: badImportData("deep1001", badNested("[", "]", canon.MaxDepth+1, "")),
			is: []error{ErrInvalid, canon.ErrTooDeep}, msg: []string{"import: line 2: canon: array nested deeper than MaxDepth (1000) at offset "}},
		// What Append accepts, Export writes and Import reads back: the
		// line's object takes no level of the data's depth.
		badCase{name: "data nested exactly 1000 deep (accepted)", do: badImportData("deep1000", badNested("[", "]", canon.MaxDepth, "")), stores: 2},
	)

	// Damaged files of a closed data directory.
	lastRecord := func(tpl *badTemplate, n uint64) segment.Location {
		recs := tpl.records(n)
		return recs[len(recs)-1]
	}
	corrupt := []error{segment.ErrCorruption}
	add("files",
		badCase{name: "sealed segment cut inside a record", outcome: badRefused, is: corrupt,
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				last := lastRecord(tpl, 1)
				badRewrite(t, badVictimSeg(1)(t, dir, tpl), func(b []byte) []byte { return b[:last.Offset+last.Size/2] })
			},
			segNum: badSegFile(1), offset: func(tpl *badTemplate) int64 { return lastRecord(tpl, 1).Offset }},
		badCase{name: "sealed segment cut at a record boundary", outcome: badRefused, is: corrupt, msg: []string{"segment does not continue the chain of the segment before"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				last := lastRecord(tpl, 1)
				badRewrite(t, badVictimSeg(1)(t, dir, tpl), func(b []byte) []byte { return b[:last.Offset] })
			},
			segNum: badSegFile(2), offset: badAt(24)},
		badCase{name: "zeroed sector in a sealed segment", outcome: badRefused, is: corrupt, msg: []string{"frame CRC mismatch"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(2)(t, dir, tpl), func(b []byte) []byte { copy(b[1024:1536], make([]byte, 512)); return b })
			},
			segNum: badSegFile(2), offset: func(tpl *badTemplate) int64 { return tpl.recordAt(2, 1024) }},
		badCase{name: "one bit flipped in a sealed segment", outcome: badRefused, is: corrupt, msg: []string{"frame CRC mismatch"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(2)(t, dir, tpl), func(b []byte) []byte { b[700] ^= 0x10; return b })
			},
			segNum: badSegFile(2), offset: func(tpl *badTemplate) int64 { return tpl.recordAt(2, 700) }},
		badCase{name: "sealed segment zeroed", outcome: badRefused, is: corrupt, msg: []string{"segment header missing"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(2)(t, dir, tpl), badZeros)
			},
			segNum: badSegFile(2), offset: badAt(0)},
		badCase{name: "sealed segment emptied", outcome: badRefused, is: corrupt, msg: []string{"segment header missing in a sealed segment"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(2)(t, dir, tpl), badEmpty)
			},
			segNum: badSegFile(2), offset: badAt(0)},
		badCase{name: "two segments swapped", outcome: badRefused, is: corrupt, msg: []string{"segment number differs from the file name (expected 1, found 2)"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				a, b := badVictimSeg(1)(t, dir, tpl), badVictimSeg(2)(t, dir, tpl)
				for _, step := range [][2]string{{a, a + ".x"}, {b, a}, {a + ".x", b}} {
					if err := os.Rename(step[0], step[1]); err != nil {
						t.Fatal(err)
					}
				}
			},
			segNum: badSegFile(1), offset: badAt(16)},
		badCase{name: "segment of another ledger", outcome: badRefused, is: corrupt, msg: []string{"segment of another ledger"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				b, err := os.ReadFile(tpl.segPath(dir, tpl.bystander.ID, 1))
				if err != nil {
					t.Fatal(err)
				}
				badRewrite(t, badVictimSeg(2)(t, dir, tpl), func([]byte) []byte { return b })
			},
			segNum: badSegFile(2), offset: badAt(12)},
		badCase{name: "segment of a newer format version", outcome: badRefused, is: []error{segment.ErrFormatVersion}, not: corrupt,
			msg: []string{"00000000000000000001.seg: segment: unsupported format version 2 (this annal reads up to 1)"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(1)(t, dir, tpl), func(b []byte) []byte {
					binary.BigEndian.PutUint16(b[8:], 2)
					// Sealed as a newer annal would write it.
					binary.BigEndian.PutUint32(b[60:], crc32.Checksum(b[:60], crc32.MakeTable(crc32.Castagnoli)))
					return b
				})
			}},
		badCase{name: "segment missing", outcome: badRefused, is: corrupt, msg: []string{"segment missing"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				if err := os.Remove(badVictimSeg(2)(t, dir, tpl)); err != nil {
					t.Fatal(err)
				}
			},
			segNum: badSegFile(2), offset: badAt(0)},
		badCase{name: "segment from the future", outcome: badRefused, is: corrupt, msg: []string{"segment number differs from the file name"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				b, err := os.ReadFile(badVictimSeg(tpl.segs)(t, dir, tpl))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(badVictimSeg(tpl.segs+1)(t, dir, tpl), b, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			segNum: func(tpl *badTemplate) uint64 { return tpl.segs + 1 }, offset: badAt(16)},
		badCase{name: "last segment's header zeroed", outcome: badRefused, is: corrupt, msg: []string{"segment header missing: its 64 bytes are zeros, but"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				badRewrite(t, badVictimSeg(tpl.segs)(t, dir, tpl), func(b []byte) []byte { copy(b, make([]byte, 64)); return b })
			},
			segNum: badLastSeg, offset: badAt(0)},
		badCase{name: "one bit flipped in the last record", outcome: badRefused, is: corrupt, msg: []string{"frame CRC mismatch"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				last := lastRecord(tpl, tpl.segs)
				badRewrite(t, badVictimSeg(tpl.segs)(t, dir, tpl), func(b []byte) []byte { b[last.Offset+last.Size-3] ^= 1; return b })
			},
			segNum: badLastSeg, offset: func(tpl *badTemplate) int64 { return lastRecord(tpl, tpl.segs).Offset }},

		badCase{name: "index table truncated", outcome: badRebuilt, msg: badRebuiltMsg, damage: badIndexFiles(badSuffix(".sst"), badHalve)},
		badCase{name: "index table zeroed", outcome: badRebuilt, msg: badRebuiltMsg, damage: badIndexFiles(badSuffix(".sst"), badZeros)},
		badCase{name: "index manifest zeroed", outcome: badRebuilt, msg: badRebuiltMsg, damage: badIndexFiles(badPrefix("MANIFEST-"), badZeros)},
		badCase{name: "index options file zeroed", outcome: badRebuilt, msg: badRebuiltMsg, damage: badIndexFiles(badPrefix("OPTIONS-"), badZeros)},
		badCase{name: "every index file emptied", outcome: badRebuilt, msg: badRebuiltMsg, damage: badIndexFiles(func(string) bool { return true }, badEmpty)},

		badCase{name: "meta.db zeroed", outcome: badOpenFails, is: []error{bolterrors.ErrInvalid}, msg: []string{"engine: open metadata ", "meta.db: invalid database"},
			damage: badMetaChange(badZeros)},
		badCase{name: "meta.db cut to one page", outcome: badOpenFails, msg: []string{"engine: open metadata ", "meta.db: file size too small 4096"},
			damage: badMetaChange(func(b []byte) []byte { return b[:badBoltPage] })},
		badCase{name: "meta.db pages after the meta pages zeroed", outcome: badOpenFails, msg: []string{"meta.db is damaged: invalid freelist page"},
			damage: badMetaChange(func(b []byte) []byte { copy(b[2*badBoltPage:], make([]byte, len(b)-2*badBoltPage)); return b })},
		badCase{name: "meta.db pages after the meta pages garbled", outcome: badOpenFails, msg: []string{"meta.db is damaged: "},
			damage: badMetaChange(func(b []byte) []byte {
				for i := 2 * badBoltPage; i < len(b); i++ {
					b[i] = byte(i * 7)
				}
				return b
			})},
		badCase{name: "meta.db record not JSON", outcome: badOpenFails, msg: []string{"meta.db: the record of ledger ", " is unreadable: invalid character"},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				db, err := bolt.Open(filepath.Join(dir, metaFile), 0o600, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if err := db.Update(func(tx *bolt.Tx) error {
					return tx.Bucket(meta.BucketLedgers).Put([]byte(tpl.victim.ID.String()), []byte("{not json"))
				}); err != nil {
					t.Fatal(err)
				}
			}},
		badCase{name: "meta.db a directory", outcome: badOpenFails, msg: []string{"meta.db is not a regular file (a directory)"},
			damage: func(t *testing.T, dir string, _ *badTemplate) {
				p := filepath.Join(dir, metaFile)
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
			}},
		// bbolt's file is often longer than the pages it uses (its high-
		// water mark): where half of it falls depends on the template's
		// history, so the cuts are made relative to the mark.
		badCase{name: "meta.db cut to the pages it uses (tolerated)", outcome: badTolerated, damage: badMetaCut(0)},
		badCase{name: "meta.db cut into the pages it uses", outcome: badOpenFails, msg: []string{"meta.db is damaged: it is cut short: its pages run to byte "},
			damage: badMetaCut(badBoltPage)},
		badCase{name: "meta.db emptied (rebuilt from the segments)", outcome: badTolerated, damage: badMetaChange(badEmpty)},

		badCase{name: "ledger directory not named by a ledger ID (ignored)", outcome: badTolerated,
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				copyTree(t, filepath.Join(dir, ledgersDir, tpl.victim.ID.String()), filepath.Join(dir, ledgersDir, "not-a-ledger"))
			}},
		badCase{name: "upper-case copy of a ledger directory (ignored)", outcome: badTolerated,
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				copyTree(t, filepath.Join(dir, ledgersDir, tpl.victim.ID.String()), filepath.Join(dir, ledgersDir, strings.ToUpper(tpl.victim.ID.String())))
			}},
		badCase{name: "ledger directory renamed to upper case", outcome: badRefused, is: []error{ErrLedgerUnavailable}, msg: []string{`"victim"): its segment directory is missing`},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				p := filepath.Join(dir, ledgersDir, tpl.victim.ID.String())
				if err := os.Rename(p, filepath.Join(dir, ledgersDir, strings.ToUpper(tpl.victim.ID.String()))); err != nil {
					t.Fatal(err)
				}
			}},
		badCase{name: "a file where a ledger directory belongs", outcome: badRefused, is: []error{ErrLedgerUnavailable}, msg: []string{`"victim"): its segment directory is missing`},
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				p := filepath.Join(dir, ledgersDir, tpl.victim.ID.String())
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("not a directory"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
		badCase{name: "a stray file among the segments (ignored)", outcome: badTolerated,
			damage: func(t *testing.T, dir string, tpl *badTemplate) {
				if err := os.WriteFile(filepath.Join(dir, ledgersDir, tpl.victim.ID.String(), "notes.txt"), []byte("hello"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
	)
	return cases
}

var badRebuiltMsg = []string{"engine: the index could not be opened and was rebuilt from the segments (the old one is in ", "index.broken): index: open "}

// withFraction returns line with the fraction digits of its timestamp
// replaced by digits.
func badFraction(t *testing.T, line []byte, digits string) []byte {
	t.Helper()
	i := bytes.Index(line, []byte(`"timestamp":"`))
	j := bytes.Index(line, []byte(`Z","meta"`))
	if i < 0 || j < 0 {
		t.Fatalf("no timestamp in %s", line)
	}
	dot := i + bytes.IndexByte(line[i:j], '.')
	return append(append(bytes.Clone(line[:dot+1]), digits...), line[j:]...)
}

// importData imports a ledger of a genesis event and one event with data.
func badImportData(name, data string) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, _ *testing.T, f *badFixture) error {
		_, err := f.db.Import(ctx, bytes.NewReader(badNDJSONLedger(name, data)), ImportOptions{})
		return err
	}
}

func badCreateCase(spec LedgerSpec) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, _ *testing.T, f *badFixture) error {
		_, err := f.db.CreateLedger(ctx, spec)
		return err
	}
}

func badOptionsCase(o *AppendOptions) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, _ *testing.T, f *badFixture) error {
		_, err := f.db.Append(ctx, "l", []EventInput{order(1)}, o)
		return err
	}
}

func badSeqCase(ledger string, seq uint64) func(context.Context, *testing.T, *badFixture) error {
	return func(ctx context.Context, _ *testing.T, f *badFixture) error {
		_, err := f.db.GetSeq(ctx, ledger, seq)
		return err
	}
}

// openCase opens a new data directory with bad options: Open must fail,
// and create nothing.
func badOpenCase(o Options) func(context.Context, *testing.T, *badFixture) error {
	return func(_ context.Context, t *testing.T, _ *badFixture) error {
		dir := filepath.Join(t.TempDir(), "new")
		db, err := Open(dir, &o)
		if db != nil {
			db.Close()
		}
		if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("Open with bad options created %s (%v)", dir, serr)
		}
		return err
	}
}

// hugeBatch appends a batch whose frames add up to more than the 1 GiB a
// segment batch may hold: every name 1024 bytes (one string shared by all
// the events), meta {} and data 0.
func badHugeBatch(ctx context.Context, _ *testing.T, f *badFixture) error {
	name := strings.Repeat("n", maxNameLen)
	const frame = 12 + 56 + 3*maxNameLen + 2 + 1
	evs := make([]EventInput, (1<<30)/frame+1)
	meta, data := []byte(`{}`), []byte(`0`)
	for i := range evs {
		evs[i] = EventInput{Entity: name, Key: name, Event: name, Meta: meta, Data: data}
	}
	return f.append(ctx, evs...)
}
