package cosign

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/annal-db/annal/engine/tree"
)

// BenchmarkWitnessAddCheckpoint measures one add-checkpoint that moves
// the witness on by one leaf: the log's signature checked, the
// consistency proof checked, the state file written and synced (its
// directory too) and the cosignature made. In process, without HTTP.
func BenchmarkWitnessAddCheckpoint(b *testing.B) {
	t := &testing.T{}
	skey, vkey := newLogKey(t, "log.example")
	w, err := OpenWitness(b.TempDir(), WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", b.N+1)
	reqs := make([][]byte, b.N)
	for i := range reqs {
		n := int64(i + 2)
		_, msg := l.checkpoint(t, n)
		p, err := l.proof(n)(uint64(n - 1))
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = request(uint64(n-1), p, msg)
	}
	_, first := l.checkpoint(t, 1)
	if _, err := w.AddCheckpoint(append([]byte("old 0\n\n"), first...)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := w.AddCheckpoint(reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCosignOverHTTP measures what a writer waits for per witness:
// WitnessConfig.Cosign of a checkpoint one leaf larger than the last, over
// loopback HTTP (the request, the witness's work, the cosignature
// checked), the witness's size known from the previous answer.
func BenchmarkCosignOverHTTP(b *testing.B) {
	t := &testing.T{}
	skey, vkey := newLogKey(t, "log.example")
	w, err := OpenWitness(b.TempDir(), WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	srv := httptest.NewServer(w)
	defer srv.Close()
	cfg := WitnessConfig{URL: srv.URL, VKey: w.VerifierKey()}
	l := newTestLog(t, skey, vkey)
	l.grow(t, "a", b.N+1)
	msgs := make([][]byte, b.N+1)
	for i := range msgs {
		_, msgs[i] = l.checkpoint(t, int64(i+1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var old uint64
	for i := range msgs {
		n := int64(i + 1)
		if _, _, err := cfg.Cosign(context.Background(), srv.Client(), msgs[i], old, func(m uint64) ([]tree.Hash, error) { return l.proof(n)(m) }); err != nil {
			b.Fatal(err)
		}
		old = uint64(n)
	}
}
