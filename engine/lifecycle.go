package engine

import (
	"context"
	"sync"
)

// checkEvery bounds how many events an iterator (Scan, Replay,
// Subscribe, Export, Import) yields or takes between two looks at its
// context and at Close: cancelling the context or closing the DB stops it
// within that many events.
const checkEvery = 64

// readers keeps Close from closing files under a read. A read (an
// iterator step, a Get) holds mu for reading while it touches the
// segments or the index, and never while it is suspended in its caller's
// loop body, so that a Close called from that loop body, or from another
// goroutine, does not wait for the caller: Close sets closing, then takes
// mu for writing, which waits only for the reads that are touching files
// now. A read that starts after that sees closing and returns ErrClosed.
type readers struct {
	mu      sync.RWMutex
	closing chan struct{} // closed when Close begins
	once    sync.Once

	// imports: the imports whose temporary directory exists, which Close
	// removes if they are still running (see abortImports).
	importsMu sync.Mutex
	imports   map[*importer]struct{}
}

// closingCh returns a channel closed when Close begins (for subscribers
// waiting for the next commit).
func (r *readers) closingCh() <-chan struct{} {
	r.once.Do(func() { r.closing = make(chan struct{}) })
	return r.closing
}

// enterRead starts a read of files: it returns ErrClosed once Close has
// begun, and otherwise holds Close off until exitRead.
func (db *DB) enterRead() error {
	db.readers.mu.RLock()
	select {
	case <-db.readers.closingCh():
		db.readers.mu.RUnlock()
		return ErrClosed
	default:
		return nil
	}
}

// exitRead ends a read started by enterRead.
func (db *DB) exitRead() { db.readers.mu.RUnlock() }

// stopReads is called by Close before it closes any file: every read
// started after it fails with ErrClosed, and it returns once the reads
// touching files now are done, and the imports still running have lost
// their temporary segments (abortImports).
func (db *DB) stopReads() {
	db.readers.closingCh()
	close(db.readers.closing)
	db.readers.mu.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the reads in progress is the point
	db.readers.mu.Unlock()
	db.abortImports()
}

// untilClosing returns a context that ends with ctx or when Close
// begins, for work that runs on goroutines of its own (Verify's checks),
// and its cancel function, which the caller must call.
func (db *DB) untilClosing(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-db.readers.closingCh():
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// openLedgers appends the open ledgers to ls (for a background writer
// that goes through them without holding db.mu).
func (db *DB) openLedgers(ls []*ledger) []*ledger {
	db.mu.RLock()
	defer db.mu.RUnlock()
	for _, l := range db.byID {
		ls = append(ls, l)
	}
	return ls
}

// stopped returns ctx's error, or ErrClosed once Close has begun, or nil:
// what an iterator checks every checkEvery events.
func (db *DB) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-db.readers.closingCh():
		return ErrClosed
	default:
		return nil
	}
}
