package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// TestFollowRefusesBadArguments: follow's usage errors say what is wrong
// before any bucket is read (the follower itself is tested in package
// engine).
func TestFollowRefusesBadArguments(t *testing.T) {
	work := t.TempDir()
	writer := filepath.Join(work, "writer")
	if err := os.MkdirAll(writer, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(writer, "meta.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	url := "s3://bucket/p?endpoint=http://127.0.0.1:1&region=us-east-1&path-style=true"
	dir := filepath.Join(work, "copy")
	_, key, err := note.GenerateKey(rand.Reader, "annal-test")
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, exitUsage, []string{"--key is required"}, "follow", url, dir)
	wantExit(t, exitUsage, []string{"verifier key"}, "follow", url, dir, "--key", "not a key")
	wantExit(t, exitUsage, []string{"writer's data directory", "meta.db"}, "follow", url, writer, "--key", key)
	wantExit(t, exitUsage, []string{"PollInterval"}, "follow", url, dir, "--key", key, "--interval", "2h")
	wantExit(t, exitUsage, []string{"s3://"}, "follow", "http://bucket", dir, "--key", key)
	wantExit(t, exitUsage, []string{"accepts 2 arg"}, "follow", url)
}

// TestFollowUnreachableBucketNothingToServe: follow on an empty DIR with a
// bucket that cannot be read (nothing listens at its endpoint) has
// nothing to serve meanwhile: it exits 1, saying that the bucket could not
// be read and DIR holds no copy (a DIR holding copies it laid is served
// instead: engine's TestFollowerOpenedWithStoreDownServesSignedPrefixes).
func TestFollowUnreachableBucketNothingToServe(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	_, key, err := note.GenerateKey(rand.Reader, "annal-test")
	if err != nil {
		t.Fatal(err)
	}
	url := "s3://bucket/p?endpoint=http://127.0.0.1:1&region=us-east-1&path-style=true"
	wantExit(t, exitError, []string{"the bucket could not be read", "holds no ledger copy"}, "follow", url, t.TempDir(), "--key", key, "--store-timeout", "500ms")
	wantExit(t, exitError, []string{"the bucket could not be read", `holds no copy of a ledger named "cash"`}, "follow", url, t.TempDir(), "--key", key, "--store-timeout", "500ms", "--ledger", "cash")
}
