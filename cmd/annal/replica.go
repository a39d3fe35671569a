package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

// exitReplica is the exit code of a command that the replica refused: the
// ledger was fenced (another writer took it), or the directory is behind
// its bucket or holds another history.
const exitReplica = 5

// replicaFlagsHelp is the help of the global replica flags.
const (
	replicaFlagHelp      = "replicate every ledger to an S3-compatible bucket: s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true (default $ANNAL_REPLICA; credentials from the standard AWS chain, never in the URL); read-only commands ignore it"
	replicationFlagHelp  = "with --replica: replicated (an append returns once its events are stored in the bucket too) or shipped (once durable locally; stored within a second) (default replicated)"
	publishTilesFlagHelp = "with --replica: also publish each ledger in the bucket as C2SP tlog-tiles, verifiable by any tlog client (two PUTs per 256 events more)"
)

// replicaOptions sets o's replica options from --replica (else
// $ANNAL_REPLICA) and --replication.
func (g *globals) replicaOptions(o *engine.Options) error {
	url := g.replica
	if url == "" {
		url = os.Getenv("ANNAL_REPLICA")
	}
	if url == "" {
		if g.replication != "" {
			return usageErr("--replication %s needs --replica (or $ANNAL_REPLICA)", g.replication)
		}
		if g.publishTiles {
			return usageErr("--publish-tiles needs --replica (or $ANNAL_REPLICA)")
		}
		return nil
	}
	o.Replica = url
	o.PublishTiles = g.publishTiles
	switch g.replication {
	case "", "replicated":
		o.Replication = engine.Replicated
	case "shipped":
		o.Replication = engine.Shipped
	default:
		return usageErr("--replication must be replicated or shipped, not %q", g.replication)
	}
	return nil
}

// bucketCommand returns the output format and the bucket of a command
// that reads a bucket (replica status, replica owners): --replica, else
// $ANNAL_REPLICA, which it needs.
func (g *globals) bucketCommand(cmd *cobra.Command, what string) (format, replicaURL string, err error) {
	if format, err = g.outputFormat(cmd); err != nil {
		return "", "", err
	}
	var o engine.Options
	if err := g.replicaOptions(&o); err != nil {
		return "", "", err
	}
	if o.Replica == "" {
		return "", "", usageErr("%s: no replica: give --replica URL (or $ANNAL_REPLICA)", what)
	}
	return format, o.Replica, nil
}

// replicaRefusal reports whether err is the replica's refusal (exit 5).
func replicaRefusal(err error) bool {
	return errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrBehind) || errors.Is(err, engine.ErrDiverged)
}

func newReplicaCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replica",
		Short: "The replica of the ledgers in an S3-compatible bucket",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return silentExit(exitUsage)
		},
	}
	cmd.AddCommand(newReplicaStatusCmd(g))
	cmd.AddCommand(newReplicaOwnersCmd(g))
	return cmd
}

// replicaNodeJSON is a node's line of annal replica owners.
type replicaNodeJSON struct {
	Name      string  `json:"name"`
	Address   string  `json:"address"`
	Lease     float64 `json:"leaseSeconds"`
	Renewal   uint64  `json:"renewal"`
	Alive     bool    `json:"alive"`
	Unchanged float64 `json:"unchangedSeconds"`
}

// replicaOwnerJSON is a ledger's line of annal replica owners.
type replicaOwnerJSON struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Node      string `json:"node"`
	Address   string `json:"address,omitempty"`
	Epoch     uint64 `json:"epoch"`
	Behind    bool   `json:"ownerBehind,omitempty"`
	NodeAlive *bool  `json:"nodeAlive,omitempty"`
}

