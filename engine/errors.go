package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/annal-db/annal/engine/internal/meta"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
)

// Errors of package engine, by subject. Errors from the packages below
// (canon, segment, index, tree) reach the caller wrapped, so errors.Is
// still finds them (segment.ErrCorruption, canon.ErrDuplicateKey, …).
// What each means and what to do about it: "Errors" in docs/engine.md.

// Errors of the data directory and the DB.
var (
	// ErrLocked: another process (or another DB in this one) has the data
	// directory open, or holds a lock on one of its files (DIR/LOCK, the
	// metadata file, the index). The error is a *LockedError naming the
	// holder when it can be found. A lock conflict is never taken for
	// damage: nothing is rebuilt or moved.
	ErrLocked = errors.New("engine: data directory in use")
	// ErrDirectoryChanged: a file or directory that the DB holds open by
	// its path (the data directory, DIR/LOCK, DIR/meta.db, DIR/index,
	// DIR/ledgers, and each ledger's directory, segments, NAME, tree and
	// checkpoint) was removed, moved or replaced while it was open, or a
	// segment was cut or overwritten in place. Every later append,
	// CreateLedger, Import and Checkpoint fails with it, and Close writes
	// neither metadata nor anything into the ledger's files; reads go on.
	// The process must close the DB and open it again. See "One writer"
	// in docs/engine.md.
	ErrDirectoryChanged = errors.New("engine: data directory changed under the running DB")
	// ErrClosed: the DB was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrReadOnly: a write (Append, CreateLedger, Import, a checkpoint, a
	// consumer's position) to a DB opened with OpenReadOnly, or a read that
	// needs what only a writer keeps up to date (the Merkle tree: proofs).
	ErrReadOnly = errors.New("engine: opened read-only")
)

// Errors of ledgers.
var (
	// ErrLedgerNotFound: no ledger has that name or ID.
	ErrLedgerNotFound = errors.New("engine: ledger not found")
	// ErrLedgerExists: CreateLedger or Import was given a name already in
	// use, or Import a ledger whose ID is already in the directory.
	ErrLedgerExists = errors.New("engine: ledger exists")
	// ErrLedgerUnavailable: the ledger failed verification or recovery
	// when the DB opened; the wrapped error says why. Other ledgers work.
	ErrLedgerUnavailable = errors.New("engine: ledger unavailable")
)

// Errors of appends and reads.
var (
	// ErrInvalid: bad input (a name, a JSON value, an ID, an option); the
	// message says what and where. Nothing was stored.
	ErrInvalid = errors.New("engine: invalid input")
	// ErrConditionFailed: a condition of an append did not hold; the
	// error is a *ConditionError with the current head. Nothing was
	// appended.
	ErrConditionFailed = errors.New("engine: condition failed")
	// ErrIdempotencyMismatch: an append's idempotency key was used before
	// by an append of other events (other content, or another number of
	// events). The error is an *IdempotencyMismatchError carrying the
	// first append's result. Nothing was appended.
	ErrIdempotencyMismatch = errors.New("engine: idempotency key reused with other events")
	// ErrNotFound: no event has that ID, prefix or sequence number.
	ErrNotFound = errors.New("engine: event not found")
	// ErrNotInTree: a proof was asked of an event that exists but comes
	// after the tree asked for: after the latest signed checkpoint (issue
	// one that covers it, DB.Checkpoint, or wait for the next), or after
	// the tree size given.
	ErrNotInTree = errors.New("engine: event not in that tree")
	// ErrAmbiguous: a hex prefix matches more than one event; the error is
	// an *AmbiguousError listing them.
	ErrAmbiguous = errors.New("engine: ambiguous ID prefix")
)

// Errors of consumers.
var (
	// ErrConsumerInUse: the consumer name is held by a live Consumer of
	// this DB (DB.Consumer until Consumer.Close), or DeleteConsumer was
	// asked to delete a live one.
	ErrConsumerInUse = errors.New("engine: consumer in use")
	// ErrConsumerNotFound: no consumer of that name has a stored
	// position in the ledger (DeleteConsumer).
	ErrConsumerNotFound = errors.New("engine: consumer not found")
	// ErrPositionsLost: the metadata file, which alone holds the named
	// consumers' positions, was missing (or empty) at an Open and was
	// rebuilt from the segments. The state lasts, recorded in the rebuilt
	// file, until DB.AcceptLostPositions clears it (annal
	// accept-lost-positions): until then every consumer call fails with
	// it, in every process that opens the directory, so that no service
	// takes a missing position for a new consumer. DB.MetaRebuilt reports
	// it too.
	ErrPositionsLost = errors.New("engine: consumer positions lost")
)

