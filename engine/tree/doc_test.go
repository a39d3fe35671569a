package tree

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestFormatDocExample recomputes docs/format.md section 9.3's worked
// example, the signed size-2 checkpoint of the two-event ledger made with
// the test key of seed 00..1f, and checks that the document's text is
// byte for byte what the code produces; then checks the example's parts
// from first principles (key name, key hash, Ed25519 signature).
func TestFormatDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	k := testKey(t)
	rootHex := "24f35e80d8f859c04d60726d0360c4ebc34055b96bc190c71e6e10269d513b01" // §9.2
	var root Hash
	if _, err := hex.Decode(root[:], []byte(rootHex)); err != nil {
		t.Fatal(err)
	}
	msg, err := Sign(Checkpoint{Origin: Origin(k.Signer.Name(), 0xe95bff80), Size: 2, Root: root}, k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"```\n" + k.Verifier + "\n```\n",
		"```\n" + string(msg) + "```\n",
		"its name is `" + k.Signer.Name() + "`",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/format.md §9.3 does not hold, byte for byte:\n%s", want)
		}
	}

	// From first principles.
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	name := "annal-" + hex.EncodeToString(sum[:4])
	kh := sha256.Sum256(append([]byte(name+"\n\x01"), pub...))
	vkey := name + "+" + hex.EncodeToString(kh[:4]) + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, pub...))
	if vkey != k.Verifier {
		t.Fatalf("verifier key %s, from first principles %s", k.Verifier, vkey)
	}
	body := name + "/e95bff80\n2\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
	sigLine := strings.TrimSuffix(strings.TrimPrefix(string(msg), body+"\n"), "\n")
	b64, ok := strings.CutPrefix(sigLine, "\u2014 "+name+" ")
	if !ok {
		t.Fatalf("signed note %q: no signature line by %s after the body", msg, name)
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sig) != 68 || binary.BigEndian.Uint32(sig) != binary.BigEndian.Uint32(kh[:4]) {
		t.Fatalf("signature line %q", sigLine)
	}
	if !ed25519.Verify(pub, []byte(body), sig[4:]) {
		t.Fatal("the example's signature does not verify over the body")
	}
}
