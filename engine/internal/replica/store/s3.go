package store

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Options tunes an S3 store. The zero S3Options gives the defaults.
type S3Options struct {
	// MaxAttempts bounds the attempts of one call that meets transient
	// failures. Default 10; the context bounds them too.
	MaxAttempts int
	// AttemptTimeout bounds one attempt (one HTTP request and its
	// response); an attempt that runs past it is a transient failure.
	// Default 30 s.
	AttemptTimeout time.Duration
	// BaseBackoff is the first wait between attempts; it doubles with each
	// retry up to MaxBackoff, and each wait is drawn at random between half
	// of it and all of it. Defaults 50 ms and 2 s.
	BaseBackoff, MaxBackoff time.Duration
	// HTTPClient sends the requests; default a client of the SDK's own.
	// Tests put a fault-injecting transport here. The SDK refuses a plain
	// *http.Client when AWS_CA_BUNDLE is set (it cannot add the bundle to
	// it): OpenS3 then fails.
	HTTPClient *http.Client
}

func (o S3Options) withDefaults() S3Options {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 30 * time.Second
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 2 * time.Second
	}
	if o.MaxBackoff < o.BaseBackoff {
		o.MaxBackoff = o.BaseBackoff
	}
	return o
}

// S3 is a Store on an S3 bucket (AWS or S3-compatible).
type S3 struct {
	client *s3.Client
	loc    Location
	opts   S3Options
}

var _ Store = (*S3)(nil)

// OpenS3 makes a store for loc. Credentials come from the standard AWS
// chain (environment, shared config and credentials files, SSO, the
// instance's role) and are never printed. OpenS3 sends no request: Probe
// checks the store.
//
// For a non-AWS endpoint the request checksums are computed and the
// response checksums validated only when the operation requires them:
// aws-sdk-go-v2's service/s3 sends CRC32 checksums on every PutObject by
// default since v1.73, which several S3-compatible stores reject.
func OpenS3(ctx context.Context, loc Location, opts S3Options) (*S3, error) {
	if err := checkBucket(loc.Bucket); err != nil {
		return nil, fmt.Errorf("store: bucket: %w", err)
	}
	opts = opts.withDefaults()
	load := []func(*config.LoadOptions) error{
		// The retries are ours (see do): the SDK's would retry again
		// inside each of our attempts, and its retry quota turns a burst of
		// 503s into errors of its own.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if loc.Region != "" {
		load = append(load, config.WithRegion(loc.Region))
	}
	if loc.Endpoint != "" {
		load = append(load,
			config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
			config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
	}
	if opts.HTTPClient != nil {
		load = append(load, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("store: AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		if loc.Endpoint == "" {
			return nil, fmt.Errorf("store: no region: give ?region= in the replica URL or set AWS_REGION")
		}
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if loc.Endpoint != "" {
			o.BaseEndpoint = aws.String(loc.Endpoint)
		}
		o.UsePathStyle = loc.PathStyle
		// Request bookkeeping that no store checks: the SDK's
		// invocation ID (for its retries, which are ours), its user
		// agent and feature metrics, and AWS Lambda's trace header: 34
		// fewer allocations and 3.6 KB less garbage a PUT
		// (BenchmarkS3Put).
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			for _, id := range []string{"ClientRequestID", "UserAgent", "RecursionDetection", "AWSChecksum:RequestMetricsTracking"} {
				st.Build.Remove(id)
			}
			return st.Finalize.Insert(knownPayloadHash{}, "ComputePayloadHash", middleware.Before)
		})
	})
	return &S3{client: client, loc: loc, opts: opts}, nil
}

// knownPayloadHash gives the SDK's signer the payload hash that Put
// found in its context (WithSHA256): its ComputePayloadHash step, next,
// then does not hash the body again. Only Put sets putPayloadHash: the
// other requests made with the same context (a read-back after a 412)
// have no body, and sign their own empty payload's hash.
type knownPayloadHash struct{}

// putPayloadHash is the context key of the hex SHA-256 of a PutObject's
// body, set by Put only.
type putPayloadHash struct{}

func (knownPayloadHash) ID() string { return "annal:KnownPayloadHash" }

func (knownPayloadHash) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	if h, ok := ctx.Value(putPayloadHash{}).(string); ok {
		ctx = v4.SetPayloadHash(ctx, h)
	}
	return next.HandleFinalize(ctx, in)
}

