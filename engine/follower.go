package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// The range of FollowerOptions.PollInterval.
const (
	defaultPollInterval              = time.Second
	minPollInterval, maxPollInterval = time.Millisecond, time.Hour
)

// followerFile is the file that makes a directory a follower's: the
// bucket it follows and the verifier key of its checkpoints.
const followerFile = "follower.json"

// discoverEvery is how often a follower of every ledger lists the
// bucket's ledgers for new ones (one LIST per 1,000 ledgers).
const discoverEvery = time.Minute

// FollowerOptions say what a Follower follows, and how.
type FollowerOptions struct {
	// Replica is the bucket, in the URL form of docs/replication.md
	// ("s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true").
	Replica string
	// Ledger is the name (or the ID in hex) of the ledger to follow; ""
	// follows every ledger of the bucket, and those created later.
	Ledger string
	// PollInterval is how often the bucket is read (1 ms to 1 h; 0: 1 s).
	// Each poll costs two GETs a ledger when nothing was written
	// (docs/replication.md, "Followers").
	PollInterval time.Duration
	// StoreTimeout bounds each request to the bucket, its retries
	// included (the writer's Options.StoreTimeout, for a follower): a
	// request that gets no answer within it fails, and so does the poll,
	// which the next one tries again (FollowerStatus.LastError), so that a
	// store that hangs never holds a poll for longer. Zero means 10 s;
	// otherwise 100 ms to 10 min.
	StoreTimeout time.Duration
	// VerifierKey is the verifier (public) key, in the sumdb/note verifier
	// format (what `annal key` prints), of the key that signs
	// the writer's checkpoints. Required: a follower holds no key of its
	// own that could vouch for the bucket, and a bucket's contents are
	// no evidence of which key is the writer's.
	VerifierKey string
	// Options are those the follower's read-only DB opens with
	// (Options.TempDir, CacheDir, FollowInterval, CacheSize): see DB.
	// Their key options, Replica and Replication are not used.
	Options *Options

	// store, if set, is the bucket instead of Replica's (tests).
	store store.Store
}

// Follower keeps a local, read-only copy of a bucket's ledgers in a
// directory (OpenFollower).
type Follower struct {
	dir      string
	o        FollowerOptions
	st       store.Store
	endpoint string
	v        note.Verifier
	lock     io.Closer
	dirFile  *os.File
	db       *DB
	named    eventid.LedgerID // the ledger FollowerOptions.Ledger names (zero: all)

	// laidHead is, by ledger, the last record laid in the directory and
	// verified: what the DB may show of it (Options.laidBound). It only
	// moves on, once the records up to it are laid and synced; under
	// laidMu, which is taken alone (the DB calls laidBound with its own
	// locks held).
	// followed holds the ledgers followed (add), under laidMu: the DB
	// opens no other.
	laidMu   sync.Mutex
	laidHead map[eventid.LedgerID]segment.Head
	followed map[eventid.LedgerID]bool

	// recorded holds the ledgers follower.json records as laid by a
	// follower of this directory (their copy checked against the bucket
	// by a poll): those it follows, and serves up to their signed
	// prefix, while the bucket cannot be read at the open. Set at the
	// open, then the poll loop's own.
	recorded map[eventid.LedgerID]bool

	mu      sync.Mutex
	ledgers map[eventid.LedgerID]*followed
	order   []eventid.LedgerID
	listed  time.Time // when the bucket's ledgers were last listed; under mu
	// unlisted: the bucket could not be read when the follower opened,
	// and the ledgers followed are those the directory recorded
	// (followRecorded); the listing is tried again at every round until
	// it answers. Under mu.
	unlisted bool
	cancel   context.CancelFunc
	done     chan struct{}
	closed   bool
}

// followed is one ledger a Follower follows. Its fields but status are
// the poll loop's own.
type followed struct {
	id       eventid.LedgerID
	name     string
	f        *replica.Follow
	local    segment.Head // the last record laid in the directory
	ckSize   uint64       // the size of the checkpoint file written
	bucket   uint64       // the last event the bucket held at the last poll
	tree     *tree.File
	leafFrom uint64      // the tree file's size when the poll began
	leaves   []tree.Hash // the leaves of the records read after it
	status   FollowerStatus
	// opened and signed, if signed.Seq is not 0, are the copy's last
	// record when the follower opened and the one its checkpoint file
	// covers up to (signedPrefix): the DB serves the copy up to signed
	// until the first poll checked it against the bucket. held: its
	// reads are held all the same (checkSignedPrefixes).
	opened, signed segment.Head
	held           bool
	// unconfirmed: followed from the directory's record while the bucket
	// could not be listed (followRecorded): the first listing that
	// answers must name it, else the ledger stops (listedAgain).
	unconfirmed bool
}

// FollowerStatus is what a Follower knows of one ledger.
type FollowerStatus struct {
	Ledger eventid.LedgerID
	Name   string
	// Bucket is the last event the bucket held at the last poll that
	// read it (the newest of the records read and the signed
	// checkpoint's size); Local the last event of the local copy, which
	// every read serves; Signed the events the last signed checkpoint
	// verified covers.
	Bucket, Local, Signed uint64
	// Behind is Bucket − Local: 0 but while a poll lays records, or once
	// the ledger stopped.
	Behind uint64
	// Lag is how old the copy may be: the time since the start of the
	// last poll that read the bucket whole (the copy holds every event the
	// bucket held then). Zero before the first.
	Lag time.Duration
	// LastPoll is when the last poll ended; LastError its error, if it
	// failed (the store unreachable: the next poll tries again).
	LastPoll  time.Time
	LastError error
	// Stopped, if not nil, is why the ledger is no longer followed: an
	// object that failed verification, or a bucket whose history is not an
	// extension of the one verified (it names the object); or, for a
	// follower opened while the bucket could not be read, a ledger whose
	// copy it served that the bucket, once read, does not hold
	// (ErrLedgerUnavailable). Reads of the ledger then fail with it;
	// nothing past what was verified before is served.
	Stopped error

	caughtUp time.Time // the start of the last poll that read it whole
}

