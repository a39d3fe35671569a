package replica

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment/corruption"
)

// ManifestVersion is the manifest format this package writes and reads.
const ManifestVersion = 1

// maxManifest bounds a manifest object that DecodeManifest accepts.
const maxManifest = 64 << 10

// Manifest is a ledger's state in the bucket at one epoch: a small JSON
// object under manifest/N, written create-only, never replaced
// (docs/replication.md, "A manifest").
type Manifest struct {
	V      int    `json:"v"`
	Ledger string `json:"ledger"` // the ledger ID, 8 hex digits
	// Name is the ledger's name, for a restore to give it.
	Name  string `json:"name"`
	Epoch uint64 `json:"epoch"`
	// Writer is the process that wrote the manifest.
	Writer Identity `json:"writer"`
	// Fence is the chunk number at which this epoch's chunks begin (its
	// fence chunk); 0 before the writer has fenced.
	Fence uint64 `json:"fence"`
	// Segments is the number of sealed segments stored under seg/: every
	// segment from 1 to Segments is; SealedSeq is the last event of
	// segment Segments (0 when Segments is 0).
	Segments  uint64 `json:"segments"`
	SealedSeq uint64 `json:"sealedSeq"`
	// GC is the chunk number below which every chunk is covered by seg/
	// objects and may be deleted once the grace period has passed.
	GC uint64 `json:"gc"`
	// Written is when the manifest was written, by the writer's clock
	// (informational).
	Written time.Time `json:"written"`
}

// Identity names a writer process.
type Identity struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Nonce is random, so that two processes never share an identity.
	Nonce string `json:"nonce"`
}

// String is the identity as an error message gives it.
func (id Identity) String() string {
	return fmt.Sprintf("%s pid %d (started %s)", id.Host, id.PID, id.Started.UTC().Format(time.RFC3339))
}

// Encode returns the manifest's JSON object.
func (m *Manifest) Encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("replica: manifest: %v", err)) // plain fields: cannot fail
	}
	return b
}

// DecodeManifest parses the manifest stored under key, for ledger. A bad
// manifest is an error that matches corruption.Err and names key.
func DecodeManifest(key string, ledger eventid.LedgerID, object []byte) (Manifest, error) {
	bad := func(format string, args ...any) (Manifest, error) {
		return Manifest{}, fmt.Errorf("%w: manifest %s: %s", corruption.Err, key, fmt.Sprintf(format, args...))
	}
	if len(object) > maxManifest {
		return bad("%d bytes, more than a manifest's %d", len(object), maxManifest)
	}
	var m Manifest
	d := json.NewDecoder(bytes.NewReader(object))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return bad("%v", err)
	}
	if d.More() {
		return bad("bytes after the JSON object")
	}
	switch {
	case m.V != ManifestVersion:
		return bad("format version %d; this annal reads version %d", m.V, ManifestVersion)
	case m.Ledger != fmt.Sprintf("%08x", uint32(ledger)):
		return bad("ledger %q, the key's is %08x", m.Ledger, uint32(ledger))
	case m.Epoch == 0:
		return bad("epoch 0")
	case m.Segments == 0 && m.SealedSeq != 0:
		return bad("sealed sequence number %d without a sealed segment", m.SealedSeq)
	}
	return m, nil
}
