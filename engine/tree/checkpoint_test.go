package tree

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

func base64Std(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

// testKey is the key of docs/format.md's worked example: seed bytes
// 0x00..0x1f, default name.
func testKey(t testing.TB) Key {
	t.Helper()
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	skey, err := signerKey(KeyName(priv.Public().(ed25519.PublicKey)), priv)
	if err != nil {
		t.Fatal(err)
	}
	k, err := parseKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseCheckpoint(t *testing.T) {
	root := "JPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROwE="
	good := "annal-1f2e3d4c/e95bff80\n2\n" + root + "\n"
	c, err := ParseCheckpoint([]byte(good))
	if err != nil || c.Origin != "annal-1f2e3d4c/e95bff80" || c.Size != 2 || base64.StdEncoding.EncodeToString(c.Root[:]) != root {
		t.Fatalf("ParseCheckpoint = %+v, %v", c, err)
	}
	if string(c.Text()) != good {
		t.Fatalf("Text = %q", c.Text())
	}
	if c, err := ParseCheckpoint([]byte(good + "ext one\nother-ext\n")); err != nil || c.Size != 2 {
		t.Fatalf("with extension lines: %+v, %v", c, err)
	}
	if c, err := ParseCheckpoint([]byte("o\n18446744073709551615\n" + root + "\n")); err != nil || c.Size != 1<<64-1 {
		t.Fatalf("max size: %+v, %v", c, err)
	}
	// The root with its last character's unused bits set decodes to the
	// same bytes leniently.
	lenient := root[:42] + "F="
	if b, err := base64.StdEncoding.DecodeString(lenient); err != nil || base64.StdEncoding.EncodeToString(b) != root {
		t.Fatalf("test assumption: %q decodes leniently to the root (%v)", lenient, err)
	}
	for _, bad := range []string{
		"",
		"o\n2\n" + root,                           // no final newline
		"o\n2\n",                                  // no root
		"\n2\n" + root + "\n",                     // empty origin
		"o o\n2\n" + root + "\n",                  // space in origin
		"o+k\n2\n" + root + "\n",                  // '+' in origin
		"o\t\n2\n" + root + "\n",                  // tab in origin
		"o\n02\n" + root + "\n",                   // leading zero
		"o\n+2\n" + root + "\n",                   // sign
		"o\n-2\n" + root + "\n",                   // negative
		"o\n\n" + root + "\n",                     // empty size
		"o\n 2\n" + root + "\n",                   // space
		"o\n18446744073709551616\n" + root + "\n", // overflows u64
		"o\n2\n" + root[:43] + "\n",               // root without padding
		"o\n2\n" + lenient + "\n",                 // non-canonical base64
		"o\n2\nJPNegNj4WcBNYHJtA2DE68NAVblrwZDHHm4QJp1ROw==\n", // 31 bytes
		"o\n2\n" + strings.ReplaceAll(root, "N", "_") + "\n",   // URL alphabet
		"o\n2\n" + root + "\n\n",                               // empty extension line
		"o\n2\n" + root + "\r\n",                               // CR
		"o\xff\n2\n" + root + "\n",                             // not UTF-8
	} {
		if _, err := ParseCheckpoint([]byte(bad)); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("ParseCheckpoint(%q) = %v, want ErrCheckpoint", bad, err)
		}
	}
}

// TestOpenCheckpoint: a note signed by another key names the key
// expected and the signers found; a changed note never opens.
func TestOpenCheckpoint(t *testing.T) {
	k := testKey(t)
	v, err := NewVerifier(k.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	cp := Checkpoint{Origin: Origin(k.Signer.Name(), 0xe95bff80), Size: 2, Root: LeafHash([]byte("r"))}
	msg, err := Sign(cp, k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	skey, _, err := note.GenerateKey(randReader{}, "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	someone, _ := note.NewSigner(skey)
	msg2, _ := Sign(cp, someone)
	_, err = OpenCheckpoint(msg2, v)
	if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), k.Signer.Name()) || !strings.Contains(err.Error(), "someone-else+") {
		t.Fatalf("note signed by another key: %v", err)
	}
	for i := range msg {
		for _, x := range []byte{1, 2, 4, 0x20, 0x80} {
			m := bytes.Clone(msg)
			m[i] ^= x
			if c, err := OpenCheckpoint(m, v); err == nil {
				t.Fatalf("byte %d ^ %#x: note opened as %+v:\n%s", i, x, c, m)
			}
		}
	}
	// The signature's last base64 character before the padding has 2
	// unused bits: note.Open decodes the variants to the same signature
	// and accepts them; OpenCheckpoint refuses all but the canonical one.
	sigLine := msg[bytes.LastIndex(msg[:len(msg)-1], []byte("\n"))+1:]
	last := len(msg) - len(sigLine) + bytes.IndexByte(sigLine, '=') - 1
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	c := strings.IndexByte(alphabet, msg[last])
	for d := 1; d <= 3; d++ {
		m := bytes.Clone(msg)
		m[last] = alphabet[c^d]
		if _, err := note.Open(m, note.VerifierList(v2(t, k))); err != nil {
			t.Fatalf("test assumption: note.Open refuses the variant %q: %v", m, err)
		}
		if _, err := OpenCheckpoint(m, v2(t, k)); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("signature with unused bits %d set: %v, want ErrCheckpoint", d, err)
		}
	}
	for _, origin := range []string{"bad origin", "a\n5", ""} {
		if _, err := Sign(Checkpoint{Origin: origin, Size: 1}, k.Signer); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("signing origin %q: %v", origin, err)
		}
	}
	if _, err := OpenCheckpoint(msg, nil); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("nil verifier: %v", err)
	}
}

