package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/annal-db/annal/engine/internal/names"
	"github.com/annal-db/annal/eventid"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A ledger's name is local to its data directory, and kept in two places:
//
//	DIR/ledgers/LLLLLLLL/NAME  the name, raw UTF-8 bytes, no newline: the truth
//	DIR/meta.db                a copy, in the ledger's record
//
// The NAME file is in the ledger's directory so that the name goes where
// the segments go: it is written and synced before the ledger comes to
// exist (before the import's rename that makes an imported ledger appear,
// before the genesis event of a created one), and survives a lost meta.db.
// Without it (a directory written by an older annal, before its first
// Open by this one) the name is the metadata's, else the genesis event's.
//
// One rule (names.LedgerProblem) applies to every name a ledger gets: chosen
// by CreateLedger or Import, or found by Open in a NAME file, the metadata
// or a genesis event. Open gives a ledger whose name breaks the rule, or
// is another ledger's, a name derived from it (names.Derived), writes it to
// the NAME file and reports it (DB.Renamed).
const nameFile = "NAME"

// maxNameFileLen bounds what Open reads of a NAME file: a longer file
// cannot hold a valid name, and is reported as one that does not.
const maxNameFileLen = 4 * maxNameLen

// checkLedgerName returns ErrInvalid if a ledger name chosen by a caller
// (CreateLedger, Import) breaks the rule.
func checkLedgerName(s string) error {
	if p := names.LedgerProblem(s, ""); p != "" {
		return invalid("ledger name %s", p)
	}
	return nil
}

// Renamed says that Open gave a ledger another name than the one it was
// known by: its name broke the naming rule (a directory written by an
// older annal, a name rebuilt from a genesis event), or another ledger
// had it (two ledgers that came to share a name, such as a ledger
// directory copied in from another data directory), or the ledger's NAME
// file and the metadata disagreed. The new name is written to the
// ledger's NAME file and the metadata, so Open reports a rename once.
type Renamed struct {
	Ledger eventid.LedgerID
	From   string // the name it was known by (the metadata's, or else the one it found)
	To     string // the name it has now
	Why    string
}

// String says it in a sentence, names quoted (control characters
// escaped).
func (r Renamed) String() string {
	return fmt.Sprintf("ledger %s: renamed from %q to %q: %s", r.Ledger, r.From, r.To, r.Why)
}

// Renamed returns the ledgers Open renamed, by ledger ID, with why; nil if
// it renamed none. The command prints them.
func (db *DB) Renamed() []Renamed {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return slices.Clone(db.renamed)
}

