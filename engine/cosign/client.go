package cosign

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/annal-db/annal/engine/tree"
)

// maxResponse bounds what is read of a witness's answer.
const maxResponse = 64 << 10

// WitnessConfig names a tlog witness that a log asks for cosignatures:
// the URL of its submission prefix (the request goes to URL +
// "/add-checkpoint") and its verifier key (as annal witness prints it).
type WitnessConfig struct {
	URL  string
	VKey string
}

// Check says what is wrong with the configuration, if anything.
func (w WitnessConfig) Check() error {
	if !strings.HasPrefix(w.URL, "http://") && !strings.HasPrefix(w.URL, "https://") {
		return fmt.Errorf("cosign: tlog witness URL %q: want http:// or https://", w.URL)
	}
	_, err := parseVerifier(w.VKey)
	return err
}

// AddCheckpoint posts an add-checkpoint request to the witness at url
// (its submission prefix): the old size, the consistency proof from it,
// and the signed checkpoint msg. It returns the body of a 200 answer (the
// cosignature lines, unchecked), or a *RequestError (matching
// ErrRefused) with the status, the witness's size for a 409, and its
// message.
func AddCheckpoint(ctx context.Context, hc *http.Client, url string, old uint64, proof []tree.Hash, msg []byte) ([]byte, error) {
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", old)
	for _, h := range proof {
		body.WriteString(b64(h))
		body.WriteByte('\n')
	}
	body.WriteByte('\n')
	body.Write(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(url, "/")+"/add-checkpoint", &body)
	if err != nil {
		return nil, fmt.Errorf("cosign: tlog witness %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cosign: tlog witness %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("cosign: tlog witness %s: reading its answer: %w", url, err)
	}
	if len(b) > maxResponse {
		return nil, fmt.Errorf("cosign: tlog witness %s: its answer is larger than %d bytes", url, maxResponse)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return b, nil
	case http.StatusConflict:
		n := strings.TrimSuffix(string(b), "\n")
		size, err := strconv.ParseUint(n, 10, 64)
		if err != nil || !decimal(n) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/x.tlog.size") {
			return nil, fmt.Errorf("cosign: tlog witness %s: 409 Conflict without its size (text/x.tlog.size), answer %q", url, b)
		}
		return nil, &RequestError{Status: resp.StatusCode, Size: size}
	default:
		return nil, &RequestError{Status: resp.StatusCode, Reason: strings.TrimSpace(string(b))}
	}
}

// Cosign asks the witness for its cosignature of the signed checkpoint
// msg as an extension of size old (the size the caller believes the
// witness cosigned last for the origin; 0 if it knows none). On 409 it
// asks once more, from the size the witness answers. proof(m) returns the
// consistency proof from size m to the checkpoint's size; it is not
// called for m 0 or m equal to that size, and an m above it is refused
// here (the witness has seen a larger tree: the log was rolled back). It
// returns the witness's cosignature line (with its newline), checked with
// the witness's key, and the witness's size before this request (on an
// error, the last size it said it had: where to start next time).
func (w WitnessConfig) Cosign(ctx context.Context, hc *http.Client, msg []byte, old uint64, proof func(m uint64) ([]tree.Hash, error)) (line []byte, from uint64, err error) {
	v, err := parseVerifier(w.VKey)
	if err != nil {
		return nil, 0, err
	}
	text, _, err := splitNote(msg)
	if err != nil {
		return nil, 0, fmt.Errorf("cosign: the checkpoint: %w", err)
	}
	c, err := tree.ParseCheckpoint(text)
	if err != nil {
		return nil, 0, err
	}
	for try := 0; ; try++ {
		if old > c.Size {
			return nil, old, fmt.Errorf("%w: tlog witness %s cosigned size %d of %s, more than this checkpoint's %d: the log was rolled back", ErrRefused, w.URL, old, c.Origin, c.Size)
		}
		var hashes []tree.Hash
		if old != 0 && old != c.Size {
			if hashes, err = proof(old); err != nil {
				return nil, old, fmt.Errorf("cosign: the consistency proof from size %d for tlog witness %s: %w", old, w.URL, err)
			}
		}
		b, err := AddCheckpoint(ctx, hc, w.URL, old, hashes, msg)
		var re *RequestError
		if errors.As(err, &re) && re.Status == http.StatusConflict && try == 0 {
			old = re.Size
			continue
		}
		if errors.As(err, &re) {
			if re.Status == http.StatusConflict {
				old = re.Size // moved on again meanwhile: where to start next time
			}
			return nil, old, fmt.Errorf("cosign: tlog witness %s: %w", w.URL, err)
		}
		if err != nil {
			return nil, old, err // it names the witness
		}
		for _, l := range strings.SplitAfter(string(b), "\n") {
			s, err := parseSigLine(strings.TrimSuffix(l, "\n"))
			if err != nil || !strings.HasSuffix(l, "\n") {
				continue
			}
			if _, ok := cosignatureTime(v, text, s); ok {
				return []byte(l), old, nil
			}
		}
		return nil, old, fmt.Errorf("%w: tlog witness %s answered 200 without a cosignature by its key %s that verifies: %q", ErrRefused, w.URL, w.VKey, b)
	}
}

// AddCosignatures returns the signed note msg with the signature lines
// appended (each ending in a newline), skipping a line msg holds already.
func AddCosignatures(msg []byte, lines ...[]byte) []byte {
	out := bytes.Clone(msg)
	for _, l := range lines {
		if !bytes.Contains(out, l) {
			out = append(out, l...)
		}
	}
	return out
}