// OpenFollower makes dir a follower of the bucket o.Replica: a local,
// read-only copy of one ledger (o.Ledger) or of all, kept up by polling
// the bucket every o.PollInterval, and returns it once the first poll
// of every ledger is done (a ledger whose first poll failed is retried,
// or stopped: see Status).
//
// dir is a new or empty directory, or one that a Follower made
// (follower.json names the bucket and the verifier key; another bucket
// or key is refused, ErrInvalid, and so is a copy without its
// follower.json); a writer's data directory is refused.
// The Follower holds it (its lock, ErrLocked for a writer's Open) until
// Close, and writes into it what each poll read and verified: the
// records where the writer had them (segment files byte for byte, as
// restore lays them), each ledger's NAME, its checkpoint file (the
// bucket's signed checkpoint, once the records it covers are laid) and
// its Merkle tree file. Nothing is laid before it is verified: each
// record's frame and chain, the chunks' hash chain, epochs and Merkle
// roots, and each new signed checkpoint, checked with o.VerifierKey,
// against the root of the records read at its size (which proves that it
// extends the last one verified). The first poll reads every object the
// bucket holds of a ledger (a directory that already holds records must
// hold a prefix of the bucket's and no more, else ErrDiverged, and the
// bucket's checkpoint must not be older than the directory's); the next
// ones read what was stored since.
//
// An object that fails verification, or a bucket whose history is not
// an extension of the one verified (a rewritten history, a checkpoint of
// another root), stops that ledger: Status says why, naming the object,
// and the reads of DB fail with that error; the other ledgers go on. A
// store that cannot be reached is tried again at the next poll.
//
// A bucket that cannot be read at the open (unreachable, a timeout,
// access denied: any failure but damage or an answer such as a name it
// does not hold) does not fail it if dir holds copies to serve: the
// ledgers whose copy follower.json records as laid by a follower of dir
// (each copy is recorded once a poll of it succeeded), or with o.Ledger
// the one it names (an ID; a name, found in the copies' NAME files).
// Each is served up to its checkpoint file, as below, and its Status
// says the store could not be read (LastError); the listing is tried
// again at every poll until it answers, and the follower goes on as if
// the bucket had answered at the open: new ledgers are followed, and a
// recorded ledger the bucket does not hold (or that o.Ledger's name no
// longer names) stops, no longer served (ErrLedgerUnavailable). A folder
// follower.json does not record is not served meanwhile. A directory
// with nothing to serve fails the open with the store's error, saying
// so.
//
// DB returns the read-only DB that serves the copy: every read works on
// it, and writes fail with ErrReadOnly. It shows no record of a ledger
// after the last one the follower laid and verified, whatever the files
// come to hold; files that hold more (written by someone else) stop the
// ledger at the next poll (ErrDiverged, naming the file). A copy found
// at the open is shown only up to its checkpoint file (signed with
// o.VerifierKey, its root that of the copy at its size) until a poll
// checked it against the bucket, and not at all without one, or if
// follower.json does not record it: the copy may hold records written
// into it while no follower held it. Other processes
// read the directory with OpenReadOnly (annal's read commands), as beside
// a writer: they follow the files. Promote a follower to writer with
// Takeover, once it is closed.
func OpenFollower(dir string, o FollowerOptions) (*Follower, error) {
	if o.PollInterval == 0 {
		o.PollInterval = defaultPollInterval
	}
	if o.PollInterval < minPollInterval || o.PollInterval > maxPollInterval {
		return nil, invalid("follower: PollInterval %s is out of range (%s to %s)", o.PollInterval, minPollInterval, maxPollInterval)
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = defaultStoreTimeout
	}
	if o.StoreTimeout < minStoreTimeout || o.StoreTimeout > maxStoreTimeout {
		return nil, invalid("follower: StoreTimeout %s is out of range (%s to %s)", o.StoreTimeout, minStoreTimeout, maxStoreTimeout)
	}
	if o.Replica == "" && o.store == nil {
		return nil, invalid("follower of %s: no replica (FollowerOptions.Replica)", dir)
	}
	if strings.TrimSpace(o.VerifierKey) == "" {
		return nil, invalid("follower of %s: no verifier key (FollowerOptions.VerifierKey, annal follow --key): the key that signs the writer's checkpoints is required", dir)
	}
	v, err := note.NewVerifier(strings.TrimSpace(o.VerifierKey))
	if err != nil {
		return nil, fmt.Errorf("%w: follower: the verifier key: %w", ErrInvalid, err)
	}
	fw := &Follower{dir: dir, o: o, v: v, ledgers: map[eventid.LedgerID]*followed{}, laidHead: map[eventid.LedgerID]segment.Head{}, followed: map[eventid.LedgerID]bool{}, recorded: map[eventid.LedgerID]bool{}}
	if err := fw.prepareDir(); err != nil {
		return nil, err
	}
	if fw.lock, fw.dirFile, err = lockDataDir(dir); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			fw.release()
		}
	}()
	if err := fw.writeFollowerFile(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fw.cancel = cancel
	if err := fw.openStore(ctx); err != nil {
		return nil, err
	}
	if err := fw.findLedgers(ctx); err != nil {
		if bucketAnswered(err) {
			return nil, err
		}
		if err := fw.followRecorded(err); err != nil {
			return nil, err
		}
	}
	// The copy as it is: the heads of the ledgers it holds.
	ro := Options{}
	if o.Options != nil {
		ro = *o.Options
	}
	ro.Replica, ro.replicaStore, ro.Replication, ro.Signer, ro.SigningKeyFile = "", nil, 0, nil, ""
	ro.laidBound = fw.laidBound
	for _, id := range fw.order {
		fl := fw.ledgers[id]
		if !fw.recorded[id] {
			continue // not laid by a follower of dir, as far as it knows: held until a poll checks it
		}
		if fl.opened, fl.signed = fw.signedPrefix(id, ro.MaxEventSize); fl.signed.Seq != 0 {
			fw.setLaid(id, fl.signed)
		}
	}
	if fw.db, err = OpenReadOnly(dir, &ro); err != nil {
		return nil, err
	}
	fw.checkSignedPrefixes()
	fw.round(ctx)
	fw.done = make(chan struct{})
	go fw.loop(ctx)
	ok = true
	return fw, nil
}

