package tree

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// Key is a signing key: its note signer, and its public key in the note
// verifier format ("name+hash+base64(0x01 ‖ public key)").
type Key struct {
	Signer   note.Signer
	Verifier string
}

// KeyName returns the default name of an Ed25519 key: "annal-" and the
// first 4 bytes of SHA-256 of its public key in hex.
func KeyName(pub []byte) string {
	sum := sha256.Sum256(pub)
	return "annal-" + hex.EncodeToString(sum[:4])
}

// maxKeyFile bounds what LoadOrCreateKey reads: a key line is about 100
// bytes.
const maxKeyFile = 4096

// LoadOrCreateKey reads the key file at path, or creates it (owner-only,
// 0600, synced, with its directory) with a new Ed25519 key named
// KeyName(public key) if there is none. A key file that is malformed or
// that others can read is ErrKey, and is left as it is. created says
// whether it was created.
//
// The file is one line, the note signer format:
// "PRIVATE+KEY+<name>+<key hash hex>+<base64(0x01 ‖ 32-byte seed)>".
func LoadOrCreateKey(fs vfs.FS, path string) (k Key, created bool, err error) {
	_, err = fs.Stat(path)
	switch {
	case err == nil:
		k, err := LoadKey(fs, path)
		return k, false, err
	case errors.Is(err, os.ErrNotExist):
		k, err := createKey(fs, path)
		return k, err == nil, err
	default:
		return Key{}, false, fmt.Errorf("tree: key file %s: %w", path, err)
	}
}

// LoadKey reads the key file at path, as LoadOrCreateKey does, without
// creating one: a missing file is an error matching os.ErrNotExist.
func LoadKey(fs vfs.FS, path string) (Key, error) {
	info, err := fs.Stat(path)
	switch {
	case err != nil:
		return Key{}, fmt.Errorf("tree: key file %s: %w", path, err)
	case info.IsDir():
		return Key{}, fmt.Errorf("%w: %s is a directory", ErrKey, path)
	case !info.Mode().IsRegular():
		// A named pipe would block the open for ever.
		return Key{}, fmt.Errorf("%w: %s is not a regular file (%s)", ErrKey, path, info.Mode().Type())
	case info.Mode().Perm()&0o077 != 0 && !memFS(fs):
		return Key{}, fmt.Errorf("%w: %s has mode %04o: others can read the private key (chmod 600 it)", ErrKey, path, info.Mode().Perm())
	}
	return loadKey(fs, path)
}

func loadKey(fs vfs.FS, path string) (Key, error) {
	file, err := fs.Open(path)
	if err != nil {
		return Key{}, fmt.Errorf("tree: open key file %s: %w", path, err)
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxKeyFile+1))
	if err != nil {
		return Key{}, fmt.Errorf("tree: read key file %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return Key{}, fmt.Errorf("%w: %s: more than %d bytes, not a key file", ErrKey, path, maxKeyFile)
	}
	k, err := parseKey(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		return Key{}, fmt.Errorf("%w: %s: %v", ErrKey, path, err)
	}
	return k, nil
}

// parseKey parses a signer key in the note format.
func parseKey(skey string) (Key, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return Key{}, fmt.Errorf("not a PRIVATE+KEY+name+hash+key line: %v", err)
	}
	// note.NewSigner has checked the fields; derive the public key.
	b64 := strings.SplitN(skey, "+", 5)[4] // base64 may hold '+'
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return Key{}, errors.New("not an Ed25519 key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(s.Name(), pub)
	if err != nil {
		return Key{}, err
	}
	return Key{Signer: s, Verifier: vkey}, nil
}

// signerKey returns the note signer line of an Ed25519 key.
func signerKey(name string, priv ed25519.PrivateKey) (string, error) {
	pub := priv.Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", err
	}
	// vkey is name+hash+key: take the hash from it.
	hash := strings.SplitN(vkey, "+", 3)[1]
	return "PRIVATE+KEY+" + name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, priv.Seed()...)), nil
}

