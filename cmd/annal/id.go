package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/annal-db/annal/eventid"
	"github.com/spf13/cobra"
)

func newIDCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "id ID...",
		Short: "Print the fields and all text forms of Event IDs",
		Long: `id takes Event IDs in any text form (32 hex characters in either case, UUID,
sortable base64 or Crockford base32) and prints, for each, its time (RFC 3339
with microseconds, UTC), microseconds, checksum, ledger ID, version and all
four text forms. --format text (or table, the same: the default) prints them
as a key/value listing; --format json (or ndjson, the same) prints each ID as
one JSON object on its own line.
An ID that does not parse is reported on standard error; the exit code is then 1.`,
		Args:        usageArgs(cobra.MinimumNArgs(1)),
		Annotations: map[string]string{idArgsAnnotation: "every argument is an ID"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "text", formatTable:
				format = "text"
			case formatJSON, formatNDJSON:
				format = formatJSON
			default:
				return usageErr("id: --format must be text (or table) or json (or ndjson), not %q", format)
			}
			return runID(args, format, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text (or table: a key/value listing) or json (or ndjson: one JSON object a line)")
	return cmd
}

// idFields is what 'annal id' prints of one ID.
type idFields struct {
	ID       string `json:"id"`
	Time     string `json:"time"`
	Micros   uint64 `json:"micros"`
	Checksum string `json:"checksum"`
	Ledger   string `json:"ledger"`
	Version  uint8  `json:"version"`
	Hex      string `json:"hex"`
	UUID     string `json:"uuid"`
	Base64   string `json:"base64"`
	Base32   string `json:"base32"`
}

// rfc3339Micro is RFC 3339 with exactly six fraction digits.
const rfc3339Micro = "2006-01-02T15:04:05.000000Z07:00"

func describeID(id eventid.ID) idFields {
	return idFields{
		ID:       id.String(),
		Time:     id.Time().UTC().Format(rfc3339Micro),
		Micros:   id.Micros(),
		Checksum: fmt.Sprintf("%08x", id.Checksum()),
		Ledger:   id.Ledger().String(),
		Version:  id.Version(),
		Hex:      id.String(),
		UUID:     id.UUID(),
		Base64:   id.Base64(),
		Base32:   id.Base32(),
	}
}

func runID(args []string, format string, stdout, stderr io.Writer) error {
	bad := 0
	enc := json.NewEncoder(stdout)
	for i, arg := range args {
		id, err := eventid.Parse(arg)
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "annal id: %s\n", errorText(err))
			continue
		}
		f := describeID(id)
		if format == "json" {
			if err := enc.Encode(f); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "id        %s\ntime      %s\nmicros    %d\nchecksum  %s\nledger    %s\nversion   %d\nhex       %s\nuuid      %s\nbase64    %s\nbase32    %s\n",
			f.ID, f.Time, f.Micros, f.Checksum, f.Ledger, f.Version, f.Hex, f.UUID, f.Base64, f.Base32)
	}
	if bad > 0 {
		return silentExit(exitError)
	}
	return nil
}