// Errors of checkpoints and their signing.
var (
	// ErrUnsigned: a ledger holds events that no checkpoint its signer stands
	// by covers: its checkpoint file is missing, older than what the signer
	// signed for it (rolled back), signed by another key, or not a checkpoint.
	// The writer refuses the ledger (ErrLedgerUnavailable) and signs nothing
	// for it until the operator restores the checkpoint (or the key), or
	// accepts the ledger as it is now: DB.AcceptLedger, annal checkpoint
	// --accept NAME. It does not match ErrCorruption on its own: a rolled
	// back or rewritten ledger's error matches ErrRewritten as well.
	ErrUnsigned = errors.New("engine: ledger not covered by a checkpoint its signer stands by")
	// ErrSignerRefused: a signer was asked to sign a checkpoint that is not a
	// consistent extension of the last one it signed for that origin (another
	// root at a size it signed, a smaller size, a consistency proof that does
	// not verify against its remembered root). Nothing was signed.
	ErrSignerRefused = errors.New("engine: the signer refused the checkpoint")
	// ErrSigningKeyMissing: the signing key file is missing while ledgers
	// of the directory hold checkpoints signed by a key: Open creates no
	// new key then (it would refuse every such ledger). Restore the key
	// file, or give the key (Options.SigningKeyFile, Options.Signer).
	ErrSigningKeyMissing = errors.New("engine: the signing key is missing")
)

// Errors of damaged or rewritten data. Each matches ErrCorruption as well
// as its own name.
var (
	// ErrCorruption is matched (errors.Is) by every error that says stored
	// data is damaged or rewritten, whichever layer found it: the
	// segments (segment.ErrCorruption, segment.ErrAcknowledgedLost), the
	// index (index.ErrCorruption, ErrIndexDamaged), the Merkle tree
	// (tree.ErrCorrupt, ErrTreeDamaged), the events against their tree
	// or a signed checkpoint (ErrRewritten) and the metadata file
	// (ErrMetaDamaged). Each of those still matches its own name, which
	// says what is damaged and what cures it. No error is ErrCorruption
	// itself. A lock held (ErrLocked), a missing event (ErrNotFound), a
	// ledger refused for its checkpoint evidence alone (ErrUnsigned), an
	// I/O or a permission error do not match it.
	ErrCorruption = corruption.Err
	// ErrRewritten: a ledger's events differ from what its Merkle tree or
	// a signed checkpoint committed to (an event changed in place, events
	// removed, a history rewritten); the error names the first event or
	// the checkpoint that disagrees. The segments' CRCs may all be
	// intact: this is what only the SHA-256 tree catches.
	ErrRewritten = corruption.New("engine: ledger rewritten")
	// ErrIndexDamaged: the index (DIR/index, derived from the segments)
	// is damaged or disagrees with the segments, which were verified and
	// are intact: no event is lost. Rebuild the index: open with
	// Options.RebuildIndex (the command: annal reindex).
	ErrIndexDamaged = corruption.New("engine: the index is damaged")
	// ErrTreeDamaged: a ledger's tree file (derived from the segments)
	// is damaged, while the segments agree with the signed checkpoint: no
	// event is changed. Verify reports it; Open rebuilds a tree file that
	// is missing, short or whose root disagrees with the checkpoint, and
	// Options.RebuildIndex (annal reindex) rebuilds every tree file.
	ErrTreeDamaged = corruption.New("engine: the tree file is damaged")
	// ErrMetaDamaged: the metadata file (meta.db) is damaged: bbolt cannot
	// read it, or a record in it fails its checks. The error names the file
	// and the cure (meta.Cure), and wraps the cause (bbolt's error, or the
	// check a record failed).
	ErrMetaDamaged = meta.ErrDamaged
)