// createKey writes a new key at path: to a temporary file made private
// before it holds the key, synced, renamed over path, the directory
// synced.
func createKey(fs vfs.FS, path string) (Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("tree: generate key: %w", err)
	}
	skey, err := signerKey(KeyName(priv.Public().(ed25519.PublicKey)), priv)
	if err != nil {
		return Key{}, fmt.Errorf("tree: generate key: %w", err)
	}
	k, err := parseKey(skey)
	if err != nil {
		return Key{}, fmt.Errorf("tree: generate key: %w", err)
	}
	dir := fs.PathDir(path)
	if _, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := fs.MkdirAll(dir, 0o700); err != nil {
			return Key{}, fmt.Errorf("tree: create directory %s: %w", dir, err)
		}
		// The new directory's entry is durable once its parent is
		// synced (a directory made with missing parents: only the last
		// level is synced here).
		if err := syncDir(fs, fs.PathDir(dir)); err != nil {
			return Key{}, err
		}
	}
	tmp := path + ".tmp"
	file, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return Key{}, fmt.Errorf("tree: create key file %s: %w", tmp, err)
	}
	fail := func(err error) (Key, error) {
		file.Close()
		fs.Remove(tmp)
		return Key{}, err
	}
	if err := private(fs, tmp); err != nil {
		return fail(err)
	}
	if _, err := file.Write([]byte(skey + "\n")); err != nil {
		return fail(fmt.Errorf("tree: write key file %s: %w", tmp, err))
	}
	if err := file.Sync(); err != nil {
		return fail(fmt.Errorf("tree: sync key file %s: %w", tmp, err))
	}
	if err := file.Close(); err != nil {
		fs.Remove(tmp)
		return Key{}, fmt.Errorf("tree: close key file %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, path); err != nil {
		fs.Remove(tmp)
		return Key{}, fmt.Errorf("tree: rename key file %s to %s: %w", tmp, path, err)
	}
	if err := syncDir(fs, dir); err != nil {
		return Key{}, err
	}
	return k, nil
}

// private makes the file at path owner-only (0600). vfs.FS has no Chmod:
// a file of the disk (vfs.Default, or an FS wrapping it) is chmod-ed with
// os.Chmod; a memory FS's files are nobody else's; any other file system
// must create files that others cannot read.
func private(fs vfs.FS, path string) error {
	info, err := fs.Stat(path)
	if err != nil {
		return fmt.Errorf("tree: stat %s: %w", path, err)
	}
	if info.Mode().Perm()&0o077 == 0 || memFS(fs) {
		return nil
	}
	if vfs.Root(fs) == vfs.Default {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("tree: chmod %s: %w", path, err)
		}
		return nil
	}
	return fmt.Errorf("%w: %s: created with mode %04o, others can read it, and the file system cannot chmod it", ErrKey, path, info.Mode().Perm())
}

// memFS says whether fs is a memory file system, whose files have no
// modes (vfs.MemFS says 0755 of every file): nobody else can read them.
func memFS(fs vfs.FS) bool {
	_, ok := vfs.Root(fs).(*vfs.MemFS)
	return ok
}

// SignerKey adapts a crypto.Signer holding an Ed25519 key (a KMS, an HSM)
// to a Key; name "" means KeyName(public key). Any other key is ErrKey.
func SignerKey(s crypto.Signer, name string) (Key, error) {
	if s == nil {
		return Key{}, fmt.Errorf("%w: no signer", ErrKey)
	}
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return Key{}, fmt.Errorf("%w: the signer's public key is a %T, not an Ed25519 key", ErrKey, s.Public())
	}
	if name == "" {
		name = KeyName(pub)
	}
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err == nil {
		_, err = note.NewVerifier(vkey) // checks the name
	}
	if err != nil {
		return Key{}, fmt.Errorf("%w: key name %q: %v", ErrKey, name, err)
	}
	hash, err := strconv.ParseUint(strings.SplitN(vkey, "+", 3)[1], 16, 32)
	if err != nil {
		return Key{}, fmt.Errorf("%w: verifier key %q: %v", ErrKey, vkey, err)
	}
	return Key{Signer: &cryptoSigner{name: name, hash: uint32(hash), pub: pub, s: s}, Verifier: vkey}, nil
}

// cryptoSigner is a note.Signer over a crypto.Signer.
type cryptoSigner struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
	s    crypto.Signer
}

func (c *cryptoSigner) Name() string    { return c.name }
func (c *cryptoSigner) KeyHash() uint32 { return c.hash }

// Sign signs msg (pure Ed25519), and checks the signature: a remote
// signer that returns a wrong one must not produce checkpoints that
// nobody can verify.
func (c *cryptoSigner) Sign(msg []byte) ([]byte, error) {
	sig, err := c.s.Sign(rand.Reader, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("tree: sign with key %s: %w", c.name, err)
	}
	if !ed25519.Verify(c.pub, msg, sig) {
		return nil, fmt.Errorf("%w: the signer's signature does not verify with its public key %s", ErrKey, c.name)
	}
	return sig, nil
}

// NewVerifier returns the note verifier of a key in the verifier format.
func NewVerifier(vkey string) (note.Verifier, error) { return note.NewVerifier(vkey) }
