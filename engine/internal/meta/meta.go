// Package meta is the engine's metadata file, DIR/meta.db: a bbolt file
// of msgpack records, one per ledger (its name, ID, genesis, its head
// when last written and a durable witness), the named consumers' positions, and
// the marker of positions lost with a rebuilt file. It knows bbolt and the
// records' format (docs/format.md); what the records mean to a DB, and
// when they are written, is the engine's.
package meta

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/annal-db/annal/segment/corruption"
	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The metadata file (bbolt) holds one record per ledger in bucket
// "ledgers", keyed by the ledger ID's hex. Everything in it but the
// witness can be rebuilt from the segments (the genesis event names and
// describes the ledger); the head fields are the head when the record was
// last written and the witness a durable head (see witness.go), written on Close, on CreateLedger and
// Import, at Open and by the witness writer, never on an append's path.
//
// A record is a msgpack map (Record, its format in docs/format.md)
// whose "v" is Version. Records of annal before version 1 are JSON
// objects (their first byte is '{', which no msgpack map starts with):
// they are read, and the engine's Open rewrites them as msgpack.
//
// BucketLedgers is the name of that bucket.
var BucketLedgers = []byte("ledgers")

// Version is the version of the metadata records this annal writes;
// it reads every version up to it.
const Version = 1

// Ledger is what the metadata file keeps of a ledger. The JSON tags
// are those of the records before version 1, which are still read.
type Ledger struct {
	Name        string           `json:"name"`
	ID          eventid.LedgerID `json:"id"`
	Genesis     eventid.ID       `json:"genesis"`
	Description string           `json:"description"`
	Actor       string           `json:"actor"`
	Created     time.Time        `json:"created"`
	// Head, Count and LastMicros: the head when the record was last written.
	Head       eventid.ID `json:"head"`
	Count      uint64     `json:"count"`
	LastMicros uint64     `json:"lastMicros"`
	// Witness is a head that was durable when the record was written
	// (segment.Log.Durable); zero if none. A JSON record has none, and
	// its Head and Count stand for it (see Decode).
	Witness segment.Head `json:"-"`

	// Legacy: read from a JSON record, to be rewritten as msgpack.
	Legacy bool `json:"-"`
}

// Record is the msgpack form of a Ledger. Fields are named, so
// that a later version can add some; a reader ignores names it does not
// know, and refuses a version above Version.
type Record struct {
	Version     int            `msgpack:"v"`
	Name        string         `msgpack:"name"`
	ID          uint32         `msgpack:"id"`
	Genesis     []byte         `msgpack:"genesis"`
	Description string         `msgpack:"description"`
	Actor       string         `msgpack:"actor"`
	Created     time.Time      `msgpack:"created"`
	Head        []byte         `msgpack:"head"`
	Count       uint64         `msgpack:"count"`
	LastMicros  uint64         `msgpack:"lastMicros"`
	Witness     *witnessRecord `msgpack:"witness,omitempty"`
	// CRC is the CRC32C of every byte of the record before its own four:
	// the last field, a uint32 written in full (0xce and 4 bytes), so a
	// damaged record (a wrong witness would refuse an intact ledger) is
	// found. bbolt has no checksum of its own for a value.
	CRC uint32 `msgpack:"crc"`
}

// ErrDamaged: the metadata file is damaged: bbolt cannot read it, or a
// record in it fails its checks. It matches corruption.Err; the engine
// gives it out as ErrMetaDamaged.
var ErrDamaged = corruption.New("engine: the metadata file is damaged")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// witnessRecord is a durable head: the record Seq with ID, whose frame
// is Size bytes at Offset in segment Segment.
type witnessRecord struct {
	Seq     uint64 `msgpack:"seq"`
	ID      []byte `msgpack:"id"`
	Segment uint64 `msgpack:"segment"`
	Offset  int64  `msgpack:"offset"`
	Size    int64  `msgpack:"size"`
}

