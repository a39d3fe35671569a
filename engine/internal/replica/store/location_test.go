package store

import (
	"strings"
	"testing"
)

func TestParseLocation(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Location
	}{
		{"s3://bucket", Location{Bucket: "bucket"}},
		{"s3://bucket/", Location{Bucket: "bucket"}},
		{"s3://bucket/ledgers/prod", Location{Bucket: "bucket", Prefix: "ledgers/prod/"}},
		{"s3://my.bucket-1/p/?region=eu-west-1", Location{Bucket: "my.bucket-1", Prefix: "p/", Region: "eu-west-1"}},
		{"s3://b12/p?endpoint=http://127.0.0.1:7070&region=us-east-1&path-style=true",
			Location{Bucket: "b12", Prefix: "p/", Endpoint: "http://127.0.0.1:7070", Region: "us-east-1", PathStyle: true}},
		{"s3://b12?endpoint=https%3A%2F%2Fminio.example%3A9000%2F&path-style=false",
			Location{Bucket: "b12", Endpoint: "https://minio.example:9000"}},
	} {
		got, err := ParseLocation(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLocation(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		again, err := ParseLocation(got.String())
		if err != nil || again != got {
			t.Errorf("ParseLocation(%q.String() = %q) = %+v, %v", c.in, got.String(), again, err)
		}
	}
}

func TestParseLocationErrorsNameThePart(t *testing.T) {
	for _, c := range []struct{ in, part string }{
		{"http://bucket/p", "scheme"},
		{"bucket/p", "scheme"},
		{"s3:bucket", "two slashes"},
		{"s3:///p", "bucket: missing"},
		{"s3://Bucket/p", "bucket"},
		{"s3://ab/p", "3 to 63"},
		{"s3://-bucket/p", "begin and end"},
		{"s3://bucket//p", "empty path element"},
		{"s3://bucket/a//b", "empty path element"},
		{"s3://bucket/p?endpoint=localhost:9000", "endpoint"},
		{"s3://bucket/p?endpoint=ftp://host", "endpoint"},
		{"s3://bucket/p?region=", "region"},
		{"s3://bucket/p?path-style=yes please", "path-style"},
		{"s3://bucket/p?pathstyle=true", `unknown parameter "pathstyle"`},
		{"s3://bucket/p?region=a&region=b", "region given 2 times"},
		{"s3://bucket/p#frag", "fragment"},
	} {
		_, err := ParseLocation(c.in)
		if err == nil || !strings.Contains(err.Error(), c.part) {
			t.Errorf("ParseLocation(%q) = %v; want an error naming %q", c.in, err, c.part)
		}
	}
}

func TestParseLocationNeverPrintsCredentials(t *testing.T) {
	for _, in := range []string{
		"s3://AKIAEXAMPLE:topsecret@bucket/p",
		"s3://bucket/p?endpoint=http://AKIAEXAMPLE:topsecret@host:9000",
	} {
		_, err := ParseLocation(in)
		if err == nil || strings.Contains(err.Error(), "topsecret") {
			t.Errorf("ParseLocation(%q) = %v; want an error without the secret", in, err)
		}
	}
}
