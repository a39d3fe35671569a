package cosign

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestPolicyCountsAWitnessOnce: a policy counts each witness once: two
// cosignature lines by one key are one cosignature, and a witness's
// public key given again under another name is refused (a cosignature/v1
// does not sign the witness's name, so the line relabelled with the other
// name and its key ID verifies too, and would count twice).
func TestPolicyCountsAWitnessOnce(t *testing.T) {
	k, text, msg := cosignedNote(t)
	line, err := k.cosignatureLine([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateKey("witness.example/w2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy([]string{k.VerifierKey(), other.VerifierKey()}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if found, err := p.Check(append(msg, line...)); !errors.Is(err, ErrQuorum) || len(found) != 1 {
		t.Errorf("two cosignature lines by one witness, quorum 2: %d found, %v; want 1 and ErrQuorum", len(found), err)
	}

	// The same public key named witness.example/w3: its vkey and the
	// cosignature line relabelled.
	v, _ := parseVerifier(k.VerifierKey())
	alias := "witness.example/w3"
	aliasHash := keyID(alias, v.pub)
	aliasKey := fmt.Sprintf("%s+%08x+%s", alias, aliasHash, base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, v.pub...)))
	_, sigs, err := splitNote(msg)
	if err != nil {
		t.Fatal(err)
	}
	raw := binary.BigEndian.AppendUint32(nil, aliasHash)
	relabelled := "\u2014 " + alias + " " + base64.StdEncoding.EncodeToString(append(raw, sigs[0].sig...)) + "\n"
	pa, err := NewPolicy([]string{aliasKey}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pa.Check(append(msg, relabelled...)); err != nil {
		t.Fatalf("the relabelled cosignature does not verify under the alias (%v): the premise of this test is wrong", err)
	}
	_, err = NewPolicy([]string{k.VerifierKey(), aliasKey}, 2)
	if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "one public key under two names") {
		t.Fatalf("a policy of one public key under two names: %v, want ErrKey saying so", err)
	}
	if _, err := NewPolicy([]string{k.VerifierKey(), k.VerifierKey()}, 1); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a policy of one key given twice: %v, want ErrKey saying so", err)
	}
}