// prepareDir makes dir if missing and checks that it is empty or a
// follower's.
func (fw *Follower) prepareDir() error {
	names, err := vfs.Default.List(fw.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		names = nil
	case err != nil:
		return fmt.Errorf("engine: follower: %w", err)
	}
	for _, n := range names {
		switch n {
		case ledgersDir:
			// A follower's copy whose follower.json is gone: which bucket
			// and key its records were verified with is not known.
			held, err := vfs.Default.List(filepath.Join(fw.dir, ledgersDir))
			if err != nil {
				return fmt.Errorf("engine: follower: %w", err)
			}
			if len(held) > 0 && !slices.Contains(names, followerFile) {
				return invalid("follower of %s: it holds ledgers/ but no %s (the bucket and key its copy was verified with): restore the file, or follow in a new or empty directory", fw.dir, followerFile)
			}
		case followerFile, lockFile:
		default:
			if slices.Contains(dataDirMarkers[:], n) {
				return invalid("follower of %s: a writer's data directory (it holds %s): a follower keeps its copy in a new or empty directory (promote a follower with Takeover, not the other way)", fw.dir, n)
			}
			return invalid("follower of %s: the directory holds %s: give a new or empty directory, or one a follower made", fw.dir, n)
		}
	}
	if err := mkdirSynced(vfs.Default, filepath.Join(fw.dir, ledgersDir)); err != nil {
		return fmt.Errorf("engine: follower: %w", err)
	}
	return nil
}

// followerConfig is the content of follower.json.
type followerConfig struct {
	V        int    `json:"v"`
	Replica  string `json:"replica"`
	Verifier string `json:"verifier"`
	// Ledgers are the IDs (hex) of the ledgers whose copy a follower of
	// the directory laid, or checked against the bucket, in a poll: the
	// copies it serves while the bucket cannot be read (followRecorded).
	// Absent in the files of followers before it was kept.
	Ledgers []string `json:"ledgers,omitempty"`
}

// maxFollowerFile bounds follower.json: 1 MiB holds the IDs of some
// 90,000 ledgers.
const maxFollowerFile = 1 << 20

