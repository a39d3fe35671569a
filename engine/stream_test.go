package engine

import (
	"context"
	"errors"
	"testing"
)

// TestStreamHead: the zero StreamHead for a stream with no event, which
// ExpectedStreams takes as "no event"; the head and its sequence number
// after appends; the head a ConditionError found, at once; bad names and
// an unknown ledger refused; ErrClosed after Close.
func TestStreamHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, t.TempDir())
	if _, err := db.CreateLedger(ctx, LedgerSpec{Name: "l"}); err != nil {
		t.Fatal(err)
	}
	h, err := db.StreamHead(ctx, "l", "acct", "a")
	if err != nil || !h.IsZero() || h != (StreamHead{}) {
		t.Fatalf("empty stream: %+v, %v", h, err)
	}
	// The zero head is the condition "no event yet".
	res, err := db.Append(ctx, "l", []EventInput{ev("acct", "a", "opened")}, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "acct", Key: "a", Head: h.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, "l", []EventInput{ev("acct", "b", "opened"), ev("acct", "a", "credited")}, nil); err != nil {
		t.Fatal(err)
	}
	h, err = db.StreamHead(ctx, "l", "acct", "a")
	if err != nil || h.Seq != res.FirstSeq+2 {
		t.Fatalf("head of a: %+v, %v (first append at #%d)", h, err, res.FirstSeq)
	}
	got, err := db.GetSeq(ctx, "l", h.Seq)
	if err != nil || got.ID != h.ID || got.Key != "a" {
		t.Fatalf("head %+v is %+v, %v", h, got, err)
	}
	// A stale head fails the condition; the error's Found is the head now.
	_, err = db.Append(ctx, "l", []EventInput{ev("acct", "a", "debited")}, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "acct", Key: "a", Head: res.IDs[0]}}})
	var ce *ConditionError
	if !errors.As(err, &ce) || ce.Found != h.ID {
		t.Fatalf("stale head: %v, want a ConditionError finding %s", err, h.ID)
	}
	// The current one passes.
	if _, err := db.Append(ctx, "l", []EventInput{ev("acct", "a", "debited")}, &AppendOptions{ExpectedStreams: []ExpectedStream{{Entity: "acct", Key: "a", Head: h.ID}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.StreamHead(ctx, "l", "", "a"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty entity: %v", err)
	}
	if _, err := db.StreamHead(ctx, "l", "acct", "a\xff"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("key not UTF-8: %v", err)
	}
	if _, err := db.StreamHead(ctx, "nope", "acct", "a"); !errors.Is(err, ErrLedgerNotFound) {
		t.Fatalf("unknown ledger: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.StreamHead(ctx, "l", "acct", "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
