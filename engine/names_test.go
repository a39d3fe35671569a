package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/engine/ndjson"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of ledger names: the rule every name follows, and names that stay
// unique and the ledger's own through a lost metadata file, a killed
// import and a rebuild that meets a duplicate.

// namesTime is the creation time of the genesis events the tests write.
var namesTime = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// ledgerNames returns the names Ledgers lists, with their IDs.
func ledgerNames(db *DB) map[string]eventid.LedgerID {
	out := map[string]eventid.LedgerID{}
	for _, l := range db.Ledgers() {
		out[l.Name] = l.ID
	}
	return out
}

// exportLedger exports a whole ledger.
func exportLedger(t *testing.T, db *DB, ledger string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := db.Export(context.Background(), ledger, &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestNamesSurviveLostMetadata: "orders" created in two
// directories, one exported and imported into the other under another
// name, then meta.db removed. Both ledgers must come back under their own
// names, and a name must lead to its own ledger.
func TestNamesSurviveLostMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	shopA, shopB := t.TempDir(), t.TempDir()
	a := openTest(t, shopA)
	infoA, err := a.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, a, "orders", 1, appendSpec{From: 1})[0].Ledger()
	exported := exportLedger(t, a, "orders")
	a.Close()

	b := openTest(t, shopB)
	infoB, err := b.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if infoA.ID == infoB.ID {
		t.Fatalf("both ledgers have the ID %s", infoA.ID)
	}
	appendEvents(t, b, "orders", 1, appendSpec{From: 1})[0].Ledger()
	imported := importBytes(t, b, exported, ImportOptions{Name: "orders-from-shop-a"})
	if imported.ID != infoA.ID {
		t.Fatalf("imported %s, want %s", imported.ID, infoA.ID)
	}
	b.Close()
	if err := os.Remove(filepath.Join(shopB, metaFile)); err != nil {
		t.Fatal(err)
	}

	b = openTest(t, shopB)
	defer b.Close()
	want := map[string]eventid.LedgerID{"orders": infoB.ID, "orders-from-shop-a": infoA.ID}
	if got := ledgerNames(b); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after losing meta.db the ledgers are %v, want %v", got, want)
	}
	if r := b.Renamed(); len(r) != 0 {
		t.Fatalf("renamed %v", r)
	}
	for name, id := range want {
		if info, err := b.Ledger(name); err != nil || info.ID != id {
			t.Fatalf("Ledger(%q) = %s %v, want %s", name, info.ID, err, id)
		}
		if got := appendEvents(t, b, name, 1, appendSpec{From: 1})[0].Ledger(); got != id {
			t.Fatalf("an append to %q went to ledger %s, want %s", name, got, id)
		}
	}
	if info, err := b.Ledger(infoA.ID.String()); err != nil || info.Name != "orders-from-shop-a" || info.Count != 3 {
		t.Fatalf("Ledger(%s) = %+v %v", infoA.ID, info, err)
	}
}

// TestNamesRebuildMeetsDuplicate loses the NAME files too, as in a
// directory an older annal wrote, so that the rebuild from the genesis
// events meets two "orders": the one created first keeps the name, the
// other gets a derived one, both stay reachable, and Open says so once.
func TestNamesRebuildMeetsDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	shopA, shopB := t.TempDir(), t.TempDir()
	a := openTest(t, shopA)
	infoA, err := a.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	exported := exportLedger(t, a, "orders")
	a.Close()
	b := openTest(t, shopB)
	infoB, err := b.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	importBytes(t, b, exported, ImportOptions{Name: "orders-from-shop-a"})
	b.Close()
	for _, p := range []string{metaFile, filepath.Join(ledgersDir, infoA.ID.String(), nameFile), filepath.Join(ledgersDir, infoB.ID.String(), nameFile)} {
		if err := os.Remove(filepath.Join(shopB, p)); err != nil {
			t.Fatal(err)
		}
	}
	// A was created first.
	first, second := infoA, infoB
	if infoB.Genesis.Compare(infoA.Genesis) < 0 {
		first, second = infoB, infoA
	}
	derived := "orders~" + second.ID.String()
	for reopen := range 2 {
		b = openTest(t, shopB)
		want := map[string]eventid.LedgerID{"orders": first.ID, derived: second.ID}
		if got := ledgerNames(b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("open %d: ledgers %v, want %v", reopen, got, want)
		}
		r := b.Renamed()
		if reopen == 0 && (len(r) != 1 || r[0].Ledger != second.ID || r[0].From != "orders" || r[0].To != derived ||
			!strings.Contains(r[0].String(), "ledger "+first.ID.String()+" has the name \"orders\"")) {
			t.Fatalf("first open: renamed %v", r)
		}
		if reopen == 1 && len(r) != 0 {
			t.Fatalf("second open: renamed %v again", r)
		}
		for name, id := range want {
			if got := appendEvents(t, b, name, 1, appendSpec{From: 1})[0].Ledger(); got != id {
				t.Fatalf("an append to %q went to ledger %s, want %s", name, got, id)
			}
		}
		b.Close()
	}
	if p := names.LedgerProblem(derived, second.ID.String()); p != "" {
		t.Fatalf("the derived name breaks the rule: %s", p)
	}
}

