// Package s3test runs the replica store's tests against a real S3 server:
// versitygw on a posix directory, started in-process on loopback by the
// tests themselves. It is a module of its own so that the library's go.mod
// does not carry versitygw and its dependencies; run it from this
// directory with `go test ./...`.
package s3test