func newReplicaOwnersCmd(g *globals) *cobra.Command {
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "owners",
		Short: "The nodes sharing the bucket, whether each is alive, and the node that writes each ledger",
		Long: `replica owners reads the bucket that --replica (or $ANNAL_REPLICA) names and
prints the nodes that share it (their leases under nodes/: name, address,
lease, renewal counter) and, for each ledger, the node that writes it
(its owner object, checked against its newest manifest, whose epoch
wins) and that epoch. It writes nothing.

A node is alive if its lease object changed while the command watched it,
or if the command has not yet watched it for longer than its lease: no
clock of another machine is compared. So the command watches the leases
for --watch (by default the longest lease of the nodes, and a tenth more)
before it answers; --watch 0 answers at once, every node with a lease
taken as alive.

JSON is {"nodes": [...], "ledgers": [...]}; NDJSON one object a line,
the nodes first. Node fields: name, address, leaseSeconds, renewal,
alive, unchangedSeconds; ledger fields: name, id, node, address, epoch,
ownerBehind (the owner object names the node the ledger is moving from),
nodeAlive.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, replicaURL, err := g.bucketCommand(cmd, "replica owners")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			r, err := engine.NewRouter(ctx, replicaURL)
			if err != nil {
				return &exitErr{code: exitError, err: err}
			}
			wait := watch
			if wait < 0 {
				wait = 0
				for _, n := range r.Nodes() {
					wait = max(wait, n.Lease+n.Lease/10)
				}
			}
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := r.Refresh(ctx); err != nil {
					return &exitErr{code: exitError, err: err}
				}
			}
			alive := map[string]bool{}
			var nodes []replicaNodeJSON
			for _, n := range r.Nodes() {
				alive[n.Name] = n.Alive
				nodes = append(nodes, replicaNodeJSON{Name: n.Name, Address: n.Address, Lease: n.Lease.Seconds(), Renewal: n.Renewal, Alive: n.Alive, Unchanged: n.Unchanged.Seconds()})
			}
			bucket, err := engine.InspectReplica(ctx, replicaURL, nil)
			if err != nil {
				return &exitErr{code: exitError, err: err}
			}
			var ledgers []replicaOwnerJSON
			for _, b := range bucket {
				if b.Epoch == 0 {
					continue
				}
				ow, err := r.Owner(ctx, b.Ledger.String())
				if err != nil {
					return &exitErr{code: exitError, err: err}
				}
				row := replicaOwnerJSON{Name: ow.Name, ID: b.Ledger.String(), Node: ow.Node, Address: ow.Address, Epoch: ow.Epoch, Behind: ow.Behind}
				if a, ok := alive[ow.Node]; ok {
					row.NodeAlive = &a
				}
				ledgers = append(ledgers, row)
			}
			switch format {
			case formatJSON:
				return writeJSON(cmd.OutOrStdout(), format, struct {
					Nodes   []replicaNodeJSON  `json:"nodes"`
					Ledgers []replicaOwnerJSON `json:"ledgers"`
				}{append([]replicaNodeJSON{}, nodes...), append([]replicaOwnerJSON{}, ledgers...)})
			case formatTable:
			default:
				for _, n := range nodes {
					if err := writeJSON(cmd.OutOrStdout(), format, n); err != nil {
						return err
					}
				}
				for _, l := range ledgers {
					if err := writeJSON(cmd.OutOrStdout(), format, l); err != nil {
						return err
					}
				}
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NODE\tADDRESS\tLEASE\tRENEWAL\tALIVE\tUNCHANGED")
			for _, n := range nodes {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%v\t%.1fs\n", safeText(n.Name), safeText(n.Address), time.Duration(n.Lease*float64(time.Second)), n.Renewal, n.Alive, n.Unchanged)
			}
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "LEDGER\tID\tNODE\tEPOCH\tNODE ALIVE")
			for _, l := range ledgers {
				node, live := l.Node, "-"
				if node == "" {
					node = "-"
				}
				if l.Behind {
					node += " (moving)"
				}
				if l.NodeAlive != nil {
					live = fmt.Sprint(*l.NodeAlive)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", safeName(l.Name), l.ID, safeText(node), l.Epoch, live)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().DurationVar(&watch, "watch", -1, "how long to watch the nodes' leases before answering (default: the longest lease and a tenth; 0: at once)")
	return cmd
}

// replicaStatusJSON is a ledger's line of annal replica status.
type replicaStatusJSON struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	Epoch   uint64 `json:"epoch"`
	Writer  string `json:"writer,omitempty"`
	Written string `json:"written,omitempty"`
	Stored  uint64 `json:"stored"`
	Local   uint64 `json:"local,omitempty"`
	// Lag is local - stored (negative: the bucket is ahead of the
	// directory); absent without a directory.
	Lag *int64 `json:"lag,omitempty"`
}

func newReplicaStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status [DIR]",
		Short: "What the bucket holds of each ledger, and how far behind it is",
		Long: `replica status reads the bucket that --replica (or $ANNAL_REPLICA) names and
prints, for each ledger, its epoch (one more at each takeover), the
writer that holds it, the last event stored in the bucket and, with a data
directory (DIR, or --dir), the ledger's local head and the lag between the
two: the events the directory holds and the bucket does not yet (a
negative lag: the bucket is ahead of the directory, whose writer's open
refuses the ledger). It writes nothing to the bucket nor the directory,
and needs no writer running: the directory is opened read-only. Without
DIR nor --dir it lists every ledger of the bucket.

JSON and NDJSON objects have the fields name, id, epoch, writer, written,
stored, local and lag.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			format, replicaURL, err := g.bucketCommand(cmd, "replica status")
			if err != nil {
				return err
			}
			dir := ""
			switch f := cmd.Flag("dir"); {
			case len(args) == 1:
				dir = args[0]
			case f != nil && f.Changed, os.Getenv("ANNAL_DIR") != "":
				if dir, err = g.dataDir(cmd); err != nil {
					return err
				}
			}
			local := map[eventid.LedgerID]engine.LedgerInfo{}
			var ids []eventid.LedgerID
			if dir != "" {
				if err := checkDataDir(dir); err != nil {
					return &exitErr{code: exitError, err: err}
				}
				db, err := engine.OpenReadOnly(dir, nil)
				if err != nil {
					return openError(dir, err)
				}
				for _, l := range db.Ledgers() {
					local[l.ID] = l
					ids = append(ids, l.ID)
				}
				if err := db.Close(); err != nil {
					return &exitErr{code: exitError, err: err}
				}
				if ids == nil {
					ids = []eventid.LedgerID{}
				}
			}
			bucket, err := engine.InspectReplica(cmd.Context(), replicaURL, ids)
			if err != nil {
				return &exitErr{code: exitError, err: err}
			}
			rows := make([]replicaStatusJSON, 0, len(bucket))
			for _, b := range bucket {
				r := replicaStatusJSON{Name: b.Name, ID: b.Ledger.String(), Epoch: b.Epoch, Writer: b.Writer, Stored: b.Stored}
				if !b.Written.IsZero() {
					r.Written = b.Written.UTC().Format(time.RFC3339)
				}
				if l, ok := local[b.Ledger]; ok {
					r.Name, r.Local = l.Name, l.Count
					lag := int64(l.Count) - int64(b.Stored)
					r.Lag = &lag
				}
				rows = append(rows, r)
			}
			if format != formatTable {
				if format == formatJSON {
					return writeJSON(cmd.OutOrStdout(), format, rows)
				}
				for _, r := range rows {
					if err := writeJSON(cmd.OutOrStdout(), format, r); err != nil {
						return err
					}
				}
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tID\tEPOCH\tSTORED\tLOCAL\tLAG\tWRITER")
			for _, r := range rows {
				localText, lagText := "-", "-"
				if r.Lag != nil {
					localText, lagText = fmt.Sprint(r.Local), fmt.Sprint(*r.Lag)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", safeName(r.Name), r.ID, r.Epoch, r.Stored, localText, lagText, safeText(r.Writer))
			}
			return tw.Flush()
		},
	}
}