// TestNamesCopiedLedgerDirectory copies a ledger directory in from another
// data directory, where it has the name of a ledger here: the ledger this
// directory's metadata knows by the name keeps it.
func TestNamesCopiedLedgerDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other, here := t.TempDir(), t.TempDir()
	// Created first, so that only the metadata can make the local one win.
	o := openTest(t, other)
	infoO, err := o.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	h := openTest(t, here)
	infoH, err := h.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	copyTree(t, filepath.Join(other, ledgersDir, infoO.ID.String()), filepath.Join(here, ledgersDir, infoO.ID.String()))
	// Its checkpoint is signed by the other directory's key, which this
	// one refuses (TestMerkleForgedCheckpointRefused): removed; a ledger
	// of only its genesis event without a checkpoint is signed at Open.
	os.Remove(filepath.Join(here, ledgersDir, infoO.ID.String(), checkpointFileName))
	h = openTest(t, here)
	defer h.Close()
	derived := "orders~" + infoO.ID.String()
	want := map[string]eventid.LedgerID{"orders": infoH.ID, derived: infoO.ID}
	if got := ledgerNames(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ledgers %v, want %v", got, want)
	}
	if r := h.Renamed(); len(r) != 1 || r[0].Ledger != infoO.ID || r[0].To != derived {
		t.Fatalf("renamed %v", r)
	}
	if got := appendEvents(t, h, "orders", 1, appendSpec{From: 1})[0].Ledger(); got != infoH.ID {
		t.Fatalf("an append to orders went to %s, want %s", got, infoH.ID)
	}
}

// runKilledChild runs the test named test of this binary in a child
// process, with env added to its environment, and fails t unless the child
// ends killed by SIGKILL (which such a child sends itself).
func runKilledChild(t *testing.T, test string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed: %v\n%s", err, out)
	}
}

// The child process of TestNamesImportKilledInCommit.
const (
	namesKillDirEnv   = "ANNAL_NAMES_KILL_DIR"
	namesKillStepEnv  = "ANNAL_NAMES_KILL_STEP"
	namesKillInputEnv = "ANNAL_NAMES_KILL_INPUT"
)

