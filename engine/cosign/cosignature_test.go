package cosign

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/annal-db/annal/engine/tree"
	"golang.org/x/mod/sumdb/note"
)

// TestCosignatureWorkedExample: the worked example of docs/format.md
// §9.8 (the test seed 00 01 … 1f, name witness.example/w1, time
// 1679315147, the checkpoint of §9.3) is what the code produces, and the
// cosigned note verifies with both keys (its signature line checked
// against an independent Ed25519 implementation when it was written).
func TestCosignatureWorkedExample(t *testing.T) {
	const (
		vkey = "witness.example/w1+e75f6532+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
		skey = "PRIVATE+KEY+witness.example/w1+e75f6532+BAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"
		body = "annal-56475aa7/e95bff80\n2\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwE=\n"
		logV = "annal-56475aa7+4f779702+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
		logL = "\u2014 annal-56475aa7 T3eXAkJgQcwS5PFbY/FYhIgfsQYV0wczaaPsAUaIUh4m6xqrCBD5NlhfPZ25RYD+t+WEl234f3ZMl7DU4RIzVvdDqQg=\n"
		line = "\u2014 witness.example/w1 519lMgAAAABkGFDLbKNuFEq42jtzB16RetsPYoBEZuGlNuR4nFrtf3kOTpKaPlF0/FrAzXi3NR3Xs4l7KOtvfHIawd8smrj1Fy83Dg==\n"
	)
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	k := &Key{name: "witness.example/w1", priv: priv, now: func() time.Time { return time.Unix(1679315147, 0) }}
	k.hash = keyID(k.name, priv.Public().(ed25519.PublicKey))
	if k.VerifierKey() != vkey || k.PrivateKey() != skey {
		t.Fatalf("keys:\n%s\n%s\nwant\n%s\n%s", k.VerifierKey(), k.PrivateKey(), vkey, skey)
	}
	got, err := k.cosignatureLine([]byte(body))
	if err != nil || string(got) != line {
		t.Fatalf("cosignature line %q, %v; want %q", got, err, line)
	}
	msg := []byte(body + "\n" + logL + line)
	lv, err := tree.NewVerifier(logV)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.OpenCheckpoint(msg, lv); err != nil {
		t.Fatalf("the cosigned checkpoint with the log's key: %v", err)
	}
	wv, err := NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(msg, note.VerifierList(wv)); err != nil {
		t.Fatalf("the cosigned checkpoint with the witness's key: %v", err)
	}
	p, err := NewPolicy([]string{vkey}, 1)
	if err != nil {
		t.Fatal(err)
	}
	found, err := p.Check(msg)
	if err != nil || len(found) != 1 || found[0].Time.Unix() != 1679315147 {
		t.Fatalf("policy: %+v, %v", found, err)
	}
}