func v2(t *testing.T, k Key) note.Verifier {
	v, err := NewVerifier(k.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type randReader struct{}

func (randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i * 7)
	}
	return len(p), nil
}

// TestOpenCheckpointRefusesSecondSignatureLine: note.Open verifies the
// first line by a key and skips the others by the same name and hash; a
// bogus (or repeated) second line by the trusted key must not pass, while
// a line by an unknown key is left alone.
func TestOpenCheckpointRefusesSecondSignatureLine(t *testing.T) {
	k := testKey(t)
	v := v2(t, k)
	cp := Checkpoint{Origin: Origin(k.Signer.Name(), 0xe95bff80), Size: 2, Root: LeafHash([]byte("r"))}
	msg, err := Sign(cp, k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	sigLine := msg[bytes.LastIndex(msg[:len(msg)-1], []byte("\n"))+1:]
	sig, err := base64.StdEncoding.DecodeString(strings.Fields(string(sigLine))[2])
	if err != nil {
		t.Fatal(err)
	}
	bogus := bytes.Clone(sig)
	bogus[10] ^= 1
	line := func(sig []byte) string {
		return "\u2014 " + k.Signer.Name() + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
	}
	for name, m := range map[string][]byte{
		"bogus second line": append(bytes.Clone(msg), line(bogus)...),
		"repeated line":     append(bytes.Clone(msg), sigLine...),
	} {
		if _, err := note.Open(m, note.VerifierList(v)); err != nil {
			t.Fatalf("%s: test assumption: note.Open refuses it: %v", name, err)
		}
		if _, err := OpenCheckpoint(m, v); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "signature line 2") {
			t.Fatalf("%s: OpenCheckpoint = %v, want ErrCheckpoint naming signature line 2", name, err)
		}
	}
	skey, _, err := note.GenerateKey(randReader{}, "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	someone, _ := note.NewSigner(skey)
	cosigned, err := note.Sign(&note.Note{Text: string(cp.Text())}, k.Signer, someone)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := OpenCheckpoint(cosigned, v); err != nil || c != cp {
		t.Fatalf("cosigned by an unknown key: %+v, %v", c, err)
	}
}

// TestParseCheckpointGivenASignedNote: ParseCheckpoint given a whole
// signed note (what a checkpoint file holds) fails with an error that
// says to give it to OpenCheckpoint, and its body alone parses.
func TestParseCheckpointGivenASignedNote(t *testing.T) {
	k := testKey(t)
	cp := Checkpoint{Origin: Origin(k.Signer.Name(), 0xe95bff80), Size: 2, Root: LeafHash([]byte("r"))}
	msg, err := Sign(cp, k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCheckpoint(msg); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "OpenCheckpoint") {
		t.Fatalf("a signed note: %v, want ErrCheckpoint naming OpenCheckpoint", err)
	}
	if got, err := ParseCheckpoint(cp.Text()); err != nil || got != cp {
		t.Fatalf("its body: %+v, %v", got, err)
	}
}

// TestCheckpointLines: the state-file form of checkpoints reads back what
// AppendCheckpointLines wrote, sorted by origin, and refuses a malformed
// file naming the line.
func TestCheckpointLines(t *testing.T) {
	cs := map[string]Checkpoint{
		"b.example/00000002": {Origin: "b.example/00000002", Size: 7, Root: Hash{7}},
		"a.example/00000001": {Origin: "a.example/00000001", Size: 1, Root: Hash{1}},
	}
	b := AppendCheckpointLines(nil, cs)
	if !strings.HasPrefix(string(b), "a.example/00000001 1 ") || strings.Count(string(b), "\n") != 2 {
		t.Fatalf("AppendCheckpointLines: %q", b)
	}
	got, err := ParseCheckpointLines(b)
	if err != nil || len(got) != 2 || got["b.example/00000002"] != cs["b.example/00000002"] {
		t.Fatalf("ParseCheckpointLines: %v, %v", got, err)
	}
	if got, err := ParseCheckpointLines(nil); err != nil || len(got) != 0 {
		t.Fatalf("an empty file: %v, %v", got, err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	for _, tc := range []struct{ text, want string }{
		{lines[1] + lines[0], "line 2: origin a.example/00000001 is not after"},
		{lines[0] + lines[0], "line 2: origin a.example/00000001 is not after"},
		{strings.TrimSuffix(string(b), "\n"), "line 2: the file does not end with a newline"},
		{"a 0 " + strings.Fields(lines[0])[2] + "\n", "line 1: size 0"},
		{"a 1\n", "line 1: want <origin> <size> <root>"},
		{"a 01 " + strings.Fields(lines[0])[2] + "\n", "line 1: " + ErrCheckpoint.Error()},
	} {
		if _, err := ParseCheckpointLines([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
	}
}
