// Package invariants says whether annal's self-checks are compiled in:
// Enabled is true under the build tag "invariants" (go test -tags
// invariants), false otherwise, as in Pebble's internal/invariants. Code
// that checks what a field's comment states writes
//
//	if invariants.Enabled && broken {
//		panic(...)
//	}
//
// and the check is compiled away in a build without the tag. A broken
// invariant is a bug of annal, never bad input or bad disk data (those
// are errors): under the tag it panics, so that a test that reaches it
// fails where the state broke. CI's race run sets the tag.
//
// For annal's own packages (segment, index, engine): it is not part of
// the API, and lives under segment, the lowest package of those that
// check invariants, because the top level of the module is fixed (see
// docs/decisions/invariant-checks.md).
package invariants
