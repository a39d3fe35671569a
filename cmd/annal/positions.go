package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newAcceptLostPositionsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "accept-lost-positions",
		Short: "Accept that the named consumers' positions were lost with meta.db",
		Long: `accept-lost-positions clears the state in which the positions of named
consumers are lost. They live only in DIR/meta.db; when it is missing (or
empty) the next open rebuilds it from the segments, and the positions are
gone. From then on every command says so on standard error ("consumer
positions lost"), and every consumer call of a program (engine.DB.Consumer,
its Events and Ack, Consumers, SetConsumerPosition, DeleteConsumer) fails
with engine.ErrPositionsLost, in every process that opens the directory,
until this command (or engine.DB.AcceptLostPositions) accepts the loss.

Run it once whoever runs the consumers knows: afterwards each consumer
starts again at the first event of its ledger (it is given again what it
had acknowledged: at least once), unless its program sets a position first
(engine.DB.SetConsumerPosition). Restoring meta.db from a copy instead
keeps the positions the copy holds. With nothing to accept it says so and
exits 0.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			db, _, err := g.openDB(cmd, false)
			if err != nil {
				return err
			}
			defer closeDB(db, &err)
			if db.MetaRebuilt() == nil {
				fmt.Fprintln(cmd.OutOrStdout(), "no consumer positions are lost: nothing to accept")
				return nil
			}
			if err := db.AcceptLostPositions(); err != nil {
				return &exitErr{code: exitError, err: err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "accepted: the consumer positions lost with meta.db are forgotten; each named consumer starts again at the first event of its ledger unless its position is set")
			return nil
		},
	}
}