// encode returns the msgpack record of m.
func encode(m *Ledger) ([]byte, error) {
	r := Record{Version: Version, Name: m.Name, ID: uint32(m.ID), Genesis: m.Genesis[:], Description: m.Description,
		Actor: m.Actor, Created: m.Created, Head: m.Head[:], Count: m.Count, LastMicros: m.LastMicros}
	if w := m.Witness; w.Seq != 0 {
		r.Witness = &witnessRecord{Seq: w.Seq, ID: w.ID[:], Segment: w.Loc.Segment, Offset: w.Loc.Offset, Size: w.Loc.Size}
	}
	b, err := msgpack.Marshal(&r)
	if err != nil {
		return nil, err
	}
	if !sealCRC(b) {
		return nil, fmt.Errorf("engine: metadata record of ledger %s: the encoding does not end with the CRC field", m.ID)
	}
	return b, nil
}

// sealCRC writes, into the CRC field that ends a msgpack record (a uint32,
// 0xce and 4 bytes), the CRC32C of every byte before it. It reports
// whether b ends with such a field.
func sealCRC(b []byte) bool {
	n := len(b) - 4
	if n < 1 || b[n-1] != 0xce {
		return false
	}
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	return true
}

// checkCRC checks the CRC field that ends a msgpack record sealed by
// sealCRC, whose decoded value is crc.
func checkCRC(v []byte, crc uint32) error {
	n := len(v) - 4
	if n < 1 || v[n-1] != 0xce || binary.BigEndian.Uint32(v[n:]) != crc {
		return fmt.Errorf("the record does not end with its CRC field")
	}
	if got := crc32.Checksum(v[:n], castagnoli); got != crc {
		return fmt.Errorf("CRC mismatch: the record's bytes give %08x, its CRC field holds %08x", got, crc)
	}
	return nil
}

// Decode decodes a record, msgpack or (before version 1) JSON.
func Decode(v []byte) (Ledger, error) {
	var m Ledger
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, &m); err != nil {
			return m, err
		}
		// Before version 1, Head and Count were written only at durable
		// points (CreateLedger and Import after their sync, Open after
		// recovery, Close after the segments' last sync): a witness
		// without a location.
		if m.Count != 0 {
			m.Witness = segment.Head{ID: m.Head, Seq: m.Count}
		}
		m.Legacy = true
		return m, nil
	}
	var r Record
	if err := msgpack.Unmarshal(v, &r); err != nil {
		return m, err
	}
	if r.Version > Version {
		// Before the CRC: a newer version may place it elsewhere.
		return m, fmt.Errorf("record version %d, written by a newer annal (this one reads up to version %d)", r.Version, Version)
	}
	if err := checkCRC(v, r.CRC); err != nil {
		return m, err
	}
	switch {
	case r.Version < 1:
		return m, fmt.Errorf("record version %d is not a version", r.Version)
	case len(r.Genesis) != eventid.Size || len(r.Head) != eventid.Size:
		return m, fmt.Errorf("genesis and head IDs are %d and %d bytes, want %d", len(r.Genesis), len(r.Head), eventid.Size)
	}
	m = Ledger{Name: r.Name, ID: eventid.LedgerID(r.ID), Genesis: eventid.ID(r.Genesis), Description: r.Description,
		Actor: r.Actor, Created: r.Created.UTC(), Head: eventid.ID(r.Head), Count: r.Count, LastMicros: r.LastMicros}
	if w := r.Witness; w != nil {
		switch {
		case len(w.ID) != eventid.Size:
			return m, fmt.Errorf("witness ID is %d bytes, want %d", len(w.ID), eventid.Size)
		case w.Seq == 0:
			return m, fmt.Errorf("witness of sequence number 0")
		case w.Segment == 0 && (w.Offset != 0 || w.Size != 0):
			// Segment 0: no location (rewritten from a JSON record).
			return m, fmt.Errorf("witness #%d at segment 0 offset %d size %d", w.Seq, w.Offset, w.Size)
		case w.Segment != 0 && (w.Offset < segment.FirstOffset || w.Size <= 0 || w.Offset > math.MaxInt64-w.Size):
			return m, fmt.Errorf("witness #%d at segment %d offset %d size %d is out of range", w.Seq, w.Segment, w.Offset, w.Size)
		}
		m.Witness = segment.Head{ID: eventid.ID(w.ID), Seq: w.Seq, Loc: segment.Location{Segment: w.Segment, Offset: w.Offset, Size: w.Size}}
	}
	return m, nil
}

