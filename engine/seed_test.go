package engine

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// seedFlag replays a randomized test: a test that draws its random
// choices from testSeed logs the seed and, when it fails, the command that
// runs it again with the same seed (docs/testing.md).
var seedFlag = flag.Uint64("seed", 0, "the seed of the randomized tests run (each prints its own when it fails); 0 draws a new one")

// testSeed returns the seed t draws its random choices from: -seed's, or a
// new random one. It logs the seed and the command that replays t with it,
// and logs that command again if t fails.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	for seed == 0 {
		seed = rand.Uint64()
	}
	replay := replayCommand(t.Name(), seed)
	t.Logf("seed %d; replay: %s", seed, replay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay this run with: %s", replay)
		}
	})
	return seed
}

// replayCommand returns the go test command, run from the module's root,
// that runs the test named name (a subtest's name has its parents') with
// -seed=seed.
func replayCommand(name string, seed uint64) string {
	var run []string
	for _, part := range strings.Split(name, "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	return fmt.Sprintf("go test %s -run '%s' -count=1 -seed=%d", packageDir(), strings.Join(run, "/"), seed)
}

// packageDir returns the test's package directory (go test runs a test
// binary in it) relative to the module's root, as ./engine; "." if it
// cannot tell.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for root := wd; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, wd)
			if err != nil {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		up := filepath.Dir(root)
		if up == root {
			return "."
		}
		root = up
	}
}

// TestSeedReplays: a test given -seed draws the same values each time, and
// the command it prints replays it with that seed.
func TestSeedReplays(t *testing.T) {
	old := *seedFlag
	defer func() { *seedFlag = old }()
	*seedFlag = 12345
	draw := func() []uint64 {
		rng := rand.New(rand.NewPCG(testSeed(t), 1))
		return []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
	}
	a, b := draw(), draw()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("-seed=12345 drew %v, then %v", a, b)
	}
	*seedFlag = 0
	if s1, s2 := testSeed(t), testSeed(t); s1 == 0 || s1 == s2 {
		t.Fatalf("without -seed: seeds %d and %d, want two new non-zero ones", s1, s2)
	}
	want := `go test ./engine -run '^TestCrashPoints$/^run_3$' -count=1 -seed=12345`
	if got := replayCommand("TestCrashPoints/run_3", 12345); got != want {
		t.Fatalf("replay command:\n%s\nwant\n%s", got, want)
	}
}
