package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annal-db/annal/engine"
)

// TestReplicaFlagsRefused: --replication without a replica, an unknown
// mode, a malformed replica URL and replica status without a replica are
// refused before anything is made, saying what is wrong.
func TestReplicaFlagsRefused(t *testing.T) {
	t.Setenv("ANNAL_REPLICA", "")
	dir := filepath.Join(t.TempDir(), "d")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dir", dir, "--replication", "shipped", "create", "cash"}, exitUsage, "needs --replica"},
		{[]string{"--dir", dir, "--replica", "s3://bucket/p", "--replication", "eventually", "create", "cash"}, exitUsage, "replicated or shipped"},
		{[]string{"--dir", dir, "--replica", "http://bucket/p", "create", "cash"}, exitError, "Replica"},
		{[]string{"replica", "status"}, exitUsage, "--replica"},
		{[]string{"takeover", "s3://bucket/p", dir}, exitError, "does not exist"},
		{[]string{"takeover", "s3://bucket/p", dir, "--unsigned", "maybe"}, exitUsage, "refuse, skip or pull"},
		{[]string{"takeover", "s3://bucket/p", dir, "--ledger", "cash"}, exitUsage, "--unsigned skip or pull"},
	} {
		code, _, errOut := annal(t, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("annal %s: exit %d, %q; want exit %d saying %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
	if code, _, _ := annal(t, "", "--dir", dir, "ledgers"); code == 0 {
		t.Fatal("a refused command made the data directory")
	}
}

// TestReplicaRefusalExitCode: the replica's refusals exit 5.
func TestReplicaRefusalExitCode(t *testing.T) {
	for _, err := range []error{errFencedForTest(), errBehindForTest(), errDivergedForTest()} {
		if code := unavailableCode(err); code != exitReplica {
			t.Errorf("%v: exit %d, want %d", err, code, exitReplica)
		}
		if ee := ledgerError("D", "cash", err).(*exitErr); ee.code != exitReplica {
			t.Errorf("ledgerError(%v): exit %d, want %d", err, ee.code, exitReplica)
		}
	}
}

func errFencedForTest() error   { return wrapTest(engine.ErrFenced) }
func errBehindForTest() error   { return wrapTest(engine.ErrBehind) }
func errDivergedForTest() error { return wrapTest(engine.ErrDiverged) }

// wrapTest wraps err as the engine does: inside ErrLedgerUnavailable.
func wrapTest(err error) error {
	return fmt.Errorf("%w: ledger 0a0b0c0d: %w", engine.ErrLedgerUnavailable, err)
}

// TestTakeoverLedgerNotInDirectory: takeover --ledger naming no ledger of
// the directory is a usage error naming it, found before the bucket is
// read (the bucket here answers nothing: it is never reached).
func TestTakeoverLedgerNotInDirectory(t *testing.T) {
	t.Setenv("ANNAL_REPLICA", "")
	dir := filepath.Join(t.TempDir(), "d")
	if code, _, errOut := annal(t, "", "create", "cash", "--dir", dir); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	code, _, errOut := annal(t, "", "takeover", "s3://bucket/p?endpoint=http://127.0.0.1:1", dir, "--unsigned", "pull", "--ledger", "cash", "--ledger", "orders")
	if code != exitUsage || !strings.Contains(errOut, `"orders"`) || strings.Contains(errOut, `"cash"`) {
		t.Fatalf("takeover --ledger cash --ledger orders of a directory without orders: exit %d, %q; want exit %d naming orders alone", code, errOut, exitUsage)
	}
}