// readFollowerFile reads dir's follower.json; ok is false if there is
// none.
func readFollowerFile(fs vfs.FS, dir string) (c followerConfig, ok bool, err error) {
	path := fs.PathJoin(dir, followerFile)
	b, err := readSmallFile(fs, path, maxFollowerFile)
	if errors.Is(err, os.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("engine: read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil || c.V != 1 || c.Verifier == "" {
		return c, false, fmt.Errorf("%w: %s: not a follower's file (JSON with v 1, replica and verifier)", ErrCorruption, path)
	}
	for _, s := range c.Ledgers {
		if id, err := eventid.ParseLedgerID(s); err != nil || id.String() != s {
			return c, false, fmt.Errorf("%w: %s: ledgers holds %q, not a ledger ID (8 hex digits)", ErrCorruption, path, s)
		}
	}
	return c, true, nil
}

// removeFollowerFile removes dir's follower.json, if any, and syncs dir.
func removeFollowerFile(dir string) error {
	err := os.Remove(filepath.Join(dir, followerFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return segment.SyncDir(vfs.Default, dir)
}

// writeFollowerFile writes follower.json, or checks that the one there
// names the same bucket and key.
func (fw *Follower) writeFollowerFile() error {
	want := fw.config(nil)
	have, ok, err := readFollowerFile(vfs.Default, fw.dir)
	if err != nil {
		return err
	}
	if ok {
		switch {
		case have.Replica != want.Replica:
			return invalid("follower of %s: it follows %s, not %s: follow another bucket in another directory", fw.dir, have.Replica, want.Replica)
		case have.Verifier != want.Verifier:
			return invalid("follower of %s: its checkpoints were verified with the key %s, not %s: follow with another key in another directory", fw.dir, have.Verifier, want.Verifier)
		}
		for _, s := range have.Ledgers {
			id, _ := eventid.ParseLedgerID(s) // checked by readFollowerFile
			fw.recorded[id] = true
		}
		return nil
	}
	return fw.saveConfig(nil)
}

// config is follower.json's content for this follower, recording the
// ledgers ids as laid.
func (fw *Follower) config(ids []eventid.LedgerID) followerConfig {
	c := followerConfig{V: 1, Replica: fw.o.Replica, Verifier: strings.TrimSpace(fw.o.VerifierKey)}
	for _, id := range ids {
		c.Ledgers = append(c.Ledgers, id.String())
	}
	return c
}

// saveConfig writes follower.json (config), replacing it atomically.
func (fw *Follower) saveConfig(ids []eventid.LedgerID) error {
	b, _ := json.Marshal(fw.config(ids))
	return writeFileAtomic(vfs.Default, fw.dir, followerFile, append(b, '\n'), true)
}

// recordLaid records in follower.json that the directory's copy of fl's
// ledger was laid, or checked against the bucket, by this follower (a
// poll of it succeeded): a later open serves it while the bucket cannot
// be read (followRecorded).
func (fw *Follower) recordLaid(fl *followed) error {
	if fw.recorded[fl.id] {
		return nil
	}
	ids := append(slices.Collect(maps.Keys(fw.recorded)), fl.id)
	slices.Sort(ids)
	if err := fw.saveConfig(ids); err != nil {
		return fw.wrap(fl, fmt.Errorf("record the copy in %s: %w", followerFile, err))
	}
	fw.recorded[fl.id] = true
	return nil
}

// openStore opens the bucket (no probe: a follower writes nothing, and
// may have read-only credentials), each request bounded by StoreTimeout.
func (fw *Follower) openStore(ctx context.Context) error {
	st, endpoint := fw.o.store, testEndpointName
	if st == nil {
		loc, err := store.ParseLocation(fw.o.Replica)
		if err != nil {
			return fmt.Errorf("%w: follower: Replica: %w", ErrInvalid, err)
		}
		if st, err = store.OpenS3(ctx, loc, store.S3Options{}); err != nil {
			return fmt.Errorf("engine: replica %s: %w", loc, err)
		}
		endpoint = endpointOf(loc)
	}
	fw.st, fw.endpoint = timedStore{Store: st, d: fw.o.StoreTimeout}, endpoint
	return nil
}

// timedStore bounds each read of a store (a follower's requests), its
// retries included, by d.
type timedStore struct {
	store.Store
	d time.Duration
}

// bound returns a context for one request, and says so in its error if
// it ran out.
func (s timedStore) bound(ctx context.Context) (context.Context, context.CancelFunc, func(error) error) {
	c, cancel := context.WithTimeout(ctx, s.d)
	return c, cancel, func(err error) error {
		if err != nil && ctx.Err() == nil && c.Err() != nil {
			return fmt.Errorf("%w (no answer within StoreTimeout %s)", err, s.d)
		}
		return err
	}
}

func (s timedStore) Get(ctx context.Context, key string) (store.Object, error) {
	c, cancel, said := s.bound(ctx)
	defer cancel()
	o, err := s.Store.Get(c, key)
	return o, said(err)
}

func (s timedStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	c, cancel, said := s.bound(ctx)
	defer cancel()
	i, err := s.Store.Head(c, key)
	return i, said(err)
}

func (s timedStore) List(ctx context.Context, prefix, startAfter string, limit int) (store.Page, error) {
	c, cancel, said := s.bound(ctx)
	defer cancel()
	p, err := s.Store.List(c, prefix, startAfter, limit)
	return p, said(err)
}

func (s timedStore) Folders(ctx context.Context, prefix, startAfter string, limit int) (store.FolderPage, error) {
	c, cancel, said := s.bound(ctx)
	defer cancel()
	p, err := s.Store.Folders(c, prefix, startAfter, limit)
	return p, said(err)
}

// testEndpointName names a test's store in errors.
const testEndpointName = "the replica store"

// findLedgers finds the ledgers to follow: the one named, or the
// bucket's (not those without an event: a CreateLedger that failed).
//
// After an open that could not list the bucket (followRecorded), the
// first listing that answers confirms the ledgers followed from the
// directory's record, or stops them (listedAgain).
func (fw *Follower) findLedgers(ctx context.Context) error {
	fw.mu.Lock()
	fw.listed = time.Now()
	unlisted := fw.unlisted
	fw.mu.Unlock()
	if fw.o.Ledger != "" {
		if fw.named == 0 || unlisted {
			ids, _, err := restoreLedgers(ctx, fw.st, fw.o.Ledger)
			if err != nil && (!unlisted || !bucketAnswered(err)) {
				return fmt.Errorf("engine: follower: %s: %w", fw.endpoint, err)
			}
			if unlisted {
				fw.listedAgain(func(id eventid.LedgerID) string {
					switch {
					case err != nil:
						return fmt.Sprintf("names no ledger %q to follow (%v)", fw.o.Ledger, err)
					case ids[0] != id:
						return fmt.Sprintf("gives the name %q to ledger %s", fw.o.Ledger, ids[0])
					}
					return ""
				})
				return nil
			}
			fw.named = ids[0]
		}
		fw.add(fw.named)
		return nil
	}
	ids, err := bucketLedgers(ctx, fw.st)
	if err != nil {
		return fmt.Errorf("engine: follower: %s: %w", fw.endpoint, err)
	}
	if unlisted {
		defer fw.listedAgain(func(id eventid.LedgerID) string {
			if !slices.Contains(ids, id) {
				return "does not hold it (no object under " + replica.LedgerPrefix(id) + ")"
			}
			return ""
		})
	}
	for _, id := range ids {
		if _, ok := fw.ledgers[id]; ok {
			continue
		}
		// A ledger created whose first event is not stored yet, or a
		// store that failed: the next listing looks again. One whose
		// objects were deleted is followed: its first poll stops it,
		// naming its manifest (Follower.objectsDeleted).
		if unborn, err := unbornLedger(ctx, fw.st, id); unborn != nil || err != nil && !errors.Is(err, ErrCorruption) {
			continue
		}
		fw.add(id)
	}
	return nil
}

// bucketAnswered says whether err, a failure to find the ledgers to
// follow, is the bucket's answer (damage; a ledger name it does not
// hold, or holds twice; no ledger at all) rather than a bucket that
// could not be read (unreachable, a timeout, access denied), which
// OpenFollower does without if the directory holds copies to serve
// (followRecorded).
func bucketAnswered(err error) bool {
	for _, answer := range []error{ErrCorruption, replica.ErrDiverged, ErrInvalid, ErrLedgerNotFound, replica.ErrNoReplica} {
		if errors.Is(err, answer) {
			return true
		}
	}
	return false
}

// followRecorded follows, when the bucket could not be read to find the
// ledgers at the open (listErr), those whose copy the directory holds
// and follower.json records as laid by a follower of it (recordLaid):
// each is served up to its signed prefix (signedPrefix) until a poll
// checks it against the bucket, and the listing is tried again at every
// round (findLedgers). With FollowerOptions.Ledger a name (an ID needs no
// listing), the recorded copy whose NAME file gives it. A folder not
// recorded is not followed: the DB does not open it (laidBound). With
// nothing to follow, the open fails with listErr, saying so.
func (fw *Follower) followRecorded(listErr error) error {
	var ids []eventid.LedgerID
	for id := range fw.recorded {
		if dirExists(filepath.Join(fw.dir, ledgersDir, id.String())) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if fw.o.Ledger != "" {
		var named []eventid.LedgerID
		for _, id := range ids {
			name, ok, err := readNameFile(vfs.Default, filepath.Join(fw.dir, ledgersDir, id.String()))
			if err == nil && ok && name == fw.o.Ledger {
				named = append(named, id)
			}
		}
		switch len(named) {
		case 0:
			return fmt.Errorf("%w (the bucket could not be read, and %s holds no copy of a ledger named %q that this follower laid, to serve meanwhile)", listErr, fw.dir, fw.o.Ledger)
		case 1:
		default:
			return fmt.Errorf("%w (the bucket could not be read, and %s holds copies of ledgers %s, all named %q: follow one by its ID)", listErr, fw.dir, named, fw.o.Ledger)
		}
		ids, fw.named = named, named[0]
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w (the bucket could not be read, and %s holds no ledger copy that this follower laid, to serve meanwhile)", listErr, fw.dir)
	}
	for _, id := range ids {
		fw.add(id)
		fw.ledgers[id].unconfirmed = true
	}
	fw.mu.Lock()
	fw.unlisted = true
	fw.mu.Unlock()
	return nil
}

// listedAgain ends, once the bucket answered the listing after an open
// that could not read it (followRecorded), the wait of the ledgers
// followed from the directory's record: one the bucket holds (notHeld
// says "") is followed as if the bucket had answered at the open; one
// it does not (notHeld says how) stops, and is no longer served, as it
// would not have been followed.
func (fw *Follower) listedAgain(notHeld func(eventid.LedgerID) string) {
	fw.mu.Lock()
	fw.unlisted = false
	fw.mu.Unlock()
	for _, id := range fw.order {
		fl := fw.ledgers[id]
		if !fl.unconfirmed {
			continue
		}
		fl.unconfirmed = false
		how := notHeld(id)
		if how == "" {
			continue
		}
		fw.mu.Lock()
		fl.status.Stopped = fmt.Errorf("%w: follower: ledger %s (%q): %s, read again, %s: its copy in %s, served up to its signed checkpoint while the bucket could not be read, is no longer followed nor served", ErrLedgerUnavailable, id, fl.name, fw.endpoint, how, filepath.Join(fw.dir, ledgersDir, id.String()))
		fw.mu.Unlock()
		fw.stopReads(fl)
	}
}

func (fw *Follower) add(id eventid.LedgerID) {
	if _, ok := fw.ledgers[id]; ok {
		return
	}
	fw.laidMu.Lock()
	fw.followed[id] = true
	fw.laidMu.Unlock()
	fw.mu.Lock()
	fw.ledgers[id] = &followed{id: id, status: FollowerStatus{Ledger: id}}
	fw.order = append(fw.order, id)
	fw.mu.Unlock()
}

// loop polls every PollInterval until Close.
func (fw *Follower) loop(ctx context.Context) {
	defer close(fw.done)
	t := time.NewTicker(fw.o.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fw.mu.Lock()
		due := fw.unlisted || fw.o.Ledger == "" && time.Since(fw.listed) >= discoverEvery
		fw.mu.Unlock()
		if due {
			fw.findLedgers(ctx) // a failure: the next round's (unlisted), or the next minute's
		}
		fw.round(ctx)
	}
}

// round polls each ledger once, then has the DB look at what was laid
// (and wake its subscribers) at once, not at its next FollowInterval,
// and only then says so in the status: a status says what the DB shows.
func (fw *Follower) round(ctx context.Context) {
	type polled struct {
		fl    *followed
		start time.Time
		err   error
	}
	var done []polled
	defer func() {
		fw.db.followAll()
		now := time.Now()
		fw.mu.Lock()
		for _, p := range done {
			s, fl := &p.fl.status, p.fl
			s.Name, s.Local, s.Signed, s.Bucket = fl.name, fl.local.Seq, fl.ckSize, fl.bucket
			s.LastPoll, s.LastError = now, p.err
			if p.err == nil {
				s.caughtUp = p.start
			}
			// A ledger whose first checkpoint is not stored yet (a
			// Shipped ledger just created) is tried again.
			if p.err != nil && (errors.Is(p.err, ErrCorruption) || errors.Is(p.err, replica.ErrDiverged)) && !(fl.f == nil && errors.Is(p.err, ErrNoCheckpoint)) {
				s.Stopped = p.err
			}
		}
		fw.mu.Unlock()
		for _, p := range done {
			if p.fl.status.Stopped != nil {
				fw.stopReads(p.fl)
			}
		}
	}()
	for _, id := range slices.Clone(fw.order) {
		if ctx.Err() != nil {
			return
		}
		fl := fw.ledgers[id]
		if fl.status.Stopped != nil {
			fw.stopReads(fl) // a ledger the DB showed since
			continue
		}
		start := time.Now()
		err := fw.poll(ctx, fl)
		if ctx.Err() != nil {
			return
		}
		done = append(done, polled{fl, start, err})
	}
}

// poll reads what the bucket holds of fl's ledger after what fl holds,
// verified, and lays it into the directory.
func (fw *Follower) poll(ctx context.Context, fl *followed) error {
	dir := filepath.Join(fw.dir, ledgersDir, fl.id.String())
	if fl.f == nil {
		if err := fw.first(ctx, fl, dir); err != nil {
			return err
		}
		return fw.recordLaid(fl)
	}
	if err := fw.checkCopy(dir, fl.local); err != nil {
		return fw.wrap(fl, err)
	}
	fl.leafFrom, fl.leaves = fl.tree.Size(), fl.leaves[:0]
	// A poll that fails but for damage (the store unreachable, Close)
	// lays what it verified whole before, and the next goes on from
	// there: a store that fails now and then still lets polls through.
	var failed error
	res, err := layRecords(vfs.Default, dir, fl.local, true, nil, func(yield func(replica.Piece) error) (replica.Result, error) {
		res, err := fl.f.Poll(ctx, yield)
		if err != nil && !errors.Is(err, ErrCorruption) {
			failed, err = err, nil
		}
		return res, err
	})
	if err != nil {
		return fw.wrap(fl, err)
	}
	if err := fw.laid(fl, dir, res); err != nil {
		return err
	}
	if failed != nil {
		return fw.wrap(fl, failed)
	}
	return fw.recordLaid(fl) // if the first poll's record failed
}

// first is a ledger's first poll: every object the bucket holds of it,
// checked against what the directory holds (a prefix of it), or laid in
// a new folder renamed into place once complete.
func (fw *Follower) first(ctx context.Context, fl *followed, dir string) error {
	r := fw.reader(fl)
	f := r.Follow()
	local := segment.Head{ID: eventid.Genesis(fl.id)}
	fw.db.mu.RLock()
	l, have := fw.db.byID[fl.id]
	fw.db.mu.RUnlock()
	bounded := have && fl.signed.Seq != 0
	switch {
	case bounded:
		// The DB serves the copy up to its signed checkpoint
		// (signedPrefix) until this poll checked what follows against
		// the bucket: the records the follower laid after it, and any
		// written into the copy while it was stopped.
		local, fl.name = fl.opened, l.meta.Name
	case have:
		// The copy as the DB opened it: it shows nothing written
		// since. Its reads wait for this poll's check against the
		// bucket (holdReads): events written into the copy while the
		// follower was stopped are in it.
		local, fl.name = l.log.Head(), l.meta.Name
		fw.setLaid(fl.id, local)
		fw.holdReads(l, dir)
	case dirExists(dir):
		fl.name, _, _ = readNameFile(vfs.Default, dir) // for Status: a damaged one, no name
		if fw.refusedUnfollowed(fl.id) {
			return fw.wrap(fl, fmt.Errorf("%s: the follower's DB did not open this copy when the follower opened, as it did not follow the ledger then (the bucket did not hold it, or could not be read and %s does not record the copy as laid by this follower): it is followed from the next open", dir, followerFile))
		}
		return fmt.Errorf("%w: follower: %s holds a ledger that does not open read-only (annal verify says why): remove it to follow the ledger again", ErrCorruption, dir)
	}
	into := dir
	if !have {
		into = filepath.Join(fw.dir, ledgersDir, "."+fl.id.String()+".follow")
		if err := os.RemoveAll(into); err != nil {
			return err
		}
		if err := mkdirSynced(vfs.Default, into); err != nil {
			return fmt.Errorf("engine: follower: %w", err)
		}
	}
	if err := fw.openTree(fl, into, local.Seq); err != nil {
		return err
	}
	fl.local, fl.leafFrom, fl.leaves = local, fl.tree.Size(), fl.leaves[:0]
	res, err := layRecords(vfs.Default, into, local, have, nil, func(yield func(replica.Piece) error) (replica.Result, error) {
		res, err := f.Poll(ctx, yield)
		if err == nil && have {
			err = fw.keptCheckpoint(fl, dir, f)
		}
		if err == nil && res.Verified.Seq < local.Seq {
			err = fw.notInBucket(dir, local, res)
		}
		return res, err
	})
	if err != nil {
		if !have {
			os.RemoveAll(into)
		}
		if bounded && !fl.held {
			fl.local, fl.ckSize = fl.signed, fl.signed.Seq // what the DB serves
		}
		if errors.Is(err, ErrNoCheckpoint) {
			if derr := fw.objectsDeleted(ctx, fl); derr != nil {
				err = derr
			}
		}
		return fw.wrap(fl, err)
	}
	fl.f = f
	if !have {
		m := f.Manifest()
		fl.name = m.Name
		if m.Name != "" {
			if err := writeNameFile(vfs.Default, into, m.Name); err != nil {
				return err
			}
		}
		if err := fw.laid(fl, into, res); err != nil {
			os.RemoveAll(into)
			fl.f = nil
			return err
		}
		fl.tree.Close()
		fl.tree = nil
		if err := os.Rename(into, dir); err != nil {
			fl.f = nil
			return fmt.Errorf("engine: follower: %w", err)
		}
		if err := fw.openTree(fl, dir, fl.local.Seq); err != nil {
			return err
		}
		return segment.SyncDir(vfs.Default, filepath.Dir(dir))
	}
	if err := fw.laid(fl, dir, res); err != nil {
		return err
	}
	releaseReads(l)
	return nil
}

// refusedUnfollowed says whether the DB refused, at its open, ledger
// id's folder as one the follower did not follow then (laidBound).
func (fw *Follower) refusedUnfollowed(id eventid.LedgerID) bool {
	fw.db.mu.RLock()
	_, err, ok := fw.db.brokenByID(id)
	fw.db.mu.RUnlock()
	var nf notFollowedError
	return ok && errors.As(err, &nf)
}

// dirExists says whether path exists.
func dirExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// signedPrefix finds, in the copy of ledger id the directory holds at
// the follower's open, the last record (opened) and the one its
// checkpoint file covers up to (signed: the record of the checkpoint's
// size, which ends a batch). signed.Seq is 0 when there is no such
// record: no copy, no checkpoint file, one the follower's key does not
// verify, a copy shorter than it or damaged, a size inside a batch. The
// follower then holds the ledger's reads until its first poll (holdReads).
//
// A signed record bounds what the DB shows of the ledger (laidBound)
// until the first poll checked the copy against the bucket: the records
// up to it are those the writer signed, whatever was written into the
// copy after them while the follower was stopped. The DB's open checks
// that they are (the checkpoint's root against the copy's leaves at its
// size, as at every read-only open: judgeEvidence) and refuses the
// ledger otherwise, which the first poll then stops.
//
// It reads the copy once more than the DB's open does (segment's read-only
// open verifies every record), and the records of one segment to find
// the signed one (the stamps of that open say which segment).
func (fw *Follower) signedPrefix(id eventid.LedgerID, maxEvent int) (opened, signed segment.Head) {
	dir := filepath.Join(fw.dir, ledgersDir, id.String())
	msg, err := readSmallFile(vfs.Default, filepath.Join(dir, checkpointFileName), maxCheckpointFile)
	if err != nil {
		return opened, signed
	}
	ck, err := openCheckpoint(msg, fw.v, id)
	if err != nil || ck.Size == 0 {
		return opened, signed
	}
	log, err := segment.OpenReadOnly(dir, segment.Options{FS: vfs.Default, Ledger: id, MaxRecordSize: maxEvent, VerifySealed: true})
	if err != nil {
		return opened, signed
	}
	defer log.Close()
	opened = log.Head()
	if opened.Seq < ck.Size {
		return opened, signed
	}
	from := uint64(1)
	for _, st := range log.Stamps() {
		if st.Last.Seq < ck.Size {
			from = max(from, st.Segment+1)
		}
	}
	it := log.NewIterator(from, segment.FirstOffset)
	defer it.Close()
	for it.Next() {
		r := it.Record()
		if r.Seq < ck.Size {
			continue
		}
		if r.Seq == ck.Size && !r.More() {
			signed = segment.Head{ID: r.ID, Seq: r.Seq, Loc: it.Location()}
		}
		break
	}
	return opened, signed
}

// checkSignedPrefixes holds the reads of each ledger bound by its
// signed prefix (signedPrefix) whose checkpoint, as the DB's open judged
// it, is not of the bound's size (the file replaced since it was read):
// the records up to the bound were then not all checked against a
// signed root.
func (fw *Follower) checkSignedPrefixes() {
	for _, id := range fw.order {
		fl := fw.ledgers[id]
		fw.db.mu.RLock()
		l := fw.db.byID[id]
		fw.db.mu.RUnlock()
		if l == nil || fl.signed.Seq == 0 {
			continue
		}
		if c := l.latest.Load(); c == nil || c.Size != fl.signed.Seq {
			fl.held = true
			fw.holdReads(l, filepath.Join(fw.dir, ledgersDir, id.String()))
		}
	}
}

// objectsDeleted tells, when a ledger's first poll found no signed
// checkpoint, a ledger not yet born (a Shipped ledger just created: its
// first checkpoint comes later; the next poll looks again, nil) from one
// whose objects were deleted from the bucket: no chunk and no sealed
// segment either, and a manifest that records events (objectsDeleted's
// error, naming the manifest, which stops the ledger).
func (fw *Follower) objectsDeleted(ctx context.Context, fl *followed) error {
	prefix := replica.LedgerPrefix(fl.id)
	for _, p := range []string{prefix + "wal/", prefix + "seg/"} {
		page, err := fw.st.List(ctx, p, "", 1)
		if err != nil || len(page.Objects) > 0 {
			return nil
		}
	}
	m, key, err := replica.NewReader(replica.ReaderConfig{Store: fw.st, Ledger: fl.id}).Manifest(ctx)
	if err != nil {
		return nil
	}
	fl.name = m.Name
	return objectsDeleted(fl.id, m, key)
}

// keptCheckpoint checks the checkpoint a first poll verified in the
// bucket against the checkpoint file the directory kept from the polls
// before (a follower opened again): one of fewer events, or of as many
// with another root, is refused, as a Follow refuses it between polls
// (a bucket rolled back to an older checkpoint would otherwise replace
// the file, and be followed from there).
func (fw *Follower) keptCheckpoint(fl *followed, dir string, f *replica.Follow) error {
	path := filepath.Join(dir, checkpointFileName)
	msg, err := readSmallFile(vfs.Default, path, maxCheckpointFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: follower: read %s: %w", path, err)
	}
	kept, err := openCheckpoint(msg, fw.v, fl.id)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruption, path, err)
	}
	note, size := f.Checkpoint()
	key := replica.CheckpointKey(fl.id)
	switch {
	case size < kept.Size:
		return fmt.Errorf("%w: %s: signed for %d events, this directory's checkpoint (%s) of %d events was verified before: the bucket's history is not an extension of the one read", ErrCorruption, key, size, path, kept.Size)
	case size == kept.Size:
		c, err := openCheckpoint(note, fw.v, fl.id)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorruption, key, err)
		}
		if c.Root != kept.Root {
			return fmt.Errorf("%w: %s: the root of %d events is %x, this directory's checkpoint (%s) of that size has %x: the bucket's history is not an extension of the one read", ErrCorruption, key, size, c.Root[:], path, kept.Root[:])
		}
	}
	fl.ckSize = kept.Size
	return nil
}

