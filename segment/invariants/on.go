//go:build invariants

package invariants

// Enabled says that the self-checks are compiled in (build tag
// "invariants").
const Enabled = true
