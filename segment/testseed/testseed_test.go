package testseed

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSeedReplays: a test given -seed draws the same values each time, and
// the command it prints replays it with that seed.
func TestSeedReplays(t *testing.T) {
	old := *seedFlag
	defer func() { *seedFlag = old }()
	*seedFlag = 12345
	draw := func() []uint64 {
		rng := rand.New(rand.NewPCG(Seed(t), 1))
		return []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
	}
	a, b := draw(), draw()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("-seed=12345 drew %v, then %v", a, b)
	}
	*seedFlag = 0
	if s1, s2 := Seed(t), Seed(t); s1 == 0 || s1 == s2 {
		t.Fatalf("without -seed: seeds %d and %d, want two new non-zero ones", s1, s2)
	}
	want := `go test ./segment/testseed -run '^TestCrashPoints$/^run_3$' -count=1 -seed=12345`
	if got := ReplayCommand("TestCrashPoints/run_3", 12345); got != want {
		t.Fatalf("replay command:\n%s\nwant\n%s", got, want)
	}
}