// notInBucket is the error of a first poll whose records (res) end
// before those the directory holds (local): events the follower did not
// lay, or that the bucket no longer holds. A gap in the bucket (which may
// be filled: chunks stored out of order) is tried again; else the copy is
// refused.
func (fw *Follower) notInBucket(dir string, local segment.Head, res replica.Result) error {
	msg := fmt.Sprintf("%s holds events %d to %d, which the bucket's history read does not (it ends at event %d)", filepath.Join(dir, segment.FileName(local.Loc.Segment)), res.Verified.Seq+1, local.Seq, res.Verified.Seq)
	if res.Ignored != "" {
		return fmt.Errorf("engine: follower: %s: %s (tried again)", msg, res.Ignored)
	}
	return fmt.Errorf("%w: %s: events this follower did not verify", replica.ErrDiverged, msg)
}

// laid records what a poll laid in dir: the ledger's new head, its
// tree file's leaves, then its checkpoint file if a newer one was
// verified.
func (fw *Follower) laid(fl *followed, dir string, res replica.Result) error {
	if res.Yielded.Seq > fl.local.Seq {
		fl.local = res.Yielded
	}
	if err := fw.growTree(fl); err != nil {
		return err
	}
	if msg, size := fl.f.Checkpoint(); size > fl.ckSize && size <= fl.local.Seq {
		if err := writeFileAtomic(vfs.Default, dir, checkpointFileName, msg, true); err != nil {
			return fmt.Errorf("engine: follower: ledger %s: %w", fl.id, err)
		}
		fl.ckSize = size
	}
	fl.bucket = max(res.Verified.Seq, fl.ckSize)
	fw.setLaid(fl.id, fl.local)
	return nil
}