// TestNamesImportKillChild is the child process of
// TestNamesImportKilledInCommit; it returns at once unless
// ANNAL_NAMES_KILL_DIR is set. It imports a file under the name "imp" and
// kills itself with SIGKILL at a step of the import's commit.
func TestNamesImportKillChild(t *testing.T) {
	dir := os.Getenv(namesKillDirEnv)
	if dir == "" {
		return
	}
	step := os.Getenv(namesKillStepEnv)
	in, err := os.ReadFile(os.Getenv(namesKillInputEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	db, err := Open(dir, nil)
	if err == nil {
		db.test.importCommit = func(s string) {
			if s == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		_, err = db.Import(context.Background(), bytes.NewReader(in), ImportOptions{Name: "imp"})
	}
	fmt.Fprintln(os.Stderr, "child: not killed:", err)
	os.Exit(3)
}

// TestNamesImportKilledInCommit is TestNamesSurviveLostMetadata's
// second case: an import
// under a chosen name killed after its segments are in place and before
// its metadata is written. The genesis event names the ledger "preview",
// the name of a live ledger: after the kill, Open must list the imported
// ledger under its chosen name, and leave the live one its own.
func TestNamesImportKilledInCommit(t *testing.T) {
	in := vector(t, examplesFile)
	input := filepath.Join(t.TempDir(), "in.ndjson")
	if err := os.WriteFile(input, in, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"renamed", "indexed"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir)
			live, err := db.CreateLedger(context.Background(), LedgerSpec{Name: "preview"})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			runKilledChild(t, "TestNamesImportKillChild", namesKillDirEnv+"="+dir, namesKillStepEnv+"="+step, namesKillInputEnv+"="+input)
			db = openTest(t, dir)
			defer db.Close()
			want := map[string]eventid.LedgerID{"preview": live.ID, "imp": 0x9e961c04}
			if got := ledgerNames(db); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after the kill: ledgers %v, want %v (unavailable %v)", got, want, db.Unavailable())
			}
			if r := db.Renamed(); len(r) != 0 {
				t.Fatalf("renamed %v", r)
			}
			if info, err := db.Ledger("imp"); err != nil || info.Count != 11550 {
				t.Fatalf("imp: %+v %v", info, err)
			}
			if got := appendEvents(t, db, "preview", 1, appendSpec{From: 1})[0].Ledger(); got != live.ID {
				t.Fatalf("an append to preview went to %s, want %s", got, live.ID)
			}
			if _, err := db.Verify(context.Background(), "imp", nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// badLedgerNames are names the rule refuses, with what the error says.
var badLedgerNames = []struct{ name, says string }{
	{"orders\u202e", `"orders\u202e" has an invisible or bidirectional formatting character U+202E at byte 6`},
	{"ord\u200bers", `U+200B at byte 3`},
	{"\ufefforders", `U+FEFF at byte 0`},
	{"a\u2066b\u2069", `U+2066 at byte 1`},
	{"line\u2028sep", `U+2028 at byte 4`},
	{"a\x1b[31mred", `"a\x1b[31mred" has a control character at byte 1`},
	{"a\x00b", `has a control character at byte 1`},
	{"a\nb", `has a control character at byte 1`},
	{"", `is empty`},
	{"40c9f5bc", `"40c9f5bc" reads as a ledger ID (8 hex digits); a name cannot be one`},
	{"DEADBEEF", `reads as a ledger ID`},
	{strings.Repeat("n", 1025), `is 1025 bytes, the limit is 1024`},
	{" orders", `begins with white space`},
	{"orders\u00a0", `ends with white space`},
	{"orders~9e961c04", `ends in ~ and 8 hex digits, a form reserved for the names annal derives`},
	{"\xffbad", `is not valid UTF-8`},
}

// TestLedgerNameRule checks the rule at CreateLedger and at Import (its
// Name, and the name an import takes from the genesis event): each bad
// name is ErrInvalid, saying what is wrong, and leaves nothing behind.
func TestLedgerNameRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := vector(t, twoEventFile)
	dir := t.TempDir()
	db := openTest(t, dir)
	defer db.Close()
	other, err := db.CreateLedger(ctx, LedgerSpec{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	bad := append(badLedgerNames, struct{ name, says string }{other.ID.String(), "reads as a ledger ID"})
	for _, tc := range bad {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: tc.name}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ledger name ") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CreateLedger(%q): %v, want ErrInvalid saying %s", tc.name, err, tc.says)
		}
		if tc.name == "" {
			continue // an empty Name is the genesis event's
		}
		if _, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{Name: tc.name}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Import(Name %q): %v, want ErrInvalid saying %s", tc.name, err, tc.says)
		}
		if !utf8.ValidString(tc.name) {
			continue // NDJSON, being JSON, cannot carry it
		}
		// The name an import takes from its genesis event: the genesis
		// event's key may hold what a ledger name may not (a control
		// character included), and the import asks for a name.
		want := "choose a name"
		_, err := db.Import(ctx, bytes.NewReader(ndjsonLedger(tc.name, [3]string{"e", "k", "v"})), ImportOptions{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), want) {
			t.Errorf("Import of a genesis named %q: %v, want ErrInvalid saying %s and %s", tc.name, err, tc.says, want)
		}
	}
	if got := ledgerNames(db); len(got) != 1 {
		t.Fatalf("ledgers after the refusals: %v", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, ledgersDir)); len(entries) != 1 {
		t.Fatalf("%s holds %d entries", ledgersDir, len(entries))
	}
	if info, err := db.Ledger(other.ID.String()); err != nil || info.Name != "other" {
		t.Fatalf("Ledger(%s): %+v %v", other.ID, info, err)
	}
	// Names the rule accepts.
	for _, name := range []string{"orders~x", "orders-2026", "20261123x", "a b", "📒 Ledger", "Évolution", "x~deadbeef~", strings.Repeat("é", 512)} {
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: name}); err != nil {
			t.Errorf("CreateLedger(%q): %v", name, err)
		}
		if _, err := db.Ledger(name); err != nil {
			t.Errorf("Ledger(%q): %v", name, err)
		}
	}
}

