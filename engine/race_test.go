//go:build race

package engine

// raceEnabled: the race detector slows the tests about tenfold, so the
// randomized ones run fewer rounds under it (CI runs them in full without).
const raceEnabled = true