// setLaid records h as the last record of ledger id laid and verified:
// the DB shows it, and none after it.
func (fw *Follower) setLaid(id eventid.LedgerID, h segment.Head) {
	fw.laidMu.Lock()
	fw.laidHead[id] = h
	fw.laidMu.Unlock()
}

// laidBound is the DB's Options.laidBound: a ledger the follower does
// not follow (not in the bucket, or not the one FollowerOptions.Ledger
// names), whose folder the directory holds all the same (put there, or
// laid by an earlier follower of every ledger), is not opened: nothing
// of it was laid or verified by this follower.
func (fw *Follower) laidBound(id eventid.LedgerID) (segment.Head, bool, error) {
	fw.laidMu.Lock()
	defer fw.laidMu.Unlock()
	if !fw.followed[id] {
		return segment.Head{}, false, notFollowedError{fmt.Errorf("follower: %s holds ledger %s, which this follower does not follow (%s does not hold it, or FollowerOptions.Ledger names another, or could not be read at the open and follower.json does not record the copy as laid by this follower): not served", filepath.Join(fw.dir, ledgersDir, id.String()), id, fw.endpoint)}
	}
	h, ok := fw.laidHead[id]
	return h, ok, nil
}

// notFollowedError is laidBound's refusal of a ledger the follower does
// not follow.
type notFollowedError struct{ error }

