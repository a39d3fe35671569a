package peer

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SQLite, through modernc.org/sqlite: SQLite's C source translated to Go
// (no cgo), behind database/sql. One table keyed by ID, and an index for
// the streams:
//
//	events(id BLOB PRIMARY KEY, ts, entity, key, name, meta, data) WITHOUT ROWID
//	events_stream(entity, key, id)
//
// In WAL journal mode, with one transaction per Append on a single writer
// connection (SQLite has one writer at a time, and no group commit):
//
//	Sync      synchronous=FULL: the WAL is fsynced at every commit
//	Interval  synchronous=NORMAL: commits are written to the WAL but not
//	          fsynced; the WAL is fsynced when it is checkpointed (every
//	          1,000 pages by default). A commit survives a crash of the
//	          process, and may be lost with the machine until the next
//	          checkpoint: bounded by volume, not time, but the closest
//	          SQLite comes to annal's 50 ms interval
//	None      synchronous=OFF: no fsync at all
//
// Verify runs PRAGMA integrity_check (every page, every index entry
// against its row) and counts the rows. SQLite keeps no checksums of its
// pages (the WAL's frames have some, for recovery).

func init() {
	Register(Info{
		Name:    "sqlite",
		Version: "v1.60.1",
		What:    "modernc.org/sqlite v1.60.1 (SQLite translated to pure Go): WAL mode, a WITHOUT ROWID table keyed by ID plus a stream index, one transaction per append",
		Open:    openSQLite,
	})
}

const sqliteSchema = `
CREATE TABLE IF NOT EXISTS events (
	id     BLOB PRIMARY KEY,
	ts     INTEGER,
	entity TEXT,
	"key"  TEXT,
	name   TEXT,
	meta   BLOB,
	data   BLOB
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_stream ON events(entity, "key", id);
`

// sqliteReaders is how many idle reader connections are kept: the
// harness's largest number of concurrent goroutines.
const sqliteReaders = 64

// sqliteStore is an SQLite database file in a directory, open twice: one
// connection that writes, a pool that reads.
type sqliteStore struct {
	w, r   *sql.DB
	insert *sql.Stmt // on w

	// mu serializes Append: the writer has one connection anyway, and IDs
	// made under mu increase in commit order.
	mu    sync.Mutex
	clock recordClock // guarded by mu
	seq   uint64      // guarded by mu: the next sequence number
}

var _ Store = (*sqliteStore)(nil)

func openSQLite(dir string, mode Mode) (_ Store, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "events.db")
	synchronous := map[Mode]string{Sync: "FULL", Interval: "NORMAL", None: "OFF"}[mode]
	if synchronous == "" {
		return nil, ErrUnsupported
	}
	// A plain file name (not a file: URI, which would need the path
	// escaped), then the driver's parameters: each _pragma is run on
	// every new connection, busy_timeout first. busy_timeout: a reader
	// may meet a lock for a moment (while the writer checkpoints, say);
	// it waits instead of failing.
	dsn := func(pragmas ...string) string {
		q := url.Values{"_pragma": append([]string{"busy_timeout(10000)"}, pragmas...)}
		return path + "?" + q.Encode()
	}
	s := &sqliteStore{}
	defer func() {
		if err != nil {
			_ = s.close()
			err = fmt.Errorf("sqlite: open %s: %w", path, err)
		}
	}()
	// The writer first: it sets the WAL mode (kept in the file) and
	// creates the schema. BEGIN IMMEDIATE takes the write lock at once.
	if s.w, err = sql.Open("sqlite", dsn("journal_mode(WAL)", "synchronous("+synchronous+")")+"&_txlock=immediate"); err != nil {
		return nil, err
	}
	// One connection: the pragmas above are per connection, and SQLite
	// writes one transaction at a time anyway.
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if _, err = s.w.Exec(sqliteSchema); err != nil {
		return nil, err
	}
	var journal string
	if err = s.w.QueryRow("PRAGMA journal_mode").Scan(&journal); err != nil {
		return nil, err
	}
	if journal != "wal" {
		return nil, fmt.Errorf("journal mode is %q, not wal", journal)
	}
	// IDs keep increasing across a reopen.
	var last []byte
	if err = s.w.QueryRow("SELECT max(id) FROM events").Scan(&last); err != nil {
		return nil, err
	}
	if last != nil {
		if len(last) != len(ID{}) {
			return nil, fmt.Errorf("event ID %x is not 16 bytes", last)
		}
		s.clock.last = int64(binary.BigEndian.Uint64(last[:8]))
		s.seq = binary.BigEndian.Uint64(last[8:]) + 1
	}
	if s.insert, err = s.w.Prepare(`INSERT INTO events (id, ts, entity, "key", name, meta, data) VALUES (?, ?, ?, ?, ?, ?, ?)`); err != nil {
		return nil, err
	}
	// Readers: a pool, each connection its own snapshot while it reads.
	if s.r, err = sql.Open("sqlite", dsn("query_only(1)")); err != nil {
		return nil, err
	}
	// Keep a connection per concurrent reader: database/sql keeps 2 idle
	// by default, and would otherwise open (and run the pragmas on) a new
	// connection for most reads of many goroutines.
	s.r.SetMaxIdleConns(sqliteReaders)
	if err = s.r.Ping(); err != nil {
		return nil, err
	}
	return s, nil
}

