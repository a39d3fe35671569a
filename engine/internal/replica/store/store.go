// Package store is the object store a ledger is replicated to: a small
// interface of annal's own (Put with a condition, Get, Head, List,
// Folders, Delete), an S3 implementation on aws-sdk-go-v2, and an in-memory one
// with the same semantics for unit tests.
//
// Keys are relative to the store's prefix: the S3 implementation puts
// "s3://BUCKET/PREFIX" in front of every key and takes it off every key
// it lists. ETags are opaque: a caller passes back exactly what Put, Get,
// Head or List returned.
//
// Errors are matched with errors.Is against the sentinels below. Transient
// failures (503 SlowDown, other 5xx, timeouts, reset connections) are
// retried inside the implementation, with capped exponential backoff and
// jitter, for as long as the context allows; what is left when the
// retries run out wraps ErrUnavailable.
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
)

// Store is an object store under one prefix. Implementations are safe for
// concurrent use.
type Store interface {
	// Put writes data under key if cond holds and returns the new ETag.
	// A failed condition is ErrPreconditionFailed; a concurrent conditional
	// write to the same key may instead give ErrConflict, after which the
	// caller may retry. If a conditional Put was retried after an attempt
	// whose outcome is unknown (a timeout, a 5xx) and the retry finds the
	// condition failed (or meets a conflict), the error wraps both
	// ErrPreconditionFailed (or ErrConflict) and ErrMaybeApplied: the
	// earlier attempt may have written the object, and only reading it back
	// tells.
	Put(ctx context.Context, key string, data []byte, cond Condition) (etag string, err error)
	// Get reads the whole object. A missing key is ErrNotFound.
	Get(ctx context.Context, key string) (Object, error)
	// Head returns an object's size and ETag. A missing key is ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to limit objects (limit <= 0 means the store's page
	// size, at most 1000) whose keys start with prefix and sort after
	// startAfter, in byte order of their keys. When Page.Truncated is set,
	// more follow: call again with startAfter set to the last key returned.
	List(ctx context.Context, prefix, startAfter string, limit int) (Page, error)
	// Folders returns the folders directly under prefix: each key's part
	// up to and including the first "/" after prefix, once, for the keys
	// that have one (an object directly under prefix is in no folder and
	// is not returned). The folders are in byte order, at most limit of
	// them (limit <= 0 means the store's page size, at most 1000), and
	// each sorts after startAfter, which is "" or a folder an earlier
	// call returned (every key under that folder is passed over). When
	// FolderPage.Truncated is set, more may follow: call again with
	// startAfter set to the last folder returned. On S3 a page is one
	// ListObjectsV2 with Delimiter "/" (its CommonPrefixes): a bucket of
	// n folders is listed in about n/1000 requests, whatever the number
	// of objects in them.
	Folders(ctx context.Context, prefix, startAfter string, limit int) (FolderPage, error)
	// Delete removes key. Deleting a missing key is not an error (S3 answers
	// 204 either way).
	Delete(ctx context.Context, key string) error
}

// Condition is the precondition of a Put. The zero Condition writes
// unconditionally.
type Condition struct {
	// IfNoneMatch makes the Put create-only (If-None-Match: *): it fails
	// with ErrPreconditionFailed if the key exists.
	IfNoneMatch bool
	// IfMatch, when set, makes the Put replace only the object with this
	// ETag (If-Match): it fails with ErrPreconditionFailed if the key holds
	// another ETag. A missing key fails too: with ErrPreconditionFailed on
	// the in-memory store, and ErrNotFound or ErrPreconditionFailed on S3
	// (AWS answers 404 NoSuchKey).
	IfMatch string
}

// WithSHA256 returns ctx for a Put whose data's SHA-256 the caller
// knows already (a chunk's, which the next chunk names): the S3 store
// signs it as the payload's hash (x-amz-content-sha256) rather than
// hashing the data again, and the service checks the data against it as
// it checks a hash the client computed: a Put whose data does not match
// fails, writing nothing (S3: 400 XAmzContentSHA256Mismatch, not
// retried). The in-memory store checks it too.
func WithSHA256(ctx context.Context, sum [sha256.Size]byte) context.Context {
	return context.WithValue(ctx, sha256Key{}, sum)
}

type sha256Key struct{}

// knownSHA256 returns the SHA-256 WithSHA256 put in ctx.
func knownSHA256(ctx context.Context) ([sha256.Size]byte, bool) {
	sum, ok := ctx.Value(sha256Key{}).([sha256.Size]byte)
	return sum, ok
}

// CreateOnly is the Condition of a Put that must not replace anything.
func CreateOnly() Condition { return Condition{IfNoneMatch: true} }

// ReplaceIf is the Condition of a Put that replaces only the object whose
// ETag is etag.
func ReplaceIf(etag string) Condition { return Condition{IfMatch: etag} }

// Object is a whole object as Get returns it.
type Object struct {
	Data []byte
	ETag string
}

// ObjectInfo describes an object without its data.
type ObjectInfo struct {
	// Key is relative to the store's prefix.
	Key  string
	Size int64
	ETag string
}

// Page is one page of List.
type Page struct {
	Objects []ObjectInfo
	// Truncated is set when more objects follow the last one in Objects.
	Truncated bool
}

// FolderPage is one page of Folders.
type FolderPage struct {
	// Folders are keys relative to the store's prefix, each ending in
	// "/": "ledgers/0000002a/" for the folders under "ledgers/".
	Folders []string
	// Truncated is set when more folders may follow the last one in
	// Folders.
	Truncated bool
}

// afterFolder is the key to list from, exclusive, to pass over every key
// under startAfter when it is a folder (it ends in "/"): the folder's
// name followed by '0', the byte after '/'. Every key under the folder
// sorts before it, and every other key after the folder sorts at or
// after it; one equal to it has no "/" after the folder's parent, so is
// in no folder. Any other startAfter is returned as it is.
func afterFolder(startAfter string) string {
	if name, ok := strings.CutSuffix(startAfter, "/"); ok {
		return name + "0"
	}
	return startAfter
}

var (
	// ErrNotFound is returned by Get and Head for a key that holds no
	// object (HTTP 404).
	ErrNotFound = errors.New("store: object not found")
	// ErrPreconditionFailed is returned by Put when its Condition does not
	// hold (HTTP 412): the key exists for IfNoneMatch, or holds another
	// ETag for IfMatch.
	ErrPreconditionFailed = errors.New("store: precondition failed")
	// ErrMaybeApplied accompanies ErrPreconditionFailed or ErrConflict
	// when an earlier attempt of the same Put had an unknown outcome: the
	// object found may be the caller's own.
	ErrMaybeApplied = errors.New("store: an earlier attempt may have been applied")
	// ErrConflict is returned by Put when a concurrent conditional write to
	// the same key was in progress (HTTP 409 ConditionalRequestConflict).
	// This request wrote nothing (an earlier attempt of the same Put may
	// have: then ErrMaybeApplied is wrapped too); the caller may retry.
	ErrConflict = errors.New("store: conflicting conditional request")
	// ErrUnavailable wraps the last transient failure when the retries ran
	// out before the context did: the store did not answer usefully in
	// time. The outcome of a Put that ends so is unknown.
	ErrUnavailable = errors.New("store: unavailable")
)

// maybeAppliedError is ErrPreconditionFailed or ErrConflict after an
// ambiguous attempt.
type maybeAppliedError struct{ err error }

func (e *maybeAppliedError) Error() string {
	return e.err.Error() + " (an earlier attempt may have been applied)"
}

func (e *maybeAppliedError) Unwrap() []error { return []error{e.err, ErrMaybeApplied} }
