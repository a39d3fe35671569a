package replica

// The Writer's API, as the engine uses it: its configuration, the
// Source it reads the local log through, what Open finds in the bucket,
// and the methods. Their bodies are in writer.go (state, Open, Add, Wait,
// Status, Close), take.go (the takeover's manifest and fence), cut.go
// (chunks), upload.go (uploads, acknowledgements in chunk order),
// maintain.go (sealed segments, manifests, checkpoints, GC), tiles.go
// (the log as C2SP tlog-tiles beside each checkpoint) and tilegc.go (the
// partial tiles' collection).

import (
	"context"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
)

// Mode is how an append waits for the store.
type Mode int

const (
	// Replicated: an append returns once its records are durable locally
	// and stored, with every record before them.
	Replicated Mode = iota + 1
	// Shipped: an append returns once durable locally; its records are
	// stored within Config.ShipInterval.
	Shipped
)

// Config is a ledger's Writer's configuration.
type Config struct {
	Store    store.Store
	Ledger   eventid.LedgerID
	Name     string // the ledger's name, kept in manifests
	Mode     Mode
	Identity Identity
	// MinFlushInterval: Replicated mode cuts a chunk as soon as records
	// are pending and an upload slot is free, but at most once per
	// MinFlushInterval (0: no lower bound).
	MinFlushInterval time.Duration
	// MaxChunkBytes bounds a chunk's records (default 8 MiB); a single
	// span larger than it is one chunk of its own.
	MaxChunkBytes int
	// Uploads is the number of chunk uploads in flight (default 4, at
	// least 2).
	Uploads int
	// Hold bounds how long Replicated mode holds a chunk back, when an
	// upload slot is free but other uploads are in flight, for the
	// appenders that the last acknowledgements released and that have
	// not appended again yet: at most Hold times the mean upload time
	// (default DefaultHold; negative: never hold). With nothing else in
	// flight a chunk is never held.
	Hold float64
	// ShipInterval: Shipped mode stores every record within it (default 1 s).
	ShipInterval time.Duration
	// StoreTimeout bounds how long Wait waits for the store to make
	// progress before it fails with an error naming the endpoint
	// (default 10 s).
	StoreTimeout time.Duration
	// GCGrace is how long a chunk below the manifest's GC boundary is
	// kept before it is deleted (default 10 min); a writer whose last
	// check of the newest manifest is older re-reads it before it
	// acknowledges. A partial tile is deleted once a checkpoint that has
	// its full tile has been the bucket's for GCGrace (tilegc.go).
	GCGrace time.Duration
	// Source reads the ledger's local records that the bucket lacks.
	Source Source
	// Tiles, if set, gives the Merkle tree and the leaves the Writer
	// publishes as C2SP tlog-tiles beside each checkpoint it stores
	// (tiles.go).
	Tiles TileSource
	// OpenCheckpoint checks a signed checkpoint found in the bucket's
	// checkpoint object: a checkpoint of the ledger signed by its key. It
	// returns the checkpoint's size and root. The Writer builds on that
	// object (keeps it rather than store a smaller checkpoint of its own)
	// only when it passes, its root is the ledger's at its size
	// (Source.Frontier), and it covers no record that is not stored;
	// otherwise it replaces it with its next checkpoint and reports it
	// (Status.Damage). nil: only its body is parsed (tests).
	OpenCheckpoint func(note []byte) (size uint64, root tree.Hash, err error)
	// Endpoint names the store in errors ("s3://bucket/prefix at URL").
	Endpoint string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Source is the ledger's local log, as a Writer reads it: the records
// the bucket lacks when the Writer starts (a Shipped lag, a ledger that
// was not replicated before), and sealed segments to store under seg/.
type Source interface {
	// Head is the last committed record.
	Head() segment.Head
	// Durable is the last record known to be on stable storage.
	Durable() segment.Head
	// Sync makes every committed record durable.
	Sync() error
	// Read returns committed records from sequence number from on: at
	// least one, at most max bytes unless the first alone is larger,
	// all in one segment, with their Merkle leaves.
	Read(from uint64, max int) (segment.Span, []tree.Hash, error)
	// Sealed returns sealed segment n's file, whole, and its first and
	// last sequence numbers.
	Sealed(n uint64) (data []byte, first, last uint64, err error)
	// Frontier returns a tree builder holding the ledger's Merkle tree
	// at size n (for the roots of the chunks after n).
	Frontier(n uint64) (*tree.Builder, error)
}

// Tail is what the bucket holds of a ledger, as Open found it.
type Tail struct {
	// Manifest is the newest manifest (zero Epoch: none, a ledger new to
	// the bucket).
	Manifest Manifest
	// Seq and ID are the last record stored (0 and the zero ID: none).
	Seq uint64
	ID  eventid.ID
	// Segment and Offset are where the record after Seq goes, as the
	// bucket's last chunk says.
	Segment uint64
	Offset  int64
}

// Status is a Writer's state, as DB.ReplicaStatus shows it.
type Status struct {
	Mode  Mode
	Epoch uint64
	// Stored is the last record stored in the bucket; Head the last
	// committed locally. Lag is Head - Stored, in records, and LagTime
	// the age of the oldest record not yet stored.
	Stored, Head uint64
	LagTime      time.Duration
	// Chunks is the number of the last chunk stored.
	Chunks uint64
	// Uploads is the number of chunks this Writer stored since Take, and
	// UploadTime the time their uploads took in all, each from its first
	// PUT to the store's answer that stored it (retries and read-backs
	// included; the wait for earlier chunks is not): the change of
	// UploadTime over the change of Uploads is the mean upload latency.
	Uploads    uint64
	UploadTime time.Duration
	// LastError is the last upload error (nil after a success), and when.
	LastError   error
	LastErrorAt time.Time
	// Damage is the last object the Writer found damaged in the bucket
	// and replaced, and why (a checkpoint not signed by the ledger's key,
	// of another history, claiming events the bucket does not hold, or
	// older than one the Writer stored: it matches corruption.Err); it
	// stays after later successes. DamageAt is when.
	Damage   error
	DamageAt time.Time
	// Fenced is set once another writer took the ledger.
	Fenced bool
}

// Writer ships one ledger's records to the store and holds its epoch.
type Writer struct{ writerState }

// Open reads what the bucket holds of the ledger. It writes nothing: the
// caller compares Tail with its local head (ErrBehind, ErrDiverged are
// its to decide) before it calls Take.
func Open(ctx context.Context, cfg Config) (*Writer, Tail, error) { return open(ctx, cfg) }

// Take makes this Writer the ledger's writer: the next manifest with
// epoch + 1 (create-only) and a fence chunk at the next free slot,
// taking in old-epoch chunks found there (docs/replication.md,
// "Fencing"). Then it uploads what the local log holds beyond the
// bucket (Source.Read from Tail.Seq+1) and the sealed segments the
// bucket lacks, and starts shipping. Records appended meanwhile are
// given with Add as usual.
func (w *Writer) Take(ctx context.Context) error { return w.take(ctx) }

// Fence fences the ledger from the bucket alone, before the caller holds
// its records: the next manifest (epoch + 1, create-only, naming
// cfg.Identity) and a fence chunk after the bucket's last chunk, whose
// header gives the tree size, root and place the fence states. Chunks
// the ledger's writer stores meanwhile at the fence's slot are taken in,
// the fence going after them. From then on that writer is fenced and the
// bucket's history ends at the fence: a pull reads all of it, and an
// Open and Take after the pull start from it (the next epoch again).
// The Tail is the history's up to the fence, with the manifest written.
// cfg.Source is not used. ErrFenceNeedsRecords: the bucket's chunks do
// not give the tree at its tail (pull first, then Open and Take).
func Fence(ctx context.Context, cfg Config) (Tail, error) {
	w, _, err := open(ctx, cfg)
	if err != nil {
		return Tail{}, err
	}
	return w.fenceBucket(ctx)
}

// Add gives the Writer a committed span and its leaves (from the
// segment log's Hooks.Records, with the ledger's lock held: it copies
// and returns at once, never waiting for the store).
func (w *Writer) Add(s segment.Span, leaves []tree.Hash) { w.add(s, leaves) }

// Wait returns once the record seq and every one before it are stored,
// or with ErrFenced, the store's error after StoreTimeout without
// progress, or ctx's error.
func (w *Writer) Wait(ctx context.Context, seq uint64) error { return w.wait(ctx, seq) }

// Checkpoint stores a signed checkpoint of tree size n under checkpoint
// (replaced with If-Match only, never by a smaller one), once every
// record up to n is stored.
func (w *Writer) Checkpoint(signed []byte, n uint64) { w.checkpoint(signed, n) }

// WaitCheckpoint returns once the bucket holds a signed checkpoint of at
// least n events (given with Checkpoint), or with the Writer's sticky
// error (ErrFenced), an error naming the endpoint after StoreTimeout, or
// ctx's error.
func (w *Writer) WaitCheckpoint(ctx context.Context, n uint64) error { return w.waitCheckpoint(ctx, n) }

// Status returns the Writer's state.
func (w *Writer) Status() Status { return w.status() }

// Fenced says whether another writer took the ledger (Status.Fenced),
// without taking the Writer's lock: an append asks it every time.
func (w *Writer) Fenced() bool { return w.fenced.Load() }

// Close ships what is pending within ctx (Shipped mode: what it could not
// ship stays in the local log, and the next Open ships it) and stops.
func (w *Writer) Close(ctx context.Context) error { return w.close(ctx) }
