package tree

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is the body of a C2SP tlog-checkpoint.
type Checkpoint struct {
	Origin string // "<key name>/<ledger ID in 8 lower-case hex digits>"
	Size   uint64 // the number of leaves (events, genesis included)
	Root   Hash
}

// Origin returns the origin of the checkpoints of a ledger signed with a
// key named keyName: keyName + "/" + the ledger ID in 8 hex digits.
func Origin(keyName string, ledger uint32) string {
	return fmt.Sprintf("%s/%08x", keyName, ledger)
}

// Text returns the checkpoint's body: "origin\nsize\nbase64(root)\n".
func (c Checkpoint) Text() []byte {
	b := make([]byte, 0, len(c.Origin)+1+20+1+44+1)
	b = append(b, c.Origin...)
	b = append(b, '\n')
	b = strconv.AppendUint(b, c.Size, 10)
	b = append(b, '\n')
	b = base64.StdEncoding.AppendEncode(b, c.Root[:])
	return append(b, '\n')
}

// Sign returns the signed note of the checkpoint (C2SP signed-note).
func Sign(c Checkpoint, s note.Signer) ([]byte, error) {
	text := c.Text()
	if parsed, err := ParseCheckpoint(text); err != nil {
		return nil, err
	} else if parsed != c {
		return nil, fmt.Errorf("%w: origin %q holds a line break", ErrCheckpoint, c.Origin)
	}
	msg, err := note.Sign(&note.Note{Text: string(text)}, s)
	if err != nil {
		return nil, fmt.Errorf("tree: sign checkpoint %s size %d with key %s: %w", c.Origin, c.Size, s.Name(), err)
	}
	return msg, nil
}

// OpenCheckpoint verifies a signed checkpoint with the verifier and
// parses its body (ErrCheckpoint, wrapped with the reason, if malformed
// or not signed by that key).
func OpenCheckpoint(msg []byte, v note.Verifier) (Checkpoint, error) {
	if v == nil {
		return Checkpoint{}, fmt.Errorf("%w: no verifier key given", ErrCheckpoint)
	}
	key := fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			var found []string
			for _, s := range unverified.Note.UnverifiedSigs {
				found = append(found, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
			}
			return Checkpoint{}, fmt.Errorf("%w: not signed by key %s; signed by: %s", ErrCheckpoint, key, strings.Join(found, ", "))
		case errors.As(err, &invalid):
			return Checkpoint{}, fmt.Errorf("%w: the signature by key %s does not verify", ErrCheckpoint, key)
		default:
			return Checkpoint{}, fmt.Errorf("%w: not a signed note: %v", ErrCheckpoint, err)
		}
	}
	// note.Open verifies one signature line per key and skips the
	// lines that repeat its name and hash: a note with a bogus second
	// line by the trusted key verifies, and strict verifiers reject it.
	// Every line by the key must verify.
	if err := checkEverySignature(msg, v); err != nil {
		return Checkpoint{}, err
	}
	// note.Open decodes base64 leniently: a signature whose last
	// character's unused bits are changed decodes to the same bytes.
	// Refuse such a variant, so that a signed checkpoint has one spelling.
	for _, s := range n.Sigs {
		if sig, err := base64.StdEncoding.Strict().DecodeString(s.Base64); err != nil || base64.StdEncoding.EncodeToString(sig) != s.Base64 {
			return Checkpoint{}, fmt.Errorf("%w: the signature by key %s is not in canonical base64", ErrCheckpoint, key)
		}
	}
	return ParseCheckpoint([]byte(n.Text))
}

// checkEverySignature checks every signature line of msg (a note that
// note.Open accepted) by the key of v, its name and key hash: each must
// verify, and there must be only one (a second line by the same key, even
// a valid one, is what a strict verifier refuses).
func checkEverySignature(msg []byte, v note.Verifier) error {
	key := fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
	split := bytes.LastIndex(msg, []byte("\n\n"))
	if split < 0 {
		return fmt.Errorf("%w: not a signed note", ErrCheckpoint)
	}
	text, sigs := msg[:split+1], msg[split+2:]
	lines := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(sigs), "\n"), "\n") {
		rest, ok := strings.CutPrefix(line, "\u2014 ")
		if !ok {
			return fmt.Errorf("%w: signature line %d does not begin with \"\u2014 \"", ErrCheckpoint, i+1)
		}
		name, b64, _ := strings.Cut(rest, " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) < 5 {
			return fmt.Errorf("%w: signature line %d is not base64 of a key hash and a signature", ErrCheckpoint, i+1)
		}
		if name != v.Name() || binary.BigEndian.Uint32(sig) != v.KeyHash() {
			continue // another key's: not ours to judge
		}
		if lines++; lines > 1 {
			return fmt.Errorf("%w: signature line %d is a second signature by key %s (a checkpoint holds one per key)", ErrCheckpoint, i+1, key)
		}
		if !v.Verify(text, sig[4:]) {
			return fmt.Errorf("%w: signature line %d, by key %s, does not verify", ErrCheckpoint, i+1, key)
		}
	}
	return nil
}