// ndjsonLedger makes an NDJSON ledger whose genesis event has the key and
// data name genesisName, followed by events with these entity, key and
// event names, with correct IDs.
func ndjsonLedger(genesisName string, events ...[3]string) []byte {
	data, _ := canonJSONName(genesisName)
	g := eventid.Content{Entity: "ledger", Key: genesisName, Event: "ledger-created", Meta: []byte(`{}`), Data: data}
	ledger := g.LedgerID()
	prev := g.ID(ledger, 1000, eventid.Genesis(ledger))
	out := ndjson.AppendLine(nil, prev, 1000, g.Entity, g.Key, g.Event, g.Meta, g.Data)
	for i, e := range events {
		c := eventid.Content{Entity: e[0], Key: e[1], Event: e[2], Meta: []byte(`{}`), Data: []byte(`1`)}
		micros := uint64(2000 + i)
		id := c.ID(ledger, micros, prev)
		out = ndjson.AppendLine(out, id, micros, c.Entity, c.Key, c.Event, c.Meta, c.Data)
		prev = id
	}
	return out
}

// canonJSONName returns {"name":NAME} in canonical JSON, as the genesis
// event of CreateLedger holds it.
func canonJSONName(name string) ([]byte, error) {
	g, err := genesisEvent(LedgerSpec{Name: name}, namesTime)
	return g.Data, err
}

// TestImportNameRule checks the rule for the entity, key and event names
// a ledger may hold at Import: a line whose name is empty or longer than
// the segment format's limit is ErrInvalid naming the line, though its ID
// verifies, and nothing is imported. Every other name imports
// (TestImportKeepsVerifiedNames).
func TestImportNameRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		event [3]string
		says  string
	}{
		{[3]string{"e", "", "v"}, `line 3: key is empty`},
		{[3]string{"", "k", "v"}, `line 3: entity is empty`},
		{[3]string{"e", "k", ""}, `line 3: event name is empty`},
		{[3]string{"e", strings.Repeat("k", names.MaxStoredLen+1), "v"}, `line 3: key is 65536 bytes, the limit is 65535`},
	} {
		dir := t.TempDir()
		db := openTest(t, dir)
		in := ndjsonLedger("fine", [3]string{"e", "k", "v"}, tc.event, [3]string{"e", "k", "v"})
		_, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{})
		var le *ndjson.LineError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("import with %.40q: %v, want ErrInvalid saying %s", tc.event, err, tc.says)
		}
		if got := ledgerNames(db); len(got) != 0 {
			t.Errorf("ledgers after the refusal: %v", got)
		}
		if entries, _ := os.ReadDir(filepath.Join(dir, ledgersDir)); len(entries) != 0 {
			t.Errorf("%s holds %s after the refusal", ledgersDir, entries[0].Name())
		}
		db.Close()
	}
}

// storedNames are entity, key and event names that Append refuses (a
// control character: C0, DEL, C1; longer than 1024 bytes) or takes
// (separators, format and bidirectional characters), which a ledger
// written by another implementation may hold: its IDs checksum the
// bytes. "a\x00"/"b" and "a"/"\x00b" would be one stream if a NUL
// separated entity and key in the index.
var storedNames = [][3]string{
	{"tab\tentity", "key\twith\ttabs", "tab\tname"},
	{"nul\x00entity", "\x00", "nul\x00"},
	{"a\x00", "b", "del\x7f"},
	{"a", "\x00b", "c1\u0085\u009b"},
	{"esc", "\x1b[31mred\x1b[0m", "bell\x07"},
	{"lines", "a\nb\rc", "\u2028\u2029"},
	{"order\u202e", "k\u200b-1\ufeff", "\u2066x\u2069"},
	{"mix\t\x00\u2028", "\x01\x1f\x7f\u0080\u009f", "\u202e\x00\t"},
	{"long", strings.Repeat("k", 1025), strings.Repeat("é", names.MaxStoredLen/2)},
}