// Location returns where the store is.
func (s *S3) Location() Location { return s.loc }

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, data []byte, cond Condition) (string, error) {
	if err := checkKey(s.loc.Prefix + key); err != nil {
		return "", err
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.loc.Bucket),
		Key:           aws.String(s.loc.Prefix + key),
		ContentLength: aws.Int64(int64(len(data))),
	}
	if cond.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	if sum, ok := knownSHA256(ctx); ok {
		ctx = context.WithValue(ctx, putPayloadHash{}, hex.EncodeToString(sum[:]))
	}
	var etag string
	err := s.do(ctx, "put "+key, cond != Condition{}, func(ctx context.Context) error {
		in.Body = bytes.NewReader(data)
		out, err := s.client.PutObject(ctx, in)
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	return etag, err
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (Object, error) {
	var o Object
	err := s.do(ctx, "get "+key, false, func(ctx context.Context) error {
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
			Bucket: aws.String(s.loc.Bucket),
			Key:    aws.String(s.loc.Prefix + key),
		})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		data, err := io.ReadAll(out.Body)
		if err != nil {
			// A body cut short is a transient network failure.
			return &transientError{err}
		}
		o = Object{Data: data, ETag: aws.ToString(out.ETag)}
		return nil
	})
	return o, err
}

// Head implements Store.
func (s *S3) Head(ctx context.Context, key string) (ObjectInfo, error) {
	var info ObjectInfo
	err := s.do(ctx, "head "+key, false, func(ctx context.Context) error {
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
			Bucket: aws.String(s.loc.Bucket),
			Key:    aws.String(s.loc.Prefix + key),
		})
		if err != nil {
			return err
		}
		info = ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}
		return nil
	})
	return info, err
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix, startAfter string, limit int) (Page, error) {
	in := s.listInput(prefix, startAfter, limit)
	var p Page
	err := s.do(ctx, "list "+prefix, false, func(ctx context.Context) error {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return err
		}
		p = Page{Truncated: aws.ToBool(out.IsTruncated)}
		for _, c := range out.Contents {
			k, err := s.relative(fmt.Sprintf("list %q", prefix), aws.ToString(c.Key))
			if err != nil {
				return err
			}
			p.Objects = append(p.Objects, ObjectInfo{
				Key:  k,
				Size: aws.ToInt64(c.Size),
				ETag: aws.ToString(c.ETag),
			})
		}
		return nil
	})
	return p, err
}

// Folders implements Store: ListObjectsV2 with Delimiter "/", whose
// CommonPrefixes are the folders. S3 counts the objects directly under
// prefix in MaxKeys with the folders, so a page may hold fewer than
// limit folders; one that holds none but is truncated (limit such
// objects in a row) is followed by the next at once, from its last
// object, so that a caller never gets an empty page to continue from.
func (s *S3) Folders(ctx context.Context, prefix, startAfter string, limit int) (FolderPage, error) {
	after := afterFolder(startAfter)
	for {
		in := s.listInput(prefix, after, limit)
		in.Delimiter = aws.String("/")
		var p FolderPage
		last := ""
		err := s.do(ctx, "list folders of "+prefix, false, func(ctx context.Context) error {
			out, err := s.client.ListObjectsV2(ctx, in)
			if err != nil {
				return err
			}
			p = FolderPage{Truncated: aws.ToBool(out.IsTruncated)}
			for _, c := range out.CommonPrefixes {
				f, err := s.relative("list folders of "+prefix, aws.ToString(c.Prefix))
				if err != nil {
					return err
				}
				p.Folders = append(p.Folders, f)
			}
			if n := len(out.Contents); n > 0 {
				last = aws.ToString(out.Contents[n-1].Key)
			}
			return nil
		})
		if err != nil || len(p.Folders) > 0 || !p.Truncated {
			return p, err
		}
		k, err := s.relative("list folders of "+prefix, last)
		if err != nil || k <= after {
			return FolderPage{}, fmt.Errorf("store: list folders of %q: a truncated page without a folder ends at %q, not after %q", prefix, last, after)
		}
		after = k
	}
}

