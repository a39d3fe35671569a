package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/engine/internal/replica/store/storetest"
)

const (
	access = "annal-test-access"
	secret = "annal-test-secret"
	bucket = "annal-replica-test"
)

// endpoint is the running gateway's URL, set by TestMain.
var endpoint string

// TestMain starts one versitygw for the package (embedgw allows one per
// process) on a posix root with sidecar metadata, so that no extended
// attributes are needed from the file system, and creates the bucket.
func TestMain(m *testing.M) {
	for env, main := range childMains {
		if v, ok := os.LookupEnv(env); ok {
			os.Exit(main(v))
		}
	}
	os.Exit(runWithGateway(m))
}

// childMains are run instead of the tests when their environment
// variable is set: the test binary run again as a child process by a
// test, which must not start a gateway of its own. Each gets the
// variable's value and returns the exit code.
var childMains = map[string]func(string) int{}

func runWithGateway(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "annal-versitygw-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	root, side := filepath.Join(tmp, "root"), filepath.Join(tmp, "meta")
	for _, d := range []string{root, side} {
		if err := os.Mkdir(d, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ms, err := meta.NewSideCar(side)
	if err != nil {
		fmt.Fprintln(os.Stderr, "versitygw sidecar:", err)
		return 1
	}
	be, err := posix.New(root, ms, posix.PosixOpts{SideCarDir: side})
	if err != nil {
		fmt.Fprintln(os.Stderr, "versitygw posix backend:", err)
		return 1
	}
	// posix.New has changed the process's working directory to root, and
	// the backend works with paths relative to it from then on (a bucket
	// is os.Mkdir(name)): it must stay there while the gateway runs.
	addr, err := freeLoopbackPort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
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
			Quiet:             true,
		})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			fmt.Fprintln(os.Stderr, "versitygw did not stop within 10 s")
		}
	}()
	endpoint = "http://" + addr
	if err := waitListening(addr, done); err != nil {
		fmt.Fprintln(os.Stderr, "versitygw:", err)
		return 1
	}
	if err := createBucket(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "versitygw: create bucket:", err)
		return 1
	}
	return m.Run()
}

func freeLoopbackPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
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

func createBucket(ctx context.Context) error {
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}

// prefixes hands each store its own prefix in the one bucket.
var prefixes atomic.Int64

// openStore opens a store on a fresh prefix of the test bucket, with the
// credentials in the environment, as a user's would be.
func openStore(t *testing.T) store.Store {
	t.Helper()
	credentialsInEnvironment(t, secret)
	url := fmt.Sprintf("s3://%s/t%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	loc, err := store.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenS3(context.Background(), loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// credentialsInEnvironment gives the standard AWS chain the gateway's
// access key with secretKey, and nothing else from the machine: no shared
// config or profile, no CA bundle (with one, the SDK refuses a custom
// HTTP client), no instance metadata.
func credentialsInEnvironment(t testing.TB, secretKey string) {
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	for _, name := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(name, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func TestVersityGWConformance(t *testing.T) {
	storetest.Run(t, openStore)
}

func TestVersityGWProbe(t *testing.T) {
	if err := store.Probe(context.Background(), openStore(t), "probe/"); err != nil {
		t.Fatal(err)
	}
}

// TestVersityGWIfMatchOnMissingKey records what the server answers to an
// If-Match Put on a key that holds nothing: AWS gives 404 NoSuchKey.
func TestVersityGWIfMatchOnMissingKey(t *testing.T) {
	_, err := openStore(t).Put(context.Background(), "none", []byte("v"), store.ReplaceIf(`"0123456789abcdef0123456789abcdef"`))
	switch {
	case errors.Is(err, store.ErrNotFound):
		t.Logf("versitygw: If-Match on a missing key: not found (%v)", err)
	case errors.Is(err, store.ErrPreconditionFailed):
		t.Logf("versitygw: If-Match on a missing key: precondition failed (%v)", err)
	default:
		t.Fatalf("If-Match on a missing key: %v; want ErrNotFound or ErrPreconditionFailed", err)
	}
}

// TestVersityGWBadCredentials: a wrong secret is refused at once, not
// retried as if the store were down, and the secret is not in the error.
func TestVersityGWBadCredentials(t *testing.T) {
	credentialsInEnvironment(t, "wrong-secret-value")
	loc, err := store.ParseLocation(fmt.Sprintf("s3://%s/bad?endpoint=%s&path-style=true", bucket, endpoint))
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenS3(context.Background(), loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = store.Probe(context.Background(), s, "probe/")
	var pe *store.ProbeError
	if !errors.As(err, &pe) || pe.Check != store.CheckCreate || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Probe with a wrong secret = %v; want the create check failed without retries", err)
	}
	if s := err.Error(); strings.Contains(s, "wrong-secret-value") {
		t.Fatalf("the error prints the secret: %s", s)
	}
}
