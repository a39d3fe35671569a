package tree

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// benchLeaves returns n leaf hashes, cheaply made (not SHA-256 of lines:
// the benchmarks measure the tree, not the leaf hashing).
func benchLeaves(n int) []Hash {
	out := make([]Hash, n)
	for i := range out {
		out[i][0], out[i][1], out[i][2], out[i][3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
		out[i][31] = 0xa5
	}
	return out
}

// benchTree returns a tree file of n leaves on the disk, and its leaves.
func benchTree(b *testing.B, n int) (*File, []Hash) {
	b.Helper()
	leaves := benchLeaves(n)
	f, err := Create(vfs.Default, filepath.Join(b.TempDir(), "tree"), 1)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 4096 {
		if err := f.Append(leaves[i:min(i+4096, n)]); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { f.Close() })
	return f, leaves
}

// BenchmarkAppend appends batches of leaves to a tree file on the disk
// (not synced, as the append path does): ns/leaf.
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			leaves := benchLeaves(batch)
			f, err := Create(vfs.Default, filepath.Join(b.TempDir(), "tree"), 1)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if err := f.Append(leaves); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(f.Size()), "ns/leaf")
		})
	}
}

const benchSize = 1_000_000

// BenchmarkRoot reads the root of a tree of 10^6 leaves from its file.
func BenchmarkRoot(b *testing.B) {
	f, _ := benchTree(b, benchSize)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Root(benchSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInclusionProof makes and verifies inclusion proofs of random
// leaves in a tree of 10^6 leaves.
func BenchmarkInclusionProof(b *testing.B) {
	f, leaves := benchTree(b, benchSize)
	root, _ := f.Root(benchSize)
	rng := rand.New(rand.NewPCG(1, 2))
	b.Run("prove", func(b *testing.B) {
		b.ReportAllocs()
		size := 0
		for b.Loop() {
			p, err := f.InclusionProof(rng.Uint64N(benchSize), benchSize)
			if err != nil {
				b.Fatal(err)
			}
			size = 32 * len(p)
		}
		b.ReportMetric(float64(size), "proof-bytes")
	})
	b.Run("verify", func(b *testing.B) {
		i := rng.Uint64N(benchSize)
		p, _ := f.InclusionProof(i, benchSize)
		b.ReportAllocs()
		for b.Loop() {
			if err := VerifyInclusion(i, benchSize, leaves[i], p, root); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(32*len(p)), "proof-bytes")
	})
}

// BenchmarkConsistencyProof makes and verifies consistency proofs from
// random sizes to 10^6 leaves.
func BenchmarkConsistencyProof(b *testing.B) {
	f, _ := benchTree(b, benchSize)
	root, _ := f.Root(benchSize)
	rng := rand.New(rand.NewPCG(3, 4))
	b.Run("prove", func(b *testing.B) {
		b.ReportAllocs()
		size := 0
		for b.Loop() {
			p, err := f.ConsistencyProof(1+rng.Uint64N(benchSize-1), benchSize)
			if err != nil {
				b.Fatal(err)
			}
			size = 32 * len(p)
		}
		b.ReportMetric(float64(size), "proof-bytes")
	})
	b.Run("verify", func(b *testing.B) {
		m := 1 + rng.Uint64N(benchSize-1)
		p, _ := f.ConsistencyProof(m, benchSize)
		old, _ := f.Root(m)
		b.ReportAllocs()
		for b.Loop() {
			if err := VerifyConsistency(m, benchSize, old, root, p); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(32*len(p)), "proof-bytes")
	})
}

// BenchmarkChecker checks a tree file of 10^6 leaves against its leaves,
// as verify --full does: leaves/s.
func BenchmarkChecker(b *testing.B) {
	f, leaves := benchTree(b, benchSize)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		c := f.NewChecker(benchSize)
		for _, l := range leaves {
			if err := c.Add(l); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)*benchSize/time.Since(start).Seconds(), "leaves/s")
}
