package engine

import (
	"testing"

	"github.com/annal-db/annal/segment/testseed"
)

// testSeed returns the seed t draws its random choices from: -seed's, or
// a new one, logged with the command that replays t (testseed.Seed).
func testSeed(t testing.TB) uint64 {
	t.Helper()
	return testseed.Seed(t)
}
