package s3test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fault is what the proxy does to one request.
type fault int

const (
	forward          fault = iota // no fault: forward and relay the answer
	fail500                       // answer 500 InternalError without forwarding
	fail503                       // answer 503 SlowDown without forwarding
	fail409                       // answer 409 ConditionalRequestConflict without forwarding
	lostResponse                  // forward, then close the connection without answering
	succeededThen500              // forward, then answer 500 although the server succeeded
	resetMidBody                  // forward, then reset the connection halfway through the answer
	latency                       // wait latencySpike, then forward
	faultClasses
)

var faultNames = [faultClasses]string{"none", "500", "503 SlowDown", "409 ConditionalRequestConflict",
	"lost response", "applied then 500", "reset mid-body", "latency spike"}

func (f fault) String() string { return faultNames[f] }

// latencySpike is how long a latency fault holds a request back.
const latencySpike = 200 * time.Millisecond

// faultProxy is a reverse proxy in front of the S3 server that injects
// faults chosen per request by a seeded policy: with probability rate, one
// of classes drawn at random, when eligible (if set) allows it for that
// request. A script, if set, chooses the first requests' faults instead,
// one a request.
type faultProxy struct {
	target   string // host:port of the server
	rate     float64
	classes  []fault
	eligible func(r *http.Request, f fault) bool

	mu     sync.Mutex
	rng    *rand.Rand
	script []fault

	requests atomic.Int64
	counts   [faultClasses]atomic.Int64

	url    string
	server *httptest.Server
	client *http.Transport
}

// startFaultProxy starts a proxy to the test gateway; it stops at the end
// of t.
func startFaultProxy(t *testing.T, seed uint64, rate float64, classes ...fault) *faultProxy {
	t.Helper()
	p := &faultProxy{
		target:  strings.TrimPrefix(endpoint, "http://"),
		rate:    rate,
		classes: classes,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		client:  &http.Transport{MaxIdleConnsPerHost: 64},
	}
	p.server = httptest.NewServer(p)
	p.url = p.server.URL
	t.Cleanup(func() {
		p.server.CloseClientConnections()
		p.server.Close()
		p.client.CloseIdleConnections()
	})
	return p
}

func (p *faultProxy) choose(r *http.Request) fault {
	p.mu.Lock()
	f := forward
	if len(p.script) > 0 {
		f, p.script = p.script[0], p.script[1:]
		p.mu.Unlock()
		return f
	}
	if p.rng.Float64() < p.rate && len(p.classes) > 0 {
		f = p.classes[p.rng.IntN(len(p.classes))]
	}
	p.mu.Unlock()
	if f != forward && p.eligible != nil && !p.eligible(r, f) {
		f = forward
	}
	return f
}

// report logs the requests seen and the faults injected, per class.
func (p *faultProxy) report(t *testing.T) {
	t.Helper()
	var b strings.Builder
	total := int64(0)
	for f := fault(1); f < faultClasses; f++ {
		if n := p.counts[f].Load(); n > 0 {
			fmt.Fprintf(&b, ", %s %d", f, n)
			total += n
		}
	}
	t.Logf("fault proxy: %d requests, %d faults%s", p.requests.Load(), total, b.String())
}

func (p *faultProxy) faults() int64 {
	total := int64(0)
	for f := fault(1); f < faultClasses; f++ {
		total += p.counts[f].Load()
	}
	return total
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	f := p.choose(r)
	p.counts[f].Add(1)
	switch f {
	case fail500:
		s3Error(w, r, http.StatusInternalServerError, "InternalError")
		return
	case fail503:
		s3Error(w, r, http.StatusServiceUnavailable, "SlowDown")
		return
	case fail409:
		s3Error(w, r, http.StatusConflict, "ConditionalRequestConflict")
		return
	case latency:
		time.Sleep(latencySpike)
	}
	status, header, body, err := p.roundTrip(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	switch f {
	case lostResponse:
		hangUp(w)
		return
	case succeededThen500:
		s3Error(w, r, http.StatusInternalServerError, "InternalError")
		return
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	if f == resetMidBody {
		if r.Method == http.MethodHead || len(body) == 0 {
			// No body to cut: the answer is lost whole.
			hangUp(w)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(status)
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		hangUp(w)
		return
	}
	w.WriteHeader(status)
	w.Write(body)
}

// roundTrip forwards r to the server as it came (the signature covers the
// Host header, which stays the proxy's) and reads the whole answer.
func (p *faultProxy) roundTrip(r *http.Request) (int, http.Header, []byte, error) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = "http"
	out.URL.Host = p.target
	out.Host = r.Host
	resp, err := p.client.RoundTrip(out)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, body, nil
}

// s3Error answers as S3 does, with an XML error body.
func s3Error(w http.ResponseWriter, r *http.Request, status int, code string) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>injected by the test proxy</Message><Resource>%s</Resource><RequestId>fault</RequestId></Error>`,
		code, r.URL.Path)
}

// hangUp closes the client's connection at once (a reset, not a clean
// close), whatever was or was not written on it.
func hangUp(w http.ResponseWriter) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}
