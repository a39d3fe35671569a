// Package corruption holds the one sentinel error that every error saying
// stored data is damaged or rewritten matches, whichever package found it:
// a segment that fails its CRC (segment.ErrCorruption), an index entry
// that does not decode (index.ErrCorruption), a tree file whose hashes
// disagree (tree.ErrCorrupt), a damaged metadata file, an index or tree
// file that disagrees with the segments, events that are not those a
// signed checkpoint committed to (engine's ErrMetaDamaged, ErrIndexDamaged,
// ErrTreeDamaged, ErrRewritten). A caller asks one question,
// errors.Is(err, engine.ErrCorruption), and engine.ErrCorruption is [Err].
//
// Each package keeps its own sentinel, made with [New], so that the
// existing matches keep their meaning (errors.Is(err,
// index.ErrCorruption) is still true of the index's damage only), and
// each such sentinel also matches Err. The package imports nothing of
// annal, so that segment, index, engine/tree and engine can all import it
// without a cycle; it lives under segment, the lowest of them, because
// the top level of the module is fixed. The standard library does the
// same with internal/oserror: syscall.ENOENT matches fs.ErrNotExist.
package corruption

import "errors"

// Err is matched (errors.Is) by every error that says stored data is
// damaged or rewritten, in any package of annal. engine.ErrCorruption is
// Err: callers use that name.
var Err = errors.New("corruption: stored data is damaged or rewritten")

// New returns a sentinel error whose message is text and that matches
// Err as well as itself: a package's own corruption sentinel. Each call
// returns a distinct error.
func New(text string) error { return &sentinel{text} }

// sentinel is a package's corruption sentinel.
type sentinel struct{ text string }

func (e *sentinel) Error() string { return e.text }

// Is reports whether target is Err.
func (e *sentinel) Is(target error) bool { return target == Err }
