package engine

import (
	"context"
	"errors"
	"testing"
)

// TestVerifyClosedFromLastProgress: a Close called from Verify's progress
// callback makes Verify return ErrClosed, also when the callback is the
// last one, delivered after the checks ended (a small ledger's only
// progress report comes at its end). Verify used to return the finished
// report then, as if Close had not been called.
func TestVerifyClosedFromLastProgress(t *testing.T) {
	t.Parallel()
	for i := range 10 {
		db := treeTestDB(t, t.TempDir(), 20)
		calls := 0
		_, err := db.Verify(context.Background(), "t", func(records, bytes int64) {
			calls++
			if calls == 1 {
				if err := db.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		})
		if calls == 0 {
			t.Fatal("progress was never called")
		}
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("run %d: Verify after a Close in its progress callback: %v, want ErrClosed", i, err)
		}
	}
}