// TestImportKeepsVerifiedNames imports a ledger whose names Append's rule
// refuses, and checks that it is kept byte for byte: its export is the
// input, each event reads by ID and by its stream, entity and event name,
// and Subscribe selects by them (the NUL-holding neighbours apart), its
// stream heads read and guard an append, Verify passes, and all of it
// again after a reopen and after the index is rebuilt from the segments.
// Append still refuses the names.
func TestImportKeepsVerifiedNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := ndjsonLedger("stored", storedNames...)
	dir := t.TempDir()
	db := openTest(t, dir)
	defer func() { db.Close() }()
	info, err := db.Import(ctx, bytes.NewReader(in), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ids := rewrite(t, in)
	check := func(when string) {
		t.Helper()
		if out, n := exportBytes(t, db, "stored", ExportOptions{}); !bytes.Equal(out, in) || n != int64(len(ids)) {
			t.Errorf("%s: the export (%d events) is not the input:\n%q\nwant\n%q", when, n, out, in)
		}
		if _, err := db.Verify(ctx, "stored", nil); err != nil {
			t.Errorf("%s: verify: %v", when, err)
		}
		for i, nm := range storedNames {
			id := ids[i+1]
			ev, err := db.Get(ctx, id)
			if err != nil || ev.Entity != nm[0] || ev.Key != nm[1] || ev.Event != nm[2] || ev.Seq != uint64(i+2) {
				t.Errorf("%s: Get(%s): %.60q %.60q %.60q #%d, %v; want %.60q", when, id, ev.Entity, ev.Key, ev.Event, ev.Seq, err, nm)
			}
			for what, o := range map[string]ReplayOptions{
				"stream": {Entity: nm[0], Keys: []string{nm[1]}},
				"entity": {Entity: nm[0]},
				"name":   {Events: []string{nm[2]}},
			} {
				var got []eventid.ID
				for ev, err := range db.Replay(ctx, "stored", o) {
					if err != nil {
						t.Fatalf("%s: replay of the %s of %.60q: %v", when, what, nm, err)
					}
					got = append(got, ev.ID)
				}
				if len(got) != 1 || got[0] != id {
					t.Errorf("%s: replay of the %s of %.60q: %v, want [%s]", when, what, nm, got, id)
				}
			}
			h, err := db.StreamHead(ctx, "stored", nm[0], nm[1])
			if err != nil || h.ID != id {
				t.Errorf("%s: StreamHead(%.60q, %.60q) = %s, %v; want %s", when, nm[0], nm[1], h.ID, err, id)
			}
		}
		// Subscribe's selector, from the genesis event: the first event
		// of stream "a"/"\x00b" is its own, not that of "a\x00"/"b",
		// which comes first.
		sctx, cancel := context.WithCancel(ctx)
		for ev, err := range db.Subscribe(sctx, "stored", SubscribeOptions{Entity: "a", Keys: []string{"\x00b"}, AfterSeq: 1}) {
			if err != nil || ev.ID != ids[4] {
				t.Errorf("%s: Subscribe to \"a\"/\"\\x00b\": %s %q/%q, %v; want %s", when, ev.ID, ev.Entity, ev.Key, err, ids[4])
			}
			break
		}
		cancel()
	}
	check("imported")

	// Append keeps its own rule: the control characters and the length
	// are refused in a new event, and nothing is appended.
	for _, nm := range storedNames {
		if names.Problem(nm[0]) == "" && names.Problem(nm[1]) == "" && names.Problem(nm[2]) == "" {
			continue
		}
		if _, err := db.Append(ctx, "stored", []EventInput{{Entity: nm[0], Key: nm[1], Event: nm[2], Data: []byte(`1`)}}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Append of %.60q: %v, want ErrInvalid", nm, err)
		}
	}
	// A stream with such names guards an append by its head.
	guard := func(head eventid.ID) error {
		_, err := db.Append(ctx, "stored", []EventInput{{Entity: "e", Key: "k", Event: "v", Data: []byte(`1`)}},
			&AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: storedNames[0][0], Key: storedNames[0][1], Head: head}}})
		return err
	}
	var ce *ConditionError
	if err := guard(ids[0]); !errors.As(err, &ce) || ce.Found != ids[1] {
		t.Fatalf("append expecting a stale head of %q: %v, want a ConditionError finding %s", storedNames[0][:2], err, ids[1])
	}
	if err := guard(ids[1]); err != nil {
		t.Fatalf("append expecting the head of %q: %v", storedNames[0][:2], err)
	}
	in = append(in, exportTail(t, db, "stored", info.Head)...)
	_, ids = rewrite(t, in)

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	check("reopened")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, indexDir)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	check("index rebuilt")
}

// exportTail returns the export of a ledger's events after the event
// after.
func exportTail(t *testing.T, db *DB, ledger string, after eventid.ID) []byte {
	t.Helper()
	out, _ := exportBytes(t, db, ledger, ExportOptions{After: after})
	return out
}

