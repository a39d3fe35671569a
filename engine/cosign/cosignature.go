package cosign

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Errors of the package, matchable with errors.Is.
var (
	// ErrKey: a witness key (private or verifier) that is malformed or
	// not an Ed25519 cosignature/v1 key (type 0x04).
	ErrKey = errors.New("cosign: bad witness key")
	// ErrQuorum: a checkpoint without the cosignatures a policy asks for.
	ErrQuorum = errors.New("cosign: too few tlog witness cosignatures")
	// ErrRefused: a witness did not cosign (its answer says why).
	ErrRefused = errors.New("cosign: the tlog witness refused")
)

// algCosignatureV1 is the signature type of Ed25519 cosignature/v1 keys
// (C2SP tlog-cosignature), the byte before the public key in a vkey and
// in the key ID's hash.
const algCosignatureV1 = 0x04

// sigSize is a cosignature's size after the key ID: the timestamp and the
// Ed25519 signature.
const sigSize = 8 + ed25519.SignatureSize

// Key is a tlog witness's cosigning key: a note.Signer whose signatures
// are cosignature/v1 timestamped signatures.
type Key struct {
	name string
	hash uint32
	priv ed25519.PrivateKey
	// now gives the cosignatures' time (time.Now if nil).
	now func() time.Time
}

// keyID returns the key ID of an Ed25519 cosignature/v1 key.
func keyID(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algCosignatureV1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// checkName checks a key name as signed-note wants it: not empty, valid
// UTF-8, no '+', no space or other control character.
func checkName(name string) error {
	if name == "" || !utf8.ValidString(name) {
		return fmt.Errorf("%w: name %q: empty or not UTF-8", ErrKey, name)
	}
	for _, r := range name {
		if r <= ' ' || r == '+' || r == 0x7f || r == 0x2014 {
			return fmt.Errorf("%w: name %q holds %q", ErrKey, name, r)
		}
	}
	return nil
}

// GenerateKey returns a new key named name; "" names it
// "annal-witness-" and the first 4 bytes of SHA-256 of its public key in
// hex.
func GenerateKey(name string) (*Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cosign: generate a key: %w", err)
	}
	if name == "" {
		sum := sha256.Sum256(pub)
		name = "annal-witness-" + hex.EncodeToString(sum[:4])
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &Key{name: name, hash: keyID(name, pub), priv: priv}, nil
}

// ParseKey parses a private key line:
// "PRIVATE+KEY+name+<key ID hex>+base64(0x04 ‖ 32-byte seed)".
func ParseKey(skey string) (*Key, error) {
	f := strings.SplitN(skey, "+", 5)
	if len(f) != 5 || f[0] != "PRIVATE" || f[1] != "KEY" {
		return nil, fmt.Errorf("%w: not a PRIVATE+KEY+name+hash+key line", ErrKey)
	}
	name := f[2]
	if err := checkName(name); err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(f[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != algCosignatureV1 {
		return nil, fmt.Errorf("%w: key %s is not base64 of 0x04 and a 32-byte Ed25519 seed", ErrKey, name)
	}
	priv := ed25519.NewKeyFromSeed(raw[1:])
	k := &Key{name: name, hash: keyID(name, priv.Public().(ed25519.PublicKey)), priv: priv}
	if f[3] != fmt.Sprintf("%08x", k.hash) {
		return nil, fmt.Errorf("%w: key %s: key ID %s, its key's is %08x", ErrKey, name, f[3], k.hash)
	}
	return k, nil
}

// PrivateKey returns the key's private key line (ParseKey reads it).
func (k *Key) PrivateKey() string {
	return fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", k.name, k.hash, base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, k.priv.Seed()...)))
}

// VerifierKey returns the key's verifier key (vkey):
// "name+<key ID hex>+base64(0x04 ‖ public key)".
func (k *Key) VerifierKey() string {
	pub := k.priv.Public().(ed25519.PublicKey)
	return fmt.Sprintf("%s+%08x+%s", k.name, k.hash, base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, pub...)))
}

// Name returns the key's name (note.Signer).
func (k *Key) Name() string { return k.name }

// KeyHash returns the key's ID (note.Signer).
func (k *Key) KeyHash() uint32 { return k.hash }

// Sign returns the timestamped cosignature/v1 signature of the note text
// msg (note.Signer): the time now in POSIX seconds, big-endian, and the
// Ed25519 signature of the cosignature/v1 message.
func (k *Key) Sign(msg []byte) ([]byte, error) {
	now := time.Now
	if k.now != nil {
		now = k.now
	}
	t := now().Unix()
	if t <= 0 {
		return nil, fmt.Errorf("cosign: the clock says %v: a cosignature's time is after 1970", now())
	}
	sig := make([]byte, 8, sigSize)
	binary.BigEndian.PutUint64(sig, uint64(t))
	return append(sig, ed25519.Sign(k.priv, signedMessage(uint64(t), msg))...), nil
}

// signedMessage is the message a cosignature/v1 signs: its header line,
// its time line and the checkpoint's body.
func signedMessage(t uint64, text []byte) []byte {
	m := make([]byte, 0, 40+len(text))
	m = append(m, "cosignature/v1\ntime "...)
	m = strconv.AppendUint(m, t, 10)
	m = append(m, '\n')
	return append(m, text...)
}

// verifier is the note.Verifier of a cosignature/v1 key.
type verifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
	vkey string
}

