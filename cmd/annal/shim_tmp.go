package main

import (
	"io"

	"github.com/annal-db/annal/engine"
)

// TEMPORARY until t14-eng is merged: ExportOptions.Checkpoint.
func setExportCheckpoint(o *engine.ExportOptions, w io.Writer) { _ = w }