// TestNamesRebuiltGenesisBreaksRule writes ledgers as an older annal could
// have (segments only, with a genesis event whose name breaks the rule:
// too long, a bidirectional override, a ledger ID, the name of a ledger
// already there) and opens the directory: every ledger is reachable under
// a valid derived name, and Open reports each rename.
func TestNamesRebuiltGenesisBreaksRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	long := strings.Repeat("é", 700) // 1,400 bytes
	cases := []struct {
		genesis, want string
		id            eventid.LedgerID
	}{
		{genesis: long, want: strings.Repeat("é", (maxNameLen-9)/2)},
		{genesis: "orders\u202e", want: "orders"},
		{genesis: "40c9f5bc", want: "40c9f5bc"},
		{genesis: "\u200b\x1b", want: "ledger"},
		{genesis: "x~0123abcd", want: "x~0123abcd"},
		{genesis: "taken", want: "taken"},
	}
	for i := range cases {
		cases[i].id = writeOldLedger(t, dir, cases[i].genesis)
		cases[i].want += "~" + cases[i].id.String()
	}
	db = openTest(t, dir)
	defer db.Close()
	renamed := map[eventid.LedgerID]Renamed{}
	for _, r := range db.Renamed() {
		renamed[r.Ledger] = r
	}
	for _, tc := range cases {
		info, err := db.Ledger(tc.want)
		if err != nil || info.ID != tc.id {
			t.Errorf("genesis %.20q: Ledger(%.40q) = %s %v, want %s (ledgers %v)", tc.genesis, tc.want, info.ID, err, tc.id, ledgerNames(db))
			continue
		}
		if p := names.LedgerProblem(tc.want, tc.id.String()); p != "" || !utf8.ValidString(tc.want) || len(tc.want) > maxNameLen {
			t.Errorf("the derived name %.40q breaks the rule: %s", tc.want, p)
		}
		why := "the name in its genesis event breaks the naming rule"
		if tc.genesis == "taken" {
			why = "has the name \"taken\""
		}
		r, ok := renamed[tc.id]
		if !ok || r.From != tc.genesis || r.To != tc.want || !strings.Contains(r.Why, why) {
			t.Errorf("genesis %.20q: renamed %+v", tc.genesis, r)
		}
		if got := appendEvents(t, db, tc.want, 1, appendSpec{From: 1})[0].Ledger(); got != tc.id {
			t.Errorf("append to %.40q went to %s", tc.want, got)
		}
	}
	// "40c9f5bc" is only ever an ID.
	if _, err := db.Ledger("40c9f5bc"); !errors.Is(err, ErrLedgerNotFound) {
		t.Errorf("Ledger(40c9f5bc): %v", err)
	}
	if len(db.Renamed()) != len(cases) {
		t.Errorf("renamed %v", db.Renamed())
	}
	// A genesis named as a ledger here: that one keeps its name.
	if info, err := db.Ledger("taken"); err != nil || info.Count != 1 {
		t.Errorf("taken: %+v %v", info, err)
	}
}

// writeOldLedger writes a ledger directory with only its segments, its
// genesis event naming it name, as an older annal could have written it
// (without the checks of today's CreateLedger), and returns its ID.
func writeOldLedger(t *testing.T, dir, name string) eventid.LedgerID {
	t.Helper()
	g, err := genesisEvent(LedgerSpec{Name: name, Actor: "old"}, namesTime)
	if err != nil {
		t.Fatal(err)
	}
	c := eventid.Content{Entity: g.Entity, Key: g.Key, Event: g.Event, Meta: g.Meta, Data: g.Data}
	id := c.LedgerID()
	log, err := segment.Create(filepath.Join(dir, ledgersDir, id.String()), segment.Options{FS: privateFS{vfs.Default}, Ledger: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Append(&segment.Batch{Entries: []segment.Entry{g}, Durability: Sync}); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestNamesUnreadableNameFile makes a ledger's NAME file a directory: the
// ledger's name cannot be known, so the ledger is refused, saying why, and
// the other ledgers open; put back, it opens under its name.
func TestNamesUnreadableNameFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openTest(t, dir)
	bad, err := db.CreateLedger(ctx, LedgerSpec{Name: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "good"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	name := filepath.Join(dir, ledgersDir, bad.ID.String(), nameFile)
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(name, 0o700); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	if got := ledgerNames(db); len(got) != 1 || got["good"] == 0 {
		t.Fatalf("ledgers %v", got)
	}
	u := db.Unavailable()["bad"]
	if !errors.Is(u, ErrLedgerUnavailable) || !strings.Contains(u.Error(), name) {
		t.Fatalf("unavailable: %v", db.Unavailable())
	}
	if _, err := db.Ledger("bad"); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("Ledger(bad): %v", err)
	}
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "bad"}); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("CreateLedger(bad): %v", err)
	}
	db.Close()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	if info, err := db.Ledger("bad"); err != nil || info.ID != bad.ID {
		t.Fatalf("Ledger(bad) = %+v %v", info, err)
	}
	if b, err := os.ReadFile(name); err != nil || string(b) != "bad" {
		t.Fatalf("NAME: %q %v", b, err)
	}
}

