package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/annal-db/annal/eventid"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary be the annal command of the scripts: run
// as "annal", it runs the command and exits with its code.
// The read commands keep stamps in the user's cache directory: the tests,
// and the annal processes they start, keep them in a directory of their
// own, removed at the end.
func TestMain(m *testing.M) {
	// A child of runInChild runs its command and exits here, before
	// testscript.Main copies the binary into a temporary directory that
	// an exit from a test would leave behind (48 MB a child).
	runChild()
	var cache string
	if os.Getenv("XDG_CACHE_HOME_ANNAL_TEST") == "" {
		var err error
		if cache, err = os.MkdirTemp("", "annal-test-cache-"); err != nil {
			panic(err)
		}
		os.Setenv("XDG_CACHE_HOME", cache)
		os.Setenv("XDG_CACHE_HOME_ANNAL_TEST", cache)
	}
	testscript.Main(cleanupM{m, cache}, map[string]func(){
		"annal": func() { os.Exit(runMain()) },
	})
}

// cleanupM runs the tests, then removes dir (if not "").
type cleanupM struct {
	m   *testing.M
	dir string
}

func (c cleanupM) Run() int {
	code := c.m.Run()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
	return code
}

// annal runs the command in-process and returns its exit code and output.
func annal(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func vectorPath(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "vectors")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("test vectors not found at %s (they live in ../shared/vectors beside the module): %v", dir, err)
	}
	return filepath.Join(dir, name)
}

