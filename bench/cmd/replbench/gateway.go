package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

const (
	access = "annal-bench-access"
	secret = "annal-bench-secret"
	bucket = "annal-bench"
)

// gateway is a versitygw running in this process on a loopback port, on
// a posix root with sidecar metadata (no extended attributes needed).
type gateway struct {
	endpoint string
	client   *s3.Client
	stop     func()
}

// startGateway starts versitygw with its files under dir (an absolute
// path: posix.New changes the process's working directory to its root),
// and creates the bucket.
func startGateway(dir string, keepAlive bool) (*gateway, error) {
	root, side := filepath.Join(dir, "root"), filepath.Join(dir, "meta")
	for _, d := range []string{root, side} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	// Object metadata in extended attributes where the file system has
	// them: the sidecar files cost several file writes per PUT, which on
	// the loopback made versitygw's metadata, not annal, what was
	// measured. The sidecar otherwise.
	var ms meta.MetadataStorer = meta.XattrMeta{}
	opts := posix.PosixOpts{}
	if (meta.XattrMeta{}).Test(root) != nil {
		sc, err := meta.NewSideCar(side)
		if err != nil {
			return nil, fmt.Errorf("versitygw sidecar: %w", err)
		}
		ms, opts = sc, posix.PosixOpts{SideCarDir: side}
	}
	be, err := posix.New(root, ms, opts)
	if err != nil {
		return nil, fmt.Errorf("versitygw posix backend: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- embedgw.RunVersityGW(ctx, be, &embedgw.Config{
			RootUserAccess:    access,
			RootUserSecret:    secret,
			Region:            "us-east-1",
			Ports:             []string{addr},
			MaxConnections:    250,
			MaxRequests:       250,
			MultipartMaxParts: 10000,
			KeepAlive:         keepAlive,
			Quiet:             true,
		})
	}()
	g := &gateway{endpoint: "http://" + addr, stop: func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}}
	if err := waitListening(addr, done); err != nil {
		g.stop()
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	g.client = s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(g.endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	if _, err := g.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		g.stop()
		return nil, fmt.Errorf("versitygw: create bucket: %w", err)
	}
	return g, nil
}

func waitListening(addr string, done <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("stopped at start: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %s after 30 s", addr)
}

// replicaURL is the engine's Options.Replica for prefix in the bucket,
// at endpoint.
func replicaURL(endpoint, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&path-style=true", bucket, prefix, endpoint)
}

// useCredentials gives the standard AWS chain the gateway's key and
// nothing else from the machine: no shared config or profile, no CA
// bundle (with one, the SDK refuses a custom HTTP client), no instance
// metadata.
func useCredentials(tmp string) {
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	for _, name := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		os.Unsetenv(name)
	}
	os.Setenv("AWS_CONFIG_FILE", filepath.Join(tmp, "none"))
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(tmp, "none"))
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// counter is a reverse proxy in front of the gateway that counts the
// requests by method: the cost run's meter.
type counter struct {
	endpoint                string
	puts, gets, lists, dels atomic.Int64
	// walPuts and walBytes: the chunks' PUTs (keys with /wal/) and
	// their bodies' bytes.
	walPuts, walBytes atomic.Int64
	srv               *http.Server
}

func startCounter(target string) (*counter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	c := &counter{endpoint: "http://" + l.Addr().String()}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut:
			c.puts.Add(1)
			if strings.Contains(r.URL.Path, "/wal/") {
				c.walPuts.Add(1)
				c.walBytes.Add(r.ContentLength)
			}
		case r.Method == http.MethodDelete:
			c.dels.Add(1)
		case r.Method == http.MethodGet && r.URL.Query().Has("list-type"):
			c.lists.Add(1)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			c.gets.Add(1)
		}
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(l)
	return c, nil
}

func (c *counter) reset() {
	c.puts.Store(0)
	c.gets.Store(0)
	c.lists.Store(0)
	c.dels.Store(0)
	c.walPuts.Store(0)
	c.walBytes.Store(0)
}
