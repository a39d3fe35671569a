package store

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Location is where a replica lives, as parsed from its URL form
//
//	s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true
//
// Every query parameter is optional. Without endpoint the store is AWS S3
// itself; with one it is an S3-compatible service (MinIO, Ceph, R2,
// versitygw, ...).
type Location struct {
	// Bucket is the bucket's name.
	Bucket string
	// Prefix is put in front of every key: empty, or ending with "/".
	Prefix string
	// Endpoint is the service's base URL (http or https), empty for AWS.
	Endpoint string
	// Region is the signing region; empty means the standard AWS chain's
	// (AWS_REGION, the shared config), and "us-east-1" when that has none
	// and Endpoint is set.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// rather than in the host name, as most S3-compatible services need.
	PathStyle bool
}

// ParseLocation parses the URL form of a replica. Its errors name the part
// that is wrong.
func ParseLocation(s string) (Location, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Location{}, fmt.Errorf("store: replica URL %q: %w", s, err)
	}
	if u.Scheme != "s3" {
		return Location{}, fmt.Errorf("store: replica URL %q: scheme %q, want s3://BUCKET/PREFIX", s, u.Scheme)
	}
	if u.User != nil {
		return Location{}, fmt.Errorf("store: replica URL %q: credentials do not belong in the URL; use the standard AWS chain (AWS_ACCESS_KEY_ID, shared config)", redact(u))
	}
	if u.Opaque != "" {
		return Location{}, fmt.Errorf("store: replica URL %q: want s3://BUCKET/PREFIX (two slashes after s3:)", s)
	}
	if u.Fragment != "" {
		return Location{}, fmt.Errorf("store: replica URL %q: fragment #%s not allowed", s, u.Fragment)
	}
	loc := Location{Bucket: u.Host}
	if err := checkBucket(loc.Bucket); err != nil {
		return Location{}, fmt.Errorf("store: replica URL %q: bucket: %w", s, err)
	}
	loc.Prefix = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if loc.Prefix != "" {
		if strings.Contains("/"+loc.Prefix+"/", "//") {
			return Location{}, fmt.Errorf("store: replica URL %q: prefix %q has an empty path element", s, loc.Prefix)
		}
		loc.Prefix += "/"
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Location{}, fmt.Errorf("store: replica URL %q: query: %w", s, err)
	}
	for name, values := range q {
		if len(values) != 1 {
			return Location{}, fmt.Errorf("store: replica URL %q: parameter %s given %d times", s, name, len(values))
		}
		v := values[0]
		switch name {
		case "endpoint":
			e, err := url.Parse(v)
			if err == nil && e.User != nil {
				// The URL is not repeated: it holds a secret.
				return Location{}, fmt.Errorf("store: replica URL: endpoint must not carry credentials; use the standard AWS chain (AWS_ACCESS_KEY_ID, shared config)")
			}
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return Location{}, fmt.Errorf("store: replica URL %q: endpoint %q is not an http:// or https:// URL with a host", s, v)
			}
			loc.Endpoint = strings.TrimSuffix(v, "/")
		case "region":
			if v == "" || strings.ContainsAny(v, " /?#") {
				return Location{}, fmt.Errorf("store: replica URL %q: region %q is not a region name", s, v)
			}
			loc.Region = v
		case "path-style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Location{}, fmt.Errorf("store: replica URL %q: path-style %q is not true or false", s, v)
			}
			loc.PathStyle = b
		default:
			return Location{}, fmt.Errorf("store: replica URL %q: unknown parameter %q (known: endpoint, region, path-style)", s, name)
		}
	}
	return loc, nil
}

// String gives the URL form of l, which ParseLocation reads back.
func (l Location) String() string {
	u := url.URL{Scheme: "s3", Host: l.Bucket, Path: "/" + l.Prefix}
	q := url.Values{}
	if l.Endpoint != "" {
		q.Set("endpoint", l.Endpoint)
	}
	if l.Region != "" {
		q.Set("region", l.Region)
	}
	if l.PathStyle {
		q.Set("path-style", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// checkBucket applies S3's rules for bucket names, so that a typo is
// reported here rather than as a signature or DNS error later.
func checkBucket(b string) error {
	if b == "" {
		return fmt.Errorf("missing: want s3://BUCKET/PREFIX")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("%q is %d characters, want 3 to 63", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("%q has %q: only lower-case letters, digits, '-' and '.'", b, c)
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return fmt.Errorf("%q must begin and end with a letter or digit", b)
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// redact drops the user information from u, so that a secret pasted into
// a URL is never printed.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}