// TestNamesUnavailableLedgerKeepsName: a ledger in the directory that
// fails recovery keeps its name; a ledger copied in under that name gets a
// derived one, so that an append by the name cannot reach it.
func TestNamesUnavailableLedgerKeepsName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	here, other := t.TempDir(), t.TempDir()
	h := openTest(t, here)
	damaged, err := h.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	o := openTest(t, other)
	copied, err := o.CreateLedger(ctx, LedgerSpec{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	copyTree(t, filepath.Join(other, ledgersDir, copied.ID.String()), filepath.Join(here, ledgersDir, copied.ID.String()))
	// Its checkpoint is signed by the other directory's key: removed (a
	// genesis-only ledger is signed at Open).
	os.Remove(filepath.Join(here, ledgersDir, copied.ID.String(), checkpointFileName))
	seg := filepath.Join(here, ledgersDir, damaged.ID.String(), "00000000000000000001.seg")
	badRewrite(t, seg, func(b []byte) []byte { b[0] ^= 0xff; return b })

	h = openTest(t, here)
	defer h.Close()
	if _, err := h.Ledger("orders"); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("Ledger(orders): %v, want the damaged ledger's ErrLedgerUnavailable", err)
	}
	if _, err := h.Append(ctx, "orders", []EventInput{order(1)}, nil); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("append to orders: %v", err)
	}
	derived := "orders~" + copied.ID.String()
	if got := ledgerNames(h); len(got) != 1 || got[derived] != copied.ID {
		t.Fatalf("ledgers %v", got)
	}
	if r := h.Renamed(); len(r) != 1 || r[0].To != derived || !strings.Contains(r[0].Why, "unavailable") {
		t.Fatalf("renamed %v", r)
	}
}