// Cure says what to do about a damaged metadata file at path: it is
// derived from the segments, except for the named consumers' positions.
func Cure(path string) string {
	return fmt.Sprintf("it is derived from the segments, except for the named consumers' positions: restore it from a copy (annal backup), or move it aside (mv %s %s.damaged) and the next open rebuilds it from the segments, the consumers' positions lost (annal accept-lost-positions accepts that)", path, path)
}

// Damaged is the error for a metadata file that bbolt cannot read:
// why is the cause (an error, wrapped, or a panic's value), and the
// message names the cure.
func Damaged(path string, why any) error {
	cause, ok := why.(error)
	if !ok {
		cause = errors.New(fmt.Sprint(why))
	}
	return &damagedError{fmt.Errorf("engine: metadata %s is damaged: %w; %s", path, cause, Cure(path))}
}

// damagedError is an error about a damaged metadata file: its message
// as it is, matching ErrDamaged (and what that matches, corruption.Err)
// and what it wraps.
type damagedError struct{ err error }

func (e *damagedError) Error() string        { return e.err.Error() }
func (e *damagedError) Unwrap() error        { return e.err }
func (e *damagedError) Is(target error) bool { return errors.Is(ErrDamaged, target) }

// openErr is the error of a failed bolt.Open of the metadata file at
// path: a file bbolt finds damaged is ErrDamaged with the cure. (One
// it may not open gets Open's permissionHint.)
func openErr(path string, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrVersionMismatch),
		strings.Contains(err.Error(), "file size too small"):
		return &damagedError{fmt.Errorf("engine: open metadata %s: %w; %s", path, err, Cure(path))}
	}
	return fmt.Errorf("engine: open metadata %s: %w", path, err)
}

// bucketState holds the metadata file's own state: under positionsLostKey,
// when the file was rebuilt while ledgers existed, why (the consumers'
// positions were lost with the old file; see ErrPositionsLost), until
// DB.AcceptLostPositions removes it. An annal that predates it ignores the
// bucket.
var (
	bucketState      = []byte("state")
	positionsLostKey = []byte("positions-lost")
)

// PositionsLost returns the marker of lost positions, or "".
func PositionsLost(db *bolt.DB) (why string, err error) {
	err = Tx(db, false, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketState); b != nil {
			why = string(b.Get(positionsLostKey))
		}
		return nil
	})
	return why, err
}

// ClearPositionsLost removes the marker of lost positions (a bbolt commit:
// synced before it returns).
func ClearPositionsLost(db *bolt.DB) error {
	return Tx(db, true, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketState); b != nil {
			return b.Delete(positionsLostKey)
		}
		return nil
	})
}

// Open opens the metadata file at path, creating it if it is missing,
// which must be a regular file if it exists (the caller checks: a named
// pipe would block the open for ever). lost, if not "", is why it is being rebuilt while ledgers exist: it is
// written as the marker of lost positions in the transaction that makes
// the new file, so that no crash leaves a rebuilt file without it.
func Open(path, lost string) (db *bolt.DB, err error) {
	// bbolt panics on some damaged pages (a freelist page that is not
	// one, a page that names another page): a damaged metadata file
	// must fail Open, not crash the process. A panic inside bolt.Open
	// leaves the file mapped, and so locked, until the process ends:
	// checkOpen makes it happen on a copy instead.
	if err := checkOpen(path); err != nil {
		return nil, err
	}
	var file *os.File
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				file.Close()
			}
			db, err = nil, Damaged(path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}})
	if err != nil {
		return nil, openErr(path, err)
	}
	// Written only when missing: an Open that then fails on a damaged
	// record leaves the file as it was.
	var exists bool
	if err := db.View(func(tx *bolt.Tx) error { exists = tx.Bucket(BucketLedgers) != nil; return nil }); err != nil || !exists {
		err = db.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(BucketLedgers); err != nil {
				return err
			}
			if lost == "" {
				return nil
			}
			b, err := tx.CreateBucketIfNotExists(bucketState)
			if err != nil {
				return err
			}
			return b.Put(positionsLostKey, []byte(lost))
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("engine: metadata %s: %w", path, err)
		}
	}
	return db, nil
}

