package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// loseFirstPutResponse is a transport that delivers the first PUT to the
// server and then drops its answer, as a connection reset after the
// request landed looks to the client.
type loseFirstPutResponse struct {
	next http.RoundTripper
	lost atomic.Bool
}

func (l *loseFirstPutResponse) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPut && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, fmt.Errorf("connection reset after the request was sent (injected)")
	}
	return resp, err
}

// TestVersityGWCreateRetriedAfterLostResponse: the create landed but its
// answer was lost; the client's retry meets its own object and gets 412.
// The error must say that the earlier attempt may have been applied, so
// that the caller reads back and finds its own bytes rather than taking
// the 412 for being fenced (SlateDB #766).
func TestVersityGWCreateRetriedAfterLostResponse(t *testing.T) {
	credentialsInEnvironment(t, secret)
	loc, err := store.ParseLocation(fmt.Sprintf("s3://%s/lost%d?endpoint=%s&path-style=true", bucket, prefixes.Add(1), endpoint))
	if err != nil {
		t.Fatal(err)
	}
	transport := &loseFirstPutResponse{next: http.DefaultTransport}
	s, err := store.OpenS3(context.Background(), loc, store.S3Options{HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte("chunk 1")
	_, err = s.Put(ctx, "wal/1", data, store.CreateOnly())
	if !transport.lost.Load() {
		t.Fatal("no response was lost")
	}
	if !errors.Is(err, store.ErrPreconditionFailed) || !errors.Is(err, store.ErrMaybeApplied) {
		t.Fatalf("Put after a lost response = %v; want ErrPreconditionFailed with ErrMaybeApplied", err)
	}
	o, err := s.Get(ctx, "wal/1")
	if err != nil || !bytes.Equal(o.Data, data) {
		t.Fatalf("read back %q, %v; want the first attempt's bytes", o.Data, err)
	}
}
