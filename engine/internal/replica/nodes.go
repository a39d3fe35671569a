package replica

// The objects of nodes that share one bucket (docs/replication.md,
// "Nodes and ownership"): a node's lease under nodes/, a ledger's owner
// beside its manifests, and the map from a ledger's name to its ID under
// names/. None of them is part of the fencing: the epoch in the manifest
// and the fence chunk stays the safety; these route and tell liveness.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
)

// NodesPrefix is the folder of the nodes' leases.
const NodesPrefix = "nodes/"

// NamesPrefix is the folder of the map from ledger names to IDs.
const NamesPrefix = "names/"

// maxEscaped bounds an escaped name in a key; a longer one is replaced by
// "~" and the SHA-256 of the name in hex (EscapeName).
const maxEscaped = 240

// EscapeName returns name as one segment of an object key: every byte
// but the ASCII letters, digits, '-' and '_' as %XX (upper-case hex), so
// that no name makes a '/', a "." or ".." segment, or a character an S3
// tool mangles. An escaped form longer than 240 bytes (a name of up to
// 1,024 bytes may escape to three times that, past S3's 1,024-byte keys)
// is "~" and the hex SHA-256 of the name instead: '~' is escaped in the
// other form, so the two never meet. The object holds the name itself.
func EscapeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > maxEscaped {
		sum := sha256.Sum256([]byte(name))
		return "~" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// NodeKey is the key of a node's lease.
func NodeKey(node string) string { return NodesPrefix + EscapeName(node) }

// NameKey is the key of a ledger name's claim.
func NameKey(name string) string { return NamesPrefix + EscapeName(name) }

// OwnerKey is the key of a ledger's owner object.
func OwnerKey(ledger eventid.LedgerID) string { return LedgerPrefix(ledger) + "owner" }

// NodeVersion is the format of the lease, owner and name objects.
const NodeVersion = 1

// maxNodeObject bounds a lease, owner or name object that the decoders
// accept.
const maxNodeObject = 16 << 10

// Lease is a node's lease object, nodes/NAME: created create-only when
// the node starts (replaced If-Match when an earlier process of the node
// left one), renewed If-Match every Lease/3 with Renewal one more.
// Observers never compare its times with their clocks: a node is dead
// for an observer that has seen the same object (ETag) for longer than
// Lease on its own monotonic clock.
type Lease struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	// Address is where the node takes requests, as the application gave
	// it (opaque to annal).
	Address string `json:"address"`
	// LeaseMS is the lease's duration in milliseconds.
	LeaseMS int64 `json:"leaseMs"`
	// Renewal counts the renewals of this process, from 0.
	Renewal uint64 `json:"renewal"`
	// Writer is the process holding the lease: the identity it writes
	// into the manifests of the ledgers it takes.
	Writer Identity `json:"writer"`
	// Written is the writer's clock at the renewal (informational).
	Written time.Time `json:"written"`
	// Released is set by the process's clean Close, once its ledgers'
	// writers are closed: the node's next process takes the lease at
	// once, without waiting to see that no live process renews it. The
	// other nodes judge it as any lease no longer renewed.
	Released bool `json:"released,omitempty"`
}

// Duration is the lease's duration.
func (l Lease) Duration() time.Duration { return time.Duration(l.LeaseMS) * time.Millisecond }

// Owner is a ledger's owner object, ledgers/LLLLLLLL/owner: the node that
// writes it and the epoch it took it at. Written create-only when a node
// first takes the ledger, and If-Match (the ETag read) when it moves,
// after the manifest of the new epoch: it may be one step behind the
// newest manifest, whose epoch wins.
type Owner struct {
	V      int    `json:"v"`
	Ledger string `json:"ledger"`
	Name   string `json:"name"`
	Node   string `json:"node"`
	Epoch  uint64 `json:"epoch"`
	// Writer is the process that took the ledger, as in its manifest.
	Writer  Identity  `json:"writer"`
	Written time.Time `json:"written"`
}

// NameClaim is the object names/NAME: the ledger that has the name in
// the bucket, written create-only by the node that creates it, so that
// two nodes never make two ledgers of one name.
type NameClaim struct {
	V       int       `json:"v"`
	Name    string    `json:"name"`
	Ledger  string    `json:"ledger"`
	Node    string    `json:"node"`
	Written time.Time `json:"written"`
}

// LedgerID returns the claimed ledger's ID.
func (c NameClaim) LedgerID() (eventid.LedgerID, error) { return eventid.ParseLedgerID(c.Ledger) }

// encodeJSON encodes one of the objects above.
func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("replica: %T: %v", v, err)) // plain fields: cannot fail
	}
	return b
}

// Encode returns the lease's JSON object.
func (l *Lease) Encode() []byte { return encodeJSON(l) }

// Encode returns the owner's JSON object.
func (o *Owner) Encode() []byte { return encodeJSON(o) }

// Encode returns the claim's JSON object.
func (c *NameClaim) Encode() []byte { return encodeJSON(c) }

// decodeJSON parses the object stored under key into v strictly; an
// error matches corruption.Err and names key.
func decodeJSON(key string, object []byte, v any) error {
	if len(object) > maxNodeObject {
		return fmt.Errorf("%w: %s: %d bytes, more than %d", corruption.Err, key, len(object), maxNodeObject)
	}
	d := json.NewDecoder(bytes.NewReader(object))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", corruption.Err, key, err)
	}
	if d.More() {
		return fmt.Errorf("%w: %s: bytes after the JSON object", corruption.Err, key)
	}
	return nil
}

