package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/annal-db/annal/engine"
	"github.com/spf13/cobra"
)

// readCommands are the commands that only read: they open the data
// directory read-only (engine.OpenReadOnly), so that they work beside a
// process that has it open for writing, and change no byte in it.
var readCommands = []string{"ledgers", "stats", "get", "scan", "tail", "export"}

// readsOnly reports whether cmd only reads the data directory: one of
// readCommands, export without --checkpoint (which signs a checkpoint).
func readsOnly(cmd *cobra.Command) bool {
	if !slices.Contains(readCommands, cmd.Name()) {
		return false
	}
	f := cmd.Flag("checkpoint")
	return f == nil || !f.Changed
}

// openReader opens dir read-only for a read command. A ledger whose last
// segment ends with bytes it does not show (a write in progress, or a
// torn write that the writer's next open cuts) gets a note on stderr.
// When no writer holds the directory, every command but tail holds it
// while it runs and reads its index (engine.Options.UseIndex): tail
// follows for long, and would keep a writer from starting.
func (g *globals) openReader(cmd *cobra.Command, dir string, opts *engine.Options) (*engine.DB, string, error) {
	opts = readerOptions(opts)
	opts.UseIndex = cmd.Name() != "tail"
	db, err := engine.OpenReadOnly(dir, opts)
	if err != nil {
		return nil, dir, openError(dir, err)
	}
	readerNotes(cmd.ErrOrStderr(), db, "not shown")
	return db, dir, nil
}

// openBesideWriter opens the data directory for a command that only reads
// once it finds another process holding it (prove, checkpoint without
// --new or --accept, export --checkpoint, key): as a writer if none holds
// it (an open that may sign a ledger's first checkpoint, repair what a
// crash left), read-only (openReader) beside the one that does, which
// signs nothing: the latest signed checkpoint is the writer's to make.
func (g *globals) openBesideWriter(cmd *cobra.Command) (*engine.DB, string, error) {
	db, dir, err := g.openDB(cmd, false)
	if !errors.Is(err, engine.ErrLocked) {
		return db, dir, err
	}
	opts, oerr := g.options()
	if oerr != nil {
		return nil, dir, oerr
	}
	return g.openReader(cmd, dir, opts)
}

// openVerifier opens dir for verify: read-only (engine.OpenReadOnly), so
// that verify never writes, signs or cuts anything, with the writer's
// index when no writer holds the directory (engine.Options.VerifyIndex).
// What a writer's next open would repair (a torn tail it cuts, a missing
// index, metadata file or tree file it rebuilds) is noted on stderr.
func (g *globals) openVerifier(cmd *cobra.Command) (*engine.DB, string, error) {
	dir, err := g.dataDir(cmd)
	if err != nil {
		return nil, "", err
	}
	if err := checkDataDir(dir); err != nil {
		return nil, dir, &exitErr{code: exitError, err: err}
	}
	opts, err := g.options()
	if err != nil {
		return nil, dir, err
	}
	opts = readerOptions(opts)
	// verify reads every record, whatever the stamps say.
	opts.VerifyIndex, opts.FullVerifyOnOpen = true, true
	db, err := engine.OpenReadOnly(dir, opts)
	if err != nil {
		return nil, dir, openError(dir, err)
	}
	if err := db.MetaDamaged(); err != nil {
		// The writer's open fails on it: so does verify.
		db.Close()
		return nil, dir, openError(dir, err)
	}
	readerNotes(cmd.ErrOrStderr(), db, "not verified and not cut")
	for _, p := range db.Pending() {
		fmt.Fprintf(cmd.ErrOrStderr(), "annal: note: %s\n", safeText(p))
	}
	return db, dir, nil
}

// readerOptions returns opts (new ones if nil) with the reader's cache
// directory (engine.Options.CacheDir): annal's directory in the user's
// cache directory ($XDG_CACHE_HOME, else ~/.cache, on Linux), where a
// read command keeps the stamps of the sealed segments it verified, so
// that the next one does not read them again. None if the system has no
// such directory.
func readerOptions(opts *engine.Options) *engine.Options {
	if opts == nil {
		opts = &engine.Options{}
	}
	if c, err := os.UserCacheDir(); err == nil && opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(c, "annal")
	}
	return opts
}

// readerNotes writes to w what a read-only open of db has to say: the
// names a writer's open will give (written by it, not here), consumer
// positions lost with a rebuilt meta.db, and each last segment's bytes
// past what it shows (which are hidden: "not shown", "not verified and
// not cut").
func readerNotes(w io.Writer, db *engine.DB, hidden string) {
	for _, r := range db.Renamed() {
		fmt.Fprintf(w, "annal: %s\n", safeText(r.String()))
	}
	if why := db.MetaRebuilt(); why != nil {
		fmt.Fprintf(w, "annal: note: %s\n", safeText(errorLine(why)))
	}
	for _, h := range db.HiddenTails() {
		fmt.Fprintf(w, "annal: note: ledger %s: the last %d bytes of its last segment are %s (a write in progress, or a torn write that the writer's next open cuts): %s\n",
			safeText(h.Ledger), h.Bytes, hidden, safeText(h.Why))
	}
}
