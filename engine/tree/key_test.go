package tree

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// TestLoadOrCreateKey: a key is created private, reloads as the same key,
// and signs checkpoints that its verifier opens.
func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "signing.key")
	k, created, err := LoadOrCreateKey(vfs.Default, path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKey = %v, created %v", err, created)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", info.Mode().Perm())
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "PRIVATE+KEY+"+k.Signer.Name()+"+") || !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("key file %q", b)
	}
	if !strings.HasPrefix(k.Signer.Name(), "annal-") || len(k.Signer.Name()) != len("annal-")+8 {
		t.Fatalf("key name %q", k.Signer.Name())
	}
	k2, created, err := LoadOrCreateKey(vfs.Default, path)
	if err != nil || created {
		t.Fatalf("reload = %v, created %v", err, created)
	}
	if k2.Verifier != k.Verifier || k2.Signer.Name() != k.Signer.Name() || k2.Signer.KeyHash() != k.Signer.KeyHash() {
		t.Fatalf("reloaded key %s differs from %s", k2.Verifier, k.Verifier)
	}
	v, err := NewVerifier(k.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	cp := Checkpoint{Origin: Origin(k.Signer.Name(), 0xe95bff80), Size: 5, Root: LeafHash([]byte("x"))}
	msg, err := Sign(cp, k2.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenCheckpoint(msg, v); err != nil || got != cp {
		t.Fatalf("OpenCheckpoint = %+v, %v; want %+v", got, err, cp)
	}
	// The verifier key's name is the default name of the public key.
	pub := publicKey(t, k.Verifier)
	if KeyName(pub) != k.Signer.Name() {
		t.Fatalf("KeyName(public key) = %s, key named %s", KeyName(pub), k.Signer.Name())
	}
}

func publicKey(t *testing.T, vkey string) ed25519.PublicKey {
	t.Helper()
	parts := strings.SplitN(vkey, "+", 3)
	raw, err := base64Std(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		t.Fatalf("verifier key %q", vkey)
	}
	return ed25519.PublicKey(raw[1:])
}

// TestKeyRefused: a key file that others can read, or that is malformed,
// is ErrKey and is left untouched.
func TestKeyRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "signing.key")
	if _, _, err := LoadOrCreateKey(vfs.Default, path); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateKey(vfs.Default, path)
		if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), path) {
			t.Fatalf("mode %04o: %v, want ErrKey naming the file", mode, err)
		}
	}
	os.Chmod(path, 0o600)
	for _, bad := range []string{
		"",
		"garbage\n",
		strings.Replace(string(good), "PRIVATE", "PUBLIC", 1),
		string(good[:len(good)-5]) + "\n",                    // truncated key
		strings.Replace(string(good), "annal-", "annax-", 1), // name does not match the hash
		string(good) + string(good),                          // two lines
		strings.Repeat("x", 5000),                            // huge
		strings.TrimSuffix(string(good), "\n") + " \n",       // trailing space
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		_, created, err := LoadOrCreateKey(vfs.Default, path)
		if !errors.Is(err, ErrKey) || created {
			t.Fatalf("key file %q: %v, created %v; want ErrKey", bad, err, created)
		}
		if b, _ := os.ReadFile(path); string(b) != bad {
			t.Fatalf("malformed key file changed to %q", b)
		}
	}
	// On a memory FS (modes 0) the key is created and reloaded.
	fs := vfs.NewMem()
	k, created, err := LoadOrCreateKey(fs, "d/signing.key")
	if err != nil || !created {
		t.Fatal(err)
	}
	k2, _, err := LoadOrCreateKey(fs, "d/signing.key")
	if err != nil || k2.Verifier != k.Verifier {
		t.Fatalf("memory FS reload: %v", err)
	}
}

// TestSignerKey: an ed25519.PrivateKey as a crypto.Signer signs
// checkpoints that open with its verifier, the same bytes as the note
// signer of the same key; an RSA key is refused.
func TestSignerKey(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, 32)
	priv := ed25519.NewKeyFromSeed(seed)
	k, err := SignerKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if k.Signer.Name() != KeyName(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("name %s", k.Signer.Name())
	}
	skey, err := signerKey(k.Signer.Name(), priv)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	if ns.KeyHash() != k.Signer.KeyHash() {
		t.Fatalf("key hash %08x, note's %08x", k.Signer.KeyHash(), ns.KeyHash())
	}
	cp := Checkpoint{Origin: Origin(k.Signer.Name(), 1), Size: 1, Root: LeafHash(nil)}
	a, err := Sign(cp, k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Sign(cp, ns)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("crypto.Signer note\n%s\ndiffers from the note signer's\n%s", a, b)
	}
	v, _ := NewVerifier(k.Verifier)
	if _, err := OpenCheckpoint(a, v); err != nil {
		t.Fatal(err)
	}
	named, err := SignerKey(priv, "my-log")
	if err != nil || named.Signer.Name() != "my-log" || !strings.HasPrefix(named.Verifier, "my-log+") {
		t.Fatalf("named key: %v %+v", err, named)
	}
	if _, err := SignerKey(priv, "bad name"); !errors.Is(err, ErrKey) {
		t.Fatalf("name with a space: %v, want ErrKey", err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SignerKey(rsaKey, ""); !errors.Is(err, ErrKey) {
		t.Fatalf("RSA key: %v, want ErrKey", err)
	}
	if _, err := SignerKey(nil, ""); !errors.Is(err, ErrKey) {
		t.Fatalf("nil signer: %v, want ErrKey", err)
	}
	// A signer that signs wrongly is caught before the note is made.
	if _, err := Sign(cp, &cryptoSigner{name: k.Signer.Name(), hash: k.Signer.KeyHash(), pub: priv.Public().(ed25519.PublicKey), s: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))}); !errors.Is(err, ErrKey) {
		t.Fatalf("wrong signer: %v, want ErrKey", err)
	}
}
