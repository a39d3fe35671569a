package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/index"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

func newVerifyCmd(g *globals) *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "verify [NAME|LEDGERID]",
		Short: "Verify one ledger or all of them",
		Long: `verify checks the ledger NAME (or with that ledger ID), or every ledger.

Without --full it is the check every open makes: each ledger's segments after
the index's last checkpoint (frame CRCs, event checksums, chain links,
timestamps; a torn write at the very end is cut, anything else refuses the
ledger), then that the head, the last sequence number and the genesis event
can be read and agree. It is quick, and finds no damage to records that the
checkpoint already covers.

With --full it reads every record of every segment (frame CRC, event checksum
recomputed, chain link, timestamps, sequence numbers, on all cores) and checks
that the index agrees with the segments. When standard error is a terminal it
shows a progress bar with the rate and the time left.

It prints one result a ledger (table: name, ID, events, head, the segments'
result, the index's result and the ledger's; JSON and NDJSON: name, id, ok,
events, head, error, and for a ledger that failed, segments and index:
"ok", "failed" or "damaged", or "-" when not checked) and, on standard
error, what failed and where, in one line a ledger. Exit 3 if any ledger
fails.

The index is derived from the segments. When it alone is damaged (its files
fail their checksums, or it disagrees with segments that verify), verify
says so: the events are intact, the count and head are the segments', and
the index can be rebuilt from them.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, err := g.outputFormat(cmd)
			if err != nil {
				return err
			}
			db, dir, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			var ledgers []engine.LedgerInfo
			var results []verifyResult
			if len(args) == 1 {
				info, err := db.Ledger(args[0])
				switch {
				case errors.Is(err, engine.ErrLedgerUnavailable):
					results = append(results, verifyResult{Name: args[0], err: err, segments: partFailed, index: partUnchecked})
				case err != nil:
					return ledgerError(dir, args[0], err)
				default:
					ledgers = append(ledgers, info)
				}
			} else {
				bad := db.Unavailable()
				for _, name := range slices.Sorted(maps.Keys(bad)) {
					results = append(results, verifyResult{Name: name, err: bad[name], segments: partFailed, index: partUnchecked})
				}
				ledgers = db.Ledgers()
			}
			v := &verifier{db: db, dir: dir, full: full}
			if full && isTerminal(cmd.ErrOrStderr()) {
				v.bar = newProgressBar(cmd.ErrOrStderr(), ledgers)
			}
			for i := range ledgers {
				results = append(results, v.verify(cmd.Context(), &ledgers[i]))
			}
			if v.bar != nil {
				v.bar.Clear()
			}
			if err := writeVerifyResults(cmd.OutOrStdout(), format, results); err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.err != nil {
					failed++
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: verify %s: %s\n", safeName(r.Name), errorText(r.err))
				}
			}
			if failed > 0 {
				if ctxErr := cmd.Context().Err(); ctxErr != nil {
					return &exitErr{code: exitError, err: ctxErr}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: verification failed: %d of %d ledgers\n", failed, len(results))
				return silentExit(exitVerification)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "read and check every record, and the index against the segments")
	return cmd
}

// verifyResult is the outcome of verifying one ledger.
type verifyResult struct {
	Name   string
	ID     string
	Events uint64
	Head   eventid.ID
	err    error
	// The parts' results when err is not nil: partOK, partFailed (the
	// segments), partDamaged (the index) or partUnchecked.
	segments, index string
}

// Results of a ledger's parts.
const (
	partOK        = "ok"
	partFailed    = "failed"
	partDamaged   = "damaged"
	partUnchecked = "-"
)

// indexRebuildHint says how the index is rebuilt: annal reindex (Open
// with engine.Options.RebuildIndex), or Open, which rebuilds a missing
// index from the segments.
const indexRebuildHint = "annal reindex --dir DIR rebuilds it from the segments"

// isIndexError reports whether err is a failure of the index alone: a
// file of the index's store that fails its checksum, an entry that does
// not decode, a store that failed, or the index disagreeing with segments
// that verified (engine.DB.Verify checks the segments first, and compares
// the index with them only when they verify).
//
// The engine has no sentinel for the last case; its message is matched.
func isIndexError(err error) bool {
	if errors.Is(err, engine.ErrIndexDamaged) || errors.Is(err, index.ErrCorruption) || errors.Is(err, index.ErrFailed) || pebble.IsCorruptionError(err) ||
		pebble.ExtractDataCorruptionInfo(err) != nil {
		return true
	}
	msg := err.Error()
	return errors.Is(err, segment.ErrCorruption) &&
		(strings.Contains(msg, ": the index disagrees with the segments") || strings.Contains(msg, ": the index has "))
}

// indexDamaged is the error verify reports for a ledger whose index alone
// is damaged: one line that says so, what the events are and how the index
// is rebuilt.
func indexDamaged(dir string, err error, events uint64, full bool) error {
	// The engine's ErrIndexDamaged says the same for a library's user; the
	// command says it once, in its own words, around the cause.
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) && errors.Is(err, engine.ErrIndexDamaged) {
		for _, e := range joined.Unwrap() {
			if e != engine.ErrIndexDamaged {
				err = e
			}
		}
	}
	detail := errorLine(err)
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil && !strings.Contains(detail, info.Path) {
		detail += " (" + info.Path + ")"
	}
	intact := "the events in the segments are intact (the tail was checked when the directory was opened; verify --full checks every record)"
	if full {
		intact = fmt.Sprintf("the %d events in the segments are intact (every record verified)", events)
	}
	return fmt.Errorf("the index is damaged: %s; %s; the index is derived from them: %s", detail, intact,
		strings.ReplaceAll(indexRebuildHint, "DIR", dir))
}

// verifier verifies ledgers one after the other.
type verifier struct {
	db   *engine.DB
	dir  string
	full bool
	bar  *progressbar.ProgressBar // nil: no progress shown
	done int64                    // bytes of the ledgers verified before
}

// newProgressBar returns a bar over the segment bytes of ledgers, which
// shows the rate and the time left. A maintained library draws it
// (progressbar handles the terminal width, throttling and the estimate).
func newProgressBar(w io.Writer, ledgers []engine.LedgerInfo) *progressbar.ProgressBar {
	var total int64
	for _, l := range ledgers {
		total += l.Bytes
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("verify"),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
	)
}

func (v *verifier) verify(ctx context.Context, l *engine.LedgerInfo) verifyResult {
	r := verifyResult{Name: l.Name, ID: l.ID.String()}
	if v.bar != nil {
		v.bar.Describe("verify " + safeName(l.Name))
	}
	if v.full {
		var progress func(records, bytes int64)
		if v.bar != nil {
			progress = func(_, bytes int64) { v.bar.Set64(v.done + min(bytes, l.Bytes)) }
		}
		rep, err := v.db.Verify(ctx, l.Name, progress)
		r.Events, r.Head, r.err = rep.Events, rep.Head, err
	} else {
		r.Events, r.Head, r.err = l.Count, l.Head, checkHead(ctx, v.db, l)
	}
	if v.bar != nil {
		v.done += l.Bytes
		v.bar.Set64(v.done)
	}
	switch {
	case r.err == nil:
	case isIndexError(r.err):
		// The segments verified: with --full, Verify reads every record
		// before it compares the index (and nothing appends meanwhile,
		// this process having the directory to itself); without it, Open
		// verified the tail. Their count and head are the ledger's.
		r.Events, r.Head = l.Count, l.Head
		r.segments, r.index = partOK, partDamaged
		r.err = indexDamaged(v.dir, r.err, l.Count, v.full)
	case v.full:
		r.segments, r.index = partFailed, partUnchecked
	default:
		// The quick check reads the head and the genesis event through
		// the index; what failed is not known to be either part.
		r.segments, r.index = partUnchecked, partUnchecked
	}
	return r
}

// checkHead checks that the head, the last sequence number and the genesis
// event of a ledger can be read and agree with its count.
func checkHead(ctx context.Context, db *engine.DB, l *engine.LedgerInfo) error {
	head, err := db.Get(ctx, l.Head)
	if err != nil {
		return fmt.Errorf("head %s cannot be read: %w", l.Head, err)
	}
	if head.Seq != l.Count {
		return fmt.Errorf("head %s is event #%d, but the ledger counts %d events", l.Head, head.Seq, l.Count)
	}
	last, err := db.GetSeq(ctx, l.Name, l.Count)
	if err != nil {
		return fmt.Errorf("event #%d (the head) cannot be read by sequence number: %w", l.Count, err)
	}
	if last.ID != l.Head {
		return fmt.Errorf("event #%d is %s, but the head is %s", l.Count, last.ID, l.Head)
	}
	genesis, err := db.Get(ctx, l.Genesis)
	if err != nil {
		return fmt.Errorf("genesis event %s cannot be read: %w", l.Genesis, err)
	}
	if genesis.Seq != 1 {
		return fmt.Errorf("genesis event %s is event #%d, not #1", l.Genesis, genesis.Seq)
	}
	return nil
}

// verifyJSON is a verify result in JSON output.
type verifyJSON struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	OK       bool   `json:"ok"`
	Events   uint64 `json:"events"`
	Head     string `json:"head,omitempty"`
	Error    string `json:"error,omitempty"`
	Segments string `json:"segments,omitempty"` // on a failure
	Index    string `json:"index,omitempty"`    // on a failure
}

func (r *verifyResult) json() verifyJSON {
	j := verifyJSON{Name: r.Name, ID: r.ID, OK: r.err == nil, Events: r.Events}
	if !r.Head.IsZero() {
		j.Head = r.Head.String()
	}
	if r.err != nil {
		j.Error = errorLine(r.err)
		j.Segments, j.Index = r.segments, r.index
	}
	return j
}

// tablePart is a part's result in verify's table: a failure in capitals.
func tablePart(s string) string {
	if s == partOK || s == partUnchecked {
		return s
	}
	return strings.ToUpper(s)
}

func writeVerifyResults(w io.Writer, format string, results []verifyResult) error {
	switch format {
	case formatTable:
		tw := newTable(w)
		fmt.Fprintln(tw, "NAME\tID\tEVENTS\tHEAD\tSEGMENTS\tINDEX\tRESULT")
		for _, r := range results {
			j := r.json()
			result, segments, index := "ok", "ok", "ok"
			if !j.OK {
				result, segments, index = "FAILED", tablePart(j.Segments), tablePart(j.Index)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", safeName(j.Name), orDash(j.ID), j.Events, orDash(j.Head), segments, index, result)
		}
		return tw.Flush()
	case formatJSON:
		out := make([]verifyJSON, 0, len(results))
		for i := range results {
			out = append(out, results[i].json())
		}
		return writeJSON(w, format, out)
	}
	for i := range results {
		if err := writeJSON(w, format, results[i].json()); err != nil {
			return err
		}
	}
	return nil
}