func TestCanonCommand(t *testing.T) {
	t.Parallel()
	in := "{\"b\":1,\"a\":[1.50,\"\\u0041\"]}\n" + // good
		"{\"a\":1,\"a\":2}\n" + // duplicate key
		"\n" + // empty
		"  [1e21, -0, \"</script>\"]  \r\n" + // good, CRLF
		"12345678901234567890" // precision loss, no final newline
	code, out, errOut := annal(t, in, "canon")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (some lines were bad); stderr:\n%s", code, errOut)
	}
	if want := "{\"a\":[1.5,\"A\"],\"b\":1}\n[1e+21,0,\"</script>\"]\n"; out != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, want)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "line 2: ") || !strings.HasPrefix(lines[1], "line 3: ") || !strings.HasPrefix(lines[2], "line 5: ") {
		t.Fatalf("stderr:\n%s\nwant one error each for lines 2, 3 and 5", errOut)
	}
	if !strings.Contains(lines[0], "duplicate") || !strings.Contains(lines[2], "offset") {
		t.Fatalf("stderr does not say what and where:\n%s", errOut)
	}

	code, out, errOut = annal(t, "{\"z\":null,\"é\":true,\"10\":0,\"9\":0}\n", "canon")
	if code != 0 || errOut != "" || out != "{\"9\":0,\"10\":0,\"z\":null,\"é\":true}\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestIDCommand(t *testing.T) {
	t.Parallel()
	const hex = "0005d5813bf9c44943545b8f9e961c04"
	want := map[string]string{
		"id":       hex,
		"time":     "2022-01-14T02:05:17.275209Z",
		"micros":   "1642125917275209",
		"checksum": "43545b8f",
		"ledger":   "9e961c04",
		"version":  "0",
		"hex":      hex,
		"uuid":     "0005d581-3bf9-c449-4354-5b8f9e961c04",
		"base64":   "--0SL0Dzb3HJCJLsyT_Wk3",
		"base32":   "000QAR2EZSRH4M6N2VHYF9C704",
	}
	for _, form := range []string{hex, strings.ToUpper(hex), want["uuid"], want["base64"], want["base32"], strings.ToLower(want["base32"])} {
		code, out, errOut := annal(t, "", "id", form)
		if code != 0 {
			t.Fatalf("annal id %s: exit %d: %s", form, code, errOut)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("annal id %s: line %q", form, line)
			}
			got[f[0]] = f[1]
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("annal id %s: %s = %q, want %q", form, k, got[k], v)
			}
		}
	}

	code, out, _ := annal(t, "", "id", "--format", "json", hex, "00000000000000000000000000000000")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %q", out)
	}
	var f idFields
	if err := json.Unmarshal([]byte(lines[0]), &f); err != nil || f.Base32 != want["base32"] || f.Micros != 1642125917275209 {
		t.Fatalf("json %s: %+v %v", lines[0], f, err)
	}

	code, out, errOut := annal(t, "", "id", hex, "0005d5813bf9c44943545b8f9e961c0g")
	if code != 1 || !strings.Contains(out, hex) || !strings.Contains(errOut, "position") {
		t.Fatalf("a bad ID among good ones: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestVerifyFileCommand(t *testing.T) {
	t.Parallel()
	examples := vectorPath(t, "evently-examples-ledger.ndjson")
	code, out, errOut := annal(t, "", "verify-file", examples)
	if code != 0 || !strings.HasPrefix(out, "ok: 11550 events, ledger 9e961c04, head ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	two, err := os.ReadFile(vectorPath(t, "evently-cli-two-events.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = annal(t, string(two), "verify-file", "-")
	if want := "ok: 2 events, ledger e95bff80, head 0005d5814ce488843dc5de3ee95bff80\n"; code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q, want %q", code, out, want)
	}

	// One character changed in the data of line 2.
	tampered := strings.Replace(string(two), "second event", "secund event", 1)
	code, out, errOut = annal(t, tampered, "verify-file", "-")
	if code != 3 || out != "" || !strings.HasPrefix(errOut, "line 2: ") ||
		!strings.Contains(errOut, "expected ") || !strings.Contains(errOut, "found 0005d5814ce488843dc5de3ee95bff80") {
		t.Fatalf("tampered: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, _, errOut = annal(t, "", "verify-file", filepath.Join(t.TempDir(), "missing.ndjson"))
	if code != 1 || !strings.Contains(errOut, "missing.ndjson") {
		t.Fatalf("missing file: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = annal(t, "", "verify-file", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "line 1") {
		t.Fatalf("a directory: exit %d, stderr %q, want exit 1 naming line 1", code, errOut)
	}
	code, _, _ = annal(t, "", "verify-file", "-")
	if code != 3 {
		t.Fatalf("empty input: exit %d, want 3", code)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"verify-file"},
		{"verify-file", "a", "b"},
		{"id"},
		{"id", "--format", "xml", "0005d5813bf9c44943545b8f9e961c04"},
		{"canon", "extra"},
		{"canon", "--no-such-flag"},
		{"create"},
		{"ledgers", "extra"},
		{"--format", "xml", "ledgers"},
		{"--dir", "", "ledgers"},
		{"append"},
		{"append", "x", "--durability", "fast"},
		{"get"},
		{"scan"},
		{"scan", "x", "--from", "soon"},
		{"scan", "x", "--limit", "-1"},
		{"tail"},
		{"verify", "a", "b"},
		{"stats", "a", "b"},
	} {
		code, _, errOut := annal(t, "", args...)
		if code != 2 {
			t.Errorf("annal %q: exit %d, want 2; stderr %q", args, code, errOut)
		}
	}
}

// TestIDOrderMatchesTextOrder is a check from outside the eventid package
// that the command prints forms which sort like the IDs.
func TestIDOrderMatchesTextOrder(t *testing.T) {
	t.Parallel()
	a := eventid.MustParse("0005d5813bf9c44943545b8f9e961c04")
	b := eventid.MustParse("0005d5813bf9c44a00000000ffffffff")
	fa, fb := describeID(a), describeID(b)
	for _, p := range [][2]string{{fa.Hex, fb.Hex}, {fa.UUID, fb.UUID}, {fa.Base64, fb.Base64}, {fa.Base32, fb.Base32}} {
		if p[0] >= p[1] {
			t.Errorf("%s does not sort before %s", p[0], p[1])
		}
	}
}

func TestProtectIDArgs(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	const b64 = "--0SL0Dzb3HJCJLsyT_Wk3"
	const hex = "0005d5813bf9c44943545b8f9e961c04"
	got := protectIDArgs(root, []string{"id", "--format", "json", b64, "--help", "-h", "--", b64})
	want := []string{"id", "--format", "json", hex, "--help", "-h", "--", b64}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// A 22-character flag name made of base64 digits stays a flag.
	root.Flags().Bool("abcdefghijklmnopqrst", false, "")
	if got := protectIDArgs(root, []string{"--abcdefghijklmnopqrst"}); got[0] != "--abcdefghijklmnopqrst" {
		t.Fatalf("a flag was rewritten: %q", got)
	}
}