// TestNamesForeignMetadata puts another data directory's meta.db in place:
// its ledgers are missing here (unavailable) and take no name from the
// ledgers that are here.
func TestNamesForeignMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	here, other := t.TempDir(), t.TempDir()
	for _, dir := range []string{other, here} {
		db := openTest(t, dir)
		if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "orders"}); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	b, err := os.ReadFile(filepath.Join(other, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(here, metaFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, here)
	defer db.Close()
	info, err := db.Ledger("orders")
	if err != nil {
		t.Fatalf("Ledger(orders): %v (unavailable %v)", err, db.Unavailable())
	}
	if ls := db.Ledgers(); len(ls) != 1 || ls[0].ID != info.ID || len(db.Renamed()) != 0 {
		t.Fatalf("ledgers %+v, renamed %v", ls, db.Renamed())
	}
}

// TestRefusedLedgerKeepsItsNameAfterMetaRebuild: a ledger refused at the
// open (its checkpoint file removed: ErrUnsigned) while meta.db is gone
// (rebuilt from the segments) keeps its name: its NAME file and its
// genesis event say "acct". Ledger("acct") must say the ledger is
// unavailable, not that there is none, and CreateLedger("acct") must not
// make a second ledger under that name (an append by name would then land
// in a new, empty ledger, and the refused one is renamed acct~ID when it
// is accepted). A reader's open agrees, and AcceptLedger gives the ledger
// back its own name.
func TestRefusedLedgerKeepsItsNameAfterMetaRebuild(t *testing.T) {
	t.Parallel()
	for _, withNameFile := range []bool{true, false} {
		t.Run(fmt.Sprintf("NAME=%v", withNameFile), func(t *testing.T) {
			ctx := context.Background()
			dir, id := checkpointLedger(t)
			if err := os.Remove(filepath.Join(dir, "ledgers", id, checkpointFileName)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "meta.db")); err != nil {
				t.Fatal(err)
			}
			if !withNameFile {
				// A directory written by an older annal: the genesis
				// event names it.
				if err := os.Remove(filepath.Join(dir, "ledgers", id, nameFile)); err != nil {
					t.Fatal(err)
				}
			}
			ro, err := OpenReadOnly(dir, &Options{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ro.Ledger("acct"); !errors.Is(err, ErrLedgerUnavailable) || !errors.Is(err, ErrUnsigned) {
				t.Errorf("read-only Ledger(acct) of the refused ledger %s: %v; want ErrLedgerUnavailable, ErrUnsigned", id, err)
			}
			if _, ok := ro.Unavailable()["acct"]; !ok {
				t.Errorf("read-only Unavailable: %v; want acct", ro.Unavailable())
			}
			ro.Close()
			db, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Ledger("acct"); !errors.Is(err, ErrLedgerUnavailable) || !errors.Is(err, ErrUnsigned) {
				t.Errorf("Ledger(acct) of the refused ledger %s: %v; want ErrLedgerUnavailable, ErrUnsigned (its NAME file and genesis say acct)", id, err)
			}
			if _, ok := db.Unavailable()["acct"]; !ok {
				t.Errorf("Unavailable: %v; want acct", db.Unavailable())
			}
			if info, err := db.CreateLedger(ctx, LedgerSpec{Name: "acct"}); err == nil {
				t.Errorf("CreateLedger(acct) made ledger %s while the refused ledger %s is named acct", info.ID, id)
			}
			if _, err := db.Append(ctx, "acct", []EventInput{order(99)}, nil); !errors.Is(err, ErrLedgerUnavailable) {
				t.Errorf("Append(acct): %v; want ErrLedgerUnavailable", err)
			}
			if len(db.Renamed()) != 0 {
				t.Errorf("Renamed: %v; want none", db.Renamed())
			}
			if _, err := db.AcceptLedger(ctx, "acct"); err != nil {
				t.Fatalf("AcceptLedger(acct): %v", err)
			}
			info, err := db.Ledger("acct")
			if err != nil || info.ID.String() != id || info.Count != 21 {
				t.Errorf("Ledger(acct) after AcceptLedger: %+v, %v; want ledger %s of 21 events", info, err, id)
			}
		})
	}
}

// TestNameFileCannotStealAnotherLedgersName: acct's NAME file edited to say
// "other" and meta.db lost. acct was created first, so the rebuild gave it
// "other" (its NAME file's) and renamed the real other, whose genesis
// event and NAME file both say "other", to other~ID: appends to "other"
// landed in acct. The genesis event is covered by the signed checkpoints,
// the NAME file by nothing: the ledger both name keeps the name, in the
// reader's open as in the writer's, and acct gets a derived one.
func TestNameFileCannotStealAnotherLedgersName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, acctID := checkpointLedger(t)
	otherID := readerID(t, dir, "other")
	// acct was created first: the rebuild takes its NAME file first.
	thief, victim, victimName := acctID, otherID, "other"
	if err := os.WriteFile(filepath.Join(dir, "ledgers", thief, nameFile), []byte(victimName), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "meta.db")); err != nil {
		t.Fatal(err)
	}
	if got := readerID(t, dir, victimName); got != victim {
		t.Errorf("read-only Ledger(%q) is %s; want %s, whose NAME file and genesis say %q", victimName, got, victim, victimName)
	}
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.Ledger(victimName)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID.String() != victim {
		t.Errorf("Ledger(%q) is %s, whose genesis event names it otherwise (its NAME file was edited); want %s, whose NAME file and genesis say %q (renamed: %v)", victimName, info.ID, victim, victimName, db.Renamed())
	}
	r := db.Renamed()
	if len(r) != 1 || r[0].Ledger.String() != thief || r[0].To == victimName || r[0].From != victimName {
		t.Errorf("Renamed: %v; want the one rename of %s from %q", r, thief, victimName)
	}
	if _, err := db.Append(ctx, victimName, []EventInput{order(99)}, nil); err != nil {
		t.Fatal(err)
	}
	if info, err := db.Ledger(victimName); err != nil || info.ID.String() != victim || info.Count != 2 {
		t.Errorf("after an append to %q: %+v, %v; want ledger %s of 2 events", victimName, info, err, victim)
	}
	if len(r) == 1 {
		if info, err := db.Ledger(r[0].To); err != nil || info.ID.String() != thief || info.Count != 21 {
			t.Errorf("Ledger(%q): %+v, %v; want ledger %s of 21 events", r[0].To, info, err, thief)
		}
	}
}
