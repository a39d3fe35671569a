package engine

import (
	"sync"
	"sync/atomic"
	"testing"
)

// runSubtests runs f(t, i) for i from 0 to n-1, each as a subtest named
// name(i), at most workers of them at once. It is for independent cases
// (each in its own directory) that spend most of their time waiting for
// fsync: one at a time, they leave the cores idle. The subtests do not call
// t.Parallel, so -parallel (which defaults to the number of cores) does not
// hold them back. Once one has failed, no other starts.
func runSubtests(t *testing.T, n, workers int, name func(i int) string, f func(t *testing.T, i int)) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && !t.Failed(); i = int(next.Add(1) - 1) {
				t.Run(name(i), func(t *testing.T) { f(t, i) })
			}
		})
	}
	wg.Wait()
}