func (e notFollowedError) Unwrap() error { return e.error }

// checkCopy checks, before a poll lays records in dir, that the ledger's
// files end where the records laid end (local): its last segment as
// long as they, and no segment after it. Bytes after them were not laid
// by the follower, nor verified: events written into the copy by
// someone else (the DB does not show them: see laidBound), which the
// poll's records would be written over. That is damage, as a reopened
// follower finds it (notInBucket): ErrDiverged, naming the segment.
func (fw *Follower) checkCopy(dir string, local segment.Head) error {
	if local.Loc.Segment == 0 {
		return nil
	}
	path := filepath.Join(dir, segment.FileName(local.Loc.Segment))
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v: it holds the events this follower laid up to %d", replica.ErrDiverged, path, err, local.Seq)
	}
	if fi.Size() < local.Loc.End() {
		return fmt.Errorf("%w: %s is %d bytes, shorter than the records this follower laid and verified (they end at %d, event %d): the copy was cut under it", replica.ErrDiverged, path, fi.Size(), local.Loc.End(), local.Seq)
	}
	if fi.Size() != local.Loc.End() {
		return fmt.Errorf("%w: %s is %d bytes, the records this follower laid and verified end at %d (event %d): the copy holds bytes it did not lay (written by another process, or left by a failed write of its own, which the poll before said)", replica.ErrDiverged, path, fi.Size(), local.Loc.End(), local.Seq)
	}
	next := filepath.Join(dir, segment.FileName(local.Loc.Segment+1))
	if _, err := os.Lstat(next); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s: a segment this follower did not lay (its records end at event %d in %s)", replica.ErrDiverged, next, local.Seq, filepath.Base(path))
	}
	return nil
}

