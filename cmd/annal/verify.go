package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
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

It prints one result a ledger (table: name, ID, events, head, result; JSON
and NDJSON: name, id, ok, events, head, error) and, on standard error, what
failed and where. Exit 3 if any ledger fails.`,
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
					results = append(results, verifyResult{Name: args[0], err: err})
				case err != nil:
					return ledgerError(dir, args[0], err)
				default:
					ledgers = append(ledgers, info)
				}
			} else {
				bad := db.Unavailable()
				for _, name := range slices.Sorted(maps.Keys(bad)) {
					results = append(results, verifyResult{Name: name, err: bad[name]})
				}
				ledgers = db.Ledgers()
			}
			v := &verifier{db: db, full: full}
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
}

// verifier verifies ledgers one after the other.
type verifier struct {
	db   *engine.DB
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
	Name   string `json:"name"`
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Events uint64 `json:"events"`
	Head   string `json:"head,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (r *verifyResult) json() verifyJSON {
	j := verifyJSON{Name: r.Name, ID: r.ID, OK: r.err == nil, Events: r.Events}
	if !r.Head.IsZero() {
		j.Head = r.Head.String()
	}
	if r.err != nil {
		j.Error = errorLine(r.err)
	}
	return j
}

func writeVerifyResults(w io.Writer, format string, results []verifyResult) error {
	switch format {
	case formatTable:
		tw := newTable(w)
		fmt.Fprintln(tw, "NAME\tID\tEVENTS\tHEAD\tRESULT")
		for _, r := range results {
			j := r.json()
			result := "ok"
			if !j.OK {
				result = "FAILED"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", safeName(j.Name), orDash(j.ID), j.Events, orDash(j.Head), result)
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