// listInput is a ListObjectsV2 of the keys under prefix after
// startAfter, a page of limit (S3's largest when limit is <= 0 or larger).
func (s *S3) listInput(prefix, startAfter string, limit int) *s3.ListObjectsV2Input {
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.loc.Bucket),
		Prefix:  aws.String(s.loc.Prefix + prefix),
		MaxKeys: aws.Int32(int32(pageSize(limit))),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.loc.Prefix + startAfter)
	}
	return in
}

// relative takes the store's prefix off key, a key S3 listed.
func (s *S3) relative(what, key string) (string, error) {
	k, ok := strings.CutPrefix(key, s.loc.Prefix)
	if !ok {
		return "", fmt.Errorf("store: %s: the store returned key %q outside the prefix %q", what, key, s.loc.Prefix)
	}
	return k, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	return s.do(ctx, "delete "+key, false, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
			Bucket: aws.String(s.loc.Bucket),
			Key:    aws.String(s.loc.Prefix + key),
		})
		return err
	})
}

// do runs attempt until it succeeds, fails for good, the attempts run out
// or ctx is done, waiting between attempts. conditional marks a Put with a
// Condition: a 412 or 409 after an ambiguous attempt then also wraps
// ErrMaybeApplied.
func (s *S3) do(ctx context.Context, what string, conditional bool, attempt func(context.Context) error) error {
	ambiguous := false
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, s.opts.AttemptTimeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("store: %s in s3://%s/%s: %w", what, s.loc.Bucket, s.loc.Prefix, context.Cause(ctx))
		}
		class := classify(err)
		switch class {
		case ErrPreconditionFailed:
			err = fmt.Errorf("%s: %w", what, ErrPreconditionFailed)
			if conditional && ambiguous {
				return &maybeAppliedError{err}
			}
			return err
		case ErrConflict:
			err = fmt.Errorf("%s: %w (%s)", what, class, errorCode(err))
			if conditional && ambiguous {
				return &maybeAppliedError{err}
			}
			return err
		case ErrNotFound:
			return fmt.Errorf("%s: %w (%s)", what, class, errorCode(err))
		case nil:
			return fmt.Errorf("store: %s in s3://%s/%s: %w", what, s.loc.Bucket, s.loc.Prefix, err)
		}
		// Transient: the request may have reached the store.
		ambiguous = true
		if n >= s.opts.MaxAttempts {
			return fmt.Errorf("%s at %s after %d attempts: %w: %v", what, s.endpoint(), n, ErrUnavailable, err)
		}
		t := time.NewTimer(s.backoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("store: %s at %s: %w (last failure: %v)", what, s.endpoint(), context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// backoff is the wait after the n-th failed attempt: capped exponential,
// with jitter so that writers retrying together spread out.
func (s *S3) backoff(n int) time.Duration {
	d := s.opts.MaxBackoff
	if n < 31 {
		if e := s.opts.BaseBackoff << (n - 1); e > 0 && e < d {
			d = e
		}
	}
	return d/2 + rand.N(d/2+1)
}

func (s *S3) endpoint() string {
	if s.loc.Endpoint != "" {
		return s.loc.Endpoint
	}
	return "AWS S3"
}

// transientError marks a failure that a retry may cure.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// errTransient is classify's answer for a failure worth retrying.
var errTransient = errors.New("transient")

// classify maps an SDK error to ErrPreconditionFailed, ErrNotFound,
// ErrConflict, errTransient, or nil for a failure that no retry cures
// (access denied, no such bucket, a malformed request).
func classify(err error) error {
	var te *transientError
	if errors.As(err, &te) {
		return errTransient
	}
	status := 0
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	code := errorCode(err)
	switch {
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return ErrPreconditionFailed
	case code == "NoSuchKey" || (status == http.StatusNotFound && code != "NoSuchBucket"):
		return ErrNotFound
	case status == http.StatusConflict && code == "ConditionalRequestConflict":
		return ErrConflict
	case status == http.StatusTooManyRequests || status >= 500:
		return errTransient
	case code == "SlowDown" || code == "RequestTimeout" || code == "InternalError":
		return errTransient
	case status != 0 && (status < 200 || status > 299):
		return nil
	}
	// No HTTP response, or a success whose body did not arrive whole: the
	// request timed out, the connection was refused or reset, the response
	// was cut short.
	var ne net.Error
	var se *smithyhttp.RequestSendError
	if errors.As(err, &ne) || errors.As(err, &se) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errTransient
	}
	return nil
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
