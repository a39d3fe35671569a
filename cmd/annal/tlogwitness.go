package main

// annal witness, a C2SP tlog witness (engine/cosign), and the policy the
// verify commands apply to the checkpoints they read: --witness KEY
// (repeated) and --quorum K.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/cosign"
	"github.com/spf13/cobra"
)

func newWitnessCmd(g *globals) *cobra.Command {
	var listen, name string
	var logs []string
	var printKey bool
	cmd := &cobra.Command{
		Use:   "witness --dir D --listen ADDR --log K [--log K…] | witness --dir D --print-key",
		Short: "Run a tlog witness: cosign a log's checkpoints only as consistent extensions",
		Long: `witness runs a C2SP tlog witness (tlog-witness, tlog-cosignature): an HTTP
server of POST /add-checkpoint that cosigns a log's signed checkpoint only
when it is a consistent extension of the last checkpoint it cosigned for the
same origin (the first it is shown, it takes as it is). A writer that asks
for its cosignature (engine.Options.TlogWitnesses) and verifiers that
require it (verify --witness KEY --quorum K) then find a history rewritten
by whoever holds the log's signing key: the witness refuses to cosign it.

D (--dir, required; not a data directory) holds the witness's Ed25519 key
(witness.key, created on the first run, mode 0600) and what it cosigned
(witness.state: per origin the size and root, written and synced before it
answers; created empty with the key, and a D holding the key without it is
refused: keep it, as an empty or older state would cosign a rewritten
history), and witness.log, a second record of it: a line per cosignature,
appended and synced after the state. A state older than the log's last line
for an origin (witness.state put back alone from an old copy) is refused at
start, naming both; a D restored whole from an old copy is not detected:
never restore D from a backup (see docs/cli.md, "annal witness"). One
witness at a time runs on D.

--log K (repeatable, at least one) is a log's verifier key, as annal key
prints it, or @FILE holding it. A key named N vouches for the origins N and
N/<ledger ID> (every ledger of the data directories it signs for).

On start it prints on standard output its verifier key (the line a writer
and a verifier are given) and then the URL it listens on; it runs until
SIGINT or SIGTERM (exit 0). --print-key prints the verifier key alone
(creating the key if D has none) and exits.

The answers to add-checkpoint: 200 with the cosignature line; 409 Conflict
(text/x.tlog.size, its size for the origin) when the request's old size is
not the size it cosigned last; 422 for a consistency proof that does not
verify (another history) or another root at the size it cosigned; 403 for a
checkpoint not signed by the origin's log key; 404 for an origin of no log
given; 400 for a malformed request. Each refusal is logged on standard
error.

Exit codes: 0 stopped by a signal, or --print-key; 1 a directory or an
address that cannot be used (another witness on D, a port in use); 2 usage.

Example:
  annal witness --dir /var/lib/annal-witness --listen :7380 --log @annal.pub`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := g.dir
			if dir == "" {
				return usageErr("witness: --dir D is required: the witness's own directory (its key and what it cosigned), not a data directory")
			}
			if _, err := os.Stat(filepath.Join(dir, "meta.db")); err == nil {
				return usageErr("witness: %s is an annal data directory: give the witness a directory of its own", dir)
			}
			if printKey {
				if listen != "" || len(logs) > 0 {
					return usageErr("witness: --print-key prints the key and exits: it takes no --listen or --log")
				}
				k, err := cosign.WitnessKey(dir, name)
				if err != nil {
					return &exitErr{code: exitError, err: err}
				}
				fmt.Fprintln(cmd.OutOrStdout(), k.VerifierKey())
				return nil
			}
			if listen == "" || len(logs) == 0 {
				return usageErr("witness: --listen ADDR and at least one --log K are required (or --print-key)")
			}
			var vkeys []string
			for _, l := range logs {
				k, err := keyArg(l)
				var ee *exitErr
				if errors.As(err, &ee) && ee.code == exitUsage {
					return usageErr("witness: --log %s is not a log's verifier key (name+hash+base64, as annal key prints it, or @FILE holding one)", safeText(strconv.Quote(l)))
				}
				if err != nil {
					return err
				}
				vkeys = append(vkeys, k)
			}
			stderr := cmd.ErrOrStderr()
			w, err := cosign.OpenWitness(dir, cosign.WitnessOptions{Name: name, Logs: vkeys, Log: log.New(stderr, "annal: witness: ", 0)})
			if err != nil {
				if errors.Is(err, cosign.ErrKey) {
					return usageErr("witness: %w", err)
				}
				return &exitErr{code: exitError, err: err}
			}
			defer w.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return &exitErr{code: exitError, err: fmt.Errorf("witness: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\nhttp://%s\n", w.VerifierKey(), ln.Addr())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			srv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, ErrorLog: log.New(stderr, "annal: witness: ", 0)}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return &exitErr{code: exitError, err: fmt.Errorf("witness: %w", err)}
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "the address to serve add-checkpoint on (host:port; :0 picks a free port)")
	cmd.Flags().StringArrayVar(&logs, "log", nil, "a log's verifier key (annal key prints it), or @FILE holding it; repeatable")
	cmd.Flags().StringVar(&name, "name", "", "the witness key's name when it is created (default annal-witness- and 8 hex digits of its public key)")
	cmd.Flags().BoolVar(&printKey, "print-key", false, "print the witness's verifier key (creating the key if none) and exit")
	return cmd
}

