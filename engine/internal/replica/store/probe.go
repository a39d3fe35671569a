package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ProbeError is Probe's answer when the store lacks a guarantee that
// replication rests on. Check names the failed check.
type ProbeError struct {
	// Check is the guarantee the store did not give, in words a user can
	// take to the store's vendor.
	Check string
	// Err is what the store answered instead, or nil when it answered
	// success where it should have refused.
	Err error
}

func (e *ProbeError) Error() string {
	if e.Err == nil {
		return "store: probe: " + e.Check
	}
	return "store: probe: " + e.Check + ": " + e.Err.Error()
}

func (e *ProbeError) Unwrap() error { return e.Err }

// The checks Probe makes, as ProbeError.Check names them.
const (
	CheckCreate       = "a create-only write (If-None-Match: *) of a new key failed"
	CheckReadAfter    = "a read after a write did not return what was written"
	CheckIfNoneMatch  = "a create-only write (If-None-Match: *) on an existing key was not refused with 412"
	CheckIfMatchWrong = "a write with a wrong ETag (If-Match) was not refused with 412"
	CheckIfMatchRight = "a write with the current ETag (If-Match) failed"
	CheckCleanUp      = "deleting the probe's object failed"
)

// Probe checks once that s gives what replication rests on: If-None-Match
// on an existing key gives 412, If-Match with a wrong ETag gives 412, and
// a read after a write sees it. It writes, replaces and deletes one object
// whose key starts with keyPrefix and ends with a random name, so probes
// from several machines do not meet. A failed check is a *ProbeError; a
// store that cannot be reached gives the store's own error.
func Probe(ctx context.Context, s Store, keyPrefix string) error {
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("store: probe: %w", err)
	}
	key := keyPrefix + hex.EncodeToString(nonce[:])
	first := []byte("annal store probe: first write " + key)
	second := []byte("annal store probe: second write " + key)

	if _, err := s.Put(ctx, key, first, CreateOnly()); err != nil && !ownWrite(ctx, s, key, first, err) {
		return probeFailure(CheckCreate, err)
	}
	cleanUp := true
	defer func() {
		if cleanUp {
			_ = s.Delete(context.WithoutCancel(ctx), key)
		}
	}()
	got, err := s.Get(ctx, key)
	if err != nil {
		return probeFailure(CheckReadAfter, err)
	}
	if !bytes.Equal(got.Data, first) {
		return &ProbeError{Check: CheckReadAfter, Err: fmt.Errorf("read %d bytes, wrote %d", len(got.Data), len(first))}
	}
	_, err = s.Put(ctx, key, second, CreateOnly())
	if !errors.Is(err, ErrPreconditionFailed) {
		return probeFailure(CheckIfNoneMatch, err)
	}
	wrong := `"00000000000000000000000000000000"`
	if got.ETag == wrong {
		wrong = `"11111111111111111111111111111111"`
	}
	_, err = s.Put(ctx, key, second, ReplaceIf(wrong))
	if !errors.Is(err, ErrPreconditionFailed) {
		return probeFailure(CheckIfMatchWrong, err)
	}
	if _, err := s.Put(ctx, key, second, ReplaceIf(got.ETag)); err != nil && !ownWrite(ctx, s, key, second, err) {
		return probeFailure(CheckIfMatchRight, err)
	}
	got, err = s.Get(ctx, key)
	if err != nil {
		return probeFailure(CheckReadAfter, err)
	}
	if !bytes.Equal(got.Data, second) {
		return &ProbeError{Check: CheckReadAfter, Err: fmt.Errorf("read the first write back after the second")}
	}
	cleanUp = false
	if err := s.Delete(ctx, key); err != nil {
		return probeFailure(CheckCleanUp, err)
	}
	return nil
}

// ownWrite reports whether a conditional Put of data that failed with
// err was applied all the same: a 412 after an attempt whose answer was
// lost (ErrMaybeApplied) may be that attempt's own write, which reading
// the key back tells.
func ownWrite(ctx context.Context, s Store, key string, data []byte, err error) bool {
	if !errors.Is(err, ErrPreconditionFailed) || !errors.Is(err, ErrMaybeApplied) {
		return false
	}
	o, gerr := s.Get(ctx, key)
	return gerr == nil && bytes.Equal(o.Data, data)
}

// probeFailure is a ProbeError unless err says the store was not reached
// at all, which is no answer about its guarantees.
func probeFailure(check string, err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &ProbeError{Check: check, Err: err}
}