// Append inserts the events in one transaction with the prepared insert.
func (s *sqliteStore) Append(events []Event) (_ []ID, err error) {
	if len(events) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.w.Begin()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	us := s.clock.next()
	t := time.UnixMicro(us)
	seq := s.seq
	s.seq += uint64(len(events)) // a rolled-back Append leaves a harmless gap
	ins := tx.Stmt(s.insert)
	ids := make([]ID, len(events))
	for i := range events {
		e := &events[i]
		ids[i] = PeerID(t, seq+uint64(i))
		if _, err = ins.Exec(ids[i][:], us, e.Entity, e.Key, e.Name, e.Meta, e.Data); err != nil {
			return nil, err
		}
	}
	if err = tx.Commit(); err != nil {
		return nil, err
	}
	return ids, nil
}

// Get selects the event by its primary key.
func (s *sqliteStore) Get(id ID) (int, error) {
	var e Event
	err := s.r.QueryRow(`SELECT entity, "key", name, meta, data FROM events WHERE id = ?`, id[:]).
		Scan(&e.Entity, &e.Key, &e.Name, &e.Meta, &e.Data) // copies out
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %x", errNoSuchEvent, id[:])
	}
	if err != nil {
		return 0, err
	}
	return e.Size(), nil
}

// Scan selects the IDs of [from, to] in the primary key's order.
func (s *sqliteStore) Scan(from, to time.Time) (int, int64, error) {
	lo, hi, ok := idBounds(from, to)
	if !ok {
		return 0, 0, nil
	}
	return s.read(`SELECT entity, "key", name, meta, data FROM events WHERE id >= ? AND id < ? ORDER BY id`, lo[:], hi[:])
}

// Replay selects the stream's events through the events_stream index.
func (s *sqliteStore) Replay(entity, key string) (int, int64, error) {
	return s.read(`SELECT entity, "key", name, meta, data FROM events WHERE entity = ? AND "key" = ? ORDER BY id`, entity, key)
}

// read runs a query of events and returns how many rows and their
// content bytes, copying each row out.
func (s *sqliteStore) read(query string, args ...any) (n int, size int64, err error) {
	rows, err := s.r.Query(query, args...)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}()
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.Entity, &e.Key, &e.Name, &e.Meta, &e.Data); err != nil {
			return n, size, err
		}
		n++
		size += int64(e.Size())
	}
	return n, size, rows.Err()
}

// Verify runs PRAGMA integrity_check, which must say "ok", and counts the
// events.
func (s *sqliteStore) Verify() (n int, err error) {
	rows, err := s.r.Query("PRAGMA integrity_check")
	if err != nil {
		return 0, err
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			_ = rows.Close()
			return 0, err
		}
		problems = append(problems, line)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	if len(problems) != 1 || problems[0] != "ok" {
		return 0, fmt.Errorf("sqlite: integrity_check: %q", problems)
	}
	err = s.r.QueryRow("SELECT count(*) FROM events").Scan(&n)
	return n, err
}

// TimeOf returns the time in the ID: the time the event was appended.
func (s *sqliteStore) TimeOf(id ID) time.Time { return PeerTime(id) }

// Close closes the readers, then the writer, whose last connection
// checkpoints the WAL into the database file and removes it.
func (s *sqliteStore) Close() error { return s.close() }

// close closes what is open, so that a failed Open can clean up too.
func (s *sqliteStore) close() error {
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.insert != nil {
		errs = append(errs, s.insert.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}