// tlogWitnessOptions sets the engine options of --tlog-witness URL=KEY
// and --tlog-witness-quorum K. The URL may hold '=': the split is at the
// first '=' whose right side is a witness's verifier key.
func (g *globals) tlogWitnessOptions(o *engine.Options) error {
	for _, arg := range g.tlogWitnesses {
		var w *cosign.WitnessConfig
		for i := strings.IndexByte(arg, '='); i >= 0; {
			c := cosign.WitnessConfig{URL: arg[:i], VKey: arg[i+1:]}
			if _, err := cosign.NewVerifier(c.VKey); err == nil {
				w = &c
				break
			}
			j := strings.IndexByte(arg[i+1:], '=')
			if j < 0 {
				break
			}
			i += 1 + j
		}
		if w == nil {
			return usageErr("--tlog-witness %s: want URL=KEY, KEY the witness's verifier key as annal witness prints it", safeText(strconv.Quote(arg)))
		}
		if err := w.Check(); err != nil {
			return usageErr("--tlog-witness %s: %v", safeText(strconv.Quote(arg)), err)
		}
		o.TlogWitnesses = append(o.TlogWitnesses, *w)
	}
	if g.tlogQuorum < 0 || g.tlogQuorum > len(o.TlogWitnesses) {
		return usageErr("--tlog-witness-quorum %d: want 1 to the number of --tlog-witness given (%d), or 0 for all of them", g.tlogQuorum, len(o.TlogWitnesses))
	}
	o.TlogWitnessQuorum = g.tlogQuorum
	return nil
}

// cosignPolicy is the --witness and --quorum flags of a verify command.
type cosignPolicy struct {
	witnesses []string
	quorum    int
	p         *cosign.Policy // nil: no --witness
}

// addFlags adds --witness and --quorum to cmd.
func (c *cosignPolicy) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&c.witnesses, "witness", nil, "require the checkpoint's cosignature by this tlog witness (its verifier key, as annal witness prints it, or @FILE holding it); repeatable")
	cmd.Flags().IntVar(&c.quorum, "quorum", 0, "with --witness: how many of the witnesses given must have cosigned the checkpoint (default: all)")
}

// parse reads the flags (a usage error if they are bad); without
// --witness the policy is off.
func (c *cosignPolicy) parse(cmd *cobra.Command) error {
	if len(c.witnesses) == 0 {
		if cmd.Flags().Changed("quorum") {
			return usageErr("%s: --quorum goes with --witness KEY: the tlog witnesses whose cosignatures are counted", cmd.Name())
		}
		return nil
	}
	var vkeys []string
	for _, w := range c.witnesses {
		k := w
		if path, ok := strings.CutPrefix(w, "@"); ok {
			b, err := readSmallFile("--witness", path)
			if err != nil {
				return err
			}
			k = strings.TrimSpace(strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)[0])
		}
		vkeys = append(vkeys, k)
	}
	p, err := cosign.NewPolicy(vkeys, c.quorum)
	if err != nil {
		return usageErr("%s: --witness/--quorum: %v", cmd.Name(), err)
	}
	c.p = p
	return nil
}

// check applies the policy to the signed checkpoint note, what names it
// ("checkpoint FILE") (nil policy: nothing to check). Too few
// cosignatures is exit 3, naming the checkpoint, how many were found and
// which keys.
func (c *cosignPolicy) check(what string, note []byte) ([]cosign.Cosigned, error) {
	if c.p == nil {
		return nil, nil
	}
	found, err := c.p.Check(note)
	if err != nil {
		return found, &exitErr{code: exitVerification, err: fmt.Errorf("%s: %w", what, err)}
	}
	return found, nil
}

// summary says in words what the policy found: "cosigned by N of the M
// tlog witnesses given (quorum K)".
func (c *cosignPolicy) summary(found []cosign.Cosigned) string {
	return "cosigned by " + strconv.Itoa(len(found)) + " of the " + strconv.Itoa(len(c.witnesses)) + " tlog witnesses given (quorum " + strconv.Itoa(c.p.Quorum()) + ")"
}
