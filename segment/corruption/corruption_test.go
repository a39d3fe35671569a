package corruption

import (
	"errors"
	"fmt"
	"testing"
)

// TestNewMatchesErr: a sentinel made with New matches itself and Err,
// also wrapped, and keeps its own message; two sentinels do not match
// each other, and Err matches neither.
func TestNewMatchesErr(t *testing.T) {
	a, b := New("a: corruption"), New("b: corruption")
	wrapped := fmt.Errorf("open x: %w", a)
	switch {
	case !errors.Is(a, a) || !errors.Is(a, Err) || !errors.Is(wrapped, a) || !errors.Is(wrapped, Err):
		t.Fatal("a sentinel made with New does not match itself and Err")
	case errors.Is(a, b) || errors.Is(b, a) || errors.Is(Err, a):
		t.Fatal("two sentinels, or Err and a sentinel, match each other")
	case a.Error() != "a: corruption" || wrapped.Error() != "open x: a: corruption":
		t.Fatalf("messages %q, %q", a, wrapped)
	case errors.Is(errors.New("a: corruption"), Err):
		t.Fatal("an error with the same message matches Err")
	}
}