func newTakeoverCmd(g *globals) *cobra.Command {
	var unsigned string
	var ledgers []string
	cmd := &cobra.Command{
		Use:   "takeover URL DIR",
		Short: "Make DIR the writer of its ledgers replicated to URL, fencing the writer that held them",
		Long: `takeover makes the data directory DIR the writer of its ledgers in the
bucket URL (s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true;
credentials from the standard AWS chain), also of those whose bucket is
ahead of it: an older copy of the directory, or a node that was not the
writer. For each such ledger it pulls the events the bucket holds beyond
the directory's into the ledger's segments (every object verified, the
bucket's checkpoint checked with the directory's key), then opens DIR as
the writer: each ledger gets the next epoch in the bucket, and the writer
that held it is fenced (its appends fail, exit 5).

The directory's events must be a prefix of the bucket's: a ledger whose
events differ is refused (exit 5) and nothing is written into it. DIR must
not be open in another process. --replication says how the next commands
that open DIR with --replica append; takeover itself only takes.

A ledger whose bucket holds events beyond DIR's but no signed checkpoint
(its checkpoint object deleted, by mistake or to pass off other events)
fails the takeover (exit 3), naming it, unless --unsigned says otherwise,
as for restore: skip takes the other ledgers and names it on stderr (it
stays behind its bucket, not taken); pull pulls its events too, verified as
any other, and DIR's key signs them at its next checkpoint: nothing in the
bucket that its writer signed vouches for them, so use pull only for a
bucket you vouch for. --ledger NAME (its name or ID; repeated for more)
limits skip or pull to the ledgers named: any other ledger whose bucket is
ahead without a signed checkpoint still fails the takeover. The others
are taken all the same: --ledger selects what --unsigned applies to, not
the ledgers taken. A NAME that is no ledger of DIR, or
--ledger without --unsigned skip or pull, is a usage error (exit 2).

It prints one line a ledger: its name, ID, the events it had and the events
it has now.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			var to engine.TakeoverOptions
			if to.Unsigned, err = unsignedFlag("takeover", unsigned, "pull"); err != nil {
				return err
			}
			if len(ledgers) > 0 && to.Unsigned == engine.RefuseUnsigned {
				return usageErr("takeover: --ledger %q selects the ledgers --unsigned applies to: give --unsigned skip or pull", ledgers)
			}
			to.Ledgers = ledgers
			if err := checkDataDir(args[1]); err != nil {
				return &exitErr{code: exitError, err: err}
			}
			g.replica = args[0]
			opts, err := g.options()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			db, res, err := engine.TakeoverWith(ctx, args[1], opts, to)
			if err != nil {
				switch {
				case replicaRefusal(err):
					return &exitErr{code: exitReplica, err: err}
				case errors.Is(err, engine.ErrInvalid):
					return &exitErr{code: exitUsage, err: err}
				case errors.Is(err, engine.ErrCorruption):
					return &exitErr{code: exitVerification, err: err}
				}
				return openError(args[1], err)
			}
			defer closeDB(db, &err)
			skipped := map[string]bool{}
			for _, r := range res {
				if r.Skipped != "" {
					skipped[r.Name] = true
					fmt.Fprintf(cmd.ErrOrStderr(), "annal: ledger %s (%s) NOT taken: %s\n", safeName(r.Name), r.Ledger, safeText(r.Skipped))
				}
			}
			for name, why := range db.Unavailable() {
				if skipped[name] {
					continue
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "annal: ledger %s is not taken: %s\n", safeText(name), safeText(errorLine(why)))
				err = &exitErr{code: unavailableCode(why)}
			}
			out := cmd.OutOrStdout()
			for _, r := range res {
				if r.Skipped != "" {
					continue
				}
				if r.Pulled > r.Local {
					fmt.Fprintf(out, "%s\t%s\t%d events before\t%d now\t%s\n", safeName(r.Name), r.Ledger, r.Local, r.Pulled, vouched(r.Signed, r.Pulled))
				} else {
					fmt.Fprintf(out, "%s\t%s\t%d events before\t%d now\n", safeName(r.Name), r.Ledger, r.Local, r.Pulled)
				}
			}
			fmt.Fprintf(out, "takeover %s: %s\n", safeText(args[1]), plural(len(res)-len(skipped), "ledger"))
			return err
		},
	}
	cmd.Flags().StringVar(&unsigned, "unsigned", "refuse", "a ledger whose bucket is ahead without a signed checkpoint: refuse (the takeover fails), skip (take the others) or pull (its events too, signed by DIR's key)")
	cmd.Flags().StringArrayVar(&ledgers, "ledger", nil, "apply --unsigned only to this ledger (its name or ID; repeated for more); default every ledger of DIR")
	return cmd
}

// plural says n things: "1 ledger", "2 ledgers".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