// openTree opens the tree file of the ledger in dir, whose records end
// at event n: one of more leaves, or damaged, is made anew (the first
// poll reads every record).
func (fw *Follower) openTree(fl *followed, dir string, n uint64) error {
	if fl.tree != nil {
		fl.tree.Close()
		fl.tree = nil
	}
	path := filepath.Join(dir, "tree")
	t, err := tree.OpenFile(vfs.Default, path, uint32(fl.id))
	if err == nil && t.Size() > n {
		t.Close()
		err = tree.ErrCorrupt
	}
	if err != nil {
		if t, err = tree.Create(vfs.Default, path, uint32(fl.id)); err != nil {
			return fmt.Errorf("engine: follower: ledger %s: %w", fl.id, err)
		}
	}
	fl.tree = t
	return nil
}

// growTree appends the leaves of a poll's records to the ledger's tree
// file, which the proofs read.
func (fw *Follower) growTree(fl *followed) error {
	if len(fl.leaves) == 0 {
		return nil
	}
	if err := fl.tree.Append(fl.leaves); err != nil {
		return fmt.Errorf("engine: follower: ledger %s: %w", fl.id, err)
	}
	fl.leaves = fl.leaves[:0]
	if err := fl.tree.Sync(); err != nil {
		return fmt.Errorf("engine: follower: ledger %s: %w", fl.id, err)
	}
	return nil
}

// reader returns a Reader of fl's ledger that checks the checkpoints
// with the follower's key and keeps the leaves of the records read after
// fl.leafFrom in fl.leaves, for the tree file.
func (fw *Follower) reader(fl *followed) *replica.Reader {
	cfg := ledgerReaderConfig(fw.st, fl.id, fw.v, false, followerKeyHint)
	leaf := cfg.Leaf
	cfg.Leaf = func(rec *segment.Record) tree.Hash {
		h := leaf(rec)
		// A record read twice (a seg/ object read after the chunks that
		// held it, deleted since) is left out.
		if rec.Seq == fl.leafFrom+uint64(len(fl.leaves))+1 {
			fl.leaves = append(fl.leaves, h)
		}
		return h
	}
	return replica.NewReader(cfg)
}

// wrap names the ledger and the bucket in a poll's error.
func (fw *Follower) wrap(fl *followed, err error) error {
	return fmt.Errorf("engine: follower: ledger %s (%q) from %s: %w", fl.id, fl.name, fw.endpoint, err)
}

// notCheckedError is the error of the reads of a ledger whose copy the
// follower has not checked against the bucket since it opened
// (holdReads).
type notCheckedError struct{ error }

func (e notCheckedError) Unwrap() error { return e.error }

// holdReads makes the reads of l, a ledger whose copy in dir the
// follower found at its open without a signed checkpoint to serve it up
// to (signedPrefix), fail until its first poll checked the copy
// against the bucket (releaseReads): the follower verified what it laid
// before, but the copy may hold more (events written into it while the
// follower was stopped), and a first poll that fails (the store
// unreachable, a gap in the bucket) does not say which. The first poll
// of OpenFollower runs before it returns: the hold is seen only when it
// fails.
func (fw *Follower) holdReads(l *ledger, dir string) {
	l.idxMu.Lock()
	if l.idxErr == nil {
		l.idxErr = notCheckedError{fmt.Errorf("%w: follower: ledger %s: its copy in %s is not checked against the bucket %s yet (the follower's polls since it opened failed: FollowerStatus.LastError says why): nothing of it is served until a poll checks it", ErrLedgerUnavailable, l.meta.Name, dir, fw.endpoint)}
		l.wake()
	}
	l.idxMu.Unlock()
}

// releaseReads ends holdReads once the copy was checked.
func releaseReads(l *ledger) {
	l.idxMu.Lock()
	if _, held := l.idxErr.(notCheckedError); held {
		l.idxErr = nil
		l.wake()
	}
	l.idxMu.Unlock()
}

// stopReads makes the reads of a stopped ledger fail with why it
// stopped.
func (fw *Follower) stopReads(fl *followed) {
	fw.db.mu.RLock()
	l := fw.db.byID[fl.id]
	fw.db.mu.RUnlock()
	if l == nil {
		return
	}
	l.idxMu.Lock()
	l.idxErr = fl.status.Stopped
	l.wake()
	l.idxMu.Unlock()
}

// DB returns the read-only DB that serves the copy (OpenReadOnly's, on
// the follower's directory, bounded by what the follower laid and
// verified): every read works on it, writes fail with ErrReadOnly, and
// the reads of a stopped ledger fail with why it stopped. Close closes it.
func (fw *Follower) DB() *DB { return fw.db }

// Dir returns the follower's directory.
func (fw *Follower) Dir() string { return fw.dir }

// Status returns what the follower knows of the ledger name (its name or
// its ID in hex), or ErrLedgerNotFound.
func (fw *Follower) Status(name string) (FollowerStatus, error) {
	for _, s := range fw.Statuses() {
		if s.Name == name || s.Ledger.String() == name {
			return s, nil
		}
	}
	return FollowerStatus{}, fmt.Errorf("%w: %q: not followed", ErrLedgerNotFound, name)
}

// Statuses returns the status of every ledger followed, in the order
// they were found.
func (fw *Follower) Statuses() []FollowerStatus {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	now := time.Now()
	out := make([]FollowerStatus, 0, len(fw.order))
	for _, id := range fw.order {
		s := fw.ledgers[id].status
		s.Behind = 0
		if s.Bucket > s.Local {
			s.Behind = s.Bucket - s.Local
		}
		if !s.caughtUp.IsZero() {
			s.Lag = now.Sub(s.caughtUp)
		}
		out = append(out, s)
	}
	return out
}

// Close stops polling (a poll under way is cancelled: what it read is
// laid up to the last object it verified whole), closes the DB and lets
// the directory go.
func (fw *Follower) Close() error {
	fw.mu.Lock()
	if fw.closed {
		fw.mu.Unlock()
		return ErrClosed
	}
	fw.closed = true
	fw.mu.Unlock()
	fw.cancel()
	<-fw.done
	return fw.release()
}

// release closes what the follower holds.
func (fw *Follower) release() error {
	if fw.cancel != nil {
		fw.cancel()
	}
	var errs []error
	if fw.db != nil {
		errs = append(errs, fw.db.Close())
	}
	for _, fl := range fw.ledgers {
		if fl.tree != nil {
			errs = append(errs, fl.tree.Close())
		}
	}
	if fw.lock != nil {
		errs = append(errs, fw.lock.Close())
	}
	if fw.dirFile != nil {
		fw.dirFile.Close()
	}
	return errors.Join(errs...)
}