// checkOpen opens a temporary copy of the metadata file at path, as
// bolt.Open opens a file for writing (reading its freelist), and returns
// the error naming path if that panics. Any other failure is left for the
// real open to report.
func checkOpen(path string) (err error) {
	b, rerr := os.ReadFile(path)
	if rerr != nil || len(b) == 0 {
		return nil
	}
	f, cerr := os.CreateTemp("", "annal-meta-check-*")
	if cerr != nil {
		return nil
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil {
		os.Remove(tmp)
		return nil
	}
	defer os.Remove(tmp)
	defer func() {
		if r := recover(); r != nil {
			err = Damaged(path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := CheckSize(tmp, path, int64(len(b))); err != nil {
		return err
	}
	if db, oerr := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second}); oerr == nil {
		db.Close()
	}
	return nil
}

// CheckSize returns an error naming path if the metadata file's pages
// (its high-water mark, which its meta page gives) run past its size, of
// which tmp is a copy: a file cut short, by an operator or a copy that
// stopped, whose pages past the end bbolt would read through its map as
// a fault (reported as a nil pointer dereference) or, opened for writing,
// extend with holes. Only the meta pages are read: bbolt's read-only open
// reads no other. Any other failure is left for the real open to report.
func CheckSize(tmp, path string, size int64) error {
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil
	}
	defer db.Close()
	var need int64
	if db.View(func(tx *bolt.Tx) error { need = tx.Size(); return nil }) != nil || need <= size {
		return nil
	}
	return Damaged(path, fmt.Sprintf("it is cut short: its pages run to byte %d, the file ends at byte %d", need, size))
}

// Load reads every ledger's record. A record that does not decode is
// ErrDamaged, naming the ledger and the cure.
func Load(db *bolt.DB) (out []Ledger, err error) {
	err = Tx(db, false, func(tx *bolt.Tx) error {
		return tx.Bucket(BucketLedgers).ForEach(func(k, v []byte) error {
			m, err := Decode(v)
			if err != nil {
				return &damagedError{fmt.Errorf("engine: metadata %s: the record of ledger %q is unreadable: %w; %s", db.Path(), k, err, Cure(db.Path()))}
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

// Put writes the records of ledgers in one transaction (a bbolt commit:
// synced before it returns), each under its ledger ID's hex.
func Put(db *bolt.DB, ms ...Ledger) (err error) {
	return Tx(db, true, func(tx *bolt.Tx) error {
		b := tx.Bucket(BucketLedgers)
		for _, m := range ms {
			v, err := encode(&m)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(m.ID.String()), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// recoverTx, deferred in a function that reads or writes the metadata
// file, turns a panic of bbolt into an error naming the file: bbolt
// panics on some damaged pages, when it reads them and when a write
// meets them (a page number out of range in the freelist), and its
// Update rolls the transaction back as the panic passes. The functions
// that call into bbolt also set debug.SetPanicOnFault meanwhile: bbolt
// reads its pages through a memory mapping, and a page beyond the end of
// a file cut short faults (SIGBUS), which would otherwise end the process.
func recoverTx(db *bolt.DB, err *error) {
	if r := recover(); r != nil {
		*err = Damaged(db.Path(), r)
	}
}

// Tx runs fn in a transaction of the metadata file (an Update with
// write set, else a View), guarded as recoverTx says.
func Tx(db *bolt.DB, write bool, fn func(*bolt.Tx) error) (err error) {
	defer recoverTx(db, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if write {
		return db.Update(fn)
	}
	return db.View(fn)
}