// ParseCheckpoint parses a checkpoint's body without any signature check.
// It is strict: an origin of printable characters without spaces or '+',
// a size in decimal without leading zeros that fits in a uint64, a root
// of exactly 32 bytes in canonical standard base64, each line ending in
// '\n'; extension lines after the root are allowed (non-empty) and
// ignored.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	bad := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: %s", ErrCheckpoint, fmt.Sprintf(format, args...))
	}
	if !utf8.Valid(text) {
		return bad("not UTF-8")
	}
	if len(text) == 0 || text[len(text)-1] != '\n' {
		return bad("the body does not end with a newline")
	}
	if body, _, signed := strings.Cut(string(text), "\n\n\u2014 "); signed && strings.Count(body, "\n") >= 2 {
		return bad("a signed note (the body, a blank line, then signature lines beginning with \"\u2014 \"): ParseCheckpoint reads the body only, unchecked; give the whole note to OpenCheckpoint, which checks its signature and returns the checkpoint")
	}
	lines := strings.Split(string(text[:len(text)-1]), "\n")
	if len(lines) < 3 {
		return bad("%d lines, want origin, size and root", len(lines))
	}
	origin, size, root := lines[0], lines[1], lines[2]
	if origin == "" {
		return bad("empty origin")
	}
	for _, r := range origin {
		if r <= ' ' || r == '+' || r == 0x7f || r == utf8.RuneError {
			return bad("origin %q holds %q", origin, r)
		}
	}
	var c Checkpoint
	c.Origin = origin
	if size == "" || size[0] < '0' || size[0] > '9' || size[0] == '0' && len(size) > 1 {
		return bad("size %q is not a decimal number without leading zeros", size)
	}
	s, err := strconv.ParseUint(size, 10, 64)
	if err != nil {
		return bad("size %q: not a uint64", size)
	}
	c.Size = s
	r, err := base64.StdEncoding.Strict().DecodeString(root)
	if err != nil || len(r) != len(c.Root) || base64.StdEncoding.EncodeToString(r) != root {
		return bad("root %q is not 32 bytes in standard base64", root)
	}
	copy(c.Root[:], r)
	for i, ext := range lines[3:] {
		if ext == "" {
			return bad("extension line %d is empty", i+1)
		}
		if bytes.ContainsFunc([]byte(ext), func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return bad("extension line %d holds a control character", i+1)
		}
	}
	return c, nil
}

// ParseCheckpointLines parses checkpoint bodies written one per line, as
// a signer's and a tlog witness's state files hold them: "<origin> <size>
// <root in standard base64>\n" each, sizes above 0, sorted by origin, one
// line per origin. It returns them by origin; an error says which line
// (from 1) is wrong and why.
func ParseCheckpointLines(b []byte) (map[string]Checkpoint, error) {
	out := map[string]Checkpoint{}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("line %d: the file does not end with a newline", bytes.Count(b, []byte("\n"))+1)
	}
	prev := ""
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if len(b) == 0 {
			break
		}
		f := strings.Split(line, " ")
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want <origin> <size> <root>, found %q", i+1, line)
		}
		c, err := ParseCheckpoint([]byte(f[0] + "\n" + f[1] + "\n" + f[2] + "\n"))
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		if c.Size == 0 {
			return nil, fmt.Errorf("line %d: size 0", i+1)
		}
		if i > 0 && c.Origin <= prev {
			return nil, fmt.Errorf("line %d: origin %s is not after %s (the lines are sorted, one per origin)", i+1, c.Origin, prev)
		}
		prev = c.Origin
		out[c.Origin] = c
	}
	return out, nil
}

// AppendCheckpointLines appends the checkpoints to b in the form
// ParseCheckpointLines reads, sorted by origin.
func AppendCheckpointLines(b []byte, cs map[string]Checkpoint) []byte {
	origins := make([]string, 0, len(cs))
	for o := range cs {
		origins = append(origins, o)
	}
	slices.Sort(origins)
	for _, o := range origins {
		c := cs[o]
		b = append(b, o...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, c.Size, 10)
		b = append(b, ' ')
		b = base64.StdEncoding.AppendEncode(b, c.Root[:])
		b = append(b, '\n')
	}
	return b
}
