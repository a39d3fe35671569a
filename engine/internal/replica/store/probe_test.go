package store

import (
	"context"
	"errors"
	"testing"
)

// lax is a store that breaks one guarantee, as some S3-compatible stores do.
type lax struct {
	*Memory
	ignoreIfNoneMatch, ignoreIfMatch, stale bool
}

func (l *lax) Put(ctx context.Context, key string, data []byte, cond Condition) (string, error) {
	if l.ignoreIfNoneMatch {
		cond.IfNoneMatch = false
	}
	if l.ignoreIfMatch {
		cond.IfMatch = ""
	}
	if l.stale {
		// Acknowledge without storing, as a store with stale reads looks.
		if _, err := l.Memory.Head(ctx, key); err == nil {
			return `"stale"`, nil
		}
	}
	return l.Memory.Put(ctx, key, data, cond)
}

func TestProbeNamesTheFailedCheck(t *testing.T) {
	ctx := context.Background()
	if err := Probe(ctx, NewMemory(), "probe/"); err != nil {
		t.Fatalf("Probe of the memory store: %v", err)
	}
	for _, c := range []struct {
		store *lax
		check string
	}{
		{&lax{Memory: NewMemory(), ignoreIfNoneMatch: true}, CheckIfNoneMatch},
		{&lax{Memory: NewMemory(), ignoreIfMatch: true}, CheckIfMatchWrong},
		{&lax{Memory: NewMemory(), stale: true}, CheckIfNoneMatch},
	} {
		err := Probe(ctx, c.store, "probe/")
		var pe *ProbeError
		if !errors.As(err, &pe) || pe.Check != c.check {
			t.Errorf("Probe of %+v = %v; want the check %q", c.store, err, c.check)
		}
		if p, _ := c.store.List(ctx, "", "", 0); len(p.Objects) != 0 {
			t.Errorf("Probe left %+v", p.Objects)
		}
	}
}

// unreadable stores its writes but reads back other bytes.
type unreadable struct{ *Memory }

func (u unreadable) Get(ctx context.Context, key string) (Object, error) {
	o, err := u.Memory.Get(ctx, key)
	o.Data = append(o.Data, '!')
	return o, err
}

func TestProbeReadAfterWrite(t *testing.T) {
	err := Probe(context.Background(), unreadable{NewMemory()}, "probe/")
	var pe *ProbeError
	if !errors.As(err, &pe) || pe.Check != CheckReadAfter {
		t.Fatalf("Probe = %v; want the check %q", err, CheckReadAfter)
	}
}