// invalid returns an error matching ErrInvalid.
func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// ConditionError says which condition of an append failed and what the
// head it was checked against is. It matches ErrConditionFailed. When
// Append returns it, Found and Head are readable (Get, StreamHead, Scan,
// Replay see them): a caller can re-read and retry; see "What a reader
// sees, and when" in docs/engine.md. Append returns it wrapped with the
// ledger ("engine: append to L: condition failed: …"), so its own message
// has no package prefix.
type ConditionError struct {
	Condition string     // which condition, e.g. "expected head"
	Head      eventid.ID // the ledger's head the condition was checked against
	Expected  eventid.ID // what the condition expected (zero: no event)
	Found     eventid.ID // what it found instead (zero: no event)

	// seq is Head's sequence number: Append waits for the index to reach
	// it before returning the error, so that reads see Found.
	seq uint64
}

func (e *ConditionError) Error() string {
	return fmt.Sprintf("condition failed: %s: expected %s, found %s (ledger head %s)", e.Condition, idOrNone(e.Expected), idOrNone(e.Found), e.Head)
}

func idOrNone(id eventid.ID) string {
	if id.IsZero() {
		return "no event"
	}
	return id.String()
}

// Is reports whether target is ErrConditionFailed.
func (e *ConditionError) Is(target error) bool { return target == ErrConditionFailed }

// IdempotencyMismatchError says that an append's idempotency key was used
// before with other events, and what that first append stored. It matches
// ErrIdempotencyMismatch. A retry with the same events as the first gets
// the first's result instead, with no error.
type IdempotencyMismatchError struct {
	Ledger string // the ledger's name
	Key    string // the idempotency key
	// First is the result of the first append with the key: its IDs and
	// sequence numbers.
	First AppendResult
	// Events is the number of events of this append (the first has
	// len(First.IDs)). Which of them differ is not known: the digest
	// covers them all.
	Events int
}

func (e *IdempotencyMismatchError) Error() string {
	what := fmt.Sprintf("the same number of events (%d) with other content", e.Events)
	if n := len(e.First.IDs); n != e.Events {
		what = fmt.Sprintf("%d events, the first had %d", e.Events, n)
	}
	last, lastSeq := e.First.Last()
	return fmt.Sprintf("%s: ledger %s: key %q was used by the append of events #%d-#%d (last %s); this append has %s; nothing was appended",
		ErrIdempotencyMismatch, e.Ledger, e.Key, e.First.FirstSeq, lastSeq, last, what)
}

// Is reports whether target is ErrIdempotencyMismatch.
func (e *IdempotencyMismatchError) Is(target error) bool { return target == ErrIdempotencyMismatch }

// AmbiguousError lists the events a hex prefix matches. It matches
// ErrAmbiguous.
type AmbiguousError struct {
	Prefix     string
	Candidates []eventid.ID // at most a few
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("engine: ID prefix %q is ambiguous: it matches %v", e.Prefix, e.Candidates)
}

// Is reports whether target is ErrAmbiguous.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }

// indexDamage is an error matching ErrIndexDamaged and its cause, with a
// one-line message: a Pebble error's own message may carry details over
// several lines.
type indexDamage struct {
	msg   string
	cause error
}

func (e *indexDamage) Error() string   { return e.msg }
func (e *indexDamage) Unwrap() []error { return []error{ErrIndexDamaged, e.cause} }

// indexDamaged returns the error of a ledger whose segments verified up to
// events, and whose index failed with cause.
func indexDamaged(ledger string, events uint64, cause error) error {
	return &indexDamage{cause: cause, msg: fmt.Sprintf("%s: ledger %s: %s; the events in the segments are intact (%d verified); the index is derived from them and can be rebuilt: reopen with Options.RebuildIndex (annal reindex)",
		ErrIndexDamaged, ledger, oneLine(cause), events)}
}

// oneLine returns the first line of err's message, without the
// placeholder that cockroachdb/errors prints for a detail it redacts.
func oneLine(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.ReplaceAll(msg, "<corruption detail carrier>", "")
	// Said once, by indexDamaged.
	msg = strings.TrimSuffix(strings.TrimSpace(msg), " (the index is derived from the segments and can be rebuilt)")
	return strings.TrimSpace(msg)
}