// readNameFile reads the NAME file of a ledger directory; ok is false if
// it has none.
func readNameFile(fs vfs.FS, dir string) (name string, ok bool, err error) {
	err = regularFile(fs, fs.PathJoin(dir, nameFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	f, err := fs.Open(fs.PathJoin(dir, nameFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxNameFileLen+1))
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", fs.PathJoin(dir, nameFile), err)
	}
	return string(b), true, nil
}

// writeNameFile writes name to the NAME file of a ledger directory,
// durably and atomically: NAME.tmp written and synced, renamed over
// NAME, and the directory synced.
func writeNameFile(fs vfs.FS, dir, name string) error {
	if err := writeFileAtomic(fs, dir, nameFile, []byte(name), true); err != nil {
		return fmt.Errorf("engine: the ledger's name: %w", err)
	}
	return nil
}

// openRefusal is a ledger Open refused (it failed recovery, or the
// evidence), with what registerLedgers needs to keep its name.
type openRefusal struct {
	id       eventid.LedgerID
	err      error           // why, wrapping ErrLedgerUnavailable
	found    ledgerMeta      // its genesis event's metadata, if recovery read it (Genesis not zero)
	unsigned *unsignedLedger // refused for its checkpoint evidence only (ErrUnsigned): its key is set here
}

// nameChoice is what registerLedgers decides for one ledger, recovered
// (l) or refused (r).
type nameChoice struct {
	l        *ledger
	r        *openRefusal
	id       eventid.LedgerID
	genesis  eventid.ID // zero if unknown (a refused ledger whose genesis event was not read)
	dir      string
	found    string // the name found: the NAME file's, else the metadata's, else the genesis event's
	source   string // where found comes from
	had      string // the name it was known by: the metadata's, else found
	inFile   string // the NAME file's contents, if hasFile
	hasFile  bool
	name     string // the name it gets
	why      string // why name is not found
	assigned bool   // name is the metadata's: this directory knew the ledger by it

	fromGenesis string // the name in its genesis event, if read (the metadata's, if it has the ledger)
	vouched     bool   // name is fromGenesis: not only a NAME file, which nothing signs, says it
}

// registerLedgers names the ledgers Open recovered and registers them in
// byName and byID, and records those it refused in broken, under the name
// they have. Each ledger's name is its NAME file's, else the metadata's
// (known), else its genesis event's (recoverLedger put it in l.meta, or
// in the refused ledger's found). A name that breaks the rule is replaced
// by one derived from it. When two ledgers, or a ledger and one that
// failed recovery, have the same name, the one that keeps it is, in this
// order: a ledger whose directory is here but failed recovery, whose
// metadata holds the name; the one whose metadata holds it; the one whose
// genesis event holds it (the genesis event is covered by the signed
// checkpoints, the NAME file by nothing: a NAME file edited, or copied
// from another ledger, cannot take the name of a ledger whose genesis
// event and NAME file both say it); the one created first (its genesis ID, which begins with its time; a refused
// ledger whose genesis event could not be read comes after those whose
// was); the lower ledger ID. The others get derived names.
//
// A refused ledger keeps its name even when the metadata is lost (rebuilt
// from the segments): it is unavailable under that name, so that
// CreateLedger cannot give the name to a new ledger, an append by the name
// cannot land in another one, and AcceptLedger gives it back its own name.
// Nothing is written for it (its NAME file stays as it is) and no rename
// of it is reported; a refused ledger whose name cannot be read (no NAME
// file and no genesis event read) is unavailable under its ID.
//
// A ledger whose new name cannot be written to its NAME file is refused
// (as ledgers that fail recovery are, see Unavailable). Every rename of a
// recovered ledger is reported in db.renamed.
func (db *DB) registerLedgers(ls []*ledger, refused []openRefusal, known map[eventid.LedgerID]ledgerMeta) {
	// The names the metadata gives ledgers that are in the directory but
	// failed recovery stay theirs: an append by such a name must not reach
	// another ledger. (A ledger whose directory is gone, or a metadata
	// file brought from another data directory, holds none.)
	taken := map[string]bool{}
	for i := range refused {
		r := &refused[i]
		if m, ok := known[r.id]; ok && m.Name != "" {
			db.refuseAs(r, m.Name)
			taken[m.Name] = true
		}
	}
	recovered := map[eventid.LedgerID]bool{}
	for _, l := range ls {
		recovered[l.meta.ID] = true
	}
	for id, m := range known {
		if recovered[id] || m.Name == "" {
			continue
		}
		if _, err := db.fs.Stat(db.ledgerDir(id)); err == nil {
			taken[m.Name] = true
		}
	}
	choices := make([]*nameChoice, 0, len(ls)+len(refused))
	for _, l := range ls {
		choices = append(choices, &nameChoice{l: l, id: l.meta.ID, genesis: l.meta.Genesis, dir: l.log.Dir(), fromGenesis: l.meta.Name})
	}
	for i := range refused {
		r := &refused[i]
		if m, ok := known[r.id]; ok && m.Name != "" {
			continue // refused under it above
		}
		choices = append(choices, &nameChoice{r: r, id: r.id, genesis: r.found.Genesis, dir: db.ledgerDir(r.id), fromGenesis: r.found.Name})
	}
	kept := choices[:0]
	for _, c := range choices {
		id := c.id
		m, haveMeta := known[id]
		var err error
		c.inFile, c.hasFile, err = readNameFile(db.fs, c.dir)
		if err != nil {
			if c.r != nil {
				db.refuseAs(c.r, id.String())
				continue
			}
			db.refuse(c.l, known, fmt.Errorf("%w: ledger %s: its name: %w", ErrLedgerUnavailable, id, err))
			if haveMeta && m.Name != "" {
				taken[m.Name] = true
			}
			continue
		}
		switch {
		case c.hasFile:
			c.found, c.source = c.inFile, "the name in its NAME file"
		case haveMeta && m.Name != "":
			c.found, c.source = m.Name, "the name in the metadata"
		case c.fromGenesis != "":
			c.found, c.source = c.fromGenesis, "the name in its genesis event"
		default:
			// A refused ledger whose name is unknown.
			db.refuseAs(c.r, id.String())
			continue
		}
		c.had = c.found
		if haveMeta && m.Name != "" {
			c.had = m.Name
		}
		c.name = c.found
		if p := names.LedgerProblem(c.found, id.String()); p != "" {
			c.name = names.Derived(c.found, id, 0)
			c.why = fmt.Sprintf("%s breaks the naming rule: %s", c.source, p)
		} else if c.had != c.found {
			c.why = fmt.Sprintf("%s is %q; the metadata said %q", c.source, c.found, c.had)
		}
		c.assigned = haveMeta && m.Name == c.name
		c.vouched = c.name == c.fromGenesis
		kept = append(kept, c)
	}
	choices = kept
	slices.SortFunc(choices, func(a, b *nameChoice) int {
		if a.assigned != b.assigned {
			if a.assigned {
				return -1
			}
			return 1
		}
		if a.vouched != b.vouched {
			if a.vouched {
				return -1
			}
			return 1
		}
		if a.genesis.IsZero() != b.genesis.IsZero() {
			if a.genesis.IsZero() {
				return 1
			}
			return -1
		}
		if c := a.genesis.Compare(b.genesis); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	owner := map[string]eventid.LedgerID{}
	for _, c := range choices {
		id := c.id
		if taken[c.name] {
			was := c.name
			for n := 0; taken[c.name]; n++ {
				c.name = names.Derived(was, id, n)
			}
			if o, ok := owner[was]; ok {
				c.why = fmt.Sprintf("ledger %s has the name %q", o, was)
			} else {
				c.why = fmt.Sprintf("the name %q is that of a ledger that is unavailable", was)
			}
		}
		taken[c.name] = true
		owner[c.name] = id
	}
	slices.SortFunc(choices, func(a, b *nameChoice) int { return cmp.Compare(a.id, b.id) })
	for _, c := range choices {
		id := c.id
		if c.r != nil {
			db.refuseAs(c.r, c.name)
			continue
		}
		l := c.l
		if db.ro == nil && (!c.hasFile || c.inFile != c.name) {
			err := writeNameFile(db.fs, l.log.Dir(), c.name)
			// A directory written by an older annal gets its NAME file
			// at its first Open, when it can be written: the metadata
			// still holds the name meanwhile. A new name must be written,
			// or the next Open would not find it.
			if err != nil && (c.hasFile || c.name != c.had) {
				db.refuse(l, known, fmt.Errorf("%w: ledger %s: %w", ErrLedgerUnavailable, id, err))
				continue
			}
		}
		l.meta.Name = c.name
		if c.name != c.had {
			db.renamed = append(db.renamed, Renamed{Ledger: id, From: c.had, To: c.name, Why: c.why})
		}
		if db.ro == nil {
			l.watchFiles()
		}
		db.byName[c.name] = l
		db.byID[id] = l
	}
}

// refuseAs records the refused ledger r as unavailable under key, its
// name (or its ID).
func (db *DB) refuseAs(r *openRefusal, key string) {
	db.setBroken(key, r.id, r.err)
	if r.unsigned != nil {
		if db.unsigned == nil {
			db.unsigned = map[eventid.LedgerID]unsignedLedger{}
		}
		u := *r.unsigned
		u.key = key
		db.unsigned[r.id] = u
	}
}

// refuse closes a recovered ledger and records it as unavailable, by the
// name the metadata knows it by, or else by its ID.
func (db *DB) refuse(l *ledger, known map[eventid.LedgerID]ledgerMeta, err error) {
	l.log.Close()
	key := l.meta.ID.String()
	if m, ok := known[l.meta.ID]; ok && m.Name != "" {
		key = m.Name
	}
	db.setBroken(key, l.meta.ID, err)
}