// DecodeLease parses the lease stored under key.
func DecodeLease(key string, object []byte) (Lease, error) {
	var l Lease
	if err := decodeJSON(key, object, &l); err != nil {
		return Lease{}, err
	}
	switch {
	case l.V != NodeVersion:
		return Lease{}, fmt.Errorf("%w: %s: format version %d; this annal reads version %d", corruption.Err, key, l.V, NodeVersion)
	case NodeKey(l.Node) != key:
		return Lease{}, fmt.Errorf("%w: %s: holds the lease of node %q, whose key is %s", corruption.Err, key, l.Node, NodeKey(l.Node))
	case l.LeaseMS <= 0:
		return Lease{}, fmt.Errorf("%w: %s: lease of %d ms", corruption.Err, key, l.LeaseMS)
	}
	return l, nil
}

// DecodeOwner parses the owner object of ledger stored under key.
func DecodeOwner(key string, ledger eventid.LedgerID, object []byte) (Owner, error) {
	var o Owner
	if err := decodeJSON(key, object, &o); err != nil {
		return Owner{}, err
	}
	switch {
	case o.V != NodeVersion:
		return Owner{}, fmt.Errorf("%w: %s: format version %d; this annal reads version %d", corruption.Err, key, o.V, NodeVersion)
	case o.Ledger != fmt.Sprintf("%08x", uint32(ledger)):
		return Owner{}, fmt.Errorf("%w: %s: ledger %q, the key's is %08x", corruption.Err, key, o.Ledger, uint32(ledger))
	case o.Node == "" || o.Epoch == 0:
		return Owner{}, fmt.Errorf("%w: %s: no node or epoch 0", corruption.Err, key)
	}
	return o, nil
}

// DecodeNameClaim parses the claim stored under key.
func DecodeNameClaim(key string, object []byte) (NameClaim, error) {
	var c NameClaim
	if err := decodeJSON(key, object, &c); err != nil {
		return NameClaim{}, err
	}
	if c.V != NodeVersion {
		return NameClaim{}, fmt.Errorf("%w: %s: format version %d; this annal reads version %d", corruption.Err, key, c.V, NodeVersion)
	}
	if NameKey(c.Name) != key {
		return NameClaim{}, fmt.Errorf("%w: %s: claims the name %q, whose key is %s", corruption.Err, key, c.Name, NameKey(c.Name))
	}
	if _, err := c.LedgerID(); err != nil {
		return NameClaim{}, fmt.Errorf("%w: %s: ledger %q: %v", corruption.Err, key, c.Ledger, err)
	}
	return c, nil
}

// ReadOwner reads ledger's owner object and its ETag; a ledger without
// one is store.ErrNotFound.
func ReadOwner(ctx context.Context, st store.Store, ledger eventid.LedgerID) (Owner, string, error) {
	key := OwnerKey(ledger)
	obj, err := st.Get(ctx, key)
	if err != nil {
		return Owner{}, "", err
	}
	o, err := DecodeOwner(key, ledger, obj.Data)
	return o, obj.ETag, err
}

// ErrOwnerMoved says that a ledger's owner object names a newer epoch
// than the one WriteOwner was to record: another node took the ledger
// since.
var ErrOwnerMoved = errors.New("replica: the ledger's owner object names a newer epoch")

// WriteOwner records o as the ledger's owner: create-only if the bucket
// has no owner object, else If-Match on the one read, read again after a
// 412. An owner object of a higher epoch than o's is ErrOwnerMoved
// (another node took the ledger after this one's take); one of o's epoch
// and node is o's own (a retried request).
func WriteOwner(ctx context.Context, st store.Store, o Owner) error {
	key := OwnerKey(mustLedger(o.Ledger))
	id := mustLedger(o.Ledger)
	data := o.Encode()
	for try := 0; ; try++ {
		cur, etag, err := ReadOwner(ctx, st, id)
		cond := store.CreateOnly()
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil && !errors.Is(err, corruption.Err):
			return fmt.Errorf("read %s: %w", key, err)
		case err != nil:
			// A damaged owner object is replaced: it routes only.
			obj, gerr := st.Get(ctx, key)
			if gerr != nil {
				return fmt.Errorf("read %s: %w", key, gerr)
			}
			cond = store.ReplaceIf(obj.ETag)
		case cur.Epoch > o.Epoch:
			return fmt.Errorf("%w: %s names node %q at epoch %d, after this node's epoch %d", ErrOwnerMoved, key, cur.Node, cur.Epoch, o.Epoch)
		case cur.Epoch == o.Epoch && cur.Node == o.Node && cur.Writer.Nonce == o.Writer.Nonce:
			return nil
		default:
			cond = store.ReplaceIf(etag)
		}
		_, err = st.Put(ctx, key, data, cond)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("write %s: %w", key, err)
		}
		if try+1 == takeTries*2 {
			return fmt.Errorf("write %s: other nodes replaced it %d times in a row: %w", key, takeTries*2, err)
		}
	}
}

// mustLedger parses an ID that this package formatted.
func mustLedger(s string) eventid.LedgerID {
	id, err := eventid.ParseLedgerID(s)
	if err != nil {
		panic(fmt.Sprintf("replica: ledger ID %q: %v", s, err))
	}
	return id
}
