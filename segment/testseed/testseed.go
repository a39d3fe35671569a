// Package testseed gives annal's randomized tests one seed they draw
// from, and the -seed flag that replays a run: a test that takes its seed
// from Seed logs it, and the command that runs it again with it, and logs
// that command again when it fails (docs/testing.md). For annal's tests
// only: importing it registers the -seed flag.
package testseed

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
// choices from Seed logs the seed and, when it fails, the command that
// runs it again with the same seed (docs/testing.md).
var seedFlag = flag.Uint64("seed", 0, "the seed of the randomized tests run (each prints its own when it fails); 0 draws a new one")

// Seed returns the seed t draws its random choices from: -seed's, or a
// new random one. It logs the seed and the command that replays t with it,
// and logs that command again if t fails.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	for seed == 0 {
		seed = rand.Uint64()
	}
	replay := ReplayCommand(t.Name(), seed)
	t.Logf("seed %d; replay: %s", seed, replay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay this run with: %s", replay)
		}
	})
	return seed
}

// ReplayCommand returns the go test command, run from the module's root,
// that runs the test named name (a subtest's name has its parents') with
// -seed=seed.
func ReplayCommand(name string, seed uint64) string {
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