// NewVerifier returns the note.Verifier of a witness's verifier key
// ("name+<key ID>+base64(0x04 ‖ public key)"); any other key is ErrKey.
// Its Verify checks a cosignature/v1 signature (time ‖ Ed25519
// signature) of a note's text.
func NewVerifier(vkey string) (note.Verifier, error) {
	v, err := parseVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func parseVerifier(vkey string) (*verifier, error) {
	f := strings.SplitN(vkey, "+", 3)
	if len(f) != 3 {
		return nil, fmt.Errorf("%w: %q is not a verifier key name+hash+base64", ErrKey, vkey)
	}
	name := f[0]
	if err := checkName(name); err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(f[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: verifier key %s: not base64 of a type byte and a 32-byte Ed25519 public key", ErrKey, name)
	}
	if raw[0] != algCosignatureV1 {
		return nil, fmt.Errorf("%w: verifier key %s is of type 0x%02x, not a cosignature/v1 key (0x04): a log's key is not a witness's", ErrKey, name, raw[0])
	}
	pub := ed25519.PublicKey(raw[1:])
	v := &verifier{name: name, hash: keyID(name, pub), pub: pub, vkey: vkey}
	if f[1] != fmt.Sprintf("%08x", v.hash) {
		return nil, fmt.Errorf("%w: verifier key %s: key ID %s, its key's is %08x", ErrKey, name, f[1], v.hash)
	}
	return v, nil
}

func (v *verifier) Name() string    { return v.name }
func (v *verifier) KeyHash() uint32 { return v.hash }

// Verify checks the cosignature sig (after the key ID) of the note text
// msg. A zero time, or one above 2^63-1, does not verify.
func (v *verifier) Verify(msg, sig []byte) bool {
	if len(sig) != sigSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t == 0 || t > 1<<63-1 {
		return false
	}
	return ed25519.Verify(v.pub, signedMessage(t, msg), sig[8:])
}

// sigLine is one signature line of a signed note.
type sigLine struct {
	name string
	hash uint32
	sig  []byte // after the key ID
	line string // as written, without its newline
}

// splitNote splits a signed note into its text (ending in a newline) and
// its signature lines. A note that is not one (no blank line before the
// signatures, a line that does not begin with "— ", a signature that is
// not base64 of a key ID and more) is an error.
func splitNote(msg []byte) (text []byte, sigs []sigLine, err error) {
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 || len(msg) == 0 || msg[len(msg)-1] != '\n' {
		return nil, nil, errors.New("not a signed note (its text, a blank line, signature lines each ending in a newline)")
	}
	text = msg[:i+1]
	for n, line := range strings.Split(string(msg[i+2:len(msg)-1]), "\n") {
		s, err := parseSigLine(line)
		if err != nil {
			return nil, nil, fmt.Errorf("signature line %d: %w", n+1, err)
		}
		sigs = append(sigs, s)
	}
	return text, sigs, nil
}

// parseSigLine parses "— name base64(key ID ‖ signature)".
func parseSigLine(line string) (sigLine, error) {
	rest, ok := strings.CutPrefix(line, "\u2014 ")
	if !ok {
		return sigLine{}, errors.New("does not begin with \"\u2014 \"")
	}
	name, b64, ok := strings.Cut(rest, " ")
	if !ok || name == "" {
		return sigLine{}, errors.New("not \"\u2014 name signature\"")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(raw) < 5 {
		return sigLine{}, fmt.Errorf("the signature of %s is not base64 of a key ID and a signature", name)
	}
	return sigLine{name: name, hash: binary.BigEndian.Uint32(raw), sig: raw[4:], line: line}, nil
}

// cosignatureLine returns the signature line of k's cosignature of the
// checkpoint body text, with its newline.
func (k *Key) cosignatureLine(text []byte) ([]byte, error) {
	sig, err := k.Sign(text)
	if err != nil {
		return nil, err
	}
	raw := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(sig)), k.hash)
	raw = append(raw, sig...)
	line := append([]byte("\u2014 "+k.name+" "), base64.StdEncoding.EncodeToString(raw)...)
	return append(line, '\n'), nil
}

// cosignatureTime returns the time of the signature line s if it is v's
// cosignature of the note text (ok false if it is not one, or does not
// verify).
func cosignatureTime(v *verifier, text []byte, s sigLine) (time.Time, bool) {
	if s.name != v.name || s.hash != v.hash || !v.Verify(text, s.sig) {
		return time.Time{}, false
	}
	return time.Unix(int64(binary.BigEndian.Uint64(s.sig)), 0).UTC(), true
}
