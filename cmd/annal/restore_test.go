package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreRefusesBadArguments: restore's usage errors say what is
// wrong before any bucket is read (the restore itself is tested in
// package engine, and against versitygw in engine/internal/replica/s3test).
func TestRestoreRefusesBadArguments(t *testing.T) {
	work := t.TempDir()
	full := filepath.Join(work, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	url := "s3://bucket/p?endpoint=http://127.0.0.1:1&region=us-east-1&path-style=true"
	dir := filepath.Join(work, "new")
	wantExit(t, exitUsage, []string{"--at and --seq"}, "restore", url, dir, "--at", "now", "--seq", "5")
	wantExit(t, exitUsage, []string{"--seq", `"x"`}, "restore", url, dir, "--seq", "x")
	wantExit(t, exitUsage, []string{"--at"}, "restore", url, dir, "--at", "not a time")
	wantExit(t, exitUsage, []string{"not empty", `"x"`}, "restore", url, full)
	wantExit(t, exitUsage, []string{"s3://"}, "restore", "http://bucket", dir)
	wantExit(t, exitUsage, []string{"--unsigned", `"maybe"`, "refuse, skip or restore"}, "restore", url, dir, "--unsigned", "maybe")
	wantExit(t, exitUsage, []string{"accepts 2 arg"}, "restore", url)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made %s: %v", dir, err)
	}
}
