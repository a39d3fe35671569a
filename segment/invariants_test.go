//go:build invariants

package segment

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestInvariantBrokenPanics: under the invariants build tag, the check
// that ends every commit (checkInvariants) panics on a state that breaks
// what the Log's fields state (here synced past size, which no code path
// makes), naming the broken invariant, and passes once it is repaired.
func TestInvariantBrokenPanics(t *testing.T) {
	t.Parallel()
	l := newTestLog(t, vfs.NewMem(), "led", Options{})
	defer l.Close()
	appendN(t, l, 0, 3, 1)
	l.ioMu.Lock()
	synced := l.synced
	l.synced = l.size + 1
	func() {
		defer func() {
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, "invariant broken") || !strings.Contains(s, "synced") {
				t.Errorf("checkInvariants on a broken state: recovered %v, want a panic naming synced", r)
			}
		}()
		l.checkInvariants()
	}()
	l.synced = synced
	l.checkInvariants() // repaired: no panic
	l.ioMu.Unlock()
}
